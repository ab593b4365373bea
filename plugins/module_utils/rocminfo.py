# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Parse the whole text output of ROCm's ``rocminfo`` into HSA agent facts (pure functions).

The parser is strict on purpose: the roles build PyTorch for the gfx archs it returns and compare
the GPU count with the PCI bus, so an output it does not fully understand raises
:class:`RocminfoError` instead of returning a partial (and so wrong) answer.
"""

from __future__ import absolute_import, division, print_function

import re

from ansible_collections.instinct.finetune.plugins.module_utils._probe import ProbeError

__metaclass__ = type

RUNBOOKS = {
    "driver_not_loaded": "docs/runbooks/driver-not-loaded.md",
    "kfd_permission": "docs/runbooks/kfd-permission.md",
    "kfd_missing": "docs/runbooks/driver-not-loaded.md",
    "hsa_failure": "docs/runbooks/driver-not-loaded.md",
    "unparsable": "docs/runbooks/probe-output-unparsed.md",
    "no_gpu": "docs/runbooks/gpu-missing.md",
}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_AGENT_HEADER = re.compile(r"^\*{3,}\s*\n\s*Agent\s+(\d+)\s*\n\*{3,}\s*$", re.MULTILINE)
# Top-level agent properties are indented by exactly two spaces; nested blocks by more.
_PROPERTY = re.compile(r"^  ([A-Za-z][^:\n]*?):[ \t]*(.*?)[ \t]*$")
_ISA = re.compile(r"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)((?::[A-Za-z0-9_-]+[+-])*)")
_GFX = re.compile(r"^gfx[0-9a-f]+$")
_NUMBER = re.compile(r"^(\d+)")
_DEVICE_TYPES = ("CPU", "GPU", "DSP", "AIE")
_ROCK_LOADED = re.compile(r"ROCk module(?: version (\S+))? is loaded")


class RocminfoError(ProbeError):
    """rocminfo reported a problem, or printed something this parser cannot trust."""

    RUNBOOKS = RUNBOOKS


def base_gfx(isa_or_name):
    """``amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`` or ``gfx942:xnack-`` -> ``gfx942``."""
    match = _ISA.search(isa_or_name)
    name = match.group(1) if match else isa_or_name.split(":", 1)[0].strip()
    if not _GFX.match(name):
        raise RocminfoError("unparsable", f"'{isa_or_name}' is not a gfx target name.")
    return name


def _diagnose_failure(text):
    """Raise the matching error when rocminfo says the driver or /dev/kfd is not usable."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    kfd = next((line for line in lines if line.startswith("Unable to open /dev/kfd")), None)
    group_hint = next((line for line in lines if "member of" in line and "group" in line), "")
    if any("ROCk module is NOT loaded" in line for line in lines):
        detail = f" ({kfd})" if kfd else ""
        raise RocminfoError(
            "driver_not_loaded",
            "The amdgpu kernel driver (ROCk/KFD) is not loaded"
            + detail
            + ": rocminfo sees no GPU agents. Load it with `modprobe amdgpu`, or install amdgpu-dkms"
            " for the running kernel and reboot.",
        )
    if kfd and "Permission denied" in kfd:
        raise RocminfoError(
            "kfd_permission",
            f"{kfd}. The user running the probe cannot open /dev/kfd"
            + (f" ({group_hint})" if group_hint else "")
            + ": add it to the 'render' and 'video' groups and log in again.",
        )
    if kfd:
        raise RocminfoError("kfd_missing", f"{kfd}: the amdgpu driver has not created /dev/kfd.")
    hsa = next((line for line in lines if line.startswith(("hsa api call failure", "Call returned"))), None)
    if hsa:
        raise RocminfoError("hsa_failure", f"The HSA runtime failed to start: {hsa}.")


def _number(value):
    match = _NUMBER.match(value)
    return int(match.group(1)) if match else None


