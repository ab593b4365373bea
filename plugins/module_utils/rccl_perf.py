# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The fabric's all-reduce gate: rccl-tests' table, bus bandwidth as rccl-tests computes it, the
floor that applies to a cluster (a published figure where its conditions match, else the rails' link
rate times an efficiency, warned about), the verdict, and the rccl-tests command.

Bus bandwidth (rccl-tests' ``AllReduceGetBw``, ``doc/PERFORMANCE.md``): for an all-reduce of S bytes
that takes t seconds among n ranks, ``algbw = S / t`` and ``busbw = algbw * 2 * (n - 1) / n``, in
GB/s (10^9 bytes). It is the figure that compares with the hardware's link speed whatever n is:
across nodes, a node's rails (one NIC per GPU) bound it, so rails x Gb/s / 8 is its ceiling.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

RUNBOOK = "docs/runbooks/fabric-bandwidth.md"

_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<oop_time>[\d.]+)\s+(?P<oop_algbw>[\d.]+)\s+(?P<oop_busbw>[\d.]+)\s+(?P<oop_wrong>\S+)"
    r"\s+(?P<ip_time>[\d.]+)\s+(?P<ip_algbw>[\d.]+)\s+(?P<ip_busbw>[\d.]+)\s+(?P<ip_wrong>\S+)\s*$"
)
_RANK = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\d+)"
)
_HEADER = re.compile(r"^# nThread (?P<threads>\d+) nGpus (?P<gpus>\d+) minBytes (?P<min>\d+) maxBytes (?P<max>\d+)")
_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*(?P<avg>[\d.]+)")
_BOUNDS = re.compile(r"^# Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>\w+)")


class RcclPerfError(ValueError):
    """An output this collection cannot read as an rccl-tests table."""


def _wrong(text):
    # "N/A" when rccl-tests ran without validation (-c 0).
    return None if text == "N/A" else int(text)


def parse_rccl_tests(text):
    """Read an ``all_reduce_perf`` (or any rccl-tests/nccl-tests) output.

    Returns ``{"ranks": [{rank, host, device}], "rows": [{size, count, type, redop, out_of_place:
    {time_us, algbw, busbw, wrong}, in_place: {...}}], "avg_busbw", "out_of_bounds", "bounds_ok",
    "max_bytes"}``; values absent from an excerpt are None. Raises RcclPerfError when no row is found
    or a row cannot be read."""
    ranks, rows = [], []
    avg = bounds = bounds_ok = max_bytes = None
    for line in str(text).splitlines():
        found = _RANK.match(line)
        if found:
            ranks.append({"rank": int(found["rank"]), "host": found["host"], "device": int(found["device"])})
            continue
        found = _HEADER.match(line)
        if found:
            max_bytes = int(found["max"])
            continue
        found = _AVG.match(line)
        if found:
            avg = float(found["avg"])
            continue
        found = _BOUNDS.match(line)
        if found:
            bounds, bounds_ok = int(found["count"]), found["verdict"] == "OK"
            continue
        if line.lstrip().startswith("#") or not line.strip() or not line.lstrip()[0].isdigit():
            continue
        found = _ROW.match(line)
        if not found:
            raise RcclPerfError(f"an rccl-tests row that cannot be read: {line.strip()!r}")
        row = {"size": int(found["size"]), "count": int(found["count"]), "type": found["type"], "redop": found["redop"]}
        for side, prefix in (("out_of_place", "oop"), ("in_place", "ip")):
            row[side] = {
                "time_us": float(found[f"{prefix}_time"]),
                "algbw": float(found[f"{prefix}_algbw"]),
                "busbw": float(found[f"{prefix}_busbw"]),
                "wrong": _wrong(found[f"{prefix}_wrong"]),
            }
        rows.append(row)
    if not rows:
        raise RcclPerfError("no rccl-tests result row in the output (did all_reduce_perf run?)")
    return {
        "ranks": ranks,
        "rows": rows,
        "avg_busbw": avg,
        "out_of_bounds": bounds,
        "bounds_ok": bounds_ok,
        "max_bytes": max_bytes,
    }


def bus_bandwidth(size_bytes, seconds, nranks):
    """rccl-tests' all-reduce bus bandwidth in GB/s (10^9 bytes per second)."""
    if seconds <= 0 or nranks < 1:
        raise ValueError(f"bus bandwidth needs a positive time and at least one rank (got {seconds} s, {nranks})")
    algbw = size_bytes / 1.0e9 / seconds
    return algbw * 2 * (nranks - 1) / nranks


