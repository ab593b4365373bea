"""The finetune_job_status module: its helpers on a real folder tree, its wait loop with systemctl
answered by the test (the systemd boundary) and a clock that does not sleep, and the real module
through ansible with a stand-in systemctl first on PATH."""

import json
import os
import shutil
import textwrap

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


# --- launcher: slurm (issue 35) -----------------------------------------------------------------
# squeue and sacct are answered by the test (the Slurm boundary). sacct answers with the recordings of
# tests/fixtures/slurm as they are (SOURCES.md); no public recording of the collection's squeue
# format exists, so its lines are built in slurm.SQUEUE_FORMAT (%i|%T|%r|%D|%N|%M|%l|%j) from the
# values of the recorded squeue tables, as test_slurm.py's tests of that format do.

SLURM = FIXTURES / "slurm"
SQUEUE_FORMAT_ARG = "--format=%i|%T|%r|%D|%N|%M|%l|%j"
SACCT_FORMAT_ARG = "--format=JobID,JobName,State,ExitCode,DerivedExitCode,Elapsed,Start,End,NNodes,NodeList,Reason"
# squeue_hummingbird-ucsc-2025: job 403035 PD (Resources), 1 node. The plain table has no time limit
# column: UNLIMITED is squeue's word for none (slurm.parse_duration).
PENDING_RESOURCES = "403035|PENDING|Resources|1||0:00|UNLIMITED|pyscf\n"
# squeue-l_orfeo-areasciencepark-2026: job 882690_70 PENDING (launch failed requeued held), 12:00:00.
PENDING_HELD = "882690_70|PENDING|launch failed requeued held|1||0:00|12:00:00|mountain\n"
# squeue_hummingbird-ucsc-2025: job 424906 R on hbnode-[38-39] for 1:24:22 (5062 s).
RUNNING_TWO_NODES = "424906|RUNNING|None|2|hbnode-[38-39]|1:24:22|UNLIMITED|qe\n"
# squeue(1) exits 1 for a job its controller no longer holds: slurm.squeue_argv's docstring names
# the words the module looks for; the rest of the line is not Slurm's.
SQUEUE_FORGOT = (1, "", "squeue stand-in: Invalid job id specified\n")
EXIT_SUCCESS = "result=success code=exited status=0 at=1796273181.502218904\n"
EXIT_FAILED = "result=exit-code code=exited status=1 at=1796273101.344512907\n"


def slurm_job(tmp_path, job_id="4242", exit_record=None):
    """make_job's files, the job submitted through Slurm: sbatch --parsable's id in its file."""
    params = make_job(tmp_path)
    del params["unit"]
    job_dir = tmp_path / "jobs" / "tiny-sft"
    if job_id is not None:
        (job_dir / "slurm-job-id").write_text(f"{job_id}\n")
    if exit_record is not None:
        (job_dir / "exit-status").write_text(exit_record)
    return dict(params, launcher="slurm", slurm_job_id_file=str(job_dir / "slurm-job-id"))


def run_slurm(monkeypatch, capsys, params, squeue, *, sacct=None, found=("squeue", "sacct")):  # noqa: PLR0913
    """main() with launcher slurm: squeue answers squeue[i] at its i-th call (the last one again after
    that), sacct sacct[i] (a fixture's name reads that recording, rc 0). ``found``: the commands
    the node has. Returns (exit code, result, the command lines run, the clock)."""
    calls = []
    clock = Clock()
    answers = {"squeue": list(squeue), "sacct": list(sacct or [])}

    def run_command(_module, argv, *_args, **_kwargs):
        calls.append(list(argv))
        name = os.path.basename(argv[0])
        pending = answers[name]
        answer = pending.pop(0) if len(pending) > 1 else pending[0]
        if isinstance(answer, str):
            return 0, (SLURM / answer).read_text(), ""
        return answer

    def get_bin_path(_module, name, *_a, **_k):
        if name in ("squeue", "sacct", "systemctl"):
            return f"/usr/bin/{name}" if name in found else None
        raise AssertionError(f"the module looked up {name}")

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(finetune_job_status, "time", clock)
    monkeypatch.setattr(finetune_job_status.socket, "gethostname", lambda: "mi300-01")
    with patch_module_args(params), pytest.raises(SystemExit) as ended:
        finetune_job_status.main()
    return ended.value.code, json.loads(capsys.readouterr().out), calls, clock


