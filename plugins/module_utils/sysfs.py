# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Reads of the kernel's device classes into ``{relative path: text}`` mappings, the form the pure
readers in ``rdma.py`` take, so that a recorded tree can stand for a node in the tests."""

from __future__ import absolute_import, division, print_function

import os

__metaclass__ = type

# What is read of each RDMA port, relative to its folder (GID files are listed per index).
PORT_FILES = ("state", "link_layer", "rate")
# What is read of each network interface that has a device (a NIC or a VF, not a bridge or a veth).
NET_FILES = ("operstate", "speed", "device/numa_node")


def read_text(path):
    """A sysfs file's text, or None when it cannot be read (EINVAL for the speed of a link that is
    down or the type of an unused GID entry, EACCES, a device that vanished)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_infiniband_class(class_dir):
    """``/sys/class/infiniband`` as ``{"DEV/ports/N/state": text, ...}`` (empty without RDMA)."""
    files = {}
    if not os.path.isdir(class_dir):
        return files
    for device in sorted(os.listdir(class_dir)):
        numa = read_text(os.path.join(class_dir, device, "device", "numa_node"))
        if numa is not None:
            files[f"{device}/device/numa_node"] = numa
        ports_dir = os.path.join(class_dir, device, "ports")
        if not os.path.isdir(ports_dir):
            continue
        for port in sorted(os.listdir(ports_dir)):
            base = os.path.join(ports_dir, port)
            for name in PORT_FILES:
                text = read_text(os.path.join(base, name))
                if text is not None:
                    files[f"{device}/ports/{port}/{name}"] = text
            gids = os.path.join(base, "gids")
            for index in sorted(os.listdir(gids)) if os.path.isdir(gids) else []:
                gid = read_text(os.path.join(gids, index))
                if gid is None or set(gid.strip()) <= {"0", ":"}:
                    continue
                files[f"{device}/ports/{port}/gids/{index}"] = gid
                for attr in ("types", "ndevs"):
                    text = read_text(os.path.join(base, "gid_attrs", attr, index))
                    if text is not None:
                        files[f"{device}/ports/{port}/gid_attrs/{attr}/{index}"] = text
    return files


def read_net_class(net_dir):
    """``/sys/class/net`` as ``{"IF/device": PCI address, "IF/operstate": text, ...}`` for the
    interfaces that have a device; bridges, veths, bonds and loopback have none and are left out."""
    files = {}
    if not os.path.isdir(net_dir):
        return files
    for name in sorted(os.listdir(net_dir)):
        device = os.path.join(net_dir, name, "device")
        if not os.path.exists(device):
            continue
        files[f"{name}/device"] = os.path.basename(os.path.realpath(device))
        for leaf in NET_FILES:
            text = read_text(os.path.join(net_dir, name, leaf))
            if text is not None:
                files[f"{name}/{leaf}"] = text
    return files


def read_bonding_masters(net_dir):
    """The bonding masters of ``/sys/class/net``: those its ``bonding_masters`` file lists (the bonding
    driver writes it) and any interface with a ``bonding`` folder. Empty without bonds."""
    masters = set((read_text(os.path.join(net_dir, "bonding_masters")) or "").split())
    if os.path.isdir(net_dir):
        masters.update(name for name in os.listdir(net_dir) if os.path.isdir(os.path.join(net_dir, name, "bonding")))
    return sorted(masters)


def pci_numa_nodes(pci_dir, addresses):
    """The NUMA node of each PCI address (``0c:00.0`` is taken as domain 0000); None when unknown."""
    nodes = []
    for address in addresses:
        full = address if address.count(":") == 2 else f"0000:{address}"
        text = (read_text(os.path.join(pci_dir, full, "numa_node")) or "").strip()
        nodes.append(int(text) if text.lstrip("-").isdigit() else None)
    return nodes
