"""The finetune_watch action with launcher slurm (issue 35): every rank stopped by one scancel of the
job on the Slurm controller host, a pending job's progress line with Slurm's reason, and the systemd
launcher's stop per node as it was. The nodes are the test's: each answers the watch's module calls
in turn (finetune_job_status results whose ``slurm`` part is slurm.job_status of squeue lines in the
collection's format, built from the recorded squeue tables' values, or of the recorded sacct outputs
of tests/fixtures/slurm), and the clock does not sleep. tests/soak runs the real watch end to end."""

import time as real_time

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.instinct.finetune.plugins.action import finetune_watch
from ansible_collections.instinct.finetune.plugins.module_utils.slurm import job_status
from ansible_collections.instinct.finetune.plugins.module_utils.slurm_jobstate import slurm_summary
from tests.unit.clock import Clock
from tests.unit.conftest import FIXTURES
from tests.unit.plugins.action.mock import mock_action

STATUS = "instinct.finetune.finetune_job_status"
COMMAND = "ansible.legacy.command"
SYSTEMD = "ansible.legacy.systemd_service"
RANKS = ["node1", "node2"]
JOB_DIR = "/var/lib/instinct-finetune/jobs/tiny-sft"

# squeue_hummingbird-ucsc-2025's job 403035 PD (Resources) and 424906 R on two nodes, as the
# collection's squeue format prints them (the plain table has no time limit: UNLIMITED).
PENDING = slurm_summary(job_status("424906", squeue_text="424906|PENDING|Resources|2||0:00|UNLIMITED|qe\n"))
RUNNING = slurm_summary(job_status("424906", squeue_text="424906|RUNNING|None|2|hbnode-[38-39]|1:24:22|UNLIMITED|qe\n"))
# The recorded end of a 32-node job whose srun step was killed (sacct -P, Frontier).
FAILED = slurm_summary(job_status(
    "4904689", sacct_text=(FIXTURES / "slurm" / "sacct-P_frontier-mi250x_32node-FAILED-137_step-CANCELLED-sig9.txt"
                           ).read_text()))  # fmt: skip


class WatchClock(Clock):
    """The tests' clock, with the calendar the stall message prints its time with."""

    strftime = staticmethod(real_time.strftime)
    localtime = staticmethod(real_time.localtime)


def read(state, slurm, idle=None, step=None):
    """What finetune_job_status returns for a rank (launcher slurm)."""
    progress = {"current_steps": step, "total_steps": 40} if step is not None else {"current_steps": 0}
    ended = {"result": "exit-code", "code": "killed", "status": "KILL", "at": "1796273101.3"}
    return {"changed": False, "state": state, "unit": {}, "slurm": slurm, "progress": progress,
            "exit": None if state == "running" else ended, "idle_seconds": idle, "frozen": [], "errors": [],
            "log_tail": []}  # fmt: skip


class Node:
    """A node the watch reaches: its status reads answer ``reads`` in turn (the last one again), its
    command module ``command``; every call is on record."""

    def __init__(self, host, reads, command=None):
        self.host = host
        self.reads = list(reads)
        self.command = command or {"changed": True, "rc": 0, "stdout": "", "stderr": ""}
        self.calls = []
        self.closed = False

    def call(self, module, args):
        self.calls.append((module, dict(args)))
        if module == STATUS:
            return dict(self.reads.pop(0) if len(self.reads) > 1 else self.reads[0])
        if module == COMMAND:
            return dict(self.command)
        return {"changed": True, "name": args.get("name"), "state": "stopped"}

    def close(self):
        self.closed = True


@pytest.fixture
def shown(monkeypatch):
    lines = []
    monkeypatch.setattr(finetune_watch.display, "display", lambda msg, **_kw: lines.append(msg))
    monkeypatch.setattr(finetune_watch, "time", WatchClock())
    return lines


def watch(monkeypatch, nodes, **args):
    """Run the watch of job tiny-sft over ``nodes`` (host -> Node), the first two its ranks."""
    monkeypatch.setattr(finetune_watch._Rank, "open",
                        classmethod(lambda _cls, _task, _loader, _lockfd, host, _passwords: nodes[host]))  # fmt: skip
    slurm = args.get("launcher") == "slurm"
    status = {host: ({"slurm_job_id_file": f"{JOB_DIR}/slurm-job-id"} if slurm else
                     {"unit": "instinct-finetune-tiny-sft.service"}) | {"exit_file": f"{JOB_DIR}/exit-status"}
              for host in RANKS}  # fmt: skip
    task_args = {"job": "tiny-sft", "ranks": RANKS, "status": status, "interval": 60, "timeout": 3600, **args}
    action = mock_action(finetune_watch, task_args)
    action._connection.become = None
    return action.run(task_vars={"inventory_hostname": "node1"})


def status_calls(node):
    return [args for module, args in node.calls if module == STATUS]


def stops(nodes):
    return {host: [(module, args) for module, args in node.calls if module != STATUS] for host, node in nodes.items()}


