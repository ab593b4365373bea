# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The RDMA ports of a node and what RCCL is given of them: NCCL_IB_HCA (the rails: the fastest
active ports of one link layer, no bond, one per GPU; or the ports the user names) and the RoCE v2
GID index, which must agree across the ports and the nodes.

Readers for the kernel's view (``/sys/class/infiniband``, as a mapping of file paths to contents so
that a recorded tree can stand for a node), ``rdma link``, ``show_gids`` and the verbs library's
(``ibv_devinfo`` and ``ibv_devinfo -v``); the choices and the verbs check are pure functions over
their results.
"""

from __future__ import absolute_import, division, print_function

import fnmatch
import ipaddress
import re

__metaclass__ = type

RUNBOOK = "docs/runbooks/fabric-bandwidth.md"
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_IPV4_MAPPED = re.compile(r"^0000:0000:0000:0000:0000:ffff:[0-9a-f]{4}:[0-9a-f]{4}$")


class RdmaError(ValueError):
    """A node whose RDMA ports cannot serve RCCL as asked."""


def port_state(text):
    """A port's state as a word: sysfs writes "4: ACTIVE", rdma link "ACTIVE"."""
    return str(text).strip().split(":", 1)[-1].strip().upper()


def _number(value):
    """A rate as an int when whole (400), else a float (2.5); None stays None."""
    if value is None:
        return None
    value = round(float(value), 4)
    return int(value) if value == int(value) else value


_SYSFS_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?) Gb/sec\b")


def rate_from_sysfs(text):
    """A port's ``rate`` file in Gb/s: the kernel writes "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)"
    (lanes times the lane speed). None when it says something else."""
    match = _SYSFS_RATE.match(str(text or ""))
    return _number(match.group(1)) if match else None


def ports_from_sysfs(files):
    """The ports of a ``/sys/class/infiniband`` tree given as ``{"DEV/ports/N/state": text, ...}``
    (paths relative to the class folder; ``DEV/device/numa_node``, ``DEV/ports/N/gids/I`` and
    ``DEV/ports/N/gid_attrs/types/I`` / ``ndevs/I`` where the tree has them). All-zero GIDs are
    unused entries and left out. Returns ports sorted by device and port number."""
    ports = {}
    for path, text in (files or {}).items():
        parts = str(path).strip("/").split("/")
        if len(parts) < 4 or parts[1] != "ports" or not parts[2].isdigit():
            continue
        port = ports.setdefault(
            (parts[0], int(parts[2])),
            {"device": parts[0], "port": int(parts[2]), "state": "", "link_layer": "", "netdev": "", "rate_gbps": None,
             "gids": {}},
        )  # fmt: skip
        leaf = parts[3:]
        value = str(text).strip()
        if leaf == ["state"]:
            port["state"] = port_state(value)
        elif leaf == ["link_layer"]:
            port["link_layer"] = value
        elif leaf == ["rate"]:
            port["rate"] = value
            port["rate_gbps"] = rate_from_sysfs(value)
        elif len(leaf) == 2 and leaf[0] == "gids" and leaf[1].isdigit():
            port["gids"].setdefault(int(leaf[1]), {})["gid"] = value.lower()
        elif len(leaf) == 3 and leaf[:2] == ["gid_attrs", "types"] and leaf[2].isdigit():
            port["gids"].setdefault(int(leaf[2]), {})["type"] = value
        elif len(leaf) == 3 and leaf[:2] == ["gid_attrs", "ndevs"] and leaf[2].isdigit():
            port["gids"].setdefault(int(leaf[2]), {})["netdev"] = value
            port["netdev"] = port["netdev"] or value
    numa = {
        str(path).strip("/").partition("/")[0]: str(text).strip()
        for path, text in (files or {}).items()
        if str(path).strip("/").split("/")[1:] == ["device", "numa_node"]
    }
    out = []
    for key in sorted(ports):
        port = ports[key]
        port["gids"] = [
            {
                "index": index,
                "gid": entry.get("gid", ""),
                "type": entry.get("type", ""),
                "netdev": entry.get("netdev", ""),
            }
            for index, entry in sorted(port["gids"].items())
            if entry.get("gid") and entry["gid"] != _ZERO_GID
        ]
        port["numa_node"] = int(numa[port["device"]]) if numa.get(port["device"], "").lstrip("-").isdigit() else None
        out.append(port)
    return out


