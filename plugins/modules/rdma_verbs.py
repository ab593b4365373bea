#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rdma_verbs
short_description: Check with the verbs tools that the RDMA ports RCCL is given can carry it
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs C(ibv_devinfo -v) (rdma-core's ibverbs-utils, or the vendor stack's copy) and reads every device
    and port the verbs library lists, as RCCL will see them through C(libibverbs).
  - Checks each port of O(hcas) (C(NCCL_IB_HCA)). It must be listed by the verbs library (a device the
    kernel has but no user-space provider drives is not), C(ACTIVE), at O(rate_gbps) or faster where
    C(ibv_devinfo -v) gives the lanes and their speed, and, for RoCE with O(gid_index) given, hold a
    C(RoCE v2) GID at that index.
  - Returns a verdict per port and RV(problems), one sentence each naming the node, the port, what was
    found, the fix and C(docs/runbooks/fabric-bandwidth.md); it does not fail on them, so that the role can
    print every node's before it stops.
  - With no O(hcas) and no RDMA device (or no C(ibv_devinfo) at all), returns RV(rdma) false and
    RV(msg) C(no RDMA ports) without failing, as on a node whose RCCL uses sockets.
  - Fails when O(hcas) asks for ports and C(ibv_devinfo) is not installed (the fix names the packages),
    when it does not finish within O(timeout), or when its output cannot be read.
