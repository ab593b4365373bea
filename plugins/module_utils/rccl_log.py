# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""What RCCL (or NCCL) says at ``NCCL_DEBUG=INFO`` (``NCCL_DEBUG_SUBSYS=INIT,NET``) about the network it
chose, and whether that is the RDMA path the fabric stage set up.

RCCL logs every line as ``HOST:PID:TID [DEV] NCCL INFO <message>`` (``NCCL WARN`` after a source path for
warnings); the version banner (``RCCL version : 2.21.5-HEAD:...``, ``NCCL version 2.16.5+cuda11.8``) may come
without that prefix, and belongs to the process whose lines precede it. The messages read here, as RCCL's
and NCCL's sources print them (``src/init.cc``, ``src/transport/net_ib.cc``, ``src/misc/rocmwrap.cc``):

- ``Using network IB`` / ``Socket`` / ``UCX`` (a plugin's name): the transport of the process's communicator;
- ``NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_2:1/IB [RO]; OOB eth0:10.0.0.1<0>``: the RDMA ports it opened;
  ``NET/IB : No device found.`` and ``Failed to open libibverbs.so[.1]`` (no RDMA user space): why not;
- ``NET/Socket : Using [0]eno2np1:192.168.2.194<0>``: the interfaces of the socket transport;
- ``NET/IB : GPU Direct RDMA Enabled|Disabled for HCA 0 'mlx5_0'``, ``GPU Direct RDMA Enabled for GPU 81000
  / HCA 1 (distance 6 <= 7)`` and the channels ``via NET/IB/1/GDRDMA``: whether the NIC reads GPU memory;
- ``Found /sys/kernel/mm/memory_peers/amdkfd/version``: amdgpu's peer-memory interface, RCCL's GDR test;
- ``DMA-BUF is available on GPU device 0`` (NCCL), ``DMA_BUF Support Enabled`` (RCCL), ``Dmabuf feature
  disabled without NCCL_DMABUF_ENABLE=1``, ``Current version of ROCm does not support dmabuf feature.``.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

RUNBOOK = "docs/runbooks/fabric-bandwidth.md"

# host:pid:tid [dev] — a host name has no colon or bracket; anything may come before (a timestamp, a
# launcher's "(RayWorkerWrapper pid=927) " prefix).
_PREFIX = re.compile(r"(?:^|\s)(?P<host>[^\s:\[\]()]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?P<rest>.*)$")
_MESSAGE = re.compile(r"NCCL (?P<level>INFO|WARN) ?(?P<text>.*)$")
_VERSION = re.compile(r"\b(?P<lib>[RN]CCL) version\s*:?\s*(?P<version>\d+(?:\.\d+)+)")
_NETWORK = re.compile(r"^Using network (?P<net>.+?)\s*$")
_IB_USING = re.compile(r"^NET/IB\s*:\s*Using (?P<list>.*?)\s*(?:;\s*OOB (?P<oob>\S+?)(?:<\d+>)?)?\s*$")
_IB_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<name>[^\s:\[\]]+):(?P<port>\d+)/(?P<layer>IB|RoCE)\b")
_SOCKET_USING = re.compile(r"^NET/Socket\s*:\s*Using (?P<list>.*?)\s*$")
_SOCKET_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<ifname>[^\s:\[\]]+):(?P<address>\S+?)<\d+>")
_GDR_HCA = re.compile(
    r"^NET/(?P<net>[^:]+?)\s*:\s*GPU Direct RDMA (?:\((?P<how>[^)]*)\) )?(?P<state>enabled|disabled) "
    r"for HCA (?P<index>\d+) '(?P<name>[^']+)'",
    re.IGNORECASE,
)
_GDR_GPU = re.compile(r"^GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>\S+) / HCA (?P<hca>\d+)")
_CHANNEL = re.compile(r"\bvia NET/(?P<net>.+?)/(?P<dev>\d+)(?:\(\d+\))?(?P<gdr>/GDRDMA)?(?:\s|$)")
_COMM = re.compile(r"\bcomm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+)")
_DMABUF = (
    (re.compile(r"^DMA-BUF is available on GPU device \d+"), "available"),
    (re.compile(r"^DMA_BUF Support Enabled"), "available"),
    (re.compile(r"^NET/IB\s*:\s*GPU Direct RDMA \(DMABUF\) enabled", re.IGNORECASE), "available"),
    (re.compile(r"^Dmabuf feature disabled without (?P<setting>\S+)"), "disabled"),
    (re.compile(r"^Current version of ROCm does not support dmabuf feature"), "unsupported"),
    (re.compile(r"^DMA_BUF_SUPPORT Failed due to OS kernel support"), "unsupported"),
)


