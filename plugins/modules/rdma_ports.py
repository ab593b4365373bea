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
author: instinct.finetune maintainers (@instinct-finetune)
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import (
    RdmaError,
    choose_hcas,
    ports_from_sysfs,
    roce_gid_index,
)
from ansible_collections.instinct.finetune.plugins.module_utils.sysfs import read_infiniband_class


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
    ports = ports_from_sysfs(read_infiniband_class(params["class_dir"]))
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
