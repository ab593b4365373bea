"""The async_wait action (issue 28): its pure decisions (a progress line's wording, when one is due,
the log line shown), and its wait loop with the node answered by the test (async_status's results
and tail's output) and a clock that does not sleep."""

from unittest.mock import MagicMock

import pytest

from ansible_collections.instinct.finetune.plugins.action import async_wait
from ansible_collections.instinct.finetune.plugins.action.async_wait import (
    elapsed_words,
    last_log_line,
    next_progress,
    progress_line,
    timeout_message,
)
from tests.unit.clock import Clock
from tests.unit.plugins.action.mock import mock_action

JID = "j466181046419.1234"


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0 s"),
        (-3, "0 s"),
        (45.9, "45 s"),
        (60, "1 min"),
        (380, "6 min 20 s"),
        (3600, "1 h"),
        (3600 + 5 * 60 + 59, "1 h 5 min"),
        (86400, "1 d"),
        (86400 + 3 * 3600 + 120, "1 d 3 h"),
    ],
)
def test_elapsed_time_reads_as_a_person_says_it(seconds, words):
    assert elapsed_words(seconds) == words


def test_the_progress_line_names_the_host_the_label_the_time_and_the_log():
    assert progress_line("node1", "building torch 2.7.1", 380, "[12/40] Building CXX object x.o") == (
        "node1: building torch 2.7.1 — 6 min 20 s elapsed, log: [12/40] Building CXX object x.o"
    )
    assert progress_line("node1", "serving wheels", 61) == "node1: serving wheels — 1 min 1 s elapsed"


def test_the_log_line_is_the_last_one_that_says_something_cleaned_and_cut():
    assert last_log_line("") == ""
    assert last_log_line(None) == ""
    assert last_log_line("first\nsecond\n\n   \n") == "second"
    # A redrawn progress bar: its last state, without the colour codes.
    assert last_log_line("step\n\x1b[32m 10%\r 55%\r\x1b[0m 80%\r") == "80%"
    assert last_log_line("a\tb\x07c\n") == "a bc"
    long = "g++ " + "-I/opt/rocm/include " * 40
    cut = last_log_line(long, width=60)
    assert len(cut) == 60 and cut.endswith("…") and cut.startswith("g++ -I/opt/rocm/include")


def test_lines_come_every_interval_from_the_start_and_late_polls_skip_the_missed_ones():
    interval = 60
    due = interval
    printed = []
    # Polls every 25 s, one of them late by two minutes (a slow connection).
    for elapsed in (25, 50, 75, 100, 125, 150, 300, 325):
        now, due = next_progress(elapsed, due, interval)
        if now:
            printed.append(elapsed)
    assert printed == [75, 125, 300]
    assert due == 360


def test_a_job_that_ends_within_the_first_interval_prints_nothing_and_zero_never_prints():
    assert next_progress(59.9, 60, 60) == (False, 60)
    assert next_progress(10_000, 0, 0) == (False, 0)


def test_the_timeout_names_host_label_limit_job_and_log():
    msg = timeout_message("node2", "building torch 2.7.1", 21600, JID, "/var/log/build.log")
    assert msg.startswith("node2: building torch 2.7.1 did not finish within 6 h")
    assert JID in msg and "/var/log/build.log" in msg


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(async_wait, "time", clock)
    return clock


@pytest.fixture
def shown(monkeypatch):
    lines = []
    monkeypatch.setattr(async_wait.display, "display", lambda msg, **_kw: lines.append(msg))
    return lines


def make_action(args, statuses, log_tail="", check_mode=False):
    """The action with its task's options, the node's async_status answers in turn (the last one
    repeats) and tail's output; records every module call."""
    action = mock_action(async_wait, args, check_mode=check_mode)
    action._connection._shell.join_path = lambda *parts: "/".join(parts)
    answers = list(statuses)
    calls = []

    def execute_module(name, module_args=None, task_vars=None):
        calls.append((name, dict(module_args)))
        if module_args["mode"] == "cleanup":
            return {"erased": f"/home/instinct/.ansible_async/{JID}"}
        return dict(answers.pop(0) if len(answers) > 1 else answers[0])

    action._execute_module = execute_module
    action._remote_expand_user = lambda path, **_kw: path.replace("~", "/home/instinct")
    action.get_shell_option = lambda name, default=None: default
    action._low_level_execute_command = MagicMock(return_value={"rc": 0, "stdout": log_tail, "stderr": ""})
    action._remove_tmp_path = MagicMock()
    return action, calls


