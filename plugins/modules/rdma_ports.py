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
    layer, rate, GID table (RoCE v1/v2 types and netdevs; unused all-zero entries skipped) and the NUMA
    node of its device.
  - Chooses the ports for C(NCCL_IB_HCA), as C(device:port), each a rail of the node. With O(hcas) (names
    or globs of devices, or C(device:port)), exactly those, each of which must be active. Otherwise the
    fastest active ports of one link layer, leaving out ports that are down, those whose netdev is in
    O(exclude_netdevs), bonds (a device named C(*bond*), such as C(mlx5_bond_0), or one whose netdev is a
    bonding master in O(net_dir)) and slower ports; with O(gpus) given, they must be as many as the GPUs.
  - Returns which ports were left out and why (RV(left_out)).
  - Works out the RoCE v2 GID index of the chosen ports (the index of each port's RoCE v2 entry with an
    IPv4 address), unless O(gid_index) gives one. All chosen ports must agree.
  - A node without any RDMA port returns no port and no index (RCCL then uses its socket transport).
  - Fails, naming the ports and the runbook, when the node has ports but none active, a port asked for
    is missing or down, the chosen ports mix InfiniBand and Ethernet, the rails found are not as many
    as O(gpus) (and O(hcas) does not name them), or their GID indexes disagree.
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
  gpus:
    description:
      - The GPUs of the node; the rails chosen automatically must be as many (one per GPU).
      - C(0) when unknown (a CPU node), for no such check.
    type: int
    default: 0
  net_dir:
    description: The folder of the kernel's network interfaces, where bonding masters are found.
    type: path
    default: /sys/class/net
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
- name: Choose the RDMA ports RCCL uses, one rail per GPU
  instinct.finetune.rdma_ports:
    exclude_netdevs: ["{{ ansible_facts.default_ipv4.interface }}"]
    gpus: 8
  register: rdma

- name: Say which ports were left out and why
  ansible.builtin.debug:
    msg: "{{ rdma.left_out | map(attribute='port') | zip(rdma.left_out | map(attribute='why')) | map('join', ': ') }}"

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
            "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400, "numa_node": 0,
            "gids": [{"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0b00:0048",
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
rate_gbps:
  description:
    - The chosen ports' rate in Gb/s, as the kernel reports it (the slowest of them).
    - Null when unknown, or without ports.
  returned: always
  type: float
  sample: 400
max_rate_gbps:
  description:
    - The fastest chosen port's rate in Gb/s, what every rail is checked against by the verbs check.
    - Null when unknown, or without ports.
  returned: always
  type: float
  sample: 400
left_out:
  description: The ports not chosen, each with why (down, the management NIC's, a bond, slower, not asked for).
  returned: always
  type: list
  elements: dict
  sample: [{"port": "mlx5_bond_0:1", "why": "a bond (bonded device): not a rail"},
           {"port": "mlx5_9:1", "why": "slower: 100 Gb/s, the rails run at 400 Gb/s"}]
problems:
  description: Why the choice cannot be used (the module fails with them); empty when it succeeds.
  returned: always
  type: list
  elements: str
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
    choose_rails,
    ports_from_sysfs,
    roce_gid_index,
)
from ansible_collections.instinct.finetune.plugins.module_utils.sysfs import (
    read_bonding_masters,
    read_infiniband_class,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "class_dir": {"type": "path", "default": "/sys/class/infiniband"},
            "hcas": {"type": "list", "elements": "str", "default": []},
            "exclude_netdevs": {"type": "list", "elements": "str", "default": []},
            "gid_index": {"type": "str", "default": ""},
            "gpus": {"type": "int", "default": 0},
            "net_dir": {"type": "path", "default": "/sys/class/net"},
        },
        supports_check_mode=True,
    )
    params = module.params
    ports = ports_from_sysfs(read_infiniband_class(params["class_dir"]))
    choice = choose_rails(
        ports, params["hcas"], params["exclude_netdevs"], params["gpus"], read_bonding_masters(params["net_dir"])
    )
    if choice["problems"]:
        module.fail_json(msg=" ".join(choice["problems"]), ports=ports, gid_index="", **choice)
    chosen = [p for p in ports if f"{p['device']}:{p['port']}" in choice["hcas"]]
    gid_index = params["gid_index"]
    try:
        if not gid_index and choice["link_layer"] == "Ethernet":
            found = roce_gid_index(chosen)
            gid_index = "" if found is None else str(found)
    except RdmaError as error:
        module.fail_json(msg=str(error), ports=ports, gid_index="", **choice)
    module.exit_json(changed=False, ports=ports, gid_index=gid_index, **choice)


if __name__ == "__main__":
    main()
