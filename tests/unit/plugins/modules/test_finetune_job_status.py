"""The finetune_job_status module: its helpers on a real folder tree, its wait loop with systemctl
answered by the test (the systemd boundary) and a clock that does not sleep, and the real module
through ansible with a stand-in systemctl first on PATH."""

import json
import os
import shutil

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import checkpoints
from ansible_collections.instinct.finetune.plugins.modules import finetune_job_status
from tests.unit.clock import Clock
from tests.unit.conftest import FIXTURES
from tests.unit.conftest import run_module as conftest_run_module
from tests.unit.plugins.module_utils.test_jobstate import PERMISSION_ERROR, RANK1_LOG

UNIT = "instinct-finetune-tiny-sft.service"
CHECKPOINT_FILES = ["config.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state_0.pth"]
RUNNING = "MainPID=20417\nResult=success\nExecMainStatus=0\nActiveState=active\nSubState=running\n"
ENDED = "MainPID=0\nResult=success\nExecMainStatus=0\nActiveState=inactive\nSubState=dead\n"
FAILED = "MainPID=0\nResult=exit-code\nExecMainStatus=1\nActiveState=failed\nSubState=failed\n"


def make_job(tmp_path, log=""):
    """A job's files on a node, as the unit and LLaMA-Factory leave them."""
    job_dir = tmp_path / "jobs" / "tiny-sft"
    output = job_dir / "output"
    for step, complete in ((10, True), (20, True), (30, False)):
        folder = output / f"checkpoint-{step}"
        (folder / f"global_step{step}").mkdir(parents=True)
        for name in CHECKPOINT_FILES + (["trainer_state.json"] if complete else []):
            (folder / name).write_text("")
    shutil.copy(FIXTURES / "finetune" / "trainer_log.jsonl", output / "trainer_log.jsonl")
    (output / "runs").mkdir()
    (output / "checkpoint-40").write_text("a file, not a checkpoint")
    (job_dir / "fingerprint").write_text("14cec2609bbd0aa6\n")
    log_path = tmp_path / "train.log"
    log_path.write_text(log)
    return {
        "unit": UNIT,
        "exit_file": str(job_dir / "exit-status"),
        "fingerprint_file": str(job_dir / "fingerprint"),
        "fingerprint": "14cec2609bbd0aa6",
        "output_dir": str(output),
        "log_path": str(log_path),
    }


# What the module must ask systemctl, in order, for UNIT.
SHOW_ARGS = [
    "show",
    "--no-pager",
    "-p",
    "ActiveState",
    "-p",
    "SubState",
    "-p",
    "Result",
    "-p",
    "ExecMainStatus",
    "-p",
    "MainPID",
    "-p",
    "ActiveEnterTimestampMonotonic",
    "-p",
    "ControlGroup",
    UNIT,
]


def test_checkpoint_listing_of_a_real_output_folder(tmp_path):
    params = make_job(tmp_path)
    listing = finetune_job_status._checkpoint_listing(params["output_dir"])
    assert sorted(listing) == ["checkpoint-10", "checkpoint-20", "checkpoint-30"]
    assert sorted(listing["checkpoint-30"]) == sorted([*CHECKPOINT_FILES, "global_step30"])
    assert checkpoints(listing) == [
        {"name": "checkpoint-10", "step": 10, "complete": True},
        {"name": "checkpoint-20", "step": 20, "complete": True},
        {"name": "checkpoint-30", "step": 30, "complete": False},
    ]
    assert finetune_job_status._checkpoint_listing(str(tmp_path / "never-created")) == {}


def run_main(monkeypatch, capsys, params, answers, on_call=None):
    """main() in this process; systemctl show answers answers[i] at its i-th call (the last one again
    after that). Returns (exit code, result, the systemctl command lines, the clock)."""
    calls = []
    clock = Clock()

    def run_command(_module, argv, *_args, **_kwargs):
        calls.append(list(argv))
        if on_call:
            on_call(len(calls))
        return answers[min(len(calls), len(answers)) - 1]

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda _module, name, *_a, **_k: f"/usr/bin/{name}")
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(finetune_job_status, "time", clock)
    with patch_module_args(params), pytest.raises(SystemExit) as ended:
        finetune_job_status.main()
    return ended.value.code, json.loads(capsys.readouterr().out), calls, clock