def ports_from_rdma_link(text):
    """The ports ``rdma link`` lists. An InfiniBand port shows its ``lid``; a RoCE port its
    ``netdev``; a line with neither has an unknown link layer."""
    ports = []
    for line in str(text).splitlines():
        words = line.split()
        if len(words) < 2 or words[0] != "link" or "/" not in words[1]:
            continue
        device, _sep, number = words[1].partition("/")
        # name value pairs; a trailing space (older iproute2) leaves no odd word.
        fields = dict(zip(words[2::2], words[3::2], strict=False))
        layer = "InfiniBand" if "lid" in fields else ("Ethernet" if "netdev" in fields else "")
        ports.append(
            {
                "device": device,
                "port": int(number),
                "state": port_state(fields.get("state", "")),
                "link_layer": layer,
                "netdev": fields.get("netdev", ""),
                "rate_gbps": None,
                "gids": [],
                "numa_node": None,
            }
        )
    return sorted(ports, key=lambda p: (p["device"], p["port"]))


def gids_from_show_gids(text):
    """``show_gids``'s table as ``{(device, port): [{"index", "gid", "type", "netdev"}]}``; its
    VER column (v1, v2) is written as sysfs writes the type (``IB/RoCE v1``, ``RoCE v2``)."""
    table = {}
    for line in str(text).splitlines():
        words = line.split()
        if len(words) < 6 or not words[1].isdigit() or not words[2].isdigit():
            continue
        version = words[-2]
        if version not in ("v1", "v2"):
            continue
        entry = {
            "index": int(words[2]),
            "gid": words[3].lower(),
            "type": "RoCE v2" if version == "v2" else "IB/RoCE v1",
            "netdev": words[-1],
        }
        table.setdefault((words[0], int(words[1])), []).append(entry)
    return table


class IbvDevinfoError(ValueError):
    """An ``ibv_devinfo`` output this collection cannot trust (cut short, or lines lost or merged)."""

    def __init__(self, message):
        super().__init__(f"ibv_devinfo's output cannot be read: {message}. Run `ibv_devinfo -v` by hand. See {RUNBOOK}")


# rdma-core, libibverbs/examples/devinfo.c: each coded value is printed as "text (code)", and the text
# is a function of the code, so a line whose two halves disagree is damaged and is not believed.
_IBV_STATES = {"PORT_DOWN": 1, "PORT_INIT": 2, "PORT_ARMED": 3, "PORT_ACTIVE": 4}
_IBV_MTUS = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
_IBV_WIDTHS = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}  # width_str: the code -> lanes ("4X (2)")
# speed_str: the code -> Gb/s per lane as printed (SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR).
_IBV_SPEEDS = {1: 2.5, 2: 5.0, 4: 10.0, 8: 10.0, 16: 14.0, 32: 25.0, 64: 50.0, 128: 100.0, 256: 200.0}
_IBV_PHYS_STATES = {1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING", 5: "LINK_UP",
                    6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}  # fmt: skip
_IBV_LINK_LAYERS = ("InfiniBand", "Ethernet", "Unspecified")
_IBV_DEVICE_KEYS = ("transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id", "vendor_part_id", "hw_ver",
                    "board_id", "phys_port_cnt")  # fmt: skip
_IBV_PORT_KEYS = ("state", "max_mtu", "active_mtu", "sm_lid", "port_lid", "port_lmc", "link_layer", "gid_tbl_len",
                  "active_width", "active_speed", "phys_state")  # fmt: skip
_IBV_HCA = re.compile(r"^hca_id:\s+(\S+)\s*$")
_IBV_PORT = re.compile(r"^\s+port:\s+(\d+)\s*$")
_IBV_FIELD = re.compile(r"^\s+([a-z_]+):\s+(\S.*?)\s*$")
_IBV_GID = re.compile(r"^\s+GID\[\s*(\d+)\]:\s+([0-9A-Fa-f:.]+?)(?:,\s+(RoCE v1|RoCE v2|Invalid gid type))?\s*$")
_IBV_CODED = re.compile(r"^(.+?) \((\d+)\)$")


def _coded(text):
    """``"PORT_ACTIVE (4)"`` as ``("PORT_ACTIVE", 4)``; ``(None, None)`` when it is not of that form."""
    match = _IBV_CODED.match(text or "")
    return (match.group(1), int(match.group(2))) if match else (None, None)


