"""The problem_report action (issue 31): the headline and the table printed once through Ansible's display,
the decision returned for the tasks that fail the nodes, never a failure of its own on the nodes'
problems (a failed run_once task would fail every node), and a clear refusal of a malformed record."""

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.instinct.finetune.plugins.action import problem_report
from tests.unit.plugins.action.mock import mock_action
from tests.unit.plugins.module_utils.test_problems import DISK, MEMORY

ARGS = {"var": "preflight_problems", "stage": "preflight", "runbook": "preflight.md"}


@pytest.fixture
def shown(monkeypatch):
    lines = []
    monkeypatch.setattr(problem_report.display, "display", lambda msg, **_kw: lines.append(msg))
    return lines


def run(args, hostvars, play_hosts=("node1", "node2"), remaining=None):
    action = mock_action(problem_report, args)
    task_vars = {"hostvars": hostvars, "ansible_play_hosts_all": list(play_hosts)}
    if remaining is not None:
        task_vars["ansible_play_hosts"] = list(remaining)
    return action.run(task_vars=task_vars)


def test_prints_the_table_once_and_returns_the_decision_without_failing(shown):
    hostvars = {"node1": {"preflight_problems": []}, "node2": {"preflight_problems": [MEMORY, DISK]}}
    result = run(dict(ARGS, exclude=True), hostvars)
    assert not result.get("failed") and result["changed"] is False
    assert len(shown) == 1 and shown[0].splitlines() == result["msg"]
    assert result["msg"][0] == "preflight: 2 problem(s) on 1 of 2 node(s): node2; left out: node2; going on with node1"
    assert [line.split(" ")[0] for line in result["msg"][3:]] == ["node2", "node2"]
    assert (result["action"], result["fail"], result["go_on"]) == ("exclude", ["node2"], ["node1"])
    assert set(result["messages"]) == {"node2"}
    # The default: every node stops, and the failing node's message says so.
    result = run(ARGS, hostvars)
    assert not result.get("failed") and (result["action"], result["fail"]) == ("stop", ["node2"])
    assert "Every node stops" in result["messages"]["node2"]


def test_the_hosts_still_in_the_play_default_to_ansible_play_hosts(shown):
    result = run(ARGS, {"node1": {"preflight_problems": []}}, remaining=["node1"])
    assert [row[:2] for row in result["rows"]] == [["node2", "preflight did not finish"]]
    assert result["fail"] == ["node1"] and "node2 failed preflight" in result["messages"]["node1"]


def test_a_malformed_record_is_a_mistake_of_the_checks_named_as_such(shown):
    with pytest.raises(AnsibleActionFail, match=r"preflight_problems holds a malformed problem \(node2: problem 0"):
        run(ARGS, {"node1": {}, "node2": {"preflight_problems": [{"check": "memory"}]}})
    assert shown == []