def test_a_failed_rank_stops_the_job_with_one_scancel_on_the_controller(monkeypatch, shown):
    # node2 read the job after Slurm ended it; node1's read, just before, still saw it running.
    nodes = {
        "node1": Node("node1", [read("running", RUNNING, idle=20.0, step=12), read("failed", FAILED)]),
        "node2": Node("node2", [read("failed", FAILED)]),
        "slurm1": Node("slurm1", []),
    }
    result = watch(monkeypatch, nodes, launcher="slurm", slurm_job_id="424906", slurm_controller="slurm1")
    assert "failed" not in result, result
    assert result["changed"] is True and result["first_failed"] == ["node2"]
    # One scancel of the job on the controller host, through the command module; no unit stopped.
    assert stops(nodes) == {"node1": [], "node2": [], "slurm1": [(COMMAND, {"argv": ["scancel", "424906"]})]}
    # Every read asks finetune_job_status for Slurm's view, with the rank's own options.
    assert status_calls(nodes["node2"])[0] == {"slurm_job_id_file": f"{JOB_DIR}/slurm-job-id",
                                               "exit_file": f"{JOB_DIR}/exit-status", "wait_seconds": 0,
                                               "launcher": "slurm"}  # fmt: skip
    assert status_calls(nodes["node1"])[0]["wait_seconds"] == 60  # the master waits out the round
    assert result["rounds"] == 2 and result["lines"][0].startswith("rank 0 node1: failed")
    assert result["by_host"]["node2"]["slurm"]["message"].startswith("Slurm job 4904689 ended FAILED")
    assert all(node.closed for node in nodes.values())


def test_a_stall_is_one_scancel_however_many_rounds_the_job_takes_to_end(monkeypatch, shown):
    # Both ranks run with no step for 100 s (stall after 1 minute); the job takes a round to end
    # (COMPLETING is still running), then both read it cancelled.
    completing = slurm_summary(job_status("424906", squeue_text="424906|COMPLETING|None|2|hbnode-[38-39]|1:25:30|"
                                                                "UNLIMITED|qe\n"))  # fmt: skip
    reads = [read("running", RUNNING, idle=100.0, step=12), read("running", completing, idle=170.0, step=12),
             read("failed", FAILED)]  # fmt: skip
    nodes = {host: Node(host, reads) for host in RANKS}
    result = watch(monkeypatch, nodes, launcher="slurm", slurm_job_id="424906;hummingbird", stall_minutes=1)
    assert result["stall"]["suspects"] == ["node1", "node2"] and result["stall"]["idle_seconds"] == 100.0
    assert result["stall_message"].startswith("job tiny-sft stalled: every rank runs but none took a step for 1.7")
    # The controller defaults to the first rank; one scancel, although the stop stood for two rounds.
    assert stops(nodes) == {"node1": [(COMMAND, {"argv": ["scancel", "424906"]})], "node2": []}
    assert result["rounds"] == 3 and result["changed"] is True


def test_a_pending_job_says_why_in_its_progress_line_and_never_stalls(monkeypatch, shown):
    # Pending for two rounds (finetune_job_status reports no idle time for it), then running, then done.
    done = slurm_summary(job_status("4908935", sacct_text=(
        FIXTURES / "slurm" / "sacct-P_frontier-mi250x_256node-COMPLETED.txt").read_text()))  # fmt: skip
    succeeded = dict(read("succeeded", done), exit={"result": "success", "code": "exited", "status": "0"})
    reads = [read("running", PENDING), read("running", PENDING), read("running", RUNNING, idle=5.0, step=12), succeeded]
    nodes = {host: Node(host, reads) for host in RANKS}
    result = watch(monkeypatch, nodes, launcher="slurm", slurm_job_id="424906", stall_minutes=1)
    assert shown[0] == (
        "job tiny-sft, round 1:\n"
        "  rank 0 node1: pending (Resources), no step logged yet\n"
        "  rank 1 node2: pending (Resources), no step logged yet"
    )
    assert shown[1].startswith("job tiny-sft, round 2:\n  rank 0 node1: pending (Resources)")
    assert shown[2] == (
        "job tiny-sft, round 3:\n  rank 0 node1: running, step 12/40\n  rank 1 node2: running, step 12/40"
    )
    # Waiting for nodes is no stall, and nothing was cancelled; the job ran to its end.
    assert result["stall"] is None and stops(nodes) == {"node1": [], "node2": []}
    assert result["rounds"] == 4 and result["changed"] is False and result["first_failed"] == []
    assert result["lines"] == [
        "rank 0 node1: succeeded, no step logged yet",
        "rank 1 node2: succeeded, no step logged yet",
    ]


def test_a_scancel_that_fails_fails_the_watch_naming_the_controller_and_the_runbook(monkeypatch, shown):
    refused = {"failed": True, "changed": True, "rc": 1, "msg": "non-zero return code", "stdout": "",
               "stderr": "scancel stand-in: the controller does not answer"}  # fmt: skip
    nodes = {
        "node1": Node("node1", [read("running", RUNNING, idle=20.0, step=12)], command=refused),
        "node2": Node("node2", [read("failed", FAILED)]),
    }
    result = watch(monkeypatch, nodes, launcher="slurm", slurm_job_id="424906")
    assert result["failed"] is True and result["changed"] is True
    assert result["msg"] == (
        "node1: cancelling Slurm job 424906 of job tiny-sft (scancel 424906) failed: scancel stand-in: the controller "
        "does not answer. Cancel it by hand (scancel 424906) where Slurm's commands reach its controller. See "
        "docs/runbooks/slurm.md"
    )