def squeue_call(job_id):
    return ["/usr/bin/squeue", f"--jobs={job_id}", "--noheader", "--states=all", SQUEUE_FORMAT_ARG]


def sacct_call(job_id):
    return ["/usr/bin/sacct", f"--jobs={job_id}", "--parsable2", SACCT_FORMAT_ARG]


def test_systemd_mode_returns_nothing_of_slurm(tmp_path, monkeypatch, capsys):
    result = run_main(monkeypatch, capsys, make_job(tmp_path), [(0, RUNNING, "")])[1]
    assert "slurm" not in result and result["state"] == "running"


def test_a_pending_job_is_running_for_the_plan_with_slurms_reason_and_no_idle_time(tmp_path, monkeypatch, capsys):
    params = slurm_job(tmp_path, "403035")
    rc, result, calls, clock = run_slurm(monkeypatch, capsys, params, [(0, PENDING_RESOURCES, "")])
    assert rc == 0
    # Submitted: the plan must never submit it again, so it is running, and the watch reads why it waits.
    assert result["state"] == "running" and result["changed"] is False
    assert result["slurm"] == {
        "job_id": "403035", "cluster": None, "state": "PENDING", "phase": "pending", "reason": "Resources",
        "held": False, "cancelled_by": None, "exit_code": None, "signal": None, "failed_steps": [], "hosts": [],
        "elapsed_s": 0, "source": "squeue", "message": "Slurm job 403035 is PENDING (Resources)",
    }  # fmt: skip
    # Waiting for nodes is no stall: no idle time, whatever the node's files say.
    assert result["idle_seconds"] is None and result["frozen"] == []
    # No systemctl; squeue alone while the job is pending (sacct would add nothing).
    assert calls == [squeue_call("403035")] and clock.slept == []
    assert result["unit"] == {} and result["exit"] is None and result["errors"] == []
    assert result["fingerprint"] == "14cec2609bbd0aa6"
    assert [c["step"] for c in result["checkpoints"] if c["complete"]] == [10, 20]


def test_a_held_job_says_so(tmp_path, monkeypatch, capsys):
    params = slurm_job(tmp_path, "882690_70")
    result = run_slurm(monkeypatch, capsys, params, [(0, PENDING_HELD, "")])[1]
    assert result["state"] == "running"
    assert (result["slurm"]["reason"], result["slurm"]["held"]) == ("launch failed requeued held", True)


def test_wait_polls_squeue_every_ten_seconds_from_pending_to_running(tmp_path, monkeypatch, capsys):
    params = dict(slurm_job(tmp_path, "424906"), wait_seconds=25)
    pending = "424906|PENDING|Resources|2||0:00|UNLIMITED|qe\n"
    answers = [(0, pending, ""), (0, pending, ""), (0, RUNNING_TWO_NODES, "")]
    rc, result, calls, clock = run_slurm(monkeypatch, capsys, params, answers)
    assert rc == 0 and result["state"] == "running" and result["slurm"]["phase"] == "active"
    # Running is still running: the wait goes on to its deadline, never past it.
    assert clock.slept == [10, 10, 5]
    assert calls == [squeue_call("424906")] * 4