GIB = 1 << 30
# RDMA device names by driver: the NIC family a published figure was measured on.
_NIC_FAMILIES = ("mlx5", "mlx4", "bnxt_re", "ionic", "irdma", "efa", "erdma", "hns", "qedr", "rxe", "siw")


def link_rate_gbps(value):
    """A link rate in Gb/s: a number, or the kernel's text (``400 Gb/sec (4X NDR)``, ``200``); None
    when it cannot be read."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if value > 0 else None
    found = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(?:Gb/sec|Gb/s|Gbps|G)?\b", str(value))
    return float(found.group(1)) if found and float(found.group(1)) > 0 else None


def rail_rates(rdma):
    """The chosen rails' link rates in Gb/s, from the fabric stage's RDMA choice (``{"ports": [...],
    "hcas": ["mlx5_0:1", ...]}``): each chosen port's ``rate_gbps`` or its sysfs ``rate`` text, None
    where neither is known. No HCA chosen: ``[]``."""
    rdma = rdma or {}
    chosen = list(rdma.get("hcas") or [])
    by_name = {f"{p.get('device')}:{p.get('port')}": p for p in rdma.get("ports") or []}
    rates = []
    for name in chosen:
        port = by_name.get(str(name), {})
        rate = link_rate_gbps(port.get("rate_gbps"))
        rates.append(rate if rate is not None else link_rate_gbps(port.get("rate")))
    return rates


def nic_model(hcas):
    """The NIC family of the chosen ports by their RDMA driver's device names (``mlx5_0:1`` ->
    ``mlx5``, ``bnxt_re3`` -> ``bnxt_re``, ``ionic_0`` -> ``ionic``), ``+``-joined when they mix;
    ``unknown`` for a name of no known driver (``rocep1s0f0``), empty without ports."""
    families = set()
    for hca in hcas or []:
        device = str(hca).split(":", 1)[0]
        family = next((f for f in _NIC_FAMILIES if device.startswith(f)), "unknown")
        families.add(family)
    return "+".join(sorted(families))


def _nodes(count):
    return f"{int(count)} node" + ("" if int(count) == 1 else "s")


def _names(value):
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def _mismatches(ref, cluster):
    """The conditions of a published figure this cluster (``model, nodes, gpus, rails, nic``) does not
    meet, as words."""
    model, nodes, gpus, rails, nic = cluster
    out = []
    if not any(name.lower() in model.lower() for name in _names(ref.get("gpu", ""))):
        out.append(f"GPU {'/'.join(_names(ref.get('gpu', '')))} (not {model})")
    if int(ref.get("nodes", 0)) != int(nodes):
        out.append(f"{_nodes(ref.get('nodes', 0))} (not {nodes})")
    if ref.get("gpus_per_node") is not None and int(ref["gpus_per_node"]) != int(gpus):
        out.append(f"{ref['gpus_per_node']} GPUs per node (not {gpus})")
    if ref.get("rails") is not None and int(ref["rails"]) != len(rails):
        out.append(f"{ref['rails']} rails (not {len(rails)})")
    if ref.get("rail_gbps") is not None and rails and any(rate != float(ref["rail_gbps"]) for rate in rails):
        shown = "/".join(sorted({f"{rate:g}G" if rate is not None else "unknown" for rate in rails}))
        out.append(f"{float(ref['rail_gbps']):g}G rails (not {shown})")
    if ref.get("nics") and nic not in _names(ref["nics"]):
        out.append(f"NIC {'/'.join(_names(ref['nics']))} (not {nic or 'none'})")
    return out


def _fabric_words(rails, nic):
    if not rails:
        return "no RDMA rails"
    rates = sorted({f"{rate:g}" if rate is not None else "?" for rate in rails})
    return f"{len(rails)} x {'/'.join(rates)}G {nic or 'unknown NIC'}"


def fabric_floor(  # noqa: PLR0913, PLR0917 - the cluster's facts and the defaults' table, each named as in the role
    gpu_model, nodes, gpus_per_node, rails_gbps, nic, references, efficiency, size_bytes=8 * GIB
):
    """The all-reduce gate's floor for a cluster: in-place bus bandwidth (GB/s, rccl-tests' definition)
    at ``size_bytes``, whether it is enforced, why (``basis``) and where it comes from (``source``).

    - A published figure (``references``: ``{gpu, nodes, gpus_per_node, rails, rail_gbps, nics,
      busbw_gbps, size_bytes, source}``, a condition left out matches anything) applies only where all
      its conditions match the cluster: then it is the floor, enforced.
    - One node: the all-reduce stays on xGMI and no NIC bounds it; without a one-node figure for the
      GPU model nothing is judged.
    - Otherwise the floor is the chosen rails' total link rate (``rails_gbps``, Gb/s per rail: rails x
      Gb/s / 8 = GB/s) times ``efficiency`` (``{"value", "source"}`` or a number), and only warned
      about: no measured figure says what this cluster size, NIC or rate reaches.

    ``nic``: the NIC family (:func:`nic_model`). Returns ``{"busbw_gbps", "size_bytes", "enforce",
    "basis", "source"}``; ``busbw_gbps`` is None where nothing can be judged (no GPU, no rails, a rail
    of unknown rate)."""
    model = str(gpu_model or "").strip()
    nodes, gpus = int(nodes), int(gpus_per_node or 0)
    rails = [link_rate_gbps(rate) for rate in rails_gbps or []]
    if isinstance(efficiency, dict):
        factor, why = float(efficiency["value"]), str(efficiency.get("source", ""))
    else:
        factor, why = float(efficiency), ""
    none = {"busbw_gbps": None, "size_bytes": int(size_bytes), "enforce": False, "source": ""}
    if not model or gpus < 1:
        return dict(none, basis="ranks without a GPU (Gloo over CPU): no RCCL bandwidth to judge")
    fabric = _fabric_words(rails, nic) if nodes > 1 else "xGMI only"
    nearest = None
    for ref in references or []:
        missing = _mismatches(ref, (model, nodes, gpus, rails if nodes > 1 else [], nic if nodes > 1 else ""))
        if not missing:
            return {
                "busbw_gbps": float(ref["busbw_gbps"]),
                "size_bytes": int(ref.get("size_bytes", size_bytes)),
                "enforce": True,
                "basis": f"published figure for {_nodes(nodes)} of {gpus} x {model}, {fabric} (its conditions match)",
                "source": str(ref.get("source", "")),
            }
        same_gpu = not any(word.startswith("GPU ") for word in missing)
        same_kind = (int(ref.get("nodes", 0)) > 1) == (nodes > 1)
        if same_gpu and same_kind and (nearest is None or len(missing) < len(nearest[1])):
            nearest = (ref, missing)
    unmatched = (
        f"; the published {float(nearest[0]['busbw_gbps']):g} GB/s holds for {' and '.join(nearest[1])}" if nearest else
        f"; no published figure for {model}"
    )  # fmt: skip
    if nodes == 1:
        return dict(
            none,
            basis=f"one node: the all-reduce stays on xGMI, no NIC bounds it{unmatched}; nothing judged",
        )
    if not rails:
        return dict(
            none, basis=f"no RDMA rail chosen (RCCL runs over sockets): no link rate to scale a floor from{unmatched}"
        )
    if any(rate is None for rate in rails):
        return dict(none, basis=f"the link rate of a chosen rail is unknown ({fabric}): no floor{unmatched}")
    line = sum(rails) / 8
    floor = round(line * factor, 1)
    return {
        "busbw_gbps": floor,
        "size_bytes": int(size_bytes),
        "enforce": False,
        "basis": (
            f"{fabric}: {sum(rails):g} Gb/s = {line:g} GB/s line rate x {factor:g} efficiency = {floor:g} GB/s"
            f"{unmatched}; no measured reference for this cluster, so a shortfall warns"
        ),
        "source": why,
    }


def gate_verdict(measured, floor, hosts):
    """The all-reduce gate's verdict on the in-place bus bandwidth by size (``{bytes: GB/s}``) against a
    :func:`fabric_floor`: ``{"failures": [...], "warnings": [...]}``, sentences naming the nodes, the size,
    both figures, the floor's basis and source and the runbook. A shortfall, or a run that did not reach
    the floor's size (it would prove nothing), fails where the floor is enforced and warns otherwise."""
    verdict = {"failures": [], "warnings": []}
    if not floor or floor.get("busbw_gbps") is None:
        return verdict
    measured = {int(size): float(value) for size, value in (measured or {}).items()}
    names = ", ".join(hosts)
    size, required = int(floor["size_bytes"]), float(floor["busbw_gbps"])
    why = f"{floor.get('basis', '')}; {floor.get('source') or 'no source'}"
    if size not in measured:
        problem = (
            f"{names}: the all-reduce was measured up to {max(measured, default=0)} bytes, but the floor is judged at "
            f"{size} bytes ({why}); set fabric_allreduce_max_bytes to at least {size}. See {RUNBOOK}"
        )
    elif measured[size] < required:
        problem = (
            f"{names}: all-reduce bus bandwidth {measured[size]:.1f} GB/s at {size} bytes, below the {required:.1f} "
            f"GB/s floor ({why}). See {RUNBOOK}"
        )
    else:
        return verdict
    verdict["failures" if floor.get("enforce") else "warnings"].append(problem)
    return verdict