def test_a_job_that_ended_before_its_scancel_is_read_to_its_end_naming_the_rank_that_died(monkeypatch, shown):
    """node2's rank died and srun ended the job on every node before the watch's scancel came: scancel's
    "Invalid job id specified" (what the sandbox's Slurm 21.08 printed) is no failure of the stop."""
    gone = {"failed": True, "changed": True, "rc": 1, "msg": "non-zero return code", "stdout": "",
            "stderr": "scancel: error: Kill job error on job id 424906: Invalid job id specified"}  # fmt: skip
    nodes = {
        "node1": Node("node1", [read("running", RUNNING, idle=20.0, step=12), read("failed", FAILED)], command=gone),
        "node2": Node("node2", [read("failed", FAILED)]),
    }
    result = watch(monkeypatch, nodes, launcher="slurm", slurm_job_id="424906")
    assert "failed" not in result, result
    assert result["first_failed"] == ["node2"]
    assert stops(nodes)["node1"] == [(COMMAND, {"argv": ["scancel", "424906"]})]


def test_the_systemd_launcher_still_stops_each_running_rank_and_reads_without_a_launcher(monkeypatch, shown):
    running = {key: value for key, value in read("running", None, idle=20.0, step=12).items() if key != "slurm"}
    failed = {key: value for key, value in read("failed", None).items() if key != "slurm"}
    nodes = {"node1": Node("node1", [running, failed]), "node2": Node("node2", [failed])}
    result = watch(monkeypatch, nodes)
    assert stops(nodes) == {"node1": [(SYSTEMD, {"name": "instinct-finetune-tiny-sft.service", "state": "stopped"})],
                            "node2": []}  # fmt: skip
    assert status_calls(nodes["node2"])[0] == {"unit": "instinct-finetune-tiny-sft.service",
                                               "exit_file": f"{JOB_DIR}/exit-status", "wait_seconds": 0}  # fmt: skip
    assert result["changed"] is True and result["first_failed"] == ["node2"]
    assert shown[0] == (
        "job tiny-sft, round 1:\n  rank 0 node1: running, step 12/40\n  rank 1 node2: failed, no step logged yet"
    )


def test_what_the_slurm_watch_refuses_before_it_reaches_any_node(monkeypatch, shown):
    nodes = {host: Node(host, [read("running", RUNNING)]) for host in RANKS}
    with pytest.raises(AnsibleActionFail, match="launcher is slurm but all of the following are missing: slurm_job_id"):
        watch(monkeypatch, nodes, launcher="slurm")
    assert watch(monkeypatch, nodes, launcher="slurm", slurm_job_id="")["msg"].endswith(
        "needs slurm_job_id, the id sbatch --parsable printed when the job was submitted, but it is empty. See "
        "docs/runbooks/slurm.md"
    )
    result = watch(monkeypatch, nodes, launcher="slurm", slurm_job_id="Submitted batch job 424906")
    assert result["failed"] is True
    assert result["msg"] == (
        "node1: watching job tiny-sft through Slurm needs slurm_job_id, the id sbatch --parsable printed when the "
        "job was submitted, but 'Submitted batch job 424906' is not what sbatch --parsable prints (jobid or "
        "jobid;cluster). See docs/runbooks/slurm.md"
    )
    assert nodes["node1"].calls == [] and nodes["node2"].calls == []


def test_the_slurm_watch_needs_each_ranks_job_id_file_and_no_other_launcher(monkeypatch, shown):
    nodes = {host: Node(host, [read("running", RUNNING)]) for host in RANKS}
    monkeypatch.setattr(finetune_watch._Rank, "open",
                        classmethod(lambda _cls, _task, _loader, _lockfd, host, _passwords: nodes[host]))  # fmt: skip
    status = {"node1": {"slurm_job_id_file": "/x/slurm-job-id"}, "node2": {"unit": "x.service"}}
    args = {"job": "tiny-sft", "ranks": RANKS, "status": status, "timeout": 60, "launcher": "slurm",
            "slurm_job_id": "424906"}  # fmt: skip
    action = mock_action(finetune_watch, args)
    result = action.run(task_vars={"inventory_hostname": "node1"})
    assert result["msg"].startswith("node1: watching job tiny-sft needs the status options of every rank: none for "
                                    "node2 (status has node1, node2)")  # fmt: skip
    assert "finetune_job_status options, slurm_job_id_file included" in result["msg"]
    status["node2"] = {"slurm_job_id_file": "/x/slurm-job-id", "launcher": "systemd"}
    result = mock_action(finetune_watch, args).run(task_vars={"inventory_hostname": "node1"})
    assert result["msg"] == (
        "node1: watching job tiny-sft through Slurm, but the status options of node2 say launcher systemd. Give "
        "every rank launcher slurm, or none. See docs/runbooks/finetune-job.md"
    )