def test_wait_returns_at_once_when_the_job_is_not_running(tmp_path, monkeypatch, capsys):
    params = make_job(tmp_path, log="\n".join(RANK1_LOG.splitlines()[:3]) + "\n")
    (tmp_path / "jobs" / "tiny-sft" / "exit-status").write_text(
        "result=success code=exited status=0 at=1796273181.502218904\n"
    )
    rc, result, calls, clock = run_main(monkeypatch, capsys, dict(params, wait_seconds=600), [(0, ENDED, "")])
    assert rc == 0
    assert len(calls) == 1
    assert clock.slept == []
    assert calls[0] == ["/usr/bin/systemctl", *SHOW_ARGS]
    assert result["changed"] is False
    assert result["state"] == "succeeded"
    assert result["unit"]["ActiveState"] == "inactive"
    assert result["exit"] == {"result": "success", "code": "exited", "status": "0", "at": "1796273181.502218904"}
    assert result["fingerprint"] == "14cec2609bbd0aa6"
    assert (result["progress"]["current_steps"], result["progress"]["total_steps"]) == (40, 40)
    assert result["progress"]["eval_loss"] == 4.547991752624512
    assert [(c["step"], c["complete"]) for c in result["checkpoints"]] == [(10, True), (20, True), (30, False)]
    assert result["log_tail"] == RANK1_LOG.splitlines()[:3]
    assert result["errors"] == []


def test_wait_polls_while_the_job_runs_and_returns_when_it_ends(tmp_path, monkeypatch, capsys):
    mark = "==== instinct.finetune launch of rank 1 at 2026-12-03T04:44:49+00:00 ===="
    before_relaunch = RANK1_LOG.partition("==== instinct.finetune launch")[0]
    params = make_job(tmp_path, log=f"{mark}\n{before_relaunch}")
    exit_file = tmp_path / "jobs" / "tiny-sft" / "exit-status"

    def rank_dies(call):
        if call == 3:  # the unit's ExecStopPost wrote its record before systemctl reports the end
            exit_file.write_text("result=exit-code code=exited status=1 at=1796273101.344512907\n")

    answers = [(0, RUNNING, ""), (0, RUNNING, ""), (0, FAILED, "")]
    rc, result, calls, clock = run_main(monkeypatch, capsys, dict(params, wait_seconds=60), answers, rank_dies)
    assert rc == 0
    assert len(calls) == 3
    assert clock.slept == [2, 2]
    assert result["state"] == "failed"
    assert result["exit"]["status"] == "1"
    assert result["errors"] == [PERMISSION_ERROR]
    assert len(result["log_tail"]) == 25


def test_wait_ends_at_the_deadline_while_the_job_still_runs(tmp_path, monkeypatch, capsys):
    params = dict(make_job(tmp_path), wait_seconds=5, tail_lines=5)
    rc, result, calls, clock = run_main(monkeypatch, capsys, params, [(0, RUNNING, "")])
    assert rc == 0
    assert result["state"] == "running"
    assert clock.slept == [2, 2, 1]  # never past the deadline
    assert len(calls) == 4
    assert result["exit"] is None


def test_a_running_job_reports_how_long_its_ranks_are_idle(tmp_path, monkeypatch, capsys):
    params = make_job(tmp_path)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    # What the launcher's export writes after a step at wall time T (the Clock's time() is T + 1000 + 30).
    step_at = 1_796_000_000.0 + 1000.0 - 30.0
    (metrics / "rank0.prom").write_text(
        f'instinct_finetune_step{{rank="0"}} 12\ninstinct_finetune_last_step_timestamp_seconds{{rank="0"}} {step_at}\n'
    )
    os.utime(tmp_path / "jobs" / "tiny-sft" / "output" / "trainer_log.jsonl", (step_at - 600, step_at - 600))
    rc, result = run_main(monkeypatch, capsys, dict(params, metrics_dir=str(metrics)), [(0, RUNNING, "")])[:2]
    assert (rc, result["state"]) == (0, "running")
    assert result["idle_seconds"] == 30.0
    assert result["frozen"] == []  # RUNNING names no control group


def test_a_job_that_is_not_running_reports_no_idle_time(tmp_path, monkeypatch, capsys):
    result = run_main(monkeypatch, capsys, make_job(tmp_path), [(0, ENDED, "")])[1]
    assert result["idle_seconds"] is None and result["frozen"] == []


def test_without_wait_the_unit_is_read_once(tmp_path, monkeypatch, capsys):
    rc, result, calls, clock = run_main(monkeypatch, capsys, make_job(tmp_path), [(0, RUNNING, "")])
    assert (rc, result["state"], len(calls), clock.slept) == (0, "running", 1, [])


def test_a_stale_job_and_a_job_that_never_ran(tmp_path, monkeypatch, capsys):
    params = make_job(tmp_path)
    (tmp_path / "jobs" / "tiny-sft" / "exit-status").write_text("result=success code=exited status=0 at=1\n")
    result = run_main(monkeypatch, capsys, dict(params, fingerprint="0123456789abcdef"), [(0, ENDED, "")])[1]
    assert result["state"] == "stale"
    assert result["fingerprint"] == "14cec2609bbd0aa6"
    never = {
        "unit": UNIT,
        "exit_file": str(tmp_path / "none" / "exit-status"),
        "fingerprint_file": str(tmp_path / "none" / "fingerprint"),
        "output_dir": str(tmp_path / "none" / "output"),
        "log_path": str(tmp_path / "none" / "train.log"),
    }
    result = run_main(monkeypatch, capsys, never, [(0, ENDED, "")])[1]
    assert result["state"] == "absent"
    assert (result["exit"], result["fingerprint"], result["checkpoints"], result["log_tail"]) == (None, "", [], [])
    assert result["progress"]["current_steps"] == 0


