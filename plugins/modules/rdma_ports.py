#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rdma_ports
short_description: Read a node's RDMA ports and choose what RCCL is given of them
version_added: 0.1.0
author: instinct.finetune maintainers
description:
  - Reads every RDMA port in O(class_dir) (the kernel's C(/sys/class/infiniband)) with its state, link
    layer, GID table (RoCE v1/v2 types and netdevs; unused all-zero entries skipped) and the NUMA node of
    its device.
  - Chooses the ports for C(NCCL_IB_HCA), as C(device:port), each a rail of the node. With O(hcas) (names
    or globs of devices, or C(device:port)), exactly those, each of which must be active. Otherwise every
    active port except those whose netdev is in O(exclude_netdevs).
  - Works out the RoCE v2 GID index of the chosen ports (the index of each port's RoCE v2 entry with an
    IPv4 address), unless O(gid_index) gives one. All chosen ports must agree.
  - A node without any RDMA port returns no port and no index (RCCL then uses its socket transport).
  - Fails, naming the ports and the runbook, when the node has ports but none active, a port asked for
    is missing or down, the chosen ports mix InfiniBand and Ethernet, or their GID indexes disagree.
options:
  class_dir:
    description: The folder of the kernel's RDMA devices.
    type: path
    default: /sys/class/infiniband
  hcas:
    description:
      - The ports to use, as device names or globs (C(mlx5_[0-7])) or C(device:port).
      - Empty for every active port.
    type: list
    elements: str
    default: []
  exclude_netdevs:
    description: Netdevs whose ports are never chosen automatically (the management NIC is not a rail).
    type: list
    elements: str
    default: []
  gid_index:
    description: The RoCE GID index to use, as given; empty to work it out from the GID tables.
    type: str
    default: ""
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.fabric_iface
"""

EXAMPLES = r"""
- name: Choose the RDMA ports RCCL uses
  instinct.finetune.rdma_ports:
    exclude_netdevs: ["{{ ansible_facts.default_ipv4.interface }}"]
  register: rdma

- name: Show them
  ansible.builtin.debug:
    msg: "NCCL_IB_HCA={{ rdma.hcas | join(',') }} NCCL_IB_GID_INDEX={{ rdma.gid_index }}"
"""

RETURN = r"""
ports:
  description: Every RDMA port of the node.
  returned: always
  type: list
  elements: dict
  sample: [{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "link_layer": "Ethernet", "netdev": "rdma0",
            "numa_node": 0, "gids": [{"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0b00:0048",
            "type": "RoCE v2", "netdev": "rdma0"}]}]
hcas:
  description: The ports chosen for C(NCCL_IB_HCA), as C(device:port).
  returned: always
  type: list
  elements: str
  sample: ["mlx5_0:1", "mlx5_1:1"]
link_layer:
  description: The chosen ports' link layer (C(InfiniBand) or C(Ethernet)); empty without ports.
  returned: always
  type: str
gid_index:
  description:
    - The RoCE v2 GID index for C(NCCL_IB_GID_INDEX) (as given, or worked out).
    - Empty for InfiniBand or a node without ports.
  returned: always
  type: str
  sample: "3"
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import (
    RdmaError,
    choose_hcas,
    ports_from_sysfs,
    roce_gid_index,
)

# What is read of each port, relative to its folder (GID files are listed per index).
PORT_FILES = ("state", "link_layer", "rate")


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:  # EINVAL for the type of an unused GID entry, EACCES, a vanished port
        return None


def read_class_dir(class_dir):
    """The files the reader needs, as ``{relative path: text}``."""
    files = {}
    if not os.path.isdir(class_dir):
        return files
    for device in sorted(os.listdir(class_dir)):
        numa = _read(os.path.join(class_dir, device, "device", "numa_node"))
        if numa is not None:
            files[f"{device}/device/numa_node"] = numa
        ports_dir = os.path.join(class_dir, device, "ports")
        if not os.path.isdir(ports_dir):
            continue
        for port in sorted(os.listdir(ports_dir)):
            base = os.path.join(ports_dir, port)
            for name in PORT_FILES:
                text = _read(os.path.join(base, name))
                if text is not None:
                    files[f"{device}/ports/{port}/{name}"] = text
            gids = os.path.join(base, "gids")
            for index in sorted(os.listdir(gids)) if os.path.isdir(gids) else []:
                gid = _read(os.path.join(gids, index))
                if gid is None or set(gid.strip()) <= {"0", ":"}:
                    continue
                files[f"{device}/ports/{port}/gids/{index}"] = gid
                for attr in ("types", "ndevs"):
                    text = _read(os.path.join(base, "gid_attrs", attr, index))
                    if text is not None:
                        files[f"{device}/ports/{port}/gid_attrs/{attr}/{index}"] = text
    return files


def main():
    module = AnsibleModule(
        argument_spec={
            "class_dir": {"type": "path", "default": "/sys/class/infiniband"},
            "hcas": {"type": "list", "elements": "str", "default": []},
            "exclude_netdevs": {"type": "list", "elements": "str", "default": []},
            "gid_index": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    params = module.params
    ports = ports_from_sysfs(read_class_dir(params["class_dir"]))
    try:
        hcas, layer = choose_hcas(ports, params["hcas"], params["exclude_netdevs"])
        chosen = [p for p in ports if f"{p['device']}:{p['port']}" in hcas]
        gid_index = params["gid_index"]
        if not gid_index and layer == "Ethernet":
            found = roce_gid_index(chosen)
            gid_index = "" if found is None else str(found)
    except RdmaError as error:
        module.fail_json(msg=str(error), ports=ports)
    module.exit_json(changed=False, ports=ports, hcas=hcas, link_layer=layer, gid_index=gid_index)


if __name__ == "__main__":
    main()
