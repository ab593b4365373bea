"""Which of AMD's MI300X host settings a GPU node lacks (module_utils/host_tuning.py, issue 30): the
warnings the end-of-run summary prints, from the state preflight records (roles/preflight/tasks/
read-tuning.yml), before and after preflight_apply_tuning."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.host_tuning import (
    GUIDE_URL,
    tuning_cell,
    tuning_findings,
    tuning_warnings,
)

ARGS = ["iommu=pt", "pci=realloc=off"]
# A first run with the default preflight_apply_tuning: false on an untuned EPYC host.
UNTUNED = {"cmdline_missing": ARGS, "numa_balancing": "1", "c2": "on", "applied": False, "reboot_allowed": False}
TUNED = {"cmdline_missing": [], "numa_balancing": "0", "c2": "off", "applied": True, "reboot_allowed": False}


def test_an_untuned_gpu_node_lacks_every_setting_each_with_its_section_of_the_guide_and_the_switch():
    findings = tuning_findings(UNTUNED, 8)
    assert [(f["setting"], f["state"]) for f in findings] == [
        ("kernel command line iommu=pt", "missing"),
        ("kernel command line pci=realloc=off", "missing"),
        ("NUMA auto-balancing off (kernel.numa_balancing = 0)", "missing"),
        ("C2 idle state off (cpuidle state2 disable = 1)", "missing"),
    ]
    assert all(f["source"].startswith("AMD MI300X system optimisation guide, '") for f in findings)
    assert [f["source"].rsplit("#", 1)[1] for f in findings] == [
        "mi300x-grub-settings)", "mi300x-grub-settings)", "mi300x-disable-numa)", "cpu-core-states-c-states)",
    ]  # fmt: skip
    assert all(f"({GUIDE_URL}#" in f["source"] for f in findings)
    assert all("set preflight_apply_tuning: true" in f["fix"] for f in findings)
    # A kernel argument needs a reboot: the fix says so and names the switch that allows it.
    assert "preflight_allow_reboot: true" in findings[0]["fix"]
    assert tuning_cell(UNTUNED, 8) == "4 missing"


def test_the_warning_lines_name_the_setting_the_nodes_the_source_the_switch_and_the_runbook():
    lines = tuning_warnings([("mi300x-02", UNTUNED, "8")], runbook_base="docs/runbooks")
    assert len(lines) == 4
    assert lines[0] == (
        "kernel command line iommu=pt missing on mi300x-02 - AMD MI300X system optimisation guide, 'GRUB settings' "
        f"({GUIDE_URL}#mi300x-grub-settings); set preflight_apply_tuning: true (writes a GRUB drop-in; takes "
        "effect after a reboot, preflight_allow_reboot: true). See docs/runbooks/host-tuning.md"
    )
    assert "'Operating system settings / Disable NUMA auto-balancing'" in lines[2]
    assert "'Operating system settings / CPU core states (C-states)'" in lines[3]


def test_one_warning_per_setting_and_state_names_every_node_that_lacks_it_in_order():
    """Many untuned nodes: one line per setting, not one per node and setting."""
    applied = dict(TUNED, cmdline_missing=["iommu=pt"])
    nodes = [
        ("node3", UNTUNED, 8),
        ("node1", UNTUNED, 8),
        ("node2", applied, 8),  # applied, not rebooted yet: its own line
        ("cpu1", UNTUNED, 0),  # no GPU: never named
        ("node4", TUNED, 8),
        ("node5", None, 8),  # preflight did not run there
    ]
    lines = tuning_warnings(nodes)
    assert [line.split(" - ")[0] for line in lines] == [
        "kernel command line iommu=pt missing on node3, node1",
        "kernel command line pci=realloc=off missing on node3, node1",
        "NUMA auto-balancing off (kernel.numa_balancing = 0) missing on node3, node1",
        "C2 idle state off (cpuidle state2 disable = 1) missing on node3, node1",
        "kernel command line iommu=pt pending reboot on node2",
    ]
    assert tuning_warnings([("node4", TUNED, 8), ("cpu1", UNTUNED, 0)]) == []


def test_a_tuned_node_gets_no_warning_and_reads_ok():
    assert tuning_findings(TUNED, 8) == [] and tuning_cell(TUNED, 8) == "ok"
    # Tuned by hand, never applied by preflight: the same.
    assert tuning_findings(dict(TUNED, applied=False), 8) == []


def test_after_applying_the_kernel_arguments_wait_for_a_reboot_and_the_rest_is_gone():
    """preflight_apply_tuning: true turns NUMA auto-balancing and C2 off at once and re-reads them;
    the kernel command line changes only at the next boot into the GRUB drop-in."""
    applied = dict(TUNED, cmdline_missing=ARGS)
    findings = tuning_findings(applied, 8)
    assert [(f["setting"], f["state"]) for f in findings] == [
        ("kernel command line iommu=pt", "pending reboot"),
        ("kernel command line pci=realloc=off", "pending reboot"),
    ]
    assert "/etc/default/grub.d/90-instinct-finetune.cfg" in findings[0]["fix"]
    assert "set preflight_allow_reboot: true" in findings[0]["fix"]
    assert "preflight_apply_tuning" not in findings[0]["fix"]
    assert tuning_cell(applied, 8) == "2 pending reboot"
    # Reboots allowed, yet the argument is still missing: the drop-in was already there, so preflight
    # did not reboot; the node needs one.
    rebooting = tuning_findings(dict(applied, reboot_allowed=True), 8)
    assert "preflight reboots only when the drop-in changes" in rebooting[0]["fix"]
    # Something that undid the sysctl after the apply is still reported as missing.
    mixed = dict(applied, numa_balancing="1")
    assert tuning_cell(mixed, 8) == "1 missing, 2 pending reboot"


@pytest.mark.parametrize("flag", [False, "False", "false", ""])
def test_a_record_not_applied_in_any_spelling_says_missing_not_pending(flag):
    record = dict(UNTUNED, applied=flag)
    assert {f["state"] for f in tuning_findings(record, 8)} == {"missing"}


def test_no_gpu_no_record_or_an_unreadable_c2_state_say_nothing():
    assert tuning_findings(UNTUNED, 0) == [] and tuning_cell(UNTUNED, 0) is None
    assert tuning_findings(UNTUNED, None) == [] and tuning_findings(UNTUNED, "0") == []
    assert tuning_findings(None, 8) == [] and tuning_cell(None, 8) is None and tuning_cell({}, 8) is None
    # No ACPI idle driver (a VM, the sandbox): no C2 to turn off.
    assert [f["setting"] for f in tuning_findings(dict(TUNED, c2="unknown"), 8)] == []


def test_an_extra_kernel_argument_from_the_inventory_is_sourced_to_the_grub_section():
    (finding,) = tuning_findings(dict(TUNED, cmdline_missing=["amd_iommu=on"], applied=False), 8)
    assert finding["setting"] == "kernel command line amd_iommu=on"
    assert finding["source"].endswith("#mi300x-grub-settings)")