def test_a_running_job_is_idle_since_slurm_started_it(tmp_path, monkeypatch, capsys):
    params = slurm_job(tmp_path, "424906")
    trainer_log = tmp_path / "jobs" / "tiny-sft" / "output" / "trainer_log.jsonl"
    # The trainer's last step before this job started (a resumed job's earlier launch).
    before = 1_796_000_000.0 + 1000.0 - 9000.0
    os.utime(trainer_log, (before, before))
    rc, result, calls, _clock = run_slurm(monkeypatch, capsys, params, [(0, RUNNING_TWO_NODES, "")])
    assert (rc, result["state"]) == (0, "running")
    assert result["slurm"]["hosts"] == ["hbnode-38", "hbnode-39"]
    assert result["slurm"]["message"] == "Slurm job 424906 is RUNNING on hbnode-[38-39]"
    assert result["idle_seconds"] == 5062.0  # 1:24:22 since it started, not since the earlier step
    assert calls == [squeue_call("424906")]
    # A step after the start counts from that step.
    after = 1_796_000_000.0 + 1000.0 - 30.0
    os.utime(trainer_log, (after, after))
    assert run_slurm(monkeypatch, capsys, params, [(0, RUNNING_TWO_NODES, "")])[1]["idle_seconds"] == 30.0


@pytest.mark.parametrize(
    "case",
    [
        ("4904689", "sacct-P_frontier-mi250x_32node-FAILED-137_step-CANCELLED-sig9.txt",
         "Slurm job 4904689 ended FAILED with exit code 137; failed steps: batch FAILED 137:0, 0 CANCELLED 0:9"),
        ("4979526", "sacct-P_frontier-mi250x_2node-FAILED-90_step-OUT_OF_MEMORY.txt",
         "Slurm job 4979526 ended FAILED with exit code 90 on frontier[07041,07043]; failed steps: 0 OUT_OF_MEMORY "
         "0:125"),
        ("67", "sacct-P_hpc-client-lab_CANCELLED-by-1000.txt",
         "Slurm job 67 ended CANCELLED by uid 1000 with exit code 0; failed steps: batch CANCELLED 0:15"),
        # The batch script ended 0:0 but its srun step was killed (SIGUSR1): no success.
        ("239023", "sacct-P_cluster-utils-issue-87_COMPLETED_steps-CANCELLED-sig10.txt",
         "Slurm job 239023 ended COMPLETED with exit code 0 on galvani-cn001; failed steps: 0 CANCELLED 0:10"),
    ],
)  # fmt: skip
def test_a_job_slurm_says_did_not_succeed_is_failed_with_slurms_account(tmp_path, monkeypatch, capsys, case):
    job_id, recording, message = case
    # Even where this node's own rank wrote a clean exit record: the job as a whole did not succeed.
    params = slurm_job(tmp_path, job_id, exit_record=EXIT_SUCCESS)
    rc, result, calls, _clock = run_slurm(monkeypatch, capsys, params, [SQUEUE_FORGOT], sacct=[recording])
    assert rc == 0
    assert result["state"] == "failed"
    assert result["slurm"]["source"] == "sacct" and result["slurm"]["phase"] == "finished"
    assert result["slurm"]["message"] == message
    assert result["errors"] == [message]  # the training log holds no error here
    assert result["exit"]["result"] == "success" and result["idle_seconds"] is None
    # squeue first; it no longer holds the job, so sacct says how it ended.
    assert calls == [squeue_call(job_id), sacct_call(job_id)]


def test_a_timeout_is_failed(tmp_path, monkeypatch, capsys):
    # sacct-X-n-P_greatlakes-l40s: printed without its header (-n) and indented in the report; the header
    # is the column list SOURCES.md reads the values as (the module's sacct prints its header).
    lines = textwrap.dedent((SLURM / "sacct-X-n-P_greatlakes-l40s_TIMEOUT-COMPLETED-CANCELLED-by.txt").read_text())
    header = "JobID|JobName|Partition|State|Elapsed|ExitCode|Start|End|NodeList\n"
    params = slurm_job(tmp_path, "301099")
    result = run_slurm(monkeypatch, capsys, params, [SQUEUE_FORGOT], sacct=[(0, header + lines, "")])[1]
    assert (result["state"], result["slurm"]["state"], result["slurm"]["elapsed_s"]) == ("failed", "TIMEOUT", 84611)
    assert result["errors"] == ["Slurm job 301099 ended TIMEOUT with exit code 0 on gl111"]


