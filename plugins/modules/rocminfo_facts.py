#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rocminfo_facts
short_description: Read the HSA agents (CPUs and AMD GPUs) that ROCm's rocminfo reports
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs C(rocminfo), parses its whole output and returns the GPU agents, their gfx targets and
    counts as facts. The roles build PyTorch for the gfx archs found here and compare the GPU count
    with the PCI bus.
  - Fails, naming the cause and the runbook page under C(docs/runbooks/), when the binary is
    missing, the amdgpu (ROCk/KFD) driver is not loaded, C(/dev/kfd) cannot be opened (the user is
    not in the C(render)/C(video) groups), the output cannot be parsed, or no GPU agent is found
    (unless O(allow_no_gpu=true)).
  - Never changes anything on the host.
options:
  rocminfo_path:
    description:
      - The rocminfo executable. A bare name is looked up in E(PATH), then in C(/opt/rocm/bin).
      - Any path to an executable that prints rocminfo output works, for example a wrapper script.
    type: str
    default: rocminfo
  timeout:
    description: Seconds to wait for rocminfo before failing.
    type: int
    default: 60
  allow_no_gpu:
    description: Return zero GPUs instead of failing when rocminfo lists only CPU agents.
    type: bool
    default: false
extends_documentation_fragment:
  - instinct.finetune.read_only
  - instinct.finetune.read_only.facts
notes:
  - rocminfo exits non-zero when it cannot open C(/dev/kfd); the module reads its output either way
    to say why.
seealso:
  - module: instinct.finetune.rocm_smi_facts
"""

EXAMPLES = r"""
- name: Read the GPU agents of every node
  instinct.finetune.rocminfo_facts:

- name: Build for exactly the archs the hardware reports
  ansible.builtin.debug:
    msg: "PYTORCH_ROCM_ARCH={{ rocm_gfx_archs | instinct.finetune.pytorch_rocm_arch }}"

- name: Use a rocminfo from a non-standard install
  instinct.finetune.rocminfo_facts:
    rocminfo_path: /opt/rocm-7.0.2/bin/rocminfo
    timeout: 120
"""

RETURN = r"""
ansible_facts:
  description: Facts about the node's HSA agents.
  returned: success
  type: complex
  contains:
    rocm_gpus:
      description: GPU agents only, in rocminfo's order.
      type: list
      elements: dict
      sample:
        - node: 2
          gfx: gfx942
          isa: "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"
          marketing_name: AMD Instinct MI300X
          compute_units: 304
          uuid: GPU-07386a321fa45d1e
          chip_id: "0x74a1"
          bdfid: 6912
          apu: false
    rocm_agents:
      description: Every HSA agent, CPU ones included, with C(device_type) (C(CPU) or C(GPU)).
      type: list
      elements: dict
    rocm_gpu_count:
      description: Number of GPU agents.
      type: int
      sample: 8
    rocm_gfx_archs:
      description: Sorted unique gfx targets of the GPU agents, without feature suffixes.
      type: list
      elements: str
      sample: ["gfx942"]
    rocm_kfd_version:
      description: Version of the loaded ROCk (KFD) module when rocminfo prints it, else null.
      type: str
      sample: 6.8.5
rocminfo_path:
  description: The executable that was run.
  returned: always
  type: str
  sample: /opt/rocm/bin/rocminfo
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils._probe import find_tool
from ansible_collections.instinct.finetune.plugins.module_utils.rocminfo import (
    RUNBOOKS,
    RocminfoError,
    parse_rocminfo,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "rocminfo_path": {"type": "str", "default": "rocminfo"},
            "timeout": {"type": "int", "default": 60},
            "allow_no_gpu": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    requested = module.params["rocminfo_path"]
    path = find_tool(requested)
    if path is None:
        module.fail_json(
            msg=f"rocminfo was not found ('{requested}' is not an executable in PATH or /opt/rocm/bin): "
            "ROCm user space is not installed, or not on PATH. Install the 'rocminfo' package "
            f"(the rocm role does) or set rocminfo_path. See {RUNBOOKS['driver_not_loaded']}",
            reason="missing_binary",
            runbook=RUNBOOKS["driver_not_loaded"],
            rocminfo_path=requested,
        )
    try:
        proc = subprocess.run(
            [path],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=module.params["timeout"],
            check=False,
        )
    except subprocess.TimeoutExpired:
        module.fail_json(
            msg=f"{path} did not finish within {module.params['timeout']} s: the HSA runtime is hanging, "
            f"often on a GPU in a bad state. See {RUNBOOKS['hsa_failure']}",
            reason="timeout",
            runbook=RUNBOOKS["hsa_failure"],
            rocminfo_path=path,
        )
    output = proc.stdout.decode("utf-8", errors="replace")
    try:
        facts = parse_rocminfo(output)
    except RocminfoError as err:
        module.fail_json(
            msg=str(err),
            reason=err.reason,
            runbook=err.runbook,
            rc=proc.returncode,
            rocminfo_path=path,
            output_tail=output.splitlines()[-20:],
        )
    if facts["rocm_gpu_count"] == 0 and not module.params["allow_no_gpu"]:
        module.fail_json(
            msg="rocminfo lists no GPU agent (only "
            + ", ".join(a["name"] for a in facts["rocm_agents"])
            + "): the amdgpu driver is loaded but sees no Instinct GPU. Check `lspci -d 1002:` and "
            f"`dmesg | grep amdgpu`, or set allow_no_gpu. See {RUNBOOKS['no_gpu']}",
            reason="no_gpu",
            runbook=RUNBOOKS["no_gpu"],
            rocminfo_path=path,
        )
    module.exit_json(changed=False, ansible_facts=facts, rocminfo_path=path)


if __name__ == "__main__":
    main()