def _ibv_port(fields, gids, number):
    state, code = _coded(fields.get("state"))
    mtu_text, mtu_code = _coded(fields.get("active_mtu"))
    width_text, width_code = _coded(fields.get("active_width"))
    speed_text, speed_code = _coded(fields.get("active_speed"))
    phys_text, phys_code = _coded(fields.get("phys_state"))
    width = _IBV_WIDTHS.get(width_code)
    width = width if width is not None and width_text == f"{width}X" else None
    speed = _IBV_SPEEDS.get(speed_code)
    speed = speed if speed is not None and speed_text == f"{speed:.1f} Gbps" else None
    mtu = _IBV_MTUS.get(mtu_code)
    link_layer = fields.get("link_layer", "")
    verbose = "gid_tbl_len" in fields
    return {
        "port": number,
        "state": state[len("PORT_") :] if state in _IBV_STATES and _IBV_STATES[state] == code else "",
        "phys_state": phys_text if phys_code in _IBV_PHYS_STATES and _IBV_PHYS_STATES[phys_code] == phys_text else "",
        "link_layer": link_layer if link_layer in _IBV_LINK_LAYERS else "",
        "active_mtu": mtu if mtu is not None and mtu_text == str(mtu) else None,
        "width": width,
        "speed": _number(speed),
        "rate_gbps": _number(width * speed) if width is not None and speed is not None else None,
        "gids": [gids[index] for index in sorted(gids)] if verbose else None,
    }


class _DevinfoReader:
    """Reads ``ibv_devinfo`` line by line into devices, refusing lines that do not fit where they are."""

    def __init__(self):
        self.devices, self.device, self.port = [], None, None

    def close_port(self):
        if self.port is None:
            return
        fields, gids, number = self.port
        missing = [key for key in ("state", "link_layer") if key not in fields]
        if missing:
            raise IbvDevinfoError(f"{self.device['device']} port {number} has no {' or '.join(missing)} line")
        self.device["ports"].append(_ibv_port(fields, gids, number))
        self.port = None

    def hca(self, name):
        self.close_port()
        if name in [d["device"] for d in self.devices]:
            raise IbvDevinfoError(f"{name} is listed twice")
        self.device = {"device": name, "fields": {}, "ports": []}
        self.devices.append(self.device)

    def numbered(self, number):
        self.close_port()
        if number in [p["port"] for p in self.device["ports"]]:
            raise IbvDevinfoError(f"{self.device['device']} lists port {number} twice")
        self.port = ({}, {}, number)

    def gid(self, index, text, kind):
        if self.port is None:
            raise IbvDevinfoError(f"{self.device['device']} has a GID line outside a port")
        where = f"{self.device['device']} port {self.port[2]} GID[{index}]"
        try:
            address = ipaddress.IPv6Address(text).exploded
        except ValueError:
            raise IbvDevinfoError(f"{where} is not an address") from None
        if index in self.port[1]:
            raise IbvDevinfoError(f"{where} is listed twice")
        self.port[1][index] = {"index": index, "gid": address, "type": kind if kind in ("RoCE v1", "RoCE v2") else ""}

    def field(self, key, value):
        name = self.device["device"]
        if key in _IBV_DEVICE_KEYS:
            if self.port is not None or self.device["ports"]:
                raise IbvDevinfoError(f"{name} has its {key} line after its ports")
            fields = self.device["fields"]
        elif self.port is None:
            raise IbvDevinfoError(f"{name} has a port's {key} line outside a port")
        else:
            fields = self.port[0]
        if key in fields:
            raise IbvDevinfoError(f"{name} has two {key} lines" + (f" in port {self.port[2]}" if self.port else ""))
        fields[key] = value

    def line(self, line):
        hca, numbered = _IBV_HCA.match(line), _IBV_PORT.match(line)
        gid, field = _IBV_GID.match(line), _IBV_FIELD.match(line)
        known = bool(field) and field.group(1) in _IBV_DEVICE_KEYS + _IBV_PORT_KEYS
        if hca:
            self.hca(hca.group(1))
        elif self.device is None:
            if numbered or gid or known:
                raise IbvDevinfoError("a device's lines come before any hca_id line")
        elif numbered:
            self.numbered(int(numbered.group(1)))
        elif gid:
            self.gid(int(gid.group(1)), gid.group(2), gid.group(3))
        elif known:
            self.field(field.group(1), field.group(2))


