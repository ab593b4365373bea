#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rocm_smi_facts
short_description: Read per-GPU memory, temperature, power and the XGMI/PCIe topology from amd-smi or rocm-smi
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs C(amd-smi) (the ROCm 7 tool) when it is installed, else C(rocm-smi), and returns the same
    facts either way; O(prefer) reverses the order.
  - "With C(amd-smi): C(amd-smi static --json) (required), C(amd-smi metric --json) (used VRAM,
    temperature and power; when it fails those stay null and a warning says so) and
    C(amd-smi topology --json) (links; when it fails or prints a shape the parser does not know the
    links stay empty and a warning says so)."
  - "With C(rocm-smi): C(rocm-smi --showproductname --showmeminfo vram --showtemp --showpower
    --showbus --json) (required) and C(rocm-smi --showtopotype --showtoponuma --json) (links and NUMA
    nodes; optional in the same way)."
  - Fails, naming the cause and the runbook page under C(docs/runbooks/), when neither tool is
    installed, the required probe fails or prints output that cannot be parsed (garbled, truncated,
    a value that is not a number, a GPU listed twice), or no GPU is found (unless
    O(allow_no_gpu=true)).
  - Never changes anything on the host.
options:
  amd_smi_path:
    description:
      - The amd-smi executable. A bare name is looked up in E(PATH), then in C(/opt/rocm/bin).
      - Any path to an executable that prints amd-smi output works, for example a wrapper script.
    type: str
    default: amd-smi
  rocm_smi_path:
    description:
      - The rocm-smi executable, used when amd-smi is not found (or first with O(prefer=rocm-smi)).
        Looked up like O(amd_smi_path).
    type: str
    default: rocm-smi
  prefer:
    description: The tool to use when both are installed.
    type: str
    choices: [amd-smi, rocm-smi]
    default: amd-smi
  timeout:
    description: Seconds to wait for each command before giving up on it.
    type: int
    default: 60
  allow_no_gpu:
    description: Return an empty GPU list instead of failing when the tool lists no GPU.
    type: bool
    default: false
extends_documentation_fragment:
  - instinct.finetune.read_only
  - instinct.finetune.read_only.facts
notes:
  - amd-smi prints memory in MB meaning MiB (it divides bytes by 1024*1024); the module returns
    bytes as value * 1048576, which can be up to 1 MiB under the device's exact byte count.
    rocm-smi prints bytes, returned as they are.
  - Temperatures are the junction (hotspot) sensor, else the edge sensor. Power is the socket (or
    average graphics package) power in watts.
  - The index of a GPU is the tool's own device index (amd-smi C(gpu), rocm-smi C(cardN)).
seealso:
  - module: instinct.finetune.rocminfo_facts
"""

EXAMPLES = r"""
- name: Read GPU memory, temperature, power and topology of every node
  instinct.finetune.rocm_smi_facts:

- name: Warn when the GPUs of a node are not one XGMI hive
  ansible.builtin.debug:
    msg: "GPU pairs {{ rocm_smi_topology.pcie_pairs }} talk over PCIe, not XGMI: RCCL will be slower."
  when: rocm_smi_topology.all_xgmi is false

- name: Use rocm-smi even where amd-smi is installed, from a non-standard ROCm
  instinct.finetune.rocm_smi_facts:
    prefer: rocm-smi
    rocm_smi_path: /opt/rocm-6.4.1/bin/rocm-smi
    timeout: 120

- name: Read what there is on a build host without GPUs
  instinct.finetune.rocm_smi_facts:
    allow_no_gpu: true