def test_a_failing_systemctl_fails_the_module(tmp_path, monkeypatch, capsys):
    answers = [(1, "", "Failed to connect to bus: No such file or directory\n")]
    rc, result = run_main(monkeypatch, capsys, make_job(tmp_path), answers)[:2]
    assert rc == 1
    assert result["failed"] is True
    assert result["msg"] == f"systemctl show {UNIT} failed: Failed to connect to bus: No such file or directory"


def test_the_module_through_ansible(tmp_path, monkeypatch):
    params = make_job(tmp_path, log=RANK1_LOG)
    (tmp_path / "jobs" / "tiny-sft" / "exit-status").write_text("result=success code=killed status=TERM at=5\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(f"#!/bin/sh\necho \"$@\" >> '{tmp_path / 'argv'}'\nprintf '{ENDED}'\n")
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    args = " ".join(f"{key}={value}" for key, value in params.items())
    rc, result = conftest_run_module("finetune_job_status", f"{args} tail_lines=3")
    assert rc == 0, result
    assert (tmp_path / "argv").read_text().split() == SHOW_ARGS
    assert result["changed"] is False
    assert result["state"] == "failed"  # stopped with SIGTERM before it finished
    assert result["unit"] == {
        "MainPID": "0",
        "Result": "success",
        "ExecMainStatus": "0",
        "ActiveState": "inactive",
        "SubState": "dead",
    }
    assert result["progress"]["losses"][0] == [2, 6.516677379608154]
    assert [c["step"] for c in result["checkpoints"] if c["complete"]] == [10, 20]
    assert result["log_tail"] == RANK1_LOG.splitlines()[-3:]
    assert result["errors"] == []  # the last launch logged no error


def test_the_settings_of_the_launch_come_from_the_jobs_history(tmp_path, monkeypatch, capsys):
    """The job's launch history (issue 32): the entry of the launch in the fingerprint file gives its
    settings; without a history file, or without an entry for that launch, none."""
    params = make_job(tmp_path)
    history = tmp_path / "launches.jsonl"
    history.write_text(
        json.dumps({"record": "0123456789abcdef world_size=2", "settings": {"learning_rate": 0.001}}) + "\n"
        + json.dumps({"record": "14cec2609bbd0aa6 world_size=2", "settings": {"learning_rate": 0.005}}) + "\n"
    )  # fmt: skip
    result = run_main(monkeypatch, capsys, dict(params, history_file=str(history)), [(0, ENDED, "")])[1]
    assert result["launched_settings"] == {"learning_rate": 0.005}
    assert run_main(monkeypatch, capsys, params, [(0, ENDED, "")])[1]["launched_settings"] == {}
    history.write_text(json.dumps({"record": "0123456789abcdef", "settings": {"learning_rate": 0.001}}) + "\n")
    result = run_main(monkeypatch, capsys, dict(params, history_file=str(history)), [(0, ENDED, "")])[1]
    assert result["launched_settings"] == {}
    missing = dict(params, history_file=str(tmp_path / "none.jsonl"))
    assert run_main(monkeypatch, capsys, missing, [(0, ENDED, "")])[1]["launched_settings"] == {}


def test_links_and_fifos_the_training_account_puts_in_its_job_folder_are_not_read(tmp_path, monkeypatch, capsys):
    """The module runs as root; the job's folder is the training account's. Before the fix a link in
    place of the fingerprint put the job's secrets.env into the result (and the plan's message), and a
    FIFO in place of the exit record hung the watch."""
    params = make_job(tmp_path)
    job_dir = tmp_path / "jobs" / "tiny-sft"
    secrets = tmp_path / "secrets.env"
    secrets.write_text("HF_TOKEN=hf_secret_from_root_only_file\n")
    (job_dir / "fingerprint").unlink()
    (job_dir / "fingerprint").symlink_to(secrets)
    os.mkfifo(job_dir / "exit-status")
    output = job_dir / "output"
    (output / "checkpoint-50").symlink_to(tmp_path)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "rank0.prom").symlink_to(secrets)
    rc, result, _calls, _clock = run_main(
        monkeypatch, capsys, dict(params, metrics_dir=str(metrics)), [(0, RUNNING, "")]
    )
    assert rc == 0
    assert "hf_secret" not in json.dumps(result)
    assert result["fingerprint"] == "" and result["exit"] in (None, {})
    assert [c["step"] for c in result["checkpoints"]] == [10, 20, 30]