def parse_ibv_devinfo(text):
    """The devices and ports ``ibv_devinfo`` (or ``ibv_devinfo -v``) lists, in its order: one dict per
    device (``device``, ``transport``, ``fw_ver``, ``vendor_id``, ``vendor_part_id``, ``board_id``,
    ``node_guid``, ``ports``), each port with its ``state`` (``ACTIVE``, ``DOWN``, ``INIT``, ``ARMED``,
    as sysfs words it), ``phys_state``, ``link_layer``, ``active_mtu`` and, from ``-v``, ``width``
    (lanes), ``speed`` (Gb/s per lane), ``rate_gbps`` (their product, as the kernel's rate) and
    ``gids`` (``index``, ``gid`` written out in full as sysfs writes it, ``type``); without ``-v`` these
    are None. A value whose text and code disagree is left unknown ("" or None).

    Raises IbvDevinfoError when the output lost or merged lines: a field before any device or port,
    a field twice in one device or port, a device listed twice, a port missing its state or link
    layer, or a device whose ports are not its ``phys_port_cnt`` (whole output only: not ``-i``)."""
    reader = _DevinfoReader()
    for line in str(text).expandtabs(8).splitlines():
        reader.line(line)
    if reader.device is not None:
        reader.close_port()
    return [_ibv_device(device) for device in reader.devices]


def ports_from_ibv_devinfo(devices):
    """The ports of :func:`parse_ibv_devinfo`'s devices in the shape the other readers give (no netdev
    or NUMA node: ibv_devinfo does not say), so that the choice can run on the verbs library's view."""
    return [
        {"device": d["device"], "port": p["port"], "state": p["state"], "link_layer": p["link_layer"], "netdev": "",
         "rate_gbps": p["rate_gbps"], "gids": [dict(g, netdev="") for g in p["gids"] or []], "numa_node": None}
        for d in devices for p in d["ports"]
    ]  # fmt: skip


def _ibv_device(device):
    fields = device["fields"]
    count = fields.get("phys_port_cnt", "")
    numbers = [p["port"] for p in device["ports"]]
    if not count.isdigit() or sorted(numbers) != list(range(1, int(count) + 1)):
        raise IbvDevinfoError(
            f"{device['device']} lists port(s) {', '.join(map(str, numbers)) or 'none'}, its phys_port_cnt says "
            f"{count or 'nothing'}"
        )
    transport, _code = _coded(fields.get("transport"))
    part = fields.get("vendor_part_id", "")
    return {
        "device": device["device"],
        "transport": transport or "",
        "fw_ver": fields.get("fw_ver", ""),
        "vendor_id": fields.get("vendor_id", ""),
        "vendor_part_id": int(part) if part.isdigit() else None,
        "board_id": fields.get("board_id", ""),
        "node_guid": fields.get("node_guid", ""),
        "ports": device["ports"],
    }


def _name(port):
    return f"{port['device']}:{port['port']}"


def _wanted(port, requested):
    for given in requested:
        pattern = str(given)
        if ":" in pattern:
            if fnmatch.fnmatchcase(_name(port), pattern):
                return True
        elif fnmatch.fnmatchcase(port["device"], pattern):
            return True
    return False


def is_bond(port, bonds=()):
    """A port of a bonded device: a RoCE LAG device (``mlx5_bond_0``) or one whose netdev is a bonding
    master (``bonds``, as ``/sys/class/net/bonding_masters`` lists them). A bond is a frontend or
    storage link, never a rail: RCCL pairs each GPU with one NIC of its own."""
    return "bond" in str(port.get("device", "")) or bool(port.get("netdev") and port["netdev"] in set(bonds or ()))


def _gbps(rate):
    return "unknown" if rate is None else f"{rate} Gb/s"


def _not_a_rail(port, excluded, bonds):
    """Why a port is never a rail, whatever the others are; "" when it may be one."""
    if port["state"] != "ACTIVE":
        return f"not active ({port['state'] or 'state unknown'})"
    if port.get("netdev") and port["netdev"] in excluded:
        return f"the management NIC's port (netdev {port['netdev']})"
    if is_bond(port, bonds):
        bonded = port.get("netdev") in set(bonds or ())
        return (
            f"a bond ({'netdev ' + port['netdev'] + ' is a bonding master' if bonded else 'bonded device'}): not a rail"
        )
    return ""


