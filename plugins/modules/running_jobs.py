#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: running_jobs
short_description: List the fine-tune jobs whose unit runs on a node
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - The one check every stage that could disturb a training job makes before it acts (the fabric
    stage's port check and all-reduce, package changes, a reboot).
  - Reads the finetune role's units (C(instinct-finetune-JOB.service) in O(unit_dir)) and asks
    systemd which of them are active.
  - Never changes anything on the host.
options:
  unit_dir:
    description: Where the finetune role installs the job units.
    type: path
    default: /etc/systemd/system
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.finetune_job_status
"""

EXAMPLES = r"""
- name: Find the fine-tune jobs running on this node
  instinct.finetune.running_jobs:
  register: running

- name: Hold back while a job trains
  ansible.builtin.debug:
    msg: "held back: job {{ running.jobs | join(', ') }} is training"
  when: running.jobs | length > 0
"""

RETURN = r"""
jobs:
  description: The names of the jobs whose unit is active (or starting or stopping) on the node.
  returned: always
  type: list
  elements: str
  sample: ["sft-7b"]
units:
  description: Every job unit found, with the state systemd gives it.
  returned: always
  type: dict
  sample: {"instinct-finetune-sft-7b.service": "active", "instinct-finetune-old.service": "inactive"}
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import running_job_names

UNIT_GLOB = "instinct-finetune-*.service"


def main():
    module = AnsibleModule(argument_spec={"unit_dir": {"type": "path", "default": "/etc/systemd/system"}},
                           supports_check_mode=True)  # fmt: skip
    units = sorted(os.path.basename(path) for path in glob.glob(os.path.join(module.params["unit_dir"], UNIT_GLOB)))
    states = []
    if units:
        systemctl = module.get_bin_path("systemctl", required=True)
        # is-active prints one state per unit, in order, and exits non-zero when any is inactive.
        _rc, out, err = module.run_command([systemctl, "is-active", *units])
        states = out.split()
        if len(states) != len(units):
            module.fail_json(msg=f"systemctl is-active answered {out!r} {err!r} for {len(units)} units")
    found = {unit: states[index] for index, unit in enumerate(units)}
    module.exit_json(changed=False, jobs=running_job_names(found), units=found)


if __name__ == "__main__":
    main()