def test_a_completed_job_is_what_this_nodes_exit_record_says(tmp_path, monkeypatch, capsys):
    recording = "sacct-P_frontier-mi250x_256node-COMPLETED.txt"
    # squeue still holds it for MinJobAge (COMPLETED, values of the sacct recording), sacct has its steps.
    completed = "4908935|COMPLETED|None|256|frontier[00001-00256]|20:53|30:00|e97-256n-hier-smoke\n"
    params = slurm_job(tmp_path, "4908935", exit_record=EXIT_SUCCESS)
    rc, result, calls, _clock = run_slurm(monkeypatch, capsys, params, [(0, completed, "")], sacct=[recording])
    assert (rc, result["state"], result["errors"]) == (0, "succeeded", [])
    assert result["slurm"]["source"] == "sacct" and result["slurm"]["exit_code"] == 0
    assert calls == [squeue_call("4908935"), sacct_call("4908935")]
    # Launched with other settings: stale, as a unit that ended.
    stale = run_slurm(monkeypatch, capsys, dict(params, fingerprint="0123456789abcdef"), [SQUEUE_FORGOT],
                      sacct=[recording])[1]  # fmt: skip
    assert stale["state"] == "stale"
    # This node's rank failed although the job completed (its record says so): failed.
    (tmp_path / "jobs" / "tiny-sft" / "exit-status").write_text(EXIT_FAILED)
    assert run_slurm(monkeypatch, capsys, params, [SQUEUE_FORGOT], sacct=[recording])[1]["state"] == "failed"
    # No record of this node's rank (killed before it could write one, or never started here): failed.
    (tmp_path / "jobs" / "tiny-sft" / "exit-status").unlink()
    gone = run_slurm(monkeypatch, capsys, params, [SQUEUE_FORGOT], sacct=[recording])[1]
    assert gone["state"] == "failed"
    assert gone["errors"] == [
        "Slurm job 4908935 ended COMPLETED with exit code 0, but this node's rank left no exit record"
    ]


def test_a_job_never_submitted_is_absent_without_asking_slurm(tmp_path, monkeypatch, capsys):
    params = slurm_job(tmp_path, job_id=None)
    rc, result, calls, _clock = run_slurm(monkeypatch, capsys, params, [(0, "", "")])
    assert (rc, result["state"], calls) == (0, "absent", [])
    assert result["slurm"]["job_id"] is None and result["slurm"]["phase"] == "unknown"
    assert result["slurm"]["message"].startswith("no Slurm job id in ")
    assert result["idle_seconds"] is None and result["errors"] == []
    # An empty file (sbatch failed after the file was created) is no job either.
    (tmp_path / "jobs" / "tiny-sft" / "slurm-job-id").write_text("\n")
    assert run_slurm(monkeypatch, capsys, params, [(0, "", "")])[1]["state"] == "absent"
    # As for a unit that never ran, an exit record left there decides.
    (tmp_path / "jobs" / "tiny-sft" / "exit-status").write_text(EXIT_SUCCESS)
    assert run_slurm(monkeypatch, capsys, params, [(0, "", "")])[1]["state"] == "succeeded"


