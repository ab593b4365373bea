#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fabric_iface
short_description: Choose the network interface that RCCL/NCCL and Gloo traffic must use on a node
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Reads C(ip -j addr) (and C(ip -j route get PEER) when O(peer) is given) and picks the fabric
    interface, in this order, the first that applies; an explicit O(ifname) (it must exist, be up
    and hold an IPv4 address); the one interface with an IPv4 address in O(cidr); the interface of
    the route to O(peer); the only remaining up interface with an IPv4 address.
  - When several interfaces hold an address in O(cidr) (a cidr spanning the backend subnets of a
    rail-optimised node), the one on the subnet of O(peer) is chosen, or without O(peer) (the
    master) the first by name, so that every node's socket interface is on the same rail.
  - Interfaces matching O(exclude) (loopback, Docker and libvirt bridges, veth pairs) are never
    chosen automatically; bond slaves never are, their bond is.
  - Anything ambiguous or missing fails, naming what was asked and listing the candidates with their
    addresses, and the runbook C(docs/runbooks/fabric-iface.md).
  - Also reports the RDMA devices (C(/sys/class/infiniband)) whose network device is the chosen
    interface, for C(NCCL_IB_HCA).
  - Never changes anything on the host.
options:
  ifname:
    description: Use exactly this interface (per host, for example in host_vars).
    type: str
  cidr:
    description: The fabric network, for example C(10.10.0.0/16).
    type: str
  peer:
    description:
      - An address that must be reachable over the fabric, normally the master node's fabric
        address; the interface of the route to it is the third choice, and among several
        interfaces in O(cidr) the one on its subnet is chosen.
    type: str
  exclude:
    description: Interface name globs never chosen automatically.
    type: list
    elements: str
    default: [lo, docker*, veth*, virbr*, br-*]
  ip_path:
    description: The iproute2 C(ip) executable.
    type: str
    default: ip
extends_documentation_fragment:
  - instinct.finetune.read_only
  - instinct.finetune.read_only.facts
seealso:
  - module: instinct.finetune.rocminfo_facts
"""

EXAMPLES = r"""
- name: Pick the interface in the fabric network
  instinct.finetune.fabric_iface:
    cidr: 10.10.0.0/16
    peer: "{{ hostvars[groups['instinct_nodes'][0]].fabric_address | default(omit) }}"

- name: Pin one host to an interface
  instinct.finetune.fabric_iface:
    ifname: ens50f0
"""

RETURN = r"""
ansible_facts:
  description: The chosen interface.
  returned: success
  type: complex
  contains:
    fabric_ifname:
      description: Interface name, the value of C(NCCL_SOCKET_IFNAME) and C(GLOO_SOCKET_IFNAME).
      type: str
      sample: ens50f0
    fabric_address:
      description: Its IPv4 address.
      type: str
      sample: 10.10.0.11
    fabric_mtu:
      description: Its MTU.
      type: int
      sample: 9000
    fabric_reason:
      description: Why it was chosen.
      type: str
      sample: matched cidr 10.10.0.0/16
    fabric_rdma_devices:
      description: RDMA devices on that interface (empty without RDMA).
      type: list
      elements: str
      sample: [mlx5_0]
"""

import glob
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.netif import (
    FabricIfaceError,
    choose_fabric_iface,
    parse_ip_addr,
    parse_route_get,
    rdma_netdevs,
)

SYS_INFINIBAND = "/sys/class/infiniband"


def _run(module, argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, check=False)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def _rdma_mapping():
    mapping = {}
    for device in sorted(glob.glob(os.path.join(SYS_INFINIBAND, "*"))):
        net = os.path.join(device, "device", "net")
        # An RDMA device without a netdev (plain InfiniBand without IPoIB) cannot carry this fabric.
        mapping[os.path.basename(device)] = sorted(os.listdir(net)) if os.path.isdir(net) else []
    return mapping


def main():
    module = AnsibleModule(
        argument_spec={
            "ifname": {"type": "str"},
            "cidr": {"type": "str"},
            "peer": {"type": "str"},
            "exclude": {"type": "list", "elements": "str", "default": ["lo", "docker*", "veth*", "virbr*", "br-*"]},
            "ip_path": {"type": "str", "default": "ip"},
        },
        supports_check_mode=True,
    )
    params = module.params
    ip = module.get_bin_path(params["ip_path"], required=True)
    rc, out, err = _run(module, [ip, "-j", "addr"])
    if rc != 0:
        module.fail_json(msg=f"'{ip} -j addr' failed (rc {rc}): {err.strip()}. See docs/runbooks/fabric-iface.md")
    try:
        interfaces = parse_ip_addr(out)
        peer_route = None
        if params["peer"] and not (params["ifname"] or params["cidr"]):
            rc, out, err = _run(module, [ip, "-j", "route", "get", params["peer"]])
            if rc != 0:
                module.fail_json(
                    msg=f"fabric_iface: no route to the peer {params['peer']} ({err.strip()}); set cidr or ifname, "
                    "or fix the routing. See docs/runbooks/fabric-iface.md",
                    reason="bad_route",
                    runbook="docs/runbooks/fabric-iface.md",
                )
            peer_route = parse_route_get(out)
        choice = choose_fabric_iface(
            interfaces,
            ifname=params["ifname"],
            cidr=params["cidr"],
            peer_route=peer_route,
            exclude=params["exclude"],
            peer=params["peer"] if params["cidr"] and not params["ifname"] else None,
        )
        mapping = _rdma_mapping() if os.path.isdir(SYS_INFINIBAND) else {}
        rdma = rdma_netdevs(mapping, choice["ifname"], interfaces)
    except FabricIfaceError as error:
        module.fail_json(msg=str(error), reason=error.reason, runbook=error.runbook)
    facts = {
        "fabric_ifname": choice["ifname"],
        "fabric_address": choice["address"],
        "fabric_mtu": choice["mtu"],
        "fabric_reason": choice["reason"],
        "fabric_rdma_devices": rdma,
    }
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
