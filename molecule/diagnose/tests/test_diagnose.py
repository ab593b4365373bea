"""Verify the diagnose scenario: the report (written by the check-mode run) names exactly the
runbooks that apply to each simulated node, and the run changed nothing on them."""

import json
import os
from pathlib import Path

import pytest

testinfra_hosts = ["ansible://instinct_nodes"]

EXPECTED = {
    "instinct-diag-healthy": [],
    "instinct-diag-driver": ["driver-not-loaded.md"],
    "instinct-diag-gpu-missing": ["gpu-missing.md"],
}


@pytest.fixture(scope="module")
def report():
    folder = Path(os.environ["DIAGNOSE_REPORT_DIR"])
    return json.loads((folder / "diagnose.json").read_text()), (folder / "diagnose.md").read_text()


def test_the_report_names_exactly_the_runbooks_of_each_node(host, report):
    data, markdown = report
    name = host.backend.get_hostname()
    assert data["hosts"][name]["runbooks"] == EXPECTED[name]
    row = next(line for line in markdown.splitlines() if line.startswith(f"| {name} |"))
    assert row == f"| {name} | {', '.join(EXPECTED[name]) or 'none'} |"


def test_the_facts_behind_the_findings(host, report):
    data = report[0]
    name = host.backend.get_hostname()
    facts = data["hosts"][name]["facts"]
    if name == "instinct-diag-driver":
        assert facts["driver"]["reason"] == "driver_not_loaded"
        # The PCI bus still has the 8 MI300X of the recording: the driver, not the hardware, is missing.
        assert facts["gpus"]["pci"] == 8 and facts["gpus"]["rocm"] is None
    else:
        assert facts["driver"]["loaded"] is True
        assert facts["gpus"]["pci"] == 8 and facts["gpus"]["rocm"] == 8
        assert facts["gpus"]["expected"] == (9 if name == "instinct-diag-gpu-missing" else 8)
    assert facts["collection_errors"] == {}
    # The host tuning read from the container's own (the Docker host's) kernel command line: what it
    # lacks of AMD's MI300X arguments is a warning naming host-tuning.md, never a finding.
    cmdline = host.file("/proc/cmdline").content_string.split()
    tuning = facts["tuning"]
    assert tuning["pci_gpus"] == 8
    assert tuning["cmdline_missing"] == [a for a in ("iommu=pt", "pci=realloc=off") if a not in cmdline]
    node = data["hosts"][name]
    assert [w["runbook"] for w in node["warnings"]] == (["host-tuning.md"] if tuning["missing"] else [])
    assert "host-tuning.md" not in node["runbooks"]


def test_the_check_mode_run_left_the_node_as_it_was(host):
    # Nothing of the collection's is created by a diagnosis: no venv, no job state, no report here.
    for path in ("/opt/instinct", "/var/lib/instinct-finetune", "/etc/instinct-finetune"):
        assert not host.file(path).exists