def test_a_job_slurm_no_longer_knows_reads_as_its_exit_record(tmp_path, monkeypatch, capsys):
    params = slurm_job(tmp_path, "4242;mi300", exit_record=EXIT_SUCCESS)
    header_only = (0, "JobID|JobName|State|ExitCode|DerivedExitCode|Elapsed|Start|End|NNodes|NodeList|Reason\n", "")
    result = run_slurm(monkeypatch, capsys, params, [SQUEUE_FORGOT], sacct=[header_only])[1]
    assert result["state"] == "succeeded" and result["errors"] == []
    assert (result["slurm"]["job_id"], result["slurm"]["cluster"]) == ("4242", "mi300")
    assert result["slurm"]["message"] == "Slurm job 4242 is known to neither squeue nor sacct"
    (tmp_path / "jobs" / "tiny-sft" / "exit-status").unlink()
    absent = run_slurm(monkeypatch, capsys, params, [SQUEUE_FORGOT], sacct=[header_only])[1]
    assert absent["state"] == "absent" and absent["errors"] == ["Slurm job 4242 is known to neither squeue nor sacct"]


def test_an_id_that_names_another_job_now_is_not_this_job(tmp_path, monkeypatch, capsys):
    """Slurm numbers its jobs from FirstJobId again when it lost its saved state: the id a node kept
    since its job ended then names another account's job. That job is not this one, so this job is not
    running (before, the plan attached to it and the stages held back for it)."""
    params = dict(slurm_job(tmp_path, "424906", exit_record=EXIT_SUCCESS), slurm_job_name="instinct-finetune-tiny-sft")
    header_only = (0, "JobID|JobName|State|ExitCode|DerivedExitCode|Elapsed|Start|End|NNodes|NodeList|Reason\n", "")
    rc, result, calls, _clock = run_slurm(
        monkeypatch, capsys, params, [(0, RUNNING_TWO_NODES, "")], sacct=[header_only]
    )
    assert (rc, result["state"], result["errors"]) == (0, "succeeded", [])
    assert result["slurm"]["state"] is None and result["slurm"]["phase"] == "unknown"
    assert result["slurm"]["message"].startswith(
        "Slurm job 424906 names another job now (qe): the id on record is stale"
    )
    assert calls == [squeue_call("424906"), sacct_call("424906")]
    # The job's own name: its own job, running.
    ours = run_slurm(monkeypatch, capsys, dict(params, slurm_job_name="qe"), [(0, RUNNING_TWO_NODES, "")])[1]
    assert ours["state"] == "running" and ours["slurm"]["hosts"] == ["hbnode-38", "hbnode-39"]
    # sacct's record of another job under the id is no account of this one either.
    recording = "sacct-P_frontier-mi250x_256node-COMPLETED.txt"
    (tmp_path / "jobs" / "tiny-sft" / "slurm-job-id").write_text("4908935\n")
    (tmp_path / "jobs" / "tiny-sft" / "exit-status").unlink()
    other = run_slurm(monkeypatch, capsys, params, [SQUEUE_FORGOT], sacct=[recording])[1]
    assert other["state"] == "absent" and "names another job now (e97-256n-hier-smoke)" in other["errors"][0]


def test_a_failing_squeue_fails_naming_the_host_the_command_and_the_runbook(tmp_path, monkeypatch, capsys):
    # Not Slurm's words: a stand-in for a controller that does not answer.
    refused = (1, "", "squeue stand-in: the controller does not answer\n")
    rc, result, calls, _clock = run_slurm(monkeypatch, capsys, slurm_job(tmp_path), [refused])
    assert rc == 1 and result["failed"] is True
    assert result["msg"] == (
        "mi300-01: /usr/bin/squeue --jobs=4242 --noheader --states=all --format=%i|%T|%r|%D|%N|%M|%l|%j failed "
        "(rc 1): squeue stand-in: the controller does not answer. This node must reach Slurm's controller "
        "(slurmctld, munge, slurm.conf). See docs/runbooks/slurm.md"
    )
    assert calls == [squeue_call("4242")]
    assert (FIXTURES.parent.parent / "docs" / "runbooks" / "slurm.md").is_file()