"""

RETURN = r"""
ansible_facts:
  description: Facts about the node's AMD GPUs.
  returned: success
  type: complex
  contains:
    rocm_smi_gpus:
      description:
        - One entry per GPU, sorted by index. Every key is always present; a value the tool's output
          does not carry is null (for example used VRAM when C(amd-smi metric) failed, or the gfx
          target, which rocm-smi before ROCm 6.1 does not print). C(gfx) is also null when the tool
          prints a name that is not a gfx target, such as rocm-smi's C(gfx9010) for an MI200
          (C(gfx90a)); C(rocm_gfx_archs) from rocminfo_facts holds the real targets.
        - "Keys: C(index) (int), C(product_name) (str), C(vram_total_bytes) (int),
          C(vram_used_bytes) (int), C(temperature_c) (number, junction else edge),
          C(power_w) (number), C(power_limit_w) (number), C(bdf) (str, lower case),
          C(gfx) (str), C(numa_node) (int)."
      type: list
      elements: dict
      sample:
        - index: 0
          product_name: AMD Instinct MI300X
          vram_total_bytes: 206141652992
          vram_used_bytes: 297611264
          temperature_c: 43
          power_w: 155
          power_limit_w: 750
          bdf: "0000:1b:00.0"
          gfx: gfx942
          numa_node: 0
    rocm_smi_links:
      description:
        - GPU-to-GPU links, one per pair (C(a) < C(b)), with C(link_type) C(XGMI), C(PCIE) or
          C(UNKNOWN). Empty when the topology could not be read.
      type: list
      elements: dict
      sample:
        - a: 0
          b: 1
          link_type: XGMI
    rocm_smi_topology:
      description: A summary for the preflight check that the GPUs of a node form one XGMI hive.
      type: dict
      contains:
        all_xgmi:
          description:
            - true when every pair of GPUs is linked by XGMI, false when some link is not XGMI,
              null when unknown (no or incomplete link data, or fewer than two GPUs).
          type: bool
          sample: true
        pcie_pairs:
          description: The C([a, b]) pairs linked over PCIe.
          type: list
          elements: list
          sample: [[0, 1]]
        numa_nodes:
          description: NUMA node (as a string) to the sorted GPU indices on it.
          type: dict
          sample: {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
rocm_smi_source:
  description: The tool that was used.
  returned: success
  type: str
  sample: amd-smi
rocm_smi_path:
  description: The executable that was run.
  returned: success
  type: str
  sample: /opt/rocm/bin/amd-smi
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils._probe import find_tool
from ansible_collections.instinct.finetune.plugins.module_utils.rocm_smi import (
    RUNBOOKS,
    SmiError,
    build_facts,
    merge_gpus,
    parse_amdsmi_metric,
    parse_amdsmi_static,
    parse_amdsmi_topology,
    parse_rocm_smi_json,
)

ROCM_SMI_MAIN = ["--showproductname", "--showmeminfo", "vram", "--showtemp", "--showpower", "--showbus", "--json"]
ROCM_SMI_TOPO = ["--showtopotype", "--showtoponuma", "--json"]


def _tail(text, lines=20):
    return text.splitlines()[-lines:]


class Probe:
    """Runs one tool's commands for the module, failing or warning as each command allows."""

    def __init__(self, module, path):
        self.module = module
        self.path = path

    def _run(self, args):
        """(rc, stdout, stderr) of ``path args``; None after a timeout."""
        try:
            proc = subprocess.run(
                [self.path, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=self.module.params["timeout"],
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None
        return (
            proc.returncode,
            proc.stdout.decode("utf-8", errors="replace"),
            proc.stderr.decode("utf-8", errors="replace"),
        )

    def _command(self, args):
        return " ".join([self.path, *args])

    def required(self, args, parser):
        """Parse a command's output, or fail the module saying why."""
        command = self._command(args)
        result = self._run(args)
        if result is None:
            self.module.fail_json(
                msg=f"`{command}` did not finish within {self.module.params['timeout']} s: the driver or "
                f"a GPU is hanging. See {RUNBOOKS['driver_not_loaded']}",
                reason="timeout",
                runbook=RUNBOOKS["driver_not_loaded"],
                rocm_smi_path=self.path,
            )
        rc, stdout, stderr = result
        try:
            parsed = parser(stdout)
        except SmiError as err:
            if rc != 0:
                self.module.fail_json(
                    msg=f"`{command}` failed with exit code {rc}: "
                    + " / ".join(_tail(stderr or stdout, 3))
                    + ". The amdgpu driver is probably not loaded, or the user cannot open /dev/kfd "
                    f"and /dev/dri (render/video groups). See {RUNBOOKS['driver_not_loaded']}",
                    reason="probe_failed",
                    runbook=RUNBOOKS["driver_not_loaded"],
                    rc=rc,
                    rocm_smi_path=self.path,
                    output_tail=_tail(stdout + stderr),
                )
            self.module.fail_json(
                msg=f"`{command}`: {err}",
                reason=err.reason,
                runbook=err.runbook,
                rc=rc,
                rocm_smi_path=self.path,
                output_tail=_tail(stdout),
            )
        if rc != 0:
            self.module.warn(f"`{command}` exited with code {rc} but printed complete output; using it.")
        return parsed

    def optional(self, args, parser, without):
        """Parse a command's output, or warn (saying what the facts lack: ``without``) and return None."""
        command = self._command(args)
        result = self._run(args)
        if result is None:
            self.module.warn(f"`{command}` did not finish within {self.module.params['timeout']} s; {without}.")
            return None
        rc, stdout, stderr = result
        if rc != 0:
            detail = " / ".join(_tail(stderr or stdout, 2))
            detail = f" ({detail})" if detail.strip() else ""
            self.module.warn(f"`{command}` failed with exit code {rc}{detail}; {without}.")
            return None
        try:
            return parser(stdout)
        except SmiError as err:
            self.module.warn(f"`{command}` printed output this module cannot read ({err}); {without}.")
            return None


def probe_amdsmi(probe):
    static = probe.required(["static", "--json"], parse_amdsmi_static)
    metric = probe.optional(
        ["metric", "--json"],
        parse_amdsmi_metric,
        "the facts have no used VRAM, temperature or power",
    )
    links = probe.optional(["topology", "--json"], parse_amdsmi_topology, "the facts have no GPU links")
    return merge_gpus(static, metric), links or []


def probe_rocm_smi(probe):
    main = probe.required(ROCM_SMI_MAIN, parse_rocm_smi_json)
    topology = probe.optional(ROCM_SMI_TOPO, parse_rocm_smi_json, "the facts have no GPU links or NUMA nodes")
    if topology is None:
        return main["gpus"], main["links"]
    return merge_gpus(main["gpus"], topology["gpus"]), topology["links"] or main["links"]


def main():
    module = AnsibleModule(
        argument_spec={
            "amd_smi_path": {"type": "str", "default": "amd-smi"},
            "rocm_smi_path": {"type": "str", "default": "rocm-smi"},
            "prefer": {"type": "str", "default": "amd-smi", "choices": ["amd-smi", "rocm-smi"]},
            "timeout": {"type": "int", "default": 60},
            "allow_no_gpu": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    requested = {"amd-smi": module.params["amd_smi_path"], "rocm-smi": module.params["rocm_smi_path"]}
    order = ["amd-smi", "rocm-smi"] if module.params["prefer"] == "amd-smi" else ["rocm-smi", "amd-smi"]
    source, path = None, None
    for tool in order:
        path = find_tool(requested[tool])
        if path:
            source = tool
            break
    if path is None:
        module.fail_json(
            msg=f"Neither amd-smi ('{requested['amd-smi']}') nor rocm-smi ('{requested['rocm-smi']}') is an "
            "executable in PATH or /opt/rocm/bin: ROCm user space is not installed, or not on PATH. "
            "Install the 'amd-smi-lib' (ROCm 7) or 'rocm-smi-lib' package (the rocm role does), or set "
            f"amd_smi_path / rocm_smi_path. See {RUNBOOKS['driver_not_loaded']}",
            reason="missing_binary",
            runbook=RUNBOOKS["driver_not_loaded"],
            amd_smi_path=requested["amd-smi"],
            rocm_smi_path=requested["rocm-smi"],
        )
    probe = Probe(module, path)
    try:
        gpus, links = probe_amdsmi(probe) if source == "amd-smi" else probe_rocm_smi(probe)
        facts = build_facts(gpus, links)
    except SmiError as err:
        module.fail_json(msg=f"{source}: {err}", reason=err.reason, runbook=err.runbook, rocm_smi_path=path)
    if not facts["rocm_smi_gpus"] and not module.params["allow_no_gpu"]:
        module.fail_json(
            msg=f"{source} lists no GPU: the amdgpu driver is loaded but sees no AMD GPU. Check "
            f"`lspci -d 1002:` and `dmesg | grep amdgpu`, or set allow_no_gpu. See {RUNBOOKS['no_gpu']}",
            reason="no_gpu",
            runbook=RUNBOOKS["no_gpu"],
            rocm_smi_path=path,
        )
    module.exit_json(changed=False, ansible_facts=facts, rocm_smi_source=source, rocm_smi_path=path)


if __name__ == "__main__":
    main()
