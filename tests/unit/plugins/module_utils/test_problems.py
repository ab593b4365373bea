"""Every problem of every node in one table, and what the run does about it (module_utils/problems.py,
issue 31): the table's rows, the decision (go on, leave the nodes with a problem out, or stop every
node) and each failing node's message."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils import problems

MEMORY = {
    "check": "memory",
    "value": "7.6 GB, below preflight_min_memory_gb=100000",
    "fix": "Add memory, or train this job on nodes that have it",
    "runbook": "oom-fragmentation.md",
}
DISK = {
    "check": "disk /opt",
    "value": "12.3 GB free on /, below preflight_min_free_disk_gb=100000",
    "fix": "Free space or grow the filesystem.",
    "runbook": "disk-full.md",
}
OS = {
    "check": "operating system",
    "value": "Debian 12, which this run does not accept\n(supported: Ubuntu 22.04 (primary))",
    "fix": "Reinstall the node with a supported release or remove it from the inventory",
    "runbook": "unsupported-os.md",
}
NODES = ["node1", "node2", "node3"]


def run(hostvars, exclude=False, remaining=tuple(NODES), hosts=tuple(NODES)):
    return problems.report(
        hostvars, hosts, remaining, var="preflight_problems", stage="preflight", exclude=exclude, runbook="preflight.md"
    )


def test_every_problem_of_every_node_is_one_row_of_one_table():
    found = run({"node1": {"preflight_problems": [OS]}, "node2": {"preflight_problems": [DISK, MEMORY]}, "node3": {}})
    assert found["lines"][0] == "preflight: 3 problem(s) on 2 of 3 node(s): node1, node2; every node stops"
    assert [cell.strip() for cell in found["lines"][1].split("|")] == ["node", "check", "value", "fix", "runbook"]
    rows = [[cell.strip() for cell in line.split("|")] for line in found["lines"][3:]]
    assert [row[:2] for row in rows] == [["node1", "operating system"], ["node2", "disk /opt"], ["node2", "memory"]]
    # One line per problem, whatever newlines a value held; the runbook as a path.
    assert rows[0][2] == "Debian 12, which this run does not accept (supported: Ubuntu 22.04 (primary))"
    assert [row[4] for row in rows] == [
        "docs/runbooks/unsupported-os.md", "docs/runbooks/disk-full.md", "docs/runbooks/oom-fragmentation.md",
    ]  # fmt: skip
    assert found["rows"] == rows and found["problems"] == 3


def test_without_exclusion_the_nodes_with_problems_fail_and_every_node_stops():
    found = run({"node2": {"preflight_problems": [MEMORY, DISK]}})
    assert (found["action"], found["problem_nodes"], found["fail"]) == ("stop", ["node2"], ["node2"])
    assert found["go_on"] == []
    message = found["messages"]["node2"]
    # The node, each problem with its value, fix and runbook, then what the run does and how to go on.
    assert message.startswith("node2 failed preflight: memory: 7.6 GB, below preflight_min_memory_gb=100000. Add ")
    assert "See docs/runbooks/oom-fragmentation.md; disk /opt: 12.3 GB free" in message
    assert "grow the filesystem. See docs/runbooks/disk-full.md." in message  # the fix's own full stop, once
    assert "Every node stops, since node2 failed preflight (instinct_exclude_failed_nodes: true" in message
    assert message.endswith("See the table above and docs/runbooks/preflight.md")
    assert list(found["messages"]) == ["node2"]


def test_with_exclusion_only_the_nodes_with_problems_fail_and_the_rest_go_on():
    found = run({"node2": {"preflight_problems": [MEMORY]}}, exclude=True)
    assert (found["action"], found["fail"], found["go_on"]) == ("exclude", ["node2"], ["node1", "node3"])
    assert found["lines"][0].endswith("left out: node2; going on with node1, node3")
    assert (
        "left out of this run (instinct_exclude_failed_nodes: true), which goes on with node1, node3"
        in (found["messages"]["node2"])
    )


def test_with_exclusion_every_node_stops_when_none_is_left():
    found = run({host: {"preflight_problems": [MEMORY]} for host in NODES}, exclude=True)
    assert (found["action"], found["fail"], found["go_on"]) == ("stop", NODES, [])


def test_no_problem_no_table_and_everyone_goes_on():
    found = run({host: {"preflight_problems": []} for host in NODES}, exclude=True)
    assert found["lines"] == ["preflight: no problem on 3 node(s)"]
    assert (found["action"], found["fail"], found["go_on"], found["messages"]) == ("go", [], NODES, {})


def test_a_node_that_left_the_play_before_the_table_is_a_row_and_stops_the_rest():
    """node3 was unreachable: it recorded nothing and is no longer in the play. Without exclusion the nodes
    still in the play are the ones to fail, each told why."""
    found = run({"node1": {"preflight_problems": []}, "node2": {"preflight_problems": []}}, remaining=NODES[:2])
    assert [row[:2] for row in found["rows"]] == [["node3", "preflight did not finish"]]
    assert found["rows"][0][4] == "docs/runbooks/preflight.md"
    assert (found["action"], found["problem_nodes"], found["fail"]) == ("stop", ["node3"], ["node1", "node2"])
    assert found["messages"]["node1"].startswith("node1: Every node stops, since node3 failed preflight")
    # With exclusion it is simply left out: nothing more to fail.
    found = run({"node1": {}, "node2": {}}, exclude=True, remaining=NODES[:2])
    assert (found["action"], found["fail"], found["go_on"]) == ("exclude", [], ["node1", "node2"])


def test_a_node_that_failed_after_recording_problems_keeps_its_rows():
    found = run({"node3": {"preflight_problems": [DISK]}}, exclude=True, remaining=NODES[:2])
    assert [row[:2] for row in found["rows"]] == [["node3", "disk /opt"]]
    assert found["fail"] == [] and found["go_on"] == ["node1", "node2"]


@pytest.mark.parametrize(
    ("recorded", "fault"),
    [
        ("memory is low", "node1: the problems are str, not a list"),
        (["memory is low"], "node1: problem 0 is str, not a mapping"),
        ([dict(MEMORY, fix="")], "node1: problem 0 (memory) lacks fix"),
        ([{"check": "memory"}], "node1: problem 0 (memory) lacks value, fix, runbook"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_node_and_the_fault(recorded, fault):
    with pytest.raises(ValueError, match=r"^" + fault.replace("(", r"\(").replace(")", r"\)")):
        run({"node1": {"preflight_problems": recorded}})
