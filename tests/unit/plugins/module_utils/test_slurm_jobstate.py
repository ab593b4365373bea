"""A fine-tune job launched through Slurm in the collection's node states (issue 35): Slurm's view of
the job from the recorded sacct outputs of tests/fixtures/slurm (SOURCES.md), read as they are, and
squeue lines in the collection's format built from the recorded squeue tables' values (no public
recording of that format exists), as test_slurm.py's tests of that format do."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import plan_launch, watch_decision, watch_entry
from ansible_collections.instinct.finetune.plugins.module_utils.slurm import SlurmError, job_status
from ansible_collections.instinct.finetune.plugins.module_utils.slurm_jobstate import (
    pending_label,
    pending_lines,
    slurm_node_state,
    slurm_summary,
)
from tests.unit.conftest import FIXTURES

SLURM = FIXTURES / "slurm"
SUCCESS = {"result": "success", "code": "exited", "status": "0", "at": "1796273181.5"}
FAILURE = {"result": "exit-code", "code": "exited", "status": "1", "at": "1796273101.3"}
FP = "14cec2609bbd0aa6 world_size=2"


def text(name):
    return (SLURM / name).read_text()


def sacct(job_id, name):
    return job_status(job_id, sacct_text=text(name))


# squeue_hummingbird-ucsc-2025 (403035, 403040 PD; 424906 R) and squeue-l_orfeo-areasciencepark-2026
# (889393 PENDING BeginTime, 10:00), in slurm.SQUEUE_FORMAT; time limits the plain table lacks are UNLIMITED.
PENDING = job_status("403035", squeue_text="403035|PENDING|Resources|1||0:00|UNLIMITED|pyscf\n")
BEGIN_TIME = job_status("889393", squeue_text="889393|PENDING|BeginTime|1||0:00|10:00|lora-tra\n")
RUNNING = job_status("424906", squeue_text="424906|RUNNING|None|2|hbnode-[38-39]|1:24:22|UNLIMITED|qe\n")


@pytest.mark.parametrize("status", [PENDING, BEGIN_TIME, RUNNING])
def test_pending_and_active_are_running_whatever_the_exit_record_says(status):
    for record in (None, SUCCESS, FAILURE):
        assert slurm_node_state(status, record, FP, FP) == ("running", "")


def test_a_job_that_did_not_succeed_is_failed_with_slurms_account():
    for job_id, name in (
        ("4904689", "sacct-P_frontier-mi250x_32node-FAILED-137_step-CANCELLED-sig9.txt"),
        ("4979526", "sacct-P_frontier-mi250x_2node-FAILED-90_step-OUT_OF_MEMORY.txt"),
        ("67", "sacct-P_hpc-client-lab_CANCELLED-by-1000.txt"),
        ("239024", "sacct-P_cluster-utils-issue-87_COMPLETED_steps-CANCELLED-sig10.txt"),
    ):
        status = sacct(job_id, name)
        assert slurm_node_state(status, SUCCESS, FP, FP) == ("failed", status["message"])


def test_a_completed_job_is_the_exit_record_as_for_a_unit_that_ended():
    status = sacct("4908935", "sacct-P_frontier-mi250x_256node-COMPLETED.txt")
    assert status["success"] is True
    assert slurm_node_state(status, SUCCESS, FP, FP) == ("succeeded", "")
    assert slurm_node_state(status, SUCCESS, FP, "0123456789abcdef world_size=2")[0] == "stale"
    assert slurm_node_state(status, FAILURE, FP, FP) == ("failed", "")
    assert slurm_node_state(status, None, FP, FP) == (
        "failed",
        "Slurm job 4908935 ended COMPLETED with exit code 0, but this node's rank left no exit record",
    )


def test_never_submitted_or_forgotten_is_the_exit_record_as_for_a_unit_not_active():
    assert slurm_node_state(None, None, "", FP) == ("absent", "")
    assert slurm_node_state(None, SUCCESS, FP, FP) == ("succeeded", "")
    assert slurm_node_state(None, FAILURE, FP, FP) == ("failed", "")
    forgotten = job_status("4242", squeue_text="", sacct_text="JobID|JobName|State\n")
    assert slurm_node_state(forgotten, SUCCESS, FP, FP) == ("succeeded", "")
    assert slurm_node_state(forgotten, None, FP, FP) == (
        "absent",
        "Slurm job 4242 is known to neither squeue nor sacct",
    )


def test_a_state_this_collection_does_not_know_is_refused():
    # job_state keeps a word it does not know as it is (a later Slurm's state).
    status = dict(RUNNING, state="SOMETHING_NEW", phase="unknown")
    with pytest.raises(SlurmError, match="SOMETHING_NEW, a state this collection does not know"):
        slurm_node_state(status, None, FP, FP)


def test_a_pending_job_is_never_submitted_twice_by_the_plan():
    """The plan reads a pending job as running: attach on every node, never a second launch."""
    statuses = {host: {"state": slurm_node_state(PENDING, None, FP, FP)[0], "fingerprint": FP, "checkpoints": []}
                for host in ("node1", "node2")}  # fmt: skip
    assert plan_launch(statuses, ["node1", "node2"], FP)["action"] == "attach"


def test_the_summary_the_module_returns():
    summary = slurm_summary(PENDING, "mi300")
    assert summary == {
        "job_id": "403035", "cluster": "mi300", "state": "PENDING", "phase": "pending", "reason": "Resources",
        "held": False, "cancelled_by": None, "exit_code": None, "signal": None, "failed_steps": [], "hosts": [],
        "elapsed_s": 0, "source": "squeue", "message": "Slurm job 403035 is PENDING (Resources)",
    }  # fmt: skip
    never = slurm_summary(None, id_file="/var/lib/x/slurm-job-id")
    assert (never["job_id"], never["phase"], never["state"], never["held"]) == (None, "unknown", None, False)
    assert never["message"] == "no Slurm job id in /var/lib/x/slurm-job-id: the job was never submitted from this node"


def test_how_a_pending_rank_reads_in_the_progress_line():
    assert pending_label(slurm_summary(PENDING)) == "pending (Resources)"
    assert pending_label(slurm_summary(BEGIN_TIME)) == "pending (BeginTime)"
    held = job_status("4990002", squeue_text="4990002|PENDING|JobHeldAdmin|2||0:00|UNLIMITED|x\n")
    assert pending_label(held) == "pending (JobHeldAdmin)"  # the reason says it is held
    assert pending_label(dict(held, reason="BeginTime")) == "pending (BeginTime), held"
    requeued = job_status("4990003", squeue_text="4990003|REQUEUE_HOLD|JobHeldUser|2||0:00|UNLIMITED|x\n")
    assert pending_label(requeued) == "pending (REQUEUE_HOLD, JobHeldUser)"
    assert pending_label(dict(slurm_summary(PENDING), reason=None)) == "pending"
    assert pending_label(slurm_summary(RUNNING)) == "" and pending_label(None) == ""


def test_pending_lines_relabel_the_watchs_lines_of_pending_ranks_only():
    ranks = ["node1", "node2"]
    reads = {"node1": {"state": "running", "progress": {}, "idle_seconds": None, "frozen": [], "exit": None},
             "node2": {"state": "running", "progress": {"current_steps": 3, "total_steps": 40},
                       "idle_seconds": 12.0, "frozen": [], "exit": None}}  # fmt: skip
    board = {host: watch_entry(None, read, 1000.0, 1000.0, 300) for host, read in reads.items()}
    decision = watch_decision(board, ranks, stall_seconds=1)
    # A pending rank has no idle time: the job is not stalled however long it waits.
    assert decision["stall"] is None and decision["stop"] == []
    reports = {host: entry["report"] for host, entry in board.items()}
    lines = pending_lines(decision["lines"], ranks, reports,
                          {"node1": slurm_summary(PENDING), "node2": slurm_summary(RUNNING)})  # fmt: skip
    assert lines == ["rank 0 node1: pending (Resources), no step logged yet", "rank 1 node2: running, step 3/40"]
    # A rank the board has as failed keeps its line, whatever its last Slurm view said.
    reports["node1"] = dict(reports["node1"], state="failed")
    failed_line = ["rank 0 node1: failed, no step logged yet"]
    assert pending_lines(failed_line, ranks[:1], reports, {"node1": slurm_summary(PENDING)}) == failed_line