def _requested_rails(ports, requested):
    chosen = [p for p in ports if _wanted(p, requested)]
    left_out = [{"port": _name(p), "why": "not in fabric_rdma_hcas"} for p in ports if p not in chosen]
    problems = []
    if ports and not chosen:
        problems.append(
            f"no RDMA port matches {', '.join(requested)} (the node has {', '.join(_name(p) for p in ports)}); "
            f"fix fabric_rdma_hcas. See {RUNBOOK}"
        )
    down = [f"{_name(p)} ({p['state'] or 'unknown'})" for p in chosen if p["state"] != "ACTIVE"]
    if down:
        problems.append(
            f"RDMA port(s) asked for are not active: {', '.join(down)}: bring the links up, or take them out of "
            f"fabric_rdma_hcas. See {RUNBOOK}"
        )
    return chosen, left_out, problems


def _fastest_rails(ports, excluded, bonds):
    candidates, left_out = [], []
    for port in ports:
        why = _not_a_rail(port, excluded, bonds)
        if why:
            left_out.append({"port": _name(port), "why": why})
        else:
            candidates.append(port)
    known = [p["rate_gbps"] for p in candidates if p.get("rate_gbps") is not None]
    top = max(known) if known else None
    chosen = []
    for port in candidates:
        rate = port.get("rate_gbps")
        if top is not None and (rate is None or rate < top):
            left_out.append({"port": _name(port), "why": f"slower: {_gbps(rate)}, the rails run at {_gbps(top)}"})
        else:
            chosen.append(port)
    problems = []
    if ports and not chosen:
        states = ", ".join(f"{_name(p)} {p['state'] or 'unknown'}" for p in ports)
        problems.append(
            f"the node has RDMA ports but none is active and usable ({states}): bring the links up, "
            f"or set fabric_rdma_hcas. See {RUNBOOK}"
        )
    return chosen, left_out, problems


def choose_rails(ports, requested=None, exclude_netdevs=None, gpus=None, bonds=None):
    """The ports RCCL is given (``NCCL_IB_HCA``): the rails of the node, and why every other port is not one.

    ``requested`` (names or globs of devices, or ``dev:port``; ``fabric_rdma_hcas``): exactly those,
    each of which must be active; the operator's list also settles the count. Otherwise the rails are
    the fastest active ports (``rate_gbps``; ports whose rate is unknown count as equal when no rate is
    known), leaving out ports that are down, the management NIC's (``exclude_netdevs``), bonds
    (:func:`is_bond`) and slower ports; the rails must share one link layer and, where ``gpus`` (GPUs
    per node) is given, be as many as the GPUs.

    Returns ``{"hcas": ["mlx5_0:1", ...], "rate_gbps": the rails' rate (the slowest of them) or None,
    "link_layer": "InfiniBand" | "Ethernet" | "", "left_out": [{"port", "why"}], "problems": [...]}``;
    a node without RDMA ports gets no rails and no problem (RCCL uses sockets). With problems the
    choice must not be used: the sentences name the ports, the fix and the runbook."""
    ports = list(ports or [])
    requested = [str(r) for r in (requested or []) if str(r)]
    if requested:
        chosen, left_out, problems = _requested_rails(ports, requested)
    else:
        chosen, left_out, problems = _fastest_rails(ports, set(exclude_netdevs or []), bonds)
    layers = sorted({p["link_layer"] or "unknown" for p in chosen})
    if len(layers) > 1:
        detail = "; ".join(f"{layer}: {', '.join(_name(p) for p in chosen if (p['link_layer'] or 'unknown') == layer)}"
                           for layer in layers)  # fmt: skip
        problems.append(
            f"the fastest active RDMA ports mix link layers ({detail}): RCCL needs one kind; name the ports to use in "
            f"fabric_rdma_hcas. See {RUNBOOK}"
        )
    rates = [p["rate_gbps"] for p in chosen if p.get("rate_gbps") is not None]
    rate = min(rates) if rates else None
    gpus = int(gpus or 0)
    if chosen and not requested and gpus > 0 and len(chosen) != gpus and len(layers) == 1:
        dropped = "; ".join(f"{entry['port']}: {entry['why']}" for entry in left_out) or "none"
        problems.append(
            f"{len(chosen)} RDMA rail(s) at {_gbps(rate)} ({', '.join(_name(p) for p in chosen)}) for {gpus} "
            f"GPUs: RCCL pairs each GPU with a rail of its own. Left out: {dropped}. Bring the missing rails up, or "
            f"list the ports RCCL is to use in fabric_rdma_hcas. See {RUNBOOK}"
        )
    return {
        "hcas": [_name(p) for p in chosen],
        "rate_gbps": rate,
        # What every rail should run at: the fastest of them (a port that trained down fails the verbs check).
        "max_rate_gbps": max(rates) if rates else None,
        "link_layer": layers[0] if len(layers) == 1 and layers[0] != "unknown" else "",
        "left_out": left_out,
        "problems": problems,
    }


