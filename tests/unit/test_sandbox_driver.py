"""scripts/sandbox.py, the driver of the sandbox cluster: the arguments after ``--`` reach
ansible-playbook as the list they are (ansible-runner splits its command line with shlex), and a
run's events give every task's wall time, from which bench/bench_sandbox.py names the costliest."""

import importlib.util

import pytest
from ansible_runner.config.runner import RunnerConfig

from tests.unit.conftest import ROOT


@pytest.fixture(scope="module")
def sandbox():
    spec = importlib.util.spec_from_file_location("sandbox_driver", ROOT / "scripts" / "sandbox.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ansible_playbook_argv(sandbox, tmp_path, cmdline):
    """The argument list ansible-runner itself builds from ``cmdline`` for ansible-playbook."""
    config = RunnerConfig(private_data_dir=str(tmp_path), playbook="site.yml", project_dir=str(ROOT), cmdline=cmdline)
    config.prepare()
    return config.command


@pytest.mark.parametrize(
    "extra",
    [
        ["-e", 'finetune_job_name="my job/1"'],  # quoted value with a space: must stay one -e
        ["-e", '{"finetune_extra_args": {"logging_steps": 1}}'],  # inline JSON
        ["--tags", "preflight", "--check", "--diff"],
    ],
)
def test_arguments_after_the_separator_reach_ansible_playbook_unchanged(sandbox, tmp_path, monkeypatch, extra):
    monkeypatch.setenv("SIM_VARS_FILE", str(tmp_path / "sim repo.yml"))
    argv = ansible_playbook_argv(sandbox, tmp_path, sandbox.site_cmdline(extra))
    assert argv[:5] == ["ansible-playbook", "-e", f"@{tmp_path / 'sim repo.yml'}", "-e", f"@{sandbox.JOB_FILE}"]
    assert argv[5 : 5 + len(extra)] == extra


def test_main_hands_the_arguments_after_the_separator_on_as_a_list(sandbox, tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setenv("SIM_VARS_FILE", str(tmp_path / "sim.yml"))
    monkeypatch.setattr(sandbox, "cluster_up", lambda: None)

    def run_playbook(playbook, cmdline="", **_):
        seen["argv"] = ansible_playbook_argv(sandbox, tmp_path, cmdline)
        return sandbox.RunResult(playbook=playbook, status="successful", rc=0, seconds=0.0)

    monkeypatch.setattr(sandbox, "run_playbook", run_playbook)
    monkeypatch.setattr(sandbox, "collect_dir", lambda: tmp_path)
    argv = ["sandbox.py", "run", "finetune.yml", "--", "-e", 'finetune_job_name="my job/1"']
    assert sandbox.main(argv) == 0
    assert seen["argv"][5:7] == ["-e", 'finetune_job_name="my job/1"']


def test_task_walls_run_from_a_tasks_start_to_the_next_start(sandbox, monkeypatch):
    clock = iter([0.0, 1.0, 4.5, 5.0, 9.0])
    monkeypatch.setattr(sandbox.time, "monotonic", lambda: next(clock))
    reader = sandbox.EventReader()
    reader({"event": "playbook_on_play_start", "event_data": {"play": "one"}})  # 0.0
    reader({"event": "playbook_on_task_start", "event_data": {"task": "a", "role": "r", "play": "one"}})  # 1.0
    reader({"event": "playbook_on_task_start", "event_data": {"task": "b", "role": "r", "play": "one"}})  # 4.5
    reader({"event": "playbook_on_play_start", "event_data": {"play": "two"}})  # 5.0
    reader({"event": "playbook_on_task_start", "event_data": {"task": "c", "role": "", "play": "two"}})  # 9.0
    walls = reader.task_walls(end=9.5)
    assert [(w["task"], w["seconds"]) for w in walls] == [("a", 3.5), ("b", 0.5), ("c", 0.5)]
    result = sandbox.RunResult(playbook="p", status="successful", rc=0, seconds=9.5, task_walls=walls)
    assert [w["task"] for w in result.costliest(2)] == ["a", "b"]


def test_file_state_answers_are_kept_and_the_stale_ones_named(sandbox):
    reader = sandbox.EventReader()
    for host, current in (("node1", True), ("node2", False)):
        res = {"current": current, "compared": 3, "differs": [] if current else [{"path": "/x", "reason": "missing"}]}
        reader({"event": "runner_on_ok", "event_data": {"host": host, "task": "Compare", "res": res,
                                                        "task_action": "instinct.finetune.file_state"}})  # fmt: skip
    reader({"event": "runner_on_ok", "event_data": {"host": "node1", "task": "Other", "res": {"current": False},
                                                    "task_action": "ansible.builtin.stat"}})  # fmt: skip
    result = sandbox.RunResult(playbook="p", status="successful", rc=0, seconds=1.0, gates=reader.gates)
    assert len(result.gates) == 2
    assert result.stale_gates() == [("node2", "Compare", [{"path": "/x", "reason": "missing"}])]
