"""scripts/sandbox.py, the driver of the sandbox cluster: the arguments after ``--`` reach
ansible-playbook as the list they are (ansible-runner splits its command line with shlex), and a
run's events give every task's wall time, from which bench/bench_sandbox.py names the costliest, and
the files each changed result (or loop item) names, read from its own changed and diff."""

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


def ok(reader, host, task, res, uuid="t"):
    reader({"event": "runner_on_ok", "event_data": {"host": host, "task": task, "task_uuid": uuid, "res": res}})


def item(item, **res):
    return {"ansible_loop_var": "item", "item": item, **res}


def test_each_change_names_the_files_its_task_wrote_there_and_a_diff_shows_a_hidden_one(sandbox):
    """Read from the results' own changed and diff: a loop's changed item only, a file's mode, a
    copy's content, a result named by its diff's header alone, a command (no file), a handler, and a
    write hidden by changed_when that its diff still shows."""
    reader = sandbox.EventReader()
    unit = "/etc/systemd/system/collector"
    same = {"before": {"path": f"{unit}.service"}, "after": {"path": f"{unit}.service"}}
    mode = {"before": {"path": f"{unit}.timer", "mode": "0600"}, "after": {"path": f"{unit}.timer", "mode": "0644"}}
    units = [
        item("service", changed=False, dest=f"{unit}.service", path=f"{unit}.service", diff=same),
        item("timer", changed=True, dest=f"{unit}.timer", path=f"{unit}.timer", diff=mode),
    ]
    ok(reader, "node2", "Units", {"changed": True, "results": units})
    ok(
        reader,
        "node2",
        "Folders",
        {"changed": False, "results": [item("/var/log/x/", changed=False, path="/var/log/x/")]},
    )
    edit = {"before_header": "/etc/a.conf", "before": "a\n# by hand\n", "after_header": "/src/a.j2", "after": "a\n"}
    ok(reader, "node2", "Content", {"changed": True, "dest": "/etc/a.conf", "diff": [edit]})
    header = {"before_header": "/opt/lib/b.py", "before": "x", "after_header": "/src/b.py", "after": "y"}
    ok(reader, "node2", "Header", {"changed": True, "diff": [header]})
    ok(reader, "node2", "Command", {"changed": True, "rc": 0})
    hidden = {"before_header": "/etc/c (content)", "before": "1", "after_header": "/etc/c (content)", "after": "2"}
    ok(reader, "node1", "Hidden", {"changed": False, "diff": hidden})
    reader({"event": "runner_on_skipped", "event_data": {"host": "node1", "task": "Skipped", "task_uuid": "t"}})
    handler = {"task": "Reload", "task_uuid": "h", "is_conditional": True}
    reader({"event": "playbook_on_task_start", "event_data": handler})
    ok(reader, "node2", "Reload", {"changed": True, "cmd": ["systemctl", "daemon-reload"]}, uuid="h")
    result = sandbox.RunResult(playbook="p", status="successful", rc=0, seconds=1.0, tasks=reader.tasks)
    assert result.changes() == [
        ("node2", "Units", False, (f"{unit}.timer",)),
        ("node2", "Content", False, ("/etc/a.conf",)),
        ("node2", "Header", False, ("/opt/lib/b.py",)),
        ("node2", "Command", False, ()),
        ("node1", "Hidden", False, ("/etc/c",)),
        ("node2", "Reload", True, ()),
    ]
    named = {f"{unit}.service", f"{unit}.timer", "/var/log/x", "/etc/a.conf", "/opt/lib/b.py"}
    assert result.files("node2") == named
    assert result.changed_tasks() == [("node2", t) for t in ("Units", "Content", "Header", "Command", "Reload")]
    assert result.to_dict()["changes"][0] == ["node2", "Units", False, [f"{unit}.timer"]]


def test_a_converged_result_shows_no_change(sandbox):
    """Unchanged copy, template and file results (their diffs, where present, have equal sides), a
    result ansible-runner emptied for its size, and a loop of unchanged items: no change."""
    reader = sandbox.EventReader()
    same = {"before": {"path": "/etc/d", "state": "directory"}, "after": {"path": "/etc/d", "state": "directory"}}
    ok(reader, "node1", "Dir", {"changed": False, "path": "/etc/d", "diff": same})
    ok(reader, "node1", "Copy", {"changed": False, "dest": "/etc/d/f", "path": "/etc/d/f", "checksum": "0"})
    ok(reader, "node1", "Big", {})
    ok(reader, "node1", "Loop", {"changed": False, "results": [item("a", changed=False, dest="/etc/d/a")]})
    result = sandbox.RunResult(playbook="p", status="successful", rc=0, seconds=1.0, tasks=reader.tasks)
    assert result.changes() == []
    assert result.files("node1") == {"/etc/d", "/etc/d/f", "/etc/d/a"}
