# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Which of AMD's MI300X host settings a GPU node lacks, as warnings for the end-of-run summary
(pure functions).

The state is the one preflight records (``preflight_tuning``): the kernel command-line arguments
missing from ``/proc/cmdline``, ``/proc/sys/kernel/numa_balancing`` and the C2 idle state of cpu0,
read again after ``apply-tuning.yml`` ran when it ran. Each warning names the setting, where AMD's
MI300X system optimisation guide asks for it, and what to set; nothing here changes a node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

GUIDE_URL = "https://instinct.docs.amd.com/projects/amdgpu-docs/en/latest/system-optimization/mi300x.html"
RUNBOOK = "host-tuning.md"  # docs/runbooks/host-tuning.md
SWITCH = "preflight_apply_tuning: true"

# Where the guide asks for each setting: its section and the anchor Sphinx gives it.
GRUB = f"AMD MI300X system optimisation guide, 'GRUB settings' ({GUIDE_URL}#mi300x-grub-settings)"
SOURCES = {
    "iommu=pt": GRUB,
    "pci=realloc=off": GRUB,
    "numa_balancing": (
        "AMD MI300X system optimisation guide, 'Operating system settings / Disable NUMA auto-balancing' "
        f"({GUIDE_URL}#mi300x-disable-numa)"
    ),
    "c2": (
        "AMD MI300X system optimisation guide, 'Operating system settings / CPU core states (C-states)' "
        f"({GUIDE_URL}#cpu-core-states-c-states)"
    ),
}


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _bool(value):
    """A recorded flag as a bool: a string that a template left as text ('False') included."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


def tuning_findings(tuning, pci_gpu_count):
    """The MI300X settings a node lacks, one dict each: ``setting`` (what to look for on the node),
    ``state`` (``missing``, or ``pending reboot`` for a kernel argument whose GRUB drop-in is
    written but not booted yet), ``source`` (the guide's section and URL) and ``fix``.

    ``tuning`` is preflight's record (None when preflight did not run: nothing is known, nothing is
    said); a node without Instinct GPUs on the PCI bus gets none (the guide is for GPU nodes).
    A C2 state that cannot be read (no ACPI idle driver, a VM) is not reported as missing."""
    if not tuning or _int(pci_gpu_count) <= 0:
        return []
    applied = _bool(tuning.get("applied"))
    reboot = _bool(tuning.get("reboot_allowed"))
    findings = []
    for arg in tuning.get("cmdline_missing") or []:
        if applied:
            state = "pending reboot"
            fix = (
                "the GRUB drop-in /etc/default/grub.d/90-instinct-finetune.cfg adds it at the next boot; reboot the "
                + (
                    "node (preflight reboots only when the drop-in changes)"
                    if reboot
                    else "node, or set preflight_allow_reboot: true"
                )
            )
        else:
            state = "missing"
            fix = f"set {SWITCH} (writes a GRUB drop-in; takes effect after a reboot, preflight_allow_reboot: true)"
        findings.append(
            {"setting": f"kernel command line {arg}", "state": state, "source": SOURCES.get(arg, GRUB), "fix": fix}
        )
    if str(tuning.get("numa_balancing", "")).strip() not in ("", "0"):
        findings.append(
            {
                "setting": "NUMA auto-balancing off (kernel.numa_balancing = 0)",
                "state": "missing",
                "source": SOURCES["numa_balancing"],
                "fix": f"set {SWITCH} (sysctl, now and at boot)",
            }
        )
    if tuning.get("c2") == "on":
        findings.append(
            {
                "setting": "C2 idle state off (cpuidle state2 disable = 1)",
                "state": "missing",
                "source": SOURCES["c2"],
                "fix": f"set {SWITCH} (tmpfiles.d entry, now and at boot)",
            }
        )
    return findings


def tuning_cell(tuning, pci_gpu_count):
    """The summary table's cell: ``ok``, or how many settings are missing / pending a reboot;
    None where preflight did not run or the node has no GPU."""
    if not tuning or _int(pci_gpu_count) <= 0:
        return None
    findings = tuning_findings(tuning, pci_gpu_count)
    if not findings:
        return "ok"
    counts = {}
    for finding in findings:
        counts[finding["state"]] = counts.get(finding["state"], 0) + 1
    return ", ".join(f"{counts[state]} {state}" for state in ("missing", "pending reboot") if state in counts)


def tuning_warnings(nodes, runbook_base="docs/runbooks"):
    """One warning per setting and state, naming the nodes that lack it (in the order given), the
    setting, the guide's section and URL, and the fix: a cluster of 64 untuned nodes gets four lines,
    not 256. ``nodes``: (host, preflight's record, its PCI GPU count) per node."""
    grouped = {}
    for host, tuning, pci_gpu_count in nodes:
        for finding in tuning_findings(tuning, pci_gpu_count):
            key = (finding["setting"], finding["state"], finding["source"], finding["fix"])
            grouped.setdefault(key, []).append(str(host))
    return [
        f"{setting} {state} on {', '.join(hosts)} - {source}; {fix}. See {runbook_base}/{RUNBOOK}"
        for (setting, state, source, fix), hosts in grouped.items()
    ]