def _parse_agent(number, body):
    props = {}
    for line in body.splitlines():
        match = _PROPERTY.match(line)
        if not match:
            continue
        if match.group(1) in props:
            # Two agents run together: an "Agent N" banner is missing or damaged.
            raise RocminfoError("unparsable", f"Agent {number} has '{match.group(1)}:' twice.")
        props[match.group(1)] = match.group(2)
    for required in ("Name", "Device Type"):
        if required not in props:
            raise RocminfoError("unparsable", f"Agent {number} has no '{required}:' line.")
    device_type = props["Device Type"].upper()
    if device_type not in _DEVICE_TYPES:
        raise RocminfoError("unparsable", f"Agent {number} has unknown device type '{props['Device Type']}'.")
    if device_type != "GPU" and (_ISA.search(body) or _GFX.match(props["Name"])):
        raise RocminfoError("unparsable", f"Agent {number} is a {device_type} but carries a gfx target.")
    agent = {
        "agent": number,
        "name": props["Name"],
        "device_type": device_type,
        "marketing_name": props.get("Marketing Name", ""),
        "vendor": props.get("Vendor Name", ""),
        "uuid": props.get("Uuid", ""),
        "node": _number(props.get("Node", "")),
        "compute_units": _number(props.get("Compute Unit", "")),
    }
    if device_type == "GPU":
        isa = _ISA.search(body)
        if isa is None:
            raise RocminfoError("unparsable", f"GPU agent {number} ({props['Name']}) lists no amdgcn ISA.")
        gfx = base_gfx(props["Name"])
        if isa.group(1) != gfx:
            raise RocminfoError(
                "unparsable",
                f"GPU agent {number} is named {gfx} but its ISA is {isa.group(0)}.",
            )
        chip = re.search(r"\((0x[0-9a-fA-F]+)\)", props.get("Chip ID", ""))
        agent.update(
            {
                "gfx": gfx,
                "isa": isa.group(0),
                "chip_id": chip.group(1).lower() if chip else None,
                "bdfid": _number(props.get("BDFID", "")),
                "apu": props.get("Memory Properties", "").upper() == "APU",
            }
        )
    return agent


def parse_rocminfo(text):
    """Parse a complete rocminfo output.

    Returns a dict with ``rocm_agents`` (every HSA agent), ``rocm_gpus`` (GPU agents only: node,
    gfx, isa, marketing_name, compute_units, uuid, chip_id, bdfid, apu), ``rocm_gpu_count``,
    ``rocm_gfx_archs`` (sorted unique base gfx names) and ``rocm_kfd_version`` (or None).

    Raises :class:`RocminfoError` for driver and permission failures, and for any output that is
    truncated, garbled or not rocminfo's.
    """
    if not isinstance(text, str):
        raise RocminfoError("unparsable", "rocminfo output must be text.")
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    _diagnose_failure(text)

    if not re.search(r"^=+\s*\nHSA Agents\s*\n=+\s*$", text, re.MULTILINE):
        raise RocminfoError("unparsable", "The output has no 'HSA Agents' section: it is not rocminfo's.")
    if not re.search(r"^\*\*\* Done \*\*\*\s*$", text, re.MULTILINE):
        raise RocminfoError(
            "unparsable",
            "The output does not end with '*** Done ***': it was cut short, so GPUs may be missing.",
        )

    body = text.split("HSA Agents", 1)[1]
    body = body.split("*** Done ***", 1)[0]
    headers = list(_AGENT_HEADER.finditer(body))
    if not headers:
        raise RocminfoError("unparsable", "No 'Agent N' blocks were found under 'HSA Agents'.")
    numbers = [int(h.group(1)) for h in headers]
    if numbers != list(range(1, len(numbers) + 1)):
        raise RocminfoError("unparsable", f"Agent blocks are not numbered 1..N (found {numbers}).")

    agents = []
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(body)
        agents.append(_parse_agent(numbers[index], body[header.end() : end]))

    gpus = [
        {
            key: agent[key]
            for key in (
                "node",
                "gfx",
                "isa",
                "marketing_name",
                "compute_units",
                "uuid",
                "chip_id",
                "bdfid",
                "apu",
            )
        }
        for agent in agents
        if agent["device_type"] == "GPU"
    ]
    kfd = _ROCK_LOADED.search(text)
    return {
        "rocm_agents": agents,
        "rocm_gpus": gpus,
        "rocm_gpu_count": len(gpus),
        "rocm_gfx_archs": sorted({gpu["gfx"] for gpu in gpus}),
        "rocm_kfd_version": kfd.group(1) if kfd else None,
    }
