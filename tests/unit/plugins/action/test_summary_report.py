"""The summary_report action (issue 28): the table printed line for line through Ansible's display,
and summary.md written on the controller, left alone when it holds the same table, and not written
in check mode."""

import pytest

from ansible_collections.instinct.finetune.plugins.action import summary_report
from tests.unit.plugins.action.mock import mock_action
from tests.unit.plugins.filter.test_summary import HOSTVARS


@pytest.fixture
def warned(monkeypatch):
    lines = []
    monkeypatch.setattr(summary_report.display, "warning", lambda msg, **_kw: lines.append(msg))
    return lines


@pytest.fixture
def shown(monkeypatch, warned):
    lines = []
    monkeypatch.setattr(summary_report.display, "display", lambda msg, **_kw: lines.append(msg))
    return lines


def run(args, check_mode=False, play_hosts=("mi300x-01", "mi300x-02", "cpu-01"), remaining=None, hostvars=None):
    action = mock_action(summary_report, args, check_mode=check_mode)
    task_vars = {"hostvars": hostvars or HOSTVARS, "ansible_play_hosts_all": list(play_hosts)}
    if remaining is not None:
        task_vars["ansible_play_hosts"] = list(remaining)
    return action.run(task_vars=task_vars)


def test_prints_one_line_per_node_and_writes_the_markdown(tmp_path, shown):
    dest = tmp_path / "artifacts" / "sandbox" / "summary.md"
    result = run({"dest": str(dest)})
    assert result["changed"] is False and result["written"] is True
    # One display call, a line per row: the callback renders none of it.
    assert len(shown) == 1
    printed = shown[0].splitlines()
    assert printed == result["msg"][: len(printed)]
    assert [line.split(" ")[0] for line in printed[2:]] == ["mi300x-01", "mi300x-02", "cpu-01"]
    text = dest.read_text()
    assert text.startswith("# Node summary\n") and "| mi300x-01 " in text
    assert oct(dest.stat().st_mode & 0o777) == "0o644"


def test_the_same_table_leaves_the_file_alone(tmp_path, shown):
    dest = tmp_path / "summary.md"
    assert run({"dest": str(dest)})["written"] is True
    before = dest.stat().st_mtime_ns
    assert run({"dest": str(dest)})["written"] is False
    assert dest.stat().st_mtime_ns == before
    assert run({"dest": str(dest)}, play_hosts=["cpu-01"])["written"] is True
    assert "mi300x-01" not in dest.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]


def test_check_mode_prints_but_writes_nothing_and_no_dest_writes_nothing(tmp_path, shown):
    dest = tmp_path / "summary.md"
    result = run({"dest": str(dest)}, check_mode=True)
    assert result["written"] is False and not dest.exists()
    assert run({"hosts": ["mi300x-02"]})["msg"][2].startswith("mi300x-02")
    assert len(shown) == 2


def test_the_missing_host_tuning_follows_the_table_as_warnings(tmp_path, shown, warned):
    """mi300x-02's preflight found none of AMD's MI300X settings: four Ansible warnings, each naming
    the setting, the guide's section and URL, and the switch; the same lines end msg and summary.md.
    mi300x-01 is tuned and cpu-01 has no GPU: nothing is said of them."""
    dest = tmp_path / "summary.md"
    result = run({"dest": str(dest)})
    assert len(warned) == 4 and all(" missing on mi300x-02 - " in line for line in warned)
    assert warned[0].startswith("kernel command line iommu=pt missing") and "#mi300x-grub-settings" in warned[0]
    assert "NUMA auto-balancing" in warned[2] and "#mi300x-disable-numa" in warned[2]
    assert "C2 idle state" in warned[3] and "C-states" in warned[3]
    assert all("preflight_apply_tuning: true" in line and "docs/runbooks/host-tuning.md" in line for line in warned)
    assert result["node_warnings"] == warned
    assert result["msg"][-4:] == [f"warning: {line}" for line in warned]
    # No line but a node's row starts with a node's name (readers pick the rows that way).
    assert [line.split(" ")[0] for line in result["msg"] if line.startswith(("mi300x", "cpu"))] == [
        "mi300x-01", "mi300x-02", "cpu-01",
    ]  # fmt: skip
    text = dest.read_text()
    warnings_part = text.split("## Warnings\n", 1)[1]
    assert [line[2:] for line in warnings_part.strip().splitlines() if line.startswith("- ")] == warned
    assert "| mi300x-02 " in text and "4 missing" in text


def test_no_warnings_section_where_every_gpu_node_is_tuned(tmp_path, shown, warned):
    dest = tmp_path / "summary.md"
    result = run({"dest": str(dest)}, play_hosts=["mi300x-01", "cpu-01"])
    assert warned == [] and result["node_warnings"] == []
    assert "Warnings" not in dest.read_text() and not any(line.startswith("warning:") for line in result["msg"])


def test_a_node_left_out_after_failing_preflight_is_named_with_why(tmp_path, shown, warned):
    """With instinct_exclude_failed_nodes, mi300x-02 failed preflight and a later play ran without it:
    it is in the play's hosts but not among those that went on. A last column says why, and a warning
    first after the table names it, the checks it failed and the runbook."""
    problems = [
        {"check": "memory", "value": "7.6 GB, below 64", "fix": "Add memory", "runbook": "oom-fragmentation.md"},
        {"check": "disk /opt", "value": "3 GB free", "fix": "Free space", "runbook": "disk-full.md"},
        {"check": "memory", "value": "again", "fix": "Add memory", "runbook": "oom-fragmentation.md"},
    ]
    hostvars = dict(HOSTVARS, **{"mi300x-02": dict(HOSTVARS["mi300x-02"], preflight_problems=problems)})
    dest = tmp_path / "summary.md"
    result = run({"dest": str(dest)}, remaining=["mi300x-01", "cpu-01"], hostvars=hostvars)
    assert result["left_out"] == {"mi300x-02": "failed preflight: memory, disk /opt"}
    lines = result["msg"]
    assert lines[0].rstrip().endswith("| left out")
    cells = {line.split(" ")[0]: line.rsplit("|", 1)[1].strip() for line in lines[2:5]}
    assert cells == {"mi300x-01": "-", "mi300x-02": "failed preflight: memory, disk /opt", "cpu-01": "-"}
    assert warned[0].startswith("mi300x-02 was left out of this run (failed preflight: memory, disk /opt;")
    assert warned[0].endswith("See docs/runbooks/preflight.md") and len(warned) == 5  # then the 4 tuning ones
    text = dest.read_text()
    assert "| left out " in text and "| failed preflight: memory, disk /opt |" in text
    assert "- mi300x-02 was left out of this run" in text
    # Nobody left out: no such column, as before.
    assert "left out" not in run({}, remaining=["mi300x-01", "mi300x-02", "cpu-01"])["msg"][0]