def correctness_problems(parsed, hosts):
    """A run whose reduction came back wrong: any ``#wrong`` above 0 (rccl-tests' check of every result
    element, out-of-place or in-place) or ``# Out of bounds values : N FAILED``. Always a failure, whatever
    the bandwidth: a sentence naming the nodes, the sizes and counts, and the runbook."""
    wrong = []
    for row in (parsed or {}).get("rows") or []:
        counts = [(side, row[side]["wrong"]) for side in ("out_of_place", "in_place") if row[side]["wrong"]]
        if counts:
            detail = " and ".join(f"{count} {side.replace('_', '-')}" for side, count in counts)
            wrong.append(f"{row['size']} bytes: #wrong {detail}")
    bounds = (parsed or {}).get("bounds_ok") is False
    if not wrong and not bounds:
        return []
    found = "; ".join(wrong) if wrong else "no row shows #wrong"
    verdict = f"; '# Out of bounds values : {parsed.get('out_of_bounds')} FAILED'" if bounds else ""
    return [
        f"{', '.join(hosts)}: all_reduce_perf returned wrong sums ({found}{verdict}): data is corrupted on a GPU, "
        f"in its memory or on the fabric; whatever the bandwidth, the run fails. See {RUNBOOK}"
    ]


def judge_rccl_tests(output, floor, hosts):
    """rccl-tests' output judged whole: ``{"parsed", "error", "ranks", "busbw", "wrong", "failures",
    "warnings"}``. ``wrong``: :func:`correctness_problems` (always failures); ``failures`` and
    ``warnings``: :func:`gate_verdict`. An output without a table has ``parsed`` false and the reason in
    ``error``."""
    try:
        parsed = parse_rccl_tests(output)
    except RcclPerfError as error:
        return {"parsed": False, "error": str(error), "ranks": 0, "busbw": {}, "wrong": [], "failures": [],
                "warnings": [], "out_of_bounds": None}  # fmt: skip
    busbw = measured_busbw(parsed)
    verdict = gate_verdict(busbw, floor, hosts)
    return {
        "parsed": True,
        "error": "",
        "ranks": len(parsed["ranks"]),
        "busbw": busbw,
        "wrong": correctness_problems(parsed, hosts),
        "failures": verdict["failures"],
        "warnings": verdict["warnings"],
        "out_of_bounds": parsed["out_of_bounds"],
    }