def roce_gid_index(ports):
    """The RoCE v2 GID index the ports share: on each port, the index of its RoCE v2 entry with an
    IPv4-mapped address (what RCCL's own choice prefers). None when the ports are InfiniBand or show
    no GID table. Raises RdmaError naming the ports when one has no such entry or they disagree."""
    ethernet = [p for p in ports if p.get("link_layer") == "Ethernet"]
    if not ethernet or not any(p.get("gids") for p in ethernet):
        return None
    found = {}
    for port in ethernet:
        indexes = [
            g["index"] for g in port.get("gids") or [] if g.get("type") == "RoCE v2" and _IPV4_MAPPED.match(g["gid"])
        ]
        if not indexes:
            raise RdmaError(
                f"RDMA port {_name(port)} has no RoCE v2 GID with an IPv4 address: give its netdev an IPv4 "
                f"address, or set fabric_ib_gid_index. See {RUNBOOK}"
            )
        found[_name(port)] = indexes[0]
    if len(set(found.values())) > 1:
        detail = ", ".join(f"{name} {index}" for name, index in sorted(found.items()))
        raise RdmaError(
            f"the RoCE v2 GID index differs between the ports ({detail}): RCCL takes one index for all; "
            f"set fabric_ib_gid_index to one every port has. See {RUNBOOK}"
        )
    return next(iter(found.values()))


def gid_index_problems(by_node):
    """Across nodes (``{host: index or None}``): every node with a RoCE v2 index must have the same
    one. Returns sentences naming the nodes and their indexes."""
    known = {host: index for host, index in (by_node or {}).items() if index is not None and str(index) != ""}
    if len({str(index) for index in known.values()}) <= 1:
        return []
    detail = ", ".join(f"{host} {index}" for host, index in sorted(known.items()))
    return [
        f"the nodes' RoCE v2 GID indexes differ ({detail}): RCCL needs the same index on every node; fix the "
        f"ports' addressing or set fabric_ib_gid_index to an index every node has. See {RUNBOOK}"
    ]


def nearest_port_warnings(ports, hcas, gpu_numa_nodes):
    """GPUs whose nearest RDMA ports (on their own NUMA node) are all left out of NCCL_IB_HCA while
    the node has an active one there: their traffic would cross the link between the sockets.
    ``gpu_numa_nodes``: the NUMA node of each GPU (None or -1 unknown). Returns sentences."""
    chosen = set(hcas or [])
    warnings = []
    counts = {}
    for node in gpu_numa_nodes or []:
        if node is not None and int(node) >= 0:
            counts[int(node)] = counts.get(int(node), 0) + 1
    for node, gpus in sorted(counts.items()):
        near = [p for p in ports or [] if p.get("numa_node") == node and p.get("state") == "ACTIVE"]
        if near and not any(_name(p) in chosen for p in near):
            warnings.append(
                f"{gpus} GPU(s) on NUMA node {node}: their nearest active RDMA port(s) "
                f"{', '.join(_name(p) for p in near)} are not in NCCL_IB_HCA ({', '.join(sorted(chosen)) or 'empty'}); "
                f"their traffic crosses sockets. See {RUNBOOK}"
            )
    return warnings


def _verbs_listing(devices):
    names = [f"{d['device']}:{p['port']} {p['state'] or '?'}" for d in devices for p in d["ports"]]
    return ", ".join(names) or "no device"


