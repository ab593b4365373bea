"""The slurm_nodes_ready action (issue 35): the slurm role's wait for every node IDLE with its GPUs, in
one task that prints a progress line per interval instead of a FAILED - RETRYING line per read. The
node's sinfo answers are given by the test (rows in the collection's format, their values from the
recordings of tests/fixtures/slurm), and the clock does not sleep."""

from unittest.mock import MagicMock

import pytest

from ansible_collections.instinct.finetune.plugins.action import slurm_nodes_ready
from ansible_collections.instinct.finetune.plugins.action.slurm_nodes_ready import progress_line, read_problems
from tests.unit.clock import Clock
from tests.unit.plugins.action.mock import mock_action

SINFO = ["sinfo", "--Node", "--noheader", "--format=%N|%P|%T|%c|%m|%G|%E"]
EXPECTED = {"mi300-01": 8, "mi300-02": 8}
# What slurmctld shows before node2's slurmd registered, then once both have.
NODE1 = "mi300-01|mi300x*|idle|192|2063000|gpu:mi300x:8(S:0-1)|none\n"
STARTING = NODE1 + "mi300-02|mi300x*|unknown*|1|1|(null)|none\n"
READY = NODE1 + "mi300-02|mi300x*|idle|192|2063000|gpu:mi300x:8(S:0-1)|none\n"
ONE_GPU_SHORT = NODE1 + "mi300-02|mi300x*|idle|192|2063000|gpu:mi300x:7(S:0-1)|none\n"


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(slurm_nodes_ready, "time", clock)
    return clock


@pytest.fixture
def shown(monkeypatch):
    lines = []
    monkeypatch.setattr(slurm_nodes_ready.display, "display", lambda msg, **_kw: lines.append(msg))
    return lines


def make_action(args, answers, delegate_to=None, check_mode=False):
    """The action with its task's options and the command module's answers in turn (the last one
    repeats); records every module call."""
    action = mock_action(slurm_nodes_ready, args, check_mode=check_mode, delegate_to=delegate_to)
    pending = list(answers)
    calls = []

    def execute_module(name, module_args=None, task_vars=None):
        calls.append((name, dict(module_args)))
        return dict(pending.pop(0) if len(pending) > 1 else pending[0])

    action._execute_module = execute_module
    action._remove_tmp_path = MagicMock()
    return action, calls


def answer(stdout, rc=0, stderr=""):
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "changed": True}


def test_it_reads_sinfo_until_every_node_is_ready_with_a_line_per_interval(clock, shown):
    args = {"sinfo_argv": SINFO, "expected": EXPECTED, "timeout": 120, "poll": 5, "progress_interval": 10}
    # Run once for the play and delegated to the Slurm controller: the lines name the controller.
    action, calls = make_action(args, [answer(STARTING)] * 5 + [answer(READY)], delegate_to="mi300-01")
    result = action.run(task_vars={"inventory_hostname": "login01"})
    assert result["ready"] is True and result["problems"] == [] and result["changed"] is False
    assert result["waited"] == 25 and result["rc"] == 0 and result["stdout_lines"] == READY.splitlines()
    # sinfo through the command module, as an argv, once a poll.
    assert calls == [("ansible.legacy.command", {"argv": SINFO})] * 6
    assert clock.slept == [5] * 5
    # Two lines in 25 s, each naming what is still wrong; no line per read.
    still = "mi300-02: unknown (not_responding), not idle; mi300-02: GRES (null) shows 0 GPUs, 8 expected"
    assert shown == [
        f"mi300-01: Slurm's nodes not ready — 10 s elapsed: {still}",
        f"mi300-01: Slurm's nodes not ready — 20 s elapsed: {still}",
    ]


def test_when_the_wait_runs_out_it_returns_what_is_wrong_for_the_role_to_fail_with(clock, shown):
    args = {"sinfo_argv": SINFO, "expected": EXPECTED, "timeout": 12, "poll": 5, "progress_interval": 0}
    action, calls = make_action(args, [answer(ONE_GPU_SHORT)])
    result = action.run(task_vars={"inventory_hostname": "mi300-01"})
    assert result["ready"] is False and "failed" not in result
    assert result["problems"] == ["mi300-02: GRES gpu:mi300x:7(S:0-1) shows 7 GPUs, 8 expected"]
    # Reads at 0, 5, 10 and at the deadline (the last sleep cut to it).
    assert clock.slept == [5, 5, 2] and len(calls) == 4
    assert shown == []


def test_a_busy_node_is_ready_on_a_re_run_during_a_job(clock, shown):
    busy = READY.replace("mi300-02|mi300x*|idle", "mi300-02|mi300x*|allocated")
    args = {"sinfo_argv": SINFO, "expected": EXPECTED, "timeout": 60}
    action, _calls = make_action(args, [answer(busy)])
    assert action.run(task_vars={})["problems"] == ["mi300-02: allocated, not idle"]
    action, _calls = make_action(dict(args, busy_ok=True), [answer(busy)])
    result = action.run(task_vars={})
    assert result["ready"] is True and clock.slept == [5] * 12


def test_check_mode_reads_nothing_and_waits_for_nothing(clock):
    args = {"sinfo_argv": SINFO, "expected": EXPECTED, "timeout": 60}
    action, calls = make_action(args, [answer(READY)], delegate_to="mi300-01", check_mode=True)
    result = action.run(task_vars={"inventory_hostname": "mi300-01"})
    assert result["skipped"] is True and result["changed"] is False
    assert result["msg"] == "mi300-01: check mode; a real run waits here for Slurm's nodes."
    assert calls == [] and clock.slept == []


def test_a_sinfo_that_cannot_start_is_named_by_the_command_modules_message(clock):
    why = "[Errno 2] No such file or directory: b'sinfo'"
    missing = {"rc": 2, "stdout": "", "stderr": "", "failed": True, "msg": why}
    action, _calls = make_action({"sinfo_argv": SINFO, "expected": EXPECTED, "timeout": 0}, [missing])
    assert action.run(task_vars={})["problems"] == [f"sinfo failed (rc 2): {why}"]


def test_a_failing_sinfo_and_an_unreadable_output_are_the_problems_named():
    down = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    assert read_problems(1, "", down, EXPECTED, False) == [f"sinfo failed (rc 1): {down}"]
    assert read_problems(127, "", "", EXPECTED, False) == ["sinfo failed (rc 127): no output"]
    assert read_problems(0, READY, "", EXPECTED, False) == []
    assert progress_line("slurm1", 75, ["a", "b"]) == "slurm1: Slurm's nodes not ready — 1 min 15 s elapsed: a; b"


def test_an_unreachable_controller_ends_the_wait_with_ansibles_own_result(clock):
    args = {"sinfo_argv": SINFO, "expected": EXPECTED, "timeout": 60}
    action, calls = make_action(args, [{"unreachable": True, "msg": "ssh: connection refused"}])
    result = action.run(task_vars={})
    assert result["unreachable"] is True and len(calls) == 1 and clock.slept == []
