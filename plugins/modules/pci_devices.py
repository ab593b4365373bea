#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pci_devices
short_description: List the PCI devices of a vendor's device ids, with their bridge paths, in one round trip
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs C(lspci -d VENDOR:DEVICE -PP) for each of O(device_ids) on the node and parses every line
    into the device's address, the root port it hangs off and its whole bridge path.
  - One task instead of one per device id; preflight asks for all fourteen Instinct ids on every run.
  - Fails when lspci is missing or fails, naming the device id and lspci's message.
  - Never changes anything on the host.
options:
  device_ids:
    description: The device ids to list, as lspci takes them (lower-case hex, V(74a1)).
    type: list
    elements: str
    required: true
  vendor:
    description: The PCI vendor id (AMD is V(1002)).
    type: str
    default: "1002"
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.rocminfo_facts
"""

EXAMPLES = r"""
- name: List the Instinct devices on the PCI bus with their bridge paths
  instinct.finetune.pci_devices:
    device_ids: ["74a1", "74a5", "74b5"]
  register: pci

- name: Count them
  ansible.builtin.debug:
    msg: "{{ pci.devices | length }} Instinct GPUs"
"""

RETURN = r"""
devices:
  description: Every device found, in the order of O(device_ids), then of lspci's lines.
  returned: always
  type: list
  elements: dict
  sample: [{"device_id": "74a1", "bdf": "05:00.0", "root_port": "00:01.1",
            "path": ["00:01.1", "01:00.0", "02:00.0", "03:00.0", "04:00.0", "05:00.0"],
            "class": "Processing accelerators",
            "name": "Advanced Micro Devices, Inc. [AMD/ATI] Aqua Vanjaram [Instinct MI300X]"}]
outputs:
  description: lspci's output for each device id, as it printed it.
  returned: always
  type: dict
  sample: {"74a1": "00:01.1/01:00.0/02:00.0/03:00.0/04:00.0/05:00.0 Processing accelerators: ...", "74a5": ""}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.pci import parse_lspci_paths


def main():
    module = AnsibleModule(
        argument_spec={
            "device_ids": {"type": "list", "elements": "str", "required": True},
            "vendor": {"type": "str", "default": "1002"},
        },
        supports_check_mode=True,
    )
    lspci = module.get_bin_path("lspci")
    if not lspci:
        module.fail_json(msg="lspci was not found: install pciutils (apt install pciutils)")
    devices, outputs = [], {}
    for device_id in module.params["device_ids"]:
        argv = [lspci, "-d", f"{module.params['vendor']}:{device_id}", "-PP"]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(argv[1:])} failed (rc {rc}): {err.strip() or out.strip()}", rc=rc)
        try:
            found = parse_lspci_paths(out)
        except ValueError as error:
            module.fail_json(msg=f"lspci -d {module.params['vendor']}:{device_id} -PP: {error}")
        outputs[device_id] = out
        devices.extend(dict(device, device_id=device_id) for device in found)
    module.exit_json(changed=False, devices=devices, outputs=outputs)


if __name__ == "__main__":
    main()