def _port_problems(node, name, port, rate_gbps, gid_index):
    """Why one port seen by the verbs library cannot carry RCCL as asked, as sentences."""
    device = name.partition(":")[0]
    problems = []
    if port["state"] != "ACTIVE":
        phys = f", physical state {port['phys_state']}" if port.get("phys_state") else ""
        problems.append(
            f"{node}: RDMA port {name} is {port['state'] or 'in an unknown state'} in ibv_devinfo{phys}; RCCL needs it "
            f"ACTIVE. Check its cable, optics and switch port (ibv_devinfo -v -d {device}, rdma link show), or "
            f"leave it out of fabric_rdma_hcas. See {RUNBOOK}"
        )
    rate = port.get("rate_gbps")
    if rate_gbps is not None and rate is not None and rate < float(rate_gbps) - 1e-6:
        problems.append(
            f"{node}: RDMA port {name} runs at {rate} Gb/s ({port['width']}X {port['speed']} Gb/s lanes), below the "
            f"{_number(rate_gbps)} Gb/s expected of the rails: the link trained down. Check the cable, optics and "
            f"the switch port's speed, or set fabric_rdma_rate_gbps. See {RUNBOOK}"
        )
    if str(gid_index) != "" and port.get("link_layer") == "Ethernet" and port.get("gids") is not None:
        index = int(gid_index)
        entries = {g["index"]: g for g in port["gids"]}
        v2 = [g["index"] for g in port["gids"] if g["type"] == "RoCE v2" and _IPV4_MAPPED.match(g["gid"])]
        others = f"its RoCE v2 GIDs with an IPv4 address are at {', '.join(map(str, v2))}" if v2 else (
            "it has no RoCE v2 GID with an IPv4 address")  # fmt: skip
        if index not in entries:
            problems.append(
                f"{node}: RDMA port {name} has no GID at index {index} (NCCL_IB_GID_INDEX); {others}. Give its netdev "
                f"an IPv4 address, or set fabric_ib_gid_index to an index every port has. See {RUNBOOK}"
            )
        elif entries[index]["type"] != "RoCE v2":
            problems.append(
                f"{node}: RDMA port {name}'s GID at index {index} (NCCL_IB_GID_INDEX) is "
                f"{entries[index]['type'] or 'of no type'} ({entries[index]['gid']}), not RoCE v2; {others}. Set "
                f"fabric_ib_gid_index to a RoCE v2 index every port has. See {RUNBOOK}"
            )
    return problems


def verbs_check(devices, hcas, rate_gbps=None, gid_index="", *, node="", said=None):  # noqa: PLR0913 - each is asked for
    """Whether every port of ``hcas`` (``NCCL_IB_HCA``: devices, globs or ``dev:port``) is what RCCL
    needs, as the verbs library sees it (``devices``: :func:`parse_ibv_devinfo` of ``ibv_devinfo -v``):
    listed (a device the kernel has but libibverbs lacks a provider for is not), ACTIVE, at
    ``rate_gbps`` or faster where the output gives a rate, and, for RoCE with ``gid_index`` given, with
    a RoCE v2 GID at that index.

    Returns ``{"ports": [{"port", "seen", "state", "link_layer", "rate_gbps", "gid", "ok"}],
    "problems": [...]}``; each problem names ``node``, the port, what was found, the fix and the runbook.
    ``said``: ibv_devinfo's stderr lines (libibverbs' warnings about a provider it could not load),
    quoted where a port is not seen."""
    verdicts, problems, done = [], [], set()
    for wanted in [str(h) for h in hcas or [] if str(h)]:
        matched = [(f"{d['device']}:{p['port']}", p) for d in devices or [] for p in d["ports"]
                   if _wanted({"device": d["device"], "port": p["port"]}, [wanted])]  # fmt: skip
        if not matched:
            verdicts.append({"port": wanted, "seen": False, "state": "", "link_layer": "", "rate_gbps": None,
                             "gid": None, "ok": False})  # fmt: skip
            quoted = f"; it said: {' | '.join(said[-3:])}" if said else ""
            problems.append(
                f"{node}: RDMA port {wanted} is not seen by the verbs library (ibv_devinfo lists "
                f"{_verbs_listing(devices or [])}{quoted}): the kernel has no such port, or libibverbs has no provider "
                f"for its device. Install the NIC vendor's verbs library (DOCA/MLNX_OFED for ConnectX, Broadcom's "
                f"libbnxt_re for Thor, AMD's libionic1 for Pollara) or the distribution's ibverbs-providers, or fix "
                f"fabric_rdma_hcas. See {RUNBOOK}"
            )
            continue
        for name, port in matched:
            if name in done:
                continue
            done.add(name)
            found = _port_problems(node, name, port, rate_gbps, gid_index)
            gids = {g["index"]: g for g in port.get("gids") or []}
            verdicts.append({
                "port": name, "seen": True, "state": port["state"], "link_layer": port["link_layer"],
                "rate_gbps": port.get("rate_gbps"),
                "gid": gids.get(int(gid_index)) if str(gid_index) != "" else None, "ok": not found,
            })  # fmt: skip
            problems.extend(found)
    return {"ports": verdicts, "problems": problems}


