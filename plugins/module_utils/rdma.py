# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The RDMA ports of a node and what RCCL is given of them: NCCL_IB_HCA (every active port, or the
ports the user names) and the RoCE v2 GID index, which must agree across the ports and the nodes.

Readers for the kernel's view (``/sys/class/infiniband``, as a mapping of file paths to contents so
that a recorded tree can stand for a node), ``rdma link`` and ``show_gids``; the choices are pure
functions over their results.
"""

from __future__ import absolute_import, division, print_function

import fnmatch
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
            {"device": parts[0], "port": int(parts[2]), "state": "", "link_layer": "", "netdev": "", "gids": {}},
        )
        leaf = parts[3:]
        value = str(text).strip()
        if leaf == ["state"]:
            port["state"] = port_state(value)
        elif leaf == ["link_layer"]:
            port["link_layer"] = value
        elif leaf == ["rate"]:
            port["rate"] = value
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


def choose_hcas(ports, requested=None, exclude_netdevs=None):
    """The ports RCCL is given (``["mlx5_0:1", ...]``) and their link layer.

    ``requested`` (names or globs of devices, or ``dev:port``): exactly those, each of which must be
    active. Otherwise every active port, except those whose netdev is in ``exclude_netdevs`` (the
    management NIC is not a rail). No RDMA port at all: ``([], "")`` (RCCL uses sockets, as before).
    Raises RdmaError, naming the ports, when the node has ports but none active, a requested port is
    missing or down, or the chosen ports mix InfiniBand and Ethernet."""
    ports = list(ports or [])
    if not ports:
        return [], ""
    requested = [str(r) for r in (requested or []) if str(r)]
    excluded = set(exclude_netdevs or [])
    if requested:
        chosen = [p for p in ports if _wanted(p, requested)]
        if not chosen:
            raise RdmaError(
                f"no RDMA port matches {', '.join(requested)} (the node has {', '.join(_name(p) for p in ports)}); "
                f"fix fabric_rdma_hcas. See {RUNBOOK}"
            )
        down = [f"{_name(p)} ({p['state'] or 'unknown'})" for p in chosen if p["state"] != "ACTIVE"]
        if down:
            raise RdmaError(f"RDMA port(s) asked for are not active: {', '.join(down)}. See {RUNBOOK}")
    else:
        chosen = [p for p in ports if p["state"] == "ACTIVE" and not (p["netdev"] and p["netdev"] in excluded)]
        if not chosen:
            states = ", ".join(f"{_name(p)} {p['state'] or 'unknown'}" for p in ports)
            raise RdmaError(
                f"the node has RDMA ports but none is active and usable ({states}): bring the links up, "
                f"or set fabric_rdma_hcas. See {RUNBOOK}"
            )
    layers = sorted({p["link_layer"] or "unknown" for p in chosen})
    if len(layers) > 1:
        detail = "; ".join(f"{layer}: {', '.join(_name(p) for p in chosen if (p['link_layer'] or 'unknown') == layer)}"
                           for layer in layers)  # fmt: skip
        raise RdmaError(
            f"the active RDMA ports mix link layers ({detail}): RCCL needs one kind; name the ports to use in "
            f"fabric_rdma_hcas. See {RUNBOOK}"
        )
    return [_name(p) for p in chosen], layers[0] if layers[0] != "unknown" else ""


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