RUNNING = {"started": 1, "finished": 0, "ansible_job_id": JID}
DONE = {"started": 1, "finished": 1, "ansible_job_id": JID, "rc": 0, "stdout": "built", "stdout_lines": ["built"],
        "changed": True, "cmd": ["/bin/bash", "build.sh"]}  # fmt: skip


def test_it_waits_prints_a_line_per_interval_and_returns_the_jobs_result(clock, shown):
    args = {"jid": JID, "label": "building torch 2.7.1", "timeout": 600, "poll": 10, "progress_interval": 30,
            "log": "/var/log/build torch.log"}  # fmt: skip
    action, calls = make_action(args, [RUNNING] * 7 + [DONE], log_tail="[3/9] Linking\n")
    result = action.run(task_vars={"inventory_hostname": "node1"})
    assert result["finished"] is True and result["started"] is True
    assert result["rc"] == 0 and result["stdout"] == "built" and result["changed"] is True
    assert result["timed_out"] is False and result["waited"] == 70
    assert result["results_file"] == f"/home/instinct/.ansible_async/{JID}"
    assert shown == [
        "node1: building torch 2.7.1 — 30 s elapsed, log: [3/9] Linking",
        "node1: building torch 2.7.1 — 1 min elapsed, log: [3/9] Linking",
    ]
    # The log is read as the task's user, its path quoted for the shell.
    action._low_level_execute_command.assert_called_with("tail -n 5 -- '/var/log/build torch.log'", sudoable=True)
    statuses = [a for name, a in calls if a["mode"] == "status"]
    assert len(statuses) == 8
    assert statuses[0] == {"jid": JID, "mode": "status", "_async_dir": "/home/instinct/.ansible_async"}
    # Once finished, the results file goes, as after Ansible's own poll.
    assert calls[-1][1]["mode"] == "cleanup"
    assert clock.slept == [10] * 7


def test_a_failed_job_comes_back_as_async_status_returns_it(clock, shown):
    failed = dict(DONE, rc=2, failed=True, msg="non-zero return code", stdout="", stderr="error: no space")
    action, _calls = make_action({"jid": JID, "timeout": 60, "cleanup": False}, [failed])
    result = action.run(task_vars={"inventory_hostname": "node1"})
    assert result["failed"] is True and result["rc"] == 2 and result["stderr"] == "error: no space"
    assert result["timed_out"] is False
    assert shown == [] and clock.slept == []


def test_the_timeout_fails_naming_host_and_label_and_leaves_the_job_alone(clock, shown):
    args = {"jid": JID, "label": "serving wheels", "timeout": 25, "poll": 10, "progress_interval": 0}
    action, calls = make_action(args, [RUNNING])
    result = action.run(task_vars={"inventory_hostname": "node2"})
    assert result["failed"] is True and result["timed_out"] is True and result["finished"] is False
    assert result["msg"].startswith("node2: serving wheels did not finish within 25 s")
    # Reads at 0, 10, 20 and at the deadline (the last sleep is cut to it), then no cleanup.
    assert clock.slept == [10, 10, 5]
    assert [a["mode"] for _name, a in calls] == ["status"] * 4
    assert shown == []


def test_a_status_that_cannot_be_read_ends_the_wait(clock, shown):
    lost = {"failed": True, "msg": "could not find job", "started": 1, "finished": 1, "ansible_job_id": JID}
    action, _calls = make_action({"jid": JID, "timeout": 60}, [lost])
    result = action.run(task_vars={"inventory_hostname": "node1"})
    assert result["failed"] is True and result["msg"] == "could not find job"
    unreachable = {"unreachable": True, "msg": "ssh: connection refused"}
    action, calls = make_action({"jid": JID, "timeout": 60}, [unreachable])
    result = action.run(task_vars={"inventory_hostname": "node1"})
    assert result["unreachable"] is True and result["finished"] is False
    assert [a["mode"] for _name, a in calls] == ["status"]


def test_check_mode_skips_and_says_what_a_real_run_waits_for(clock, shown):
    action, calls = make_action({"jid": JID, "label": "building torch", "timeout": 60}, [RUNNING], check_mode=True)
    result = action.run(task_vars={"inventory_hostname": "node1"})
    assert result["skipped"] is True and result["changed"] is False
    assert result["msg"] == (
        "node1: check mode; a real run waits here for building torch (check mode starts no background job)."
    )
    assert calls == []
