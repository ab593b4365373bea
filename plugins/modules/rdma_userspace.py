#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rdma_userspace
short_description: Report which RDMA verbs stack a node has and whether the distribution's is needed
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Reports the node's RDMA user space (what RCCL loads through C(libibverbs)) without changing it.
  - "Finds a NIC vendor's stack: NVIDIA DOCA/MLNX_OFED (C(ofed_info), C(mlnx-*) or C(doca-*) packages, rdma-core
    packages in C(mlnx) builds), Broadcom's C(libbnxt_re) (package C(bnxt-rocelib), or a C(libbnxt_re*) library
    in O(vendor_library_dirs)) or AMD's Pensando AINIC library (C(libionic1))."
  - Lists which of the distribution's verbs packages (O(packages)) are installed and which are missing.
  - Decides RV(install_distribution_stack) true only when no vendor stack is present, the node has an RDMA
    device in O(class_dir), it uses dpkg and a package is missing; the role then installs RV(missing).
  - Never changes anything; runs the same in check mode.
options:
  packages:
    description: The distribution's verbs packages RCCL and the fabric role's verbs check need.
    type: list
    elements: str
    default: [rdma-core, ibverbs-providers, libibverbs1, ibverbs-utils]
  class_dir:
    description: The folder of the kernel's RDMA devices.
    type: path
    default: /sys/class/infiniband
  vendor_library_dirs:
    description: Folders where a vendor's user library is installed outside the distribution's packages.
    type: list
    elements: path
    default: [/usr/local/lib, /usr/local/lib/x86_64-linux-gnu]
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.rdma_verbs
"""

EXAMPLES = r"""
- name: Find which verbs stack the node has
  instinct.finetune.rdma_userspace:
  register: userspace

- name: Install the distribution's verbs stack where no vendor stack is present
  ansible.builtin.apt:
    name: "{{ userspace.missing }}"
  when: userspace.install_distribution_stack
"""

RETURN = r"""
install_distribution_stack:
  description: Whether the distribution's verbs packages (RV(missing)) should be installed.
  returned: always
  type: bool
missing:
  description: The packages of O(packages) that are not installed.
  returned: always
  type: list
  elements: str
  sample: ["rdma-core", "ibverbs-utils"]
installed:
  description: The packages of O(packages) that are installed, with their versions.
  returned: always
  type: dict
  sample: {"libibverbs1": "39.0-1", "ibverbs-providers": "39.0-1"}
vendor_stacks:
  description: The vendor verbs stacks found, each with what showed it.
  returned: always
  type: list
  elements: dict
  sample: [{"vendor": "nvidia", "name": "NVIDIA DOCA/MLNX_OFED",
            "evidence": ["ofed_info at /usr/bin/ofed_info",
                         "package mlnx-ofed-kernel-utils 23.10.OFED.23.10.1.1.9.1-1"]}]
rdma_devices:
  description: The node's RDMA devices with the PCI vendor id of each.
  returned: always
  type: list
  elements: dict
  sample: [{"device": "ionic_0", "vendor": "0x1dd8"}]
reason:
  description: Why the distribution's stack is, or is not, to be installed.
  returned: always
  type: str
  sample: a vendor verbs stack is present (NVIDIA DOCA/MLNX_OFED ...); it is left as it is
notes:
  description: Devices the distribution's stack cannot drive, and what they need instead.
  returned: always
  type: list
  elements: str
"""

import glob
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.rdma_userspace import (
    installed_packages,
    userspace_plan,
    vendor_stacks,
)
from ansible_collections.instinct.finetune.plugins.module_utils.sysfs import read_text


def rdma_devices(class_dir):
    if not os.path.isdir(class_dir):
        return []
    return [
        {"device": name, "vendor": (read_text(os.path.join(class_dir, name, "device", "vendor")) or "").strip()}
        for name in sorted(os.listdir(class_dir))
    ]


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {
                "type": "list",
                "elements": "str",
                "default": ["rdma-core", "ibverbs-providers", "libibverbs1", "ibverbs-utils"],
            },
            "class_dir": {"type": "path", "default": "/sys/class/infiniband"},
            "vendor_library_dirs": {
                "type": "list",
                "elements": "path",
                "default": ["/usr/local/lib", "/usr/local/lib/x86_64-linux-gnu"],
            },
        },
        supports_check_mode=True,
    )
    params = module.params
    dpkg_query = shutil.which("dpkg-query")
    packages = {}
    if dpkg_query:
        # dpkg-query -l widens its columns to the names when COLUMNS says so; nothing is cut.
        rc, out, err = module.run_command([dpkg_query, "-l"], environ_update={"COLUMNS": "400", "LC_ALL": "C"})
        if rc not in (0, 1):
            module.fail_json(msg=f"dpkg-query -l failed ({rc}): {err.strip() or out.strip()}")
        packages = installed_packages(out)
    files = [path for folder in params["vendor_library_dirs"] for path in glob.glob(os.path.join(folder, "lib*"))]
    stacks = vendor_stacks(packages, shutil.which("ofed_info") or "", files)
    devices = rdma_devices(params["class_dir"])
    plan = userspace_plan(packages, stacks, devices, params["packages"], dpkg=bool(dpkg_query))
    module.exit_json(
        changed=False,
        installed={name: packages[name] for name in params["packages"] if name in packages},
        vendor_stacks=stacks,
        rdma_devices=devices,
        **plan,
    )


if __name__ == "__main__":
    main()