def test_a_failing_sacct_and_missing_commands_fail_the_module(tmp_path, monkeypatch, capsys):
    params = slurm_job(tmp_path, "4904689")
    refused = (1, "", "sacct stand-in: accounting storage is not reachable\n")
    rc, result = run_slurm(monkeypatch, capsys, params, [SQUEUE_FORGOT], sacct=[refused])[:2]
    assert rc == 1
    assert result["msg"].startswith("mi300-01: /usr/bin/sacct --jobs=4904689 --parsable2 --format=JobID,")
    assert result["msg"].endswith("failed (rc 1): sacct stand-in: accounting storage is not reachable. This node "
                                  "must reach Slurm's accounting (slurmdbd). See docs/runbooks/slurm.md")  # fmt: skip
    rc, result, calls = run_slurm(monkeypatch, capsys, params, [(0, "", "")], found=())[:3]
    assert (rc, calls) == (1, [])
    assert result["msg"] == (
        "mi300-01: squeue --jobs=4904689 --noheader --states=all --format=%i|%T|%r|%D|%N|%M|%l|%j cannot run: "
        "squeue is not found on this node's PATH. Every node of a job launched through Slurm needs Slurm's client "
        "commands (the slurm role installs them), or give finetune_job_status their path. See docs/runbooks/slurm.md"
    )


def test_a_job_id_file_that_is_no_job_id_fails(tmp_path, monkeypatch, capsys):
    params = slurm_job(tmp_path, "Submitted batch job 4242")
    rc, result = run_slurm(monkeypatch, capsys, params, [(0, "", "")])[:2]
    assert rc == 1
    assert result["msg"] == (
        f"mi300-01: the Slurm job id file {params['slurm_job_id_file']} cannot be read: 'Submitted batch job 4242' "
        "is not what sbatch --parsable prints (jobid or jobid;cluster). Write the id sbatch --parsable printed into "
        "it, or remove it if no job was submitted. See docs/runbooks/slurm.md"
    )
    # A link in its place is not taken for "never submitted" (which would submit the job again).
    id_file = tmp_path / "jobs" / "tiny-sft" / "slurm-job-id"
    id_file.unlink()
    id_file.symlink_to(tmp_path / "elsewhere")
    rc, result = run_slurm(monkeypatch, capsys, params, [(0, "", "")])[:2]
    assert rc == 1 and "is not a regular file this module may read" in result["msg"]


def test_each_launcher_requires_its_own_option(tmp_path, monkeypatch, capsys):
    params = slurm_job(tmp_path)
    del params["slurm_job_id_file"]
    rc, result = run_slurm(monkeypatch, capsys, params, [(0, "", "")])[:2]
    assert rc == 1 and result["msg"] == "launcher is slurm but all of the following are missing: slurm_job_id_file"


def test_the_module_in_slurm_mode_through_ansible_in_check_mode(tmp_path, monkeypatch):
    params = slurm_job(tmp_path, "4904689", exit_record=EXIT_FAILED)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Stand-ins: squeue no longer holds the job; sacct prints the recording.
    (bin_dir / "squeue").write_text(f"#!/bin/sh\necho \"$@\" >> '{tmp_path / 'argv'}'\n"
                                    "echo 'squeue stand-in: Invalid job id specified' >&2\nexit 1\n")  # fmt: skip
    recording = SLURM / "sacct-P_frontier-mi250x_32node-FAILED-137_step-CANCELLED-sig9.txt"
    (bin_dir / "sacct").write_text(f"#!/bin/sh\necho \"$@\" >> '{tmp_path / 'argv'}'\ncat '{recording}'\n")
    for name in ("squeue", "sacct"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    args = " ".join(f"{key}={value}" for key, value in params.items())
    rc, result = conftest_run_module("finetune_job_status", args, extra=("--check",))
    assert rc == 0, result
    assert result["changed"] is False and result["state"] == "failed"
    assert result["slurm"]["state"] == "FAILED" and result["slurm"]["failed_steps"] == ["batch", "0"]
    assert (tmp_path / "argv").read_text().splitlines() == [
        " ".join(squeue_call("4904689")[1:]),
        " ".join(sacct_call("4904689")[1:]),
    ]