def _process(host, pid):
    return {
        "host": host,
        "pid": pid,
        "devices": [],
        "library": None,
        "version": None,
        "network": None,
        "ib_devices": [],
        "oob": None,
        "socket_devices": [],
        "libibverbs_missing": False,
        "ib_no_device": False,
        "peer_memory": False,
        "gdr_hcas": {},
        "gdr_gpus": {"enabled": 0, "disabled": 0},
        "gdr": None,
        "dmabuf": None,
        "dmabuf_line": None,
        "channels": {},
        "ranks": [],
        "nranks": None,
        "warnings": [],
    }


def _read_message(proc, text):  # noqa: PLR0911, PLR0912 - one branch per message RCCL prints, as a list of them
    """One INFO message of a process, into its record."""
    found = _NETWORK.match(text)
    if found:
        proc["network"] = found["net"]
        return
    found = _IB_USING.match(text)
    if found:
        proc["ib_devices"] = [
            {"index": int(d["index"]), "name": d["name"], "port": int(d["port"]), "link_layer": d["layer"]}
            for d in _IB_DEVICE.finditer(found["list"])
        ]
        proc["oob"] = found["oob"]
        return
    found = _SOCKET_USING.match(text)
    if found:
        proc["socket_devices"] = [
            {"index": int(d["index"]), "ifname": d["ifname"], "address": d["address"]}
            for d in _SOCKET_DEVICE.finditer(found["list"])
        ]
        return
    if text.startswith("Failed to open libibverbs.so"):
        proc["libibverbs_missing"] = True
        return
    if re.match(r"^NET/IB\s*:\s*No device found", text):
        proc["ib_no_device"] = True
        return
    if re.match(r"^Found /sys/(?:kernel/(?:mm/)?)?memory_peers/amdkfd/version", text):
        proc["peer_memory"] = True
        return
    for pattern, state in _DMABUF:
        found = pattern.match(text)
        if found:
            proc["dmabuf"], proc["dmabuf_line"] = state, text.strip()
            break
    found = _GDR_HCA.match(text)
    if found:
        proc["gdr_hcas"][found["name"]] = found["state"].lower() == "enabled"
        return
    found = _GDR_GPU.match(text)
    if found:
        proc["gdr_gpus"]["enabled" if found["state"] == "Enabled" else "disabled"] += 1
        return
    found = _CHANNEL.search(text)
    if found:
        key = f"NET/{found['net']}/{found['dev']}{found['gdr'] or ''}"
        proc["channels"][key] = proc["channels"].get(key, 0) + 1
        return
    found = _COMM.search(text)
    if found:
        rank = int(found["rank"])
        if rank not in proc["ranks"]:
            proc["ranks"].append(rank)
        proc["nranks"] = int(found["nranks"])


def _gdr(proc):
    """Whether the process's NIC reads and writes GPU memory directly: its network channels (all via
    GDRDMA, or not), else its GPU/HCA pairs, else its HCAs; None where the log does not say."""
    net = {key: count for key, count in proc["channels"].items() if not key.startswith("NET/Socket/")}
    if net:
        return all(key.endswith("/GDRDMA") for key in net)
    if any(proc["gdr_gpus"].values()):
        return proc["gdr_gpus"]["enabled"] > 0
    if proc["gdr_hcas"]:
        return any(proc["gdr_hcas"].values())
    return None