def netdevs_from_sysfs(files):
    """The NICs of a ``/sys/class/net`` tree given as ``{"IF/device": PCI address, "IF/operstate":
    text, "IF/speed": text, "IF/device/numa_node": text}`` (what ``sysfs.read_net_class`` reads):
    one dict per interface with a device, in natural name order. A speed of -1 or unreadable (a
    link that is down) is None."""
    nics = {}
    for path, text in (files or {}).items():
        name, _sep, leaf = str(path).strip("/").partition("/")
        nic = nics.setdefault(name, {"name": name, "pci": "", "state": "", "numa_node": None, "speed_mbps": None})
        value = str(text).strip()
        if leaf == "device":
            nic["pci"] = value
        elif leaf == "operstate":
            nic["state"] = value.upper()
        elif leaf == "speed" and value.lstrip("-").isdigit() and int(value) > 0:
            nic["speed_mbps"] = int(value)
        elif leaf == "device/numa_node" and value.lstrip("-").isdigit() and int(value) >= 0:
            nic["numa_node"] = int(value)
    return [nics[name] for name in sorted(nics, key=_natural)]


def _natural(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(name))]


def nic_report(nics, ports, hcas, gpu_numa_nodes):
    """What a node has for the fabric, for preflight's report: one row per NIC (and per RDMA port
    without a netdev, as InfiniBand ports have), with its NUMA node, its RDMA ports and whether
    they are in ``hcas`` (what NCCL_IB_HCA would list); the GPUs per NUMA node; and a warning for
    each NUMA node whose GPUs' nearest active port is left out (:func:`nearest_port_warnings`)."""
    chosen = set(hcas or [])
    by_netdev = {}
    for port in ports or []:
        by_netdev.setdefault(port.get("netdev") or "", []).append(port)
    rows = []
    for nic in nics or []:
        on_it = by_netdev.pop(nic["name"], [])
        rows.append(
            dict(nic, rdma=[_port_text(p, chosen) for p in on_it], in_hcas=any(_name(p) in chosen for p in on_it))
        )
    for netdev, left in sorted(by_netdev.items()):
        for port in left:
            rows.append({
                "name": netdev or _name(port), "pci": "", "state": port.get("state", ""),
                "numa_node": port.get("numa_node"), "speed_mbps": None,
                "rdma": [_port_text(port, chosen)], "in_hcas": _name(port) in chosen,
            })  # fmt: skip
    gpus = {}
    for node in gpu_numa_nodes or []:
        key = "unknown" if node is None or int(node) < 0 else str(int(node))
        gpus[key] = gpus.get(key, 0) + 1
    return {"nics": rows, "gpus_by_numa": gpus, "warnings": nearest_port_warnings(ports, hcas, gpu_numa_nodes)}


def _port_text(port, chosen):
    mark = ", in NCCL_IB_HCA" if _name(port) in chosen else ""
    return f"{_name(port)} {port.get('state') or '?'} {port.get('link_layer') or '?'}{mark}"


def nic_report_lines(report):
    """The report as the lines a play prints: a header, one line per NIC, the GPUs per NUMA node."""
    lines = ["NIC | PCI | state | speed | NUMA | RDMA ports"]
    for row in report["nics"]:
        speed = f"{row['speed_mbps'] // 1000} Gb/s" if row.get("speed_mbps") else "-"
        numa = "-" if row.get("numa_node") is None else str(row["numa_node"])
        lines.append(
            f"{row['name']} | {row.get('pci') or '-'} | {row.get('state') or '-'} | {speed} | {numa} | "
            f"{'; '.join(row['rdma']) or 'none'}"
        )
    gpus = ", ".join(f"NUMA {node}: {count}" for node, count in sorted(report["gpus_by_numa"].items()))
    lines.append(f"GPUs by NUMA node: {gpus or 'none'}")
    return lines
