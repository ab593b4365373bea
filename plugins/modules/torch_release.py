#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: torch_release
short_description: Choose the PyTorch ROCm wheel index and label for the node's ROCm release, and check torch's HIP
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Reads the ROCm release the rocm stage recorded on the node (O(record), a local fact written by the rocm role),
    or takes O(rocm_version) where the node has no record yet, and derives from it the PyTorch wheel index
    (C(https://download.pytorch.org/whl/rocm7.1)) and the local version label (C(rocm7.1)).
  - Refuses, through RV(problem), a torch release that PyTorch does not publish on that index, according to the
    release map O(builds) (normally C(pytorch_rocm_wheels) of the pytorch role), naming the torch releases and ROCm
    releases that would fit.
  - O(index_url) and O(local_version) override the derived values; a label set by hand is not checked against the
    map.
  - With O(hip_version) (the installed torch's C(torch.version.hip)), also says in RV(hip_problem) whether that torch
    was built for another ROCm minor release than the node's.
  - Never changes anything on the host.
options:
  torch_version:
    description: The torch release to install (C(2.10.0)), without a local label.
    type: str
    required: true
  builds:
    description: Map of torch minor release (C(2.10)) to the ROCm minor releases whose index has it (C([7.0, 7.1])).
    type: dict
    required: true
  record:
    description: The rocm stage's record on the node (JSON with a C(version) key); a missing file is no record.
    type: path
    default: /etc/ansible/facts.d/instinct_rocm.fact
  rocm_version:
    description: The ROCm release to assume where the node has no record (a check run on a new node).
    type: str
    default: ""
  index_base:
    description: The wheel server whose C(rocmX.Y) folders are the indexes.
    type: str
    default: https://download.pytorch.org/whl
  index_url:
    description: The index to use instead of the derived one; C(none) for no index (only find-links folders).
    type: str
    default: ""
  local_version:
    description: The local version label to use instead of the derived one (C(rocm7.0)); not checked against O(builds).
    type: str
    default: ""
  hip_version:
    description: The installed torch's C(torch.version.hip), to compare with the node's ROCm release.
    type: str
    default: ""
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.rocminfo_facts
notes:
  - The ROCm minor release (7.1 of 7.1.1) picks the index; HIP's patch number (51831 of 7.0.51831) is its own and
    is not compared.
"""

EXAMPLES = r"""
- name: Choose the torch wheel for the node's ROCm
  instinct.finetune.torch_release:
    torch_version: "2.10.0"
    builds:
      "2.10": ["7.0", "7.1"]
    rocm_version: "{{ rocm_version | default('') }}"
  register: wheel

- name: Stop on a torch the index does not have
  ansible.builtin.assert:
    that: wheel.problem is none
    fail_msg: "{{ inventory_hostname }}: {{ wheel.problem }}"
"""

RETURN = r"""
rocm_version:
  description: The node's ROCm release (MAJOR.MINOR.PATCH); null when neither the record nor O(rocm_version) gives one.
  returned: always
  type: str
  sample: 7.0.2
rocm_version_source:
  description: Where RV(rocm_version) came from, C(record), C(rocm_version) or C(none).
  returned: always
  type: str
  sample: record
record_version:
  description: The version in the record; null without a readable record.
  returned: always
  type: str
  sample: 7.0.2
index_url:
  description: The wheel index of the ROCm build; empty for none.
  returned: always
  type: str
  sample: https://download.pytorch.org/whl/rocm7.0
local_version:
  description: The local version label of the ROCm build; empty when no wheel could be chosen.
  returned: always
  type: str
  sample: rocm7.0
published:
  description: The ROCm indexes that have this torch release according to O(builds); empty for a label set by hand.
  returned: always
  type: list
  elements: str
  sample: [rocm7.0, rocm7.1]
problem:
  description: Why no wheel can be chosen, with the fix; null when one can.
  returned: always
  type: str
  sample: "PyTorch publishes no torch 2.10.0 for ROCm 7.2 (...); set pytorch_version to ..."
hip_problem:
  description: Why the installed torch does not fit the node's ROCm, with the fix; null when it does or is not asked.
  returned: always
  type: str
  sample: "torch 2.10.0+rocm7.0 was built for ROCm 7.0 (torch.version.hip 7.0.51831-a3e329ad8) but /opt/rocm is ..."
note:
  description: A word about a record and an O(rocm_version) that disagree (the record wins); null otherwise.
  returned: always
  type: str
  sample: null
runbook:
  description: The runbook page of RV(problem) and RV(hip_problem).
  returned: always
  type: str
  sample: torch-rocm-mismatch.md
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.torch_release import (
    RUNBOOK,
    WHEEL_INDEX_BASE,
    choose_wheel,
    hip_problem,
)


def read_record(path):
    """The version in the rocm stage's record, or None (no file, or not the record's shape)."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    version = record.get("version") if isinstance(record, dict) else None
    return str(version) if version not in (None, "") else None


def main():
    module = AnsibleModule(
        argument_spec={
            "torch_version": {"type": "str", "required": True},
            "builds": {"type": "dict", "required": True},
            "record": {"type": "path", "default": "/etc/ansible/facts.d/instinct_rocm.fact"},
            "rocm_version": {"type": "str", "default": ""},
            "index_base": {"type": "str", "default": WHEEL_INDEX_BASE},
            "index_url": {"type": "str", "default": ""},
            "local_version": {"type": "str", "default": ""},
            "hip_version": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    params = module.params
    record_version = read_record(params["record"])
    result = choose_wheel(
        record_version,
        params["rocm_version"],
        params["torch_version"],
        params["builds"],
        {key: params[key] for key in ("index_url", "local_version", "index_base")},
    )
    mismatch = ""
    if params["hip_version"] and result["rocm_version"]:
        mismatch = hip_problem(
            params["hip_version"], result["rocm_version"], params["torch_version"], params["index_base"]
        )
    module.exit_json(
        changed=False,
        record_version=record_version,
        hip_problem=mismatch or None,
        runbook=RUNBOOK,
        **result,
    )


if __name__ == "__main__":
    main()