def parse_init_log(text):
    """Read an RCCL/NCCL INFO log (one process's or several, interleaved or concatenated).

    Returns ``{"processes": [...], "versions": [...]}``: one record per ``host:pid``, in the order they
    first appear, with ``host``, ``pid``, ``devices`` (the ``[N]`` GPU indexes its lines carry), ``library``
    and ``version`` (RCCL or NCCL, ``2.21.5``), ``network`` (the last ``Using network``), ``ib_devices``
    (``[{index, name, port, link_layer}]`` from ``NET/IB : Using``) and ``oob``, ``socket_devices``
    (``[{index, ifname, address}]``), ``libibverbs_missing``, ``ib_no_device``, ``peer_memory``,
    ``gdr_hcas`` (HCA name to GPU Direct RDMA enabled), ``gdr_gpus`` (counts of enabled/disabled GPU-HCA
    pairs), ``gdr`` (True/False/None, see :func:`_gdr`), ``dmabuf`` (``available``, ``disabled``,
    ``unsupported`` or None) with ``dmabuf_line``, ``channels`` (``{"NET/IB/1/GDRDMA": count}``),
    ``ranks``, ``nranks`` and ``warnings`` (its ``NCCL WARN`` messages). ``versions``: every version
    banner, in order."""
    processes = {}
    versions = []
    last = None
    for line in str(text).splitlines():
        found = _PREFIX.search(line)
        if not found:
            banner = _VERSION.search(line)
            if banner:
                versions.append(banner["version"])
                if last is not None and last["version"] is None:
                    last["library"], last["version"] = banner["lib"], banner["version"]
            continue
        key = (found["host"], int(found["pid"]))
        proc = processes.get(key)
        if proc is None:
            proc = processes[key] = _process(*key)
        last = proc
        device = int(found["dev"])
        if device not in proc["devices"]:
            proc["devices"].append(device)
        message = _MESSAGE.search(found["rest"])
        if not message:
            continue
        text_ = message["text"]
        if message["level"] == "WARN":
            proc["warnings"].append(text_.strip())
            continue
        banner = _VERSION.match(text_)
        if banner:
            versions.append(banner["version"])
            proc["library"], proc["version"] = banner["lib"], banner["version"]
            continue
        _read_message(proc, text_)
    out = []
    for proc in processes.values():
        proc["devices"].sort()
        proc["ranks"].sort()
        proc["gdr"] = _gdr(proc)
        out.append(proc)
    return {"processes": out, "versions": versions}


def _same_port(hca, opened):
    """Whether a chosen HCA (``mlx5_0:1``, or ``mlx5_0`` for any of its ports) is the port RCCL opened."""
    return hca == opened if ":" in hca else opened.rsplit(":", 1)[0] == hca


def _label(proc):
    """``node1 pid 5646 (GPU 0, rank 8)``."""
    parts = [f"GPU {','.join(str(d) for d in proc['devices'])}"] if proc["devices"] else []
    if proc["ranks"]:
        parts.append(f"rank {','.join(str(r) for r in proc['ranks'])}")
    return f"{proc['host']} pid {proc['pid']}" + (f" ({', '.join(parts)})" if parts else "")


def _socket_cause(proc):
    if proc["libibverbs_missing"]:
        return (
            "RCCL could not open libibverbs.so ('Failed to open libibverbs.so'): the RDMA user space (rdma-core, "
            "libibverbs1 and the NIC's provider: ibverbs-providers, a vendor's DOCA/OFED, bnxt_re or ionic "
            "library) is not installed for the training account"
        )
    if proc["ib_no_device"]:
        return (
            "RCCL found no usable RDMA device ('NET/IB : No device found'): the ports in NCCL_IB_HCA are down, "
            "missing, or not readable by the training account"
        )
    return (
        "RCCL chose its socket transport although the node has RDMA ports: NCCL_IB_DISABLE=1 or "
        "NCCL_NET=Socket in the environment, or every port in NCCL_IB_HCA failed to open"
    )