options:
  hcas:
    description:
      - The ports to check, as device names, globs (C(mlx5_[0-7])) or C(device:port); a device stands for
        each of its ports.
      - Empty to only list what the verbs library sees.
    type: list
    elements: str
    default: []
  rate_gbps:
    description:
      - The rate each port must reach, in Gb/s (lanes times the lane speed, as the kernel's C(rate)).
      - Unset for no rate check.
    type: float
  gid_index:
    description: The RoCE GID index RCCL is given (C(NCCL_IB_GID_INDEX)); empty for no GID check.
    type: str
    default: ""
  node:
    description: The node's name in the problems (the inventory name); empty for the host name.
    type: str
    default: ""
  ibv_devinfo_path:
    description: The C(ibv_devinfo) executable, as a path or a name looked up in PATH.
    type: str
    default: ibv_devinfo
  timeout:
    description: Seconds C(ibv_devinfo -v) may take.
    type: int
    default: 60
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.rdma_ports
  - module: instinct.finetune.rdma_userspace
"""

EXAMPLES = r"""
- name: Check the chosen rails with the verbs tools
  instinct.finetune.rdma_verbs:
    hcas: "{{ fabric_rdma.hcas }}"
    rate_gbps: "{{ fabric_rdma.rate_gbps }}"
    gid_index: "{{ fabric_rdma.gid_index }}"
    node: "{{ inventory_hostname }}"
  register: verbs

- name: Stop on a port that cannot carry RCCL
  ansible.builtin.assert:
    that: verbs.problems | length == 0
    fail_msg: "{{ verbs.problems | join(' ') }}"
"""

RETURN = r"""
rdma:
  description: Whether the verbs library lists any RDMA device.
  returned: always
  type: bool
msg:
  description: What was found, in a few words (C(no RDMA ports) on a node without any).
  returned: always
  type: str
  sample: 8 RDMA port(s) seen, 8 checked, 0 problem(s)
devices:
  description:
    - Every device C(ibv_devinfo -v) lists, with its ports (state, physical state, link layer, active
      MTU, lanes, lane speed, rate in Gb/s and GID table).
  returned: always
  type: list
  elements: dict
  sample: [{"device": "mlx5_0", "transport": "InfiniBand", "fw_ver": "20.24.4702", "vendor_id": "0x02c9",
            "vendor_part_id": 4123, "board_id": "MT_0000000225", "node_guid": "b859:9f03:0037:8268",
            "ports": [{"port": 1, "state": "ACTIVE", "phys_state": "LINK_UP", "link_layer": "Ethernet",
                       "active_mtu": 4096, "width": 4, "speed": 25, "rate_gbps": 100,
                       "gids": [{"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:010b", "type": "RoCE v2"}]}]}]
ports:
  description: One verdict per port of O(hcas) (or per name that matched none, with C(seen) false).
  returned: always
  type: list
  elements: dict
  sample: [{"port": "mlx5_0:1", "seen": true, "state": "DOWN", "link_layer": "Ethernet", "rate_gbps": 400,
            "gid": null, "ok": false}]
problems:
  description: Why a port of O(hcas) cannot carry RCCL, one sentence each naming the node, port, value and fix.
  returned: always
  type: list
  elements: str
ibv_devinfo_path:
  description: The executable that was run; empty when none was found.
  returned: always
  type: str
  sample: /usr/bin/ibv_devinfo
said:
  description:
    - The lines C(ibv_devinfo) wrote to stderr (libibverbs' warnings about providers it could not load).
    - Not C(stderr), which Ansible takes for a text of its own.
  returned: always
  type: list
  elements: str
  sample: ["libibverbs: Warning: couldn't load driver 'libbnxt_re-rdmav34.so'"]
"""

import os
import shutil
import socket
import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import (
    RUNBOOK,
    IbvDevinfoError,
    parse_ibv_devinfo,
    verbs_check,
)

# Where the distribution's ibverbs-utils and the vendor stacks put it, for a PATH without /usr/bin.
FALLBACK_DIRS = ("/usr/bin", "/usr/local/bin")


def find_ibv_devinfo(name):
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    for folder in FALLBACK_DIRS:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def main():
    module = AnsibleModule(
        argument_spec={
            "hcas": {"type": "list", "elements": "str", "default": []},
            "rate_gbps": {"type": "float"},
            "gid_index": {"type": "str", "default": ""},
            "node": {"type": "str", "default": ""},
            "ibv_devinfo_path": {"type": "str", "default": "ibv_devinfo"},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    params = module.params
    node = params["node"] or socket.gethostname()
    hcas = [h for h in params["hcas"] if h]
    empty = {"changed": False, "devices": [], "ports": [], "problems": [], "said": []}
    path = find_ibv_devinfo(params["ibv_devinfo_path"])
    if path is None:
        if not hcas:
            module.exit_json(rdma=False, msg="no RDMA ports", ibv_devinfo_path="", **empty)
        module.fail_json(
            msg=(
                f"{node}: ibv_devinfo ('{params['ibv_devinfo_path']}') is not installed, so the RDMA ports "
                f"{', '.join(hcas)} cannot be checked and RCCL has no verbs library to use them with (it would fall "
                "back to sockets). Install the distribution's verbs stack (rdma-core, ibverbs-providers, libibverbs1, "
                "ibverbs-utils: the fabric role does where no vendor stack is present) or the NIC vendor's (DOCA/"
                f"MLNX_OFED, Broadcom's libbnxt_re, AMD's AINIC packages). See {RUNBOOK}"
            ),
            rdma=False,
            ibv_devinfo_path="",
            **empty,
        )
    try:
        proc = subprocess.run(
            [path, "-v"],
            capture_output=True,
            timeout=params["timeout"],
            check=False,
            env=dict(os.environ, LC_ALL="C"),
        )
    except subprocess.TimeoutExpired:
        module.fail_json(
            msg=f"{node}: {path} -v did not finish within {params['timeout']} s: an RDMA device or its driver is "
            f"hanging. Look at dmesg for the NIC's driver. See {RUNBOOK}",
            rdma=False,
            ibv_devinfo_path=path,
            **empty,
        )
    out = proc.stdout.decode("utf-8", errors="replace")
    err = [line for line in proc.stderr.decode("utf-8", errors="replace").splitlines() if line.strip()]
    nothing = dict(empty)
    nothing["said"] = err
    try:
        devices = parse_ibv_devinfo(out)
    except IbvDevinfoError as error:
        module.fail_json(msg=f"{node}: {error}", rdma=False, ibv_devinfo_path=path, **nothing)
    if not devices and not hcas:
        # "No IB devices found" (stderr, exit 255): a node whose RCCL uses sockets.
        module.exit_json(rdma=False, msg="no RDMA ports", ibv_devinfo_path=path, **nothing)
    check = verbs_check(devices, hcas, params["rate_gbps"], params["gid_index"], node=node, said=err)
    seen = sum(len(device["ports"]) for device in devices)
    module.exit_json(
        changed=False,
        rdma=bool(devices),
        msg=f"{seen} RDMA port(s) seen, {len(check['ports'])} checked, {len(check['problems'])} problem(s)",
        devices=devices,
        ports=check["ports"],
        problems=check["problems"],
        ibv_devinfo_path=path,
        said=err,
    )


if __name__ == "__main__":
    main()
