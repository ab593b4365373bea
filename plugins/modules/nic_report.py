#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nic_report
short_description: Report a node's NICs, their RDMA ports and NUMA nodes against its GPUs
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Lists the node's NICs (interfaces in O(net_dir) with a device, so not bridges, veths or bonds)
    with PCI address, state, speed and NUMA node; the RDMA ports (O(class_dir)) on each, and those
    without a netdev (InfiniBand ports); the GPUs per NUMA node (from O(gpu_pci_addresses)).
  - Marks the ports RCCL would be given (C(NCCL_IB_HCA)), chosen as the fabric role chooses them (O(hcas),
    else the fastest active ports of one link layer, one per GPU of O(gpu_pci_addresses), with no bond and
    none on O(exclude_netdevs)), says which ports are left out and why, and warns for each NUMA node whose
    GPUs' nearest active port is left out.
  - Reports and never fails on the choice; the fabric role enforces it. A choice that would fail there is
    returned in RV(problem).
options:
  net_dir:
    description: The folder of the kernel's network interfaces.
    type: path
    default: /sys/class/net
  class_dir:
    description: The folder of the kernel's RDMA devices.
    type: path
    default: /sys/class/infiniband
  pci_dir:
    description: The folder of the kernel's PCI devices, for the GPUs' NUMA nodes.
    type: path
    default: /sys/bus/pci/devices
  gpu_pci_addresses:
    description: The GPUs' PCI addresses (C(0c:00.0) or C(0000:0c:00.0)), as lspci lists them.
    type: list
    elements: str
    default: []
  hcas:
    description: The ports RCCL is to use, as the fabric role's O(instinct.finetune.rdma_ports#module:hcas).
    type: list
    elements: str
    default: []
  exclude_netdevs:
    description: Netdevs whose ports are never chosen automatically (the management NIC).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.rdma_ports
"""

EXAMPLES = r"""
- name: Report the NICs against the GPUs
  instinct.finetune.nic_report:
    gpu_pci_addresses: "{{ preflight_pci_gpus | map(attribute='bdf') | list }}"
    exclude_netdevs: ["{{ ansible_facts.default_ipv4.interface }}"]
  register: nics

- name: Show them
  ansible.builtin.debug:
    msg: "{{ nics.lines }}"
"""

RETURN = r"""
nics:
  description: One row per NIC, and per RDMA port without a netdev.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "rdma0", "pci": "0000:0c:00.0", "state": "UP", "speed_mbps": 400000, "numa_node": 0,
            "rdma": ["mlx5_0:1 ACTIVE Ethernet, in NCCL_IB_HCA"], "in_hcas": true}]
hcas:
  description: The ports RCCL would be given, as C(device:port); empty when the choice fails.
  returned: always
  type: list
  elements: str
problem:
  description: Why the fabric role would refuse the choice; empty when it would not.
  returned: always
  type: str
left_out:
  description: The RDMA ports that are not rails, each with why (as M(instinct.finetune.rdma_ports) returns them).
  returned: always
  type: list
  elements: dict
  sample: [{"port": "mlx5_bond_0:1", "why": "a bond (bonded device): not a rail"}]
gpus_by_numa:
  description: How many GPUs sit on each NUMA node (C(unknown) when the kernel does not say).
  returned: always
  type: dict
  sample: {"0": 4, "1": 4}
numa_warnings:
  description:
    - One sentence per NUMA node whose GPUs' nearest active RDMA port is left out.
    - Not C(warnings), which Ansible takes for the module's own warnings.
  returned: always
  type: list
  elements: str
lines:
  description: The report as lines to print.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import (
    choose_rails,
    netdevs_from_sysfs,
    nic_report,
    nic_report_lines,
    ports_from_sysfs,
)
from ansible_collections.instinct.finetune.plugins.module_utils.sysfs import (
    pci_numa_nodes,
    read_bonding_masters,
    read_infiniband_class,
    read_net_class,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "net_dir": {"type": "path", "default": "/sys/class/net"},
            "class_dir": {"type": "path", "default": "/sys/class/infiniband"},
            "pci_dir": {"type": "path", "default": "/sys/bus/pci/devices"},
            "gpu_pci_addresses": {"type": "list", "elements": "str", "default": []},
            "hcas": {"type": "list", "elements": "str", "default": []},
            "exclude_netdevs": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    nics = netdevs_from_sysfs(read_net_class(params["net_dir"]))
    ports = ports_from_sysfs(read_infiniband_class(params["class_dir"]))
    gpu_numa = pci_numa_nodes(params["pci_dir"], params["gpu_pci_addresses"])
    choice = choose_rails(
        ports,
        params["hcas"],
        params["exclude_netdevs"],
        len(params["gpu_pci_addresses"]),
        read_bonding_masters(params["net_dir"]),
    )
    problem = " ".join(choice["problems"])
    hcas = [] if problem else choice["hcas"]
    report = nic_report(nics, ports, hcas, gpu_numa)
    module.exit_json(
        changed=False,
        nics=report["nics"],
        gpus_by_numa=report["gpus_by_numa"],
        numa_warnings=report["warnings"],
        hcas=hcas,
        problem=problem,
        left_out=choice["left_out"],
        lines=nic_report_lines(report),
    )


if __name__ == "__main__":
    main()