def _process_problems(proc, wanted, require_gdr, require_dmabuf):
    network = proc["network"]
    if network is None:
        return ["logged no 'Using network' line: it did not get as far as choosing a network (or the log is cut)"]
    if network == "Socket":
        return [f"says 'Using network Socket', not the RDMA ports {', '.join(sorted(wanted))}: {_socket_cause(proc)}"]
    if not proc["ib_devices"]:
        return [f"uses network {network} but listed no IB/RoCE port ('NET/IB : Using'): it is not the RDMA path"]
    problems = []
    opened = sorted({f"{d['name']}:{d['port']}" for d in proc["ib_devices"]})
    extra = [name for name in opened if not any(_same_port(hca, name) for hca in wanted)]
    missing = [hca for hca in sorted(wanted) if not any(_same_port(hca, name) for name in opened)]
    if extra:
        problems.append(
            f"opened RDMA port(s) {', '.join(extra)} that are not chosen rails ({', '.join(sorted(wanted))}): "
            "NCCL_IB_HCA in RCCL's environment is not the fabric stage's choice, or a slower port joined the ring"
        )
    if missing:
        problems.append(
            f"did not open the chosen rail(s) {', '.join(missing)} (it opened {', '.join(opened)}): "
            "the port is down or NCCL_IB_HCA in RCCL's environment leaves it out"
        )
    if require_gdr and proc["gdr"] is not True:
        if proc["gdr"] is False:
            off = sorted(name for name, on in proc["gdr_hcas"].items() if not on)
            where = f" for HCA {', '.join(off)}" if off else ""
            peer = "" if proc["peer_memory"] else " (no 'Found .../memory_peers/amdkfd/version' line)"
            problems.append(
                f"runs without GPU Direct RDMA{where}: data is staged through host memory. amdgpu's peer memory "
                f"interface{peer} or DMA-BUF (NCCL_DMABUF_ENABLE=1 with a kernel that has CONFIG_DMABUF_MOVE_NOTIFY "
                "and CONFIG_PCI_P2PDMA) is needed, and ACS must be off"
            )
        else:
            problems.append(
                "logged no GPU Direct RDMA line (no 'GPU Direct RDMA Enabled', no channel 'via NET/.../GDRDMA'): "
                "whether the NIC reads GPU memory is unknown; run with NCCL_DEBUG_SUBSYS=INIT,NET"
            )
    if require_dmabuf and proc["dmabuf"] != "available":
        why = {
            "disabled": f"RCCL says '{proc['dmabuf_line']}': set NCCL_DMABUF_ENABLE=1 in RCCL's environment",
            "unsupported": f"RCCL says '{proc['dmabuf_line']}': ROCm or the kernel lacks DMA-BUF export",
        }.get(proc["dmabuf"], "the log has no DMA-BUF line")
        problems.append(f"has no DMA-BUF although it was asked for: {why}")
    return problems


def net_problems(parsed, hcas, require_gdr=False, require_dmabuf=False, expected=None):
    """What is wrong with the network RCCL used, as sentences naming the processes, the cause and the
    runbook; empty when every process reports the IB/RoCE transport on exactly the chosen HCAs (``hcas``:
    ``["mlx5_0:1", ...]`` or device names), with GPU Direct RDMA (``require_gdr``) and DMA-BUF
    (``require_dmabuf``) where asked. With no HCA chosen, sockets are what RCCL must use: a process on
    any other network is refused. ``expected``: how many processes must have logged (one per GPU)."""
    processes = list((parsed or {}).get("processes") or [])
    if not processes:
        return [
            "the RCCL log holds no 'NCCL INFO' line of any process: NCCL_DEBUG=INFO did not reach RCCL, or the "
            f"log was not written. See {RUNBOOK}"
        ]
    problems = []
    if expected is not None and len(processes) < int(expected):
        problems.append(
            f"only {len(processes)} of the {int(expected)} RCCL processes wrote an INFO log "
            f"({', '.join(_label(p) for p in processes)}). See {RUNBOOK}"
        )
    wanted = {str(h).strip() for h in hcas or [] if str(h).strip()}
    if not wanted:
        # No rail chosen: rccl.env disables IB (NCCL_IB_DISABLE=1), so a process that still opened
        # RDMA ports (management or bond ports RCCL found by itself) is refused.
        rdma = [p for p in processes if p.get("network") and p["network"] != "Socket"]
        if rdma:
            problems.append(
                f"{'; '.join(_label(p) for p in rdma)}: RCCL used network {rdma[0]['network']} although no RDMA "
                f"port was chosen for it (NCCL_IB_DISABLE=1 in rccl.env should keep it on sockets). See {RUNBOOK}"
            )
        return problems
    grouped = {}
    for proc in processes:
        for problem in _process_problems(proc, wanted, require_gdr, require_dmabuf):
            grouped.setdefault(problem, []).append(_label(proc))
    for problem, labels in grouped.items():
        problems.append(f"{'; '.join(labels)}: RCCL {problem}. See {RUNBOOK}")
    return problems


def net_summary(parsed):
    """One line per process: its network, ports, GPU Direct RDMA and DMA-BUF, for the play's output."""
    lines = []
    for proc in (parsed or {}).get("processes") or []:
        ports = ",".join(f"{d['name']}:{d['port']}/{d['link_layer']}" for d in proc["ib_devices"])
        sockets = ",".join(d["ifname"] for d in proc["socket_devices"])
        gdr = {True: "on", False: "off", None: "?"}[proc["gdr"]]
        lines.append(
            f"{_label(proc)}: {proc['library'] or 'RCCL'} {proc['version'] or '?'} network {proc['network'] or '?'}"
            f" {ports or sockets or '-'} GDR {gdr} DMA-BUF {proc['dmabuf'] or '?'}"
        )
    return lines