def measured_busbw(parsed):
    """The in-place bus bandwidth of each size of a parsed table (what cvs compares)."""
    return {row["size"]: row["in_place"]["busbw"] for row in parsed["rows"]}


def allreduce_layout(hosts, gpus_by_host, smoke_sizes_mb, max_bytes, judged=True):
    """Who runs which ranks of the fabric all-reduce, and at which sizes.

    ``hosts`` in rank order (the master first); ``gpus_by_host``: how many GPUs torch sees on each
    (0 without one). Every GPU gets a rank (one process per node without a GPU). On a cluster of GPU
    nodes the sizes go on from the smoke sizes, doubling from 64 MiB up to ``max_bytes``, so that the
    gate's sizes are measured (only when ``judged``: a threshold applies); without GPUs (Gloo over
    CPU) only the smoke sizes run. Returns
    ``{"ranks": {host: {"first", "local"}}, "world", "sizes_mb", "gpu"}``. A cluster that mixes nodes
    with and without GPUs cannot run one all-reduce: ValueError names them."""
    gpus = {host: int(gpus_by_host.get(host) or 0) for host in hosts}
    without = [host for host in hosts if gpus[host] == 0]
    if without and len(without) < len(hosts):
        raise ValueError(
            f"torch sees no GPU on {', '.join(without)} but GPUs on the other nodes: one all-reduce cannot mix "
            "RCCL and Gloo ranks"
        )
    ranks, first = {}, 0
    for host in hosts:
        ranks[host] = {"first": first, "local": gpus[host]}
        first += max(gpus[host], 1)
    gpu = not without
    sizes = [float(size) for size in smoke_sizes_mb]
    if gpu and judged:
        size = 64.0
        while size * 1024 * 1024 <= int(max_bytes):
            if size not in sizes:
                sizes.append(size)
            size *= 2
    return {"ranks": ranks, "world": first, "sizes_mb": sorted(sizes), "gpu": gpu}


# Each rank reads its own node's RCCL environment (the file's names and values can differ between
# nodes: NCCL_SOCKET_IFNAME, NCCL_IB_HCA), as ROCm/cvs wraps the test in "bash -c 'source ENV && ...'".
_RANK_SHELL = 'set -a && . "$0" && set +a && exec "$@"'


def rccl_tests_argv(binary, hosts, gpus_per_node, max_bytes, mpi=None):
    """The command that runs rccl-tests' ``all_reduce_perf`` over every GPU of ``hosts`` (the fabric
    addresses, the master first), from 1 MiB doubling up to ``max_bytes``.

    Open MPI starts one process per GPU (``-g 1``) on one node as on several: AMD's acceptance guide
    runs ``mpirun -np 8 ./all_reduce_perf -b 8 -e 8G -f 2 -g 1`` ("one GPU per MPI rank"), ROCm/cvs
    ``mpirun -np N --hostfile ... --bind-to numa``. MPI's own traffic is held to the fabric interface as
    cvs holds it (``--mca btl ^vader,openib --mca btl_tcp_if_include IF --mca oob_tcp_if_include IF``)
    with the ob1 messaging layer (cvs's fallback), so that neither the TCP BTL nor UCX picks docker0 or
    a management NIC and hangs. ``mpi``:

    - ``mpirun`` (default ``mpirun``), ``args`` (more options, before the program);
    - ``ifnames``: the nodes' fabric interfaces (a comma list where they differ);
    - ``env``: variables every rank gets (``-x NAME=VALUE``; default ``NCCL_IGNORE_CPU_AFFINITY=1``,
      as cvs's env scripts set it);
    - ``env_file``: the RCCL environment each rank loads on its own node before the program;
    - ``timeout``: seconds; mpirun's ``--timeout`` ends every rank on every node, and ``timeout
      --kill-after`` around mpirun ends a launcher that hangs itself (exit 124, or 137 after
      ``kill_after`` more seconds): TERM ``kill_after`` seconds after mpirun's own limit (default a tenth
      of it, 2 to 30 s)."""
    gpus = int(gpus_per_node)
    if gpus < 1 or not hosts:
        raise ValueError(f"all_reduce_perf needs GPUs on every node (gpus_per_node {gpus_per_node}, hosts {hosts})")
    mpi = mpi or {}
    sizes = ["-b", str(1 << 20), "-e", str(int(max_bytes)), "-f", "2"]
    timeout = int(mpi.get("timeout") or 0)
    grace = int(mpi.get("kill_after") or min(30, max(2, timeout // 10)))
    launcher = [mpi.get("mpirun") or "mpirun", "--np", str(gpus * len(hosts)),
                "--host", ",".join(f"{host}:{gpus}" for host in hosts), "--bind-to", "numa"]  # fmt: skip
    if timeout:
        launcher += ["--timeout", str(timeout)]
    launcher += ["--mca", "pml", "ob1", "--mca", "btl", "^vader,openib"]
    ifnames = ",".join(dict.fromkeys(str(name) for name in mpi.get("ifnames") or [] if str(name)))
    if ifnames:
        launcher += ["--mca", "btl_tcp_if_include", ifnames, "--mca", "oob_tcp_if_include", ifnames]
    env = mpi.get("env")
    env = {"NCCL_IGNORE_CPU_AFFINITY": "1"} if env is None else env
    launcher += [arg for name, value in env.items() for arg in ("-x", f"{name}={value}")]
    launcher += [str(arg) for arg in mpi.get("args") or []]
    program = [binary, *sizes, "-g", "1"]
    if mpi.get("env_file"):
        program = ["/bin/bash", "-c", _RANK_SHELL, str(mpi["env_file"]), *program]
    argv = [*launcher, *program]
    if timeout:
        argv = ["timeout", f"--kill-after={grace}", str(timeout + grace), *argv]
    return argv
