"""Watching a running job (module_utils/jobstate.py, issue 17): what a node reads of its ranks'
progress and processes, and the round that decides for the whole job, stall included."""

import os
import signal
import subprocess
import time
from pathlib import Path

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import (
    first_read_failure,
    idle_seconds,
    parse_rank_progress,
    process_state,
    running_job_names,
    stall_message,
    watch_decision,
    watch_entry,
    watch_round,
    watch_waiter,
)
from instinct_node_tools import progress as instinct_progress

RANKS = ["node1", "node2"]
LABELS = {"finetune_job": "sft", "rank": 1, "local_rank": 0, "node_rank": 1}


def rank_file(step, at):
    """A rank's progress file as the launcher's export writes it, after ``step`` steps, the last at ``at``."""
    clock = iter([at - 10, at])
    progress = instinct_progress.Progress(LABELS, world_size=2, clock=lambda: next(clock))
    progress.begin(0, 40, 0)
    progress.step(step, 0.5, 1000)
    return progress.render()


def running(idle, step=12, frozen=()):
    return {"state": "running", "progress": {"current_steps": step, "total_steps": 40}, "idle_seconds": idle,
            "frozen": list(frozen)}  # fmt: skip


def test_the_progress_file_the_launcher_writes_reads_back():
    samples = parse_rank_progress(rank_file(12, at=1_800_000_000.5))
    assert samples["instinct_finetune_step"] == 12
    assert samples["instinct_finetune_total_steps"] == 40
    assert samples["instinct_finetune_last_step_timestamp_seconds"] == 1_800_000_000.5
    assert samples["instinct_finetune_running"] == 1


def test_a_torn_or_foreign_progress_file_reads_as_what_it_holds():
    assert parse_rank_progress("") == {}
    assert parse_rank_progress(None) == {}
    text = '# HELP x\ninstinct_finetune_step{rank="0"} 7\ninstinct_finetune_loss{rank="0"} NaN-ish\ngarbage 1\n'
    assert parse_rank_progress(text) == {"instinct_finetune_step": 7.0}


def test_idle_counts_from_the_newest_step_of_the_nodes_ranks():
    ranks = [parse_rank_progress(rank_file(12, at=1000.0)), parse_rank_progress(rank_file(12, at=1030.0))]
    assert idle_seconds(1100.0, ranks, active_since=900.0) == 70.0


def test_idle_counts_from_the_units_start_before_the_first_step_and_after_a_relaunch():
    assert idle_seconds(1100.0, [], active_since=1090.0) == 10.0
    # A relaunch: the step marks of the previous launch are older than the unit's start.
    assert idle_seconds(1100.0, [parse_rank_progress(rank_file(5, at=500.0))], active_since=1060.0) == 40.0
    assert idle_seconds(1100.0, [], active_since=None) is None
    assert idle_seconds(1100.0, [{}], active_since=None) is None


def test_process_state_of_a_running_and_of_a_stopped_process():
    assert process_state(Path("/proc/self/stat").read_text()) == "R"
    child = subprocess.Popen(["sleep", "30"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        state = None
        while time.monotonic() < deadline and state != "T":
            state = process_state(Path(f"/proc/{child.pid}/stat").read_text())
            time.sleep(0.05)
        assert state == "T"
    finally:
        child.kill()
        child.wait()
    # A command name with spaces and parentheses, as the kernel writes it.
    assert process_state("4711 (python -u (x)) S 1 4711 4711 0 -1") == "S"
    assert process_state("") is None


def test_a_job_whose_every_rank_is_idle_past_the_window_is_stalled():
    board = {"node1": running(1805), "node2": running(1900, frozen=["4711"])}
    summary = watch_round(board, RANKS, stall_seconds=1800)
    assert summary["stall"] == {"idle_seconds": 1805, "step": 12, "suspects": ["node2"], "frozen": {"node2": ["4711"]}}
    assert summary["running"] == RANKS and summary["failed"] == []


def test_without_a_frozen_process_the_suspect_is_the_node_idle_longest():
    board = {"node1": running(1805), "node2": running(1900)}
    assert watch_round(board, RANKS, stall_seconds=1800)["stall"]["suspects"] == ["node2"]


def test_no_stall_while_any_rank_steps_or_before_the_window_or_when_turned_off():
    assert watch_round({"node1": running(5), "node2": running(4000)}, RANKS, 1800)["stall"] is None
    assert watch_round({"node1": running(1799), "node2": running(1799)}, RANKS, 1800)["stall"] is None
    assert watch_round({"node1": running(9999), "node2": running(9999)}, RANKS, 0)["stall"] is None


def test_no_stall_while_a_node_has_not_reported_or_a_rank_ended():
    summary = watch_round({"node1": running(9999)}, RANKS, 1800)
    assert summary["stall"] is None
    assert summary["lines"][1] == "rank 1 node2: starting, no step logged yet"
    ended = {"node1": running(9999), "node2": {"state": "failed", "exit": {"at": "5"}, "idle_seconds": None}}
    summary = watch_round(ended, RANKS, 1800)
    assert summary["stall"] is None and summary["failed"] == ["node2"]


def test_the_stall_message_names_the_stall_the_last_step_its_time_and_the_suspect():
    stall = watch_round({"node1": running(1805), "node2": running(1900, frozen=["4711"])}, RANKS, 1800)["stall"]
    message = stall_message(stall, "sft", 1800, "2026-12-03 17:41:05 UTC")
    assert message.startswith("job sft stalled: every rank runs but none took a step for 30.1 minutes")
    assert "(finetune_stall_minutes 30)" in message
    assert "the last step was 12 at 2026-12-03 17:41:05 UTC" in message
    assert "Suspect: node2 (node2: process 4711 stopped by a signal)" in message


def test_running_job_names_keep_the_units_systemd_still_holds():
    units = {
        "instinct-finetune-sft-7b.service": "active",
        "instinct-finetune-old.service": "inactive",
        "instinct-finetune-dying.service": "deactivating",
        "instinct-finetune-broken.service": "failed",
        "instinct-gpu-collector.service": "active",
    }
    assert running_job_names(units) == ["dying", "sft-7b"]
    assert running_job_names({}) == []


# --- One task watching every rank (issue 31) ------------------------------------------------------

THREE = ["node1", "node2", "node3"]


def read(state="running", idle=5.0, step=12):
    """What finetune_job_status returns for a rank, with the keys the board does not keep."""
    return {"changed": False, "state": state, "progress": {"current_steps": step, "total_steps": 40},
            "exit": None if state == "running" else {"result": "success", "code": "exited", "status": "0"},
            "idle_seconds": idle if state == "running" else None, "frozen": [], "log_tail": ["x"]}  # fmt: skip


UNREACHABLE = {"unreachable": True, "msg": "Failed to connect to the host via ssh: Connection timed out"}


def board_of(reads, now=1000.0, since=1000.0, lost_after=300, board=None):
    board = dict(board or {})
    for host, got in reads.items():
        board[host] = watch_entry(board.get(host), got, now, since, lost_after)
    return board


def test_a_good_read_is_kept_as_the_report_the_round_needs():
    entry = watch_entry(None, read(), 1000.0, 900.0, 300)
    assert entry == {"report": {"state": "running", "progress": {"current_steps": 12, "total_steps": 40}, "exit": None,
                                "idle_seconds": 5.0, "frozen": []},
                     "seen": 1000.0, "error": ""}  # fmt: skip


def test_a_missed_read_keeps_the_last_report_until_the_rank_is_lost():
    seen = watch_entry(None, read(), 1000.0, 900.0, 300)
    missed = watch_entry(seen, UNREACHABLE, 1200.0, 900.0, 300)
    assert missed["report"]["state"] == "running" and missed["seen"] == 1000.0
    assert missed["error"].startswith("unreachable: Failed to connect")
    lost = watch_entry(missed, UNREACHABLE, 1301.0, 900.0, 300)
    assert lost["report"]["state"] == "lost"
    assert lost["report"]["progress"]["current_steps"] == 12  # the progress line keeps its last step
    # Back before the job ended: its real state again.
    assert watch_entry(lost, read(), 1400.0, 900.0, 300) == watch_entry(None, read(), 1400.0, 900.0, 300)


def test_a_node_never_read_is_lost_counted_from_the_start_of_the_watch():
    assert watch_entry(None, UNREACHABLE, 1200.0, 1000.0, 300)["report"] is None
    assert watch_entry(None, UNREACHABLE, 1301.0, 1000.0, 300)["report"] == {"state": "lost"}


def test_a_lost_rank_stops_every_rank_that_runs_and_answers():
    lost = {"report": {"state": "lost"}, "seen": 600.0, "error": "unreachable: timed out"}
    board = dict(board_of({"node1": read(), "node2": read()}), node3=lost)
    decision = watch_decision(board, THREE, stall_seconds=1800)
    assert decision["failed"] == ["node3"]
    assert decision["stop"] == ["node1", "node2"] and decision["over"] is False
    line = "rank 2 node3: lost, no step logged yet (not read this round: unreachable: timed out)"
    assert decision["lines"][2] == line


def test_a_running_rank_that_did_not_answer_is_not_stopped_and_keeps_the_watch_going():
    board = board_of({"node1": read("failed"), "node2": read()})
    board = board_of({"node3": read()}, board=board)
    board = board_of({"node3": UNREACHABLE}, now=1100.0, board=board)
    decision = watch_decision(board, THREE, 1800)
    assert decision["failed"] == ["node1"]
    assert decision["stop"] == ["node2"]  # node3 is stopped once it answers, or counts as lost
    assert decision["running"] == ["node2", "node3"] and decision["over"] is False


def test_a_failed_rank_stops_the_others_and_the_watch_ends_once_none_runs():
    decision = watch_decision(board_of({"node1": read(), "node2": read("failed"), "node3": read()}), THREE, 1800)
    assert decision["stop"] == ["node1", "node3"] and decision["over"] is False
    ended = watch_decision(board_of({h: read("failed") for h in THREE}), THREE, 1800)
    assert ended["stop"] == [] and ended["over"] is True


def test_a_job_that_ends_on_every_node_is_over_without_a_stop():
    decision = watch_decision(board_of({h: read("succeeded") for h in THREE}), THREE, 1800)
    assert decision == dict(decision, failed=[], stop=[], over=True, stall=None)


def test_a_stall_stops_every_rank_and_holds_once_they_ended():
    stalled = watch_decision(board_of({h: read(idle=1900.0) for h in THREE}), THREE, 1800)
    assert stalled["stall"]["suspects"] == THREE and stalled["stop"] == THREE
    # The next round reads the stopped ranks as failed: the stall is still what ended the job.
    after = watch_decision(board_of({h: read("failed") for h in THREE}), THREE, 1800, stalled["stall"])
    assert after["stall"] == stalled["stall"] and after["over"] is True


def test_the_waiter_is_the_first_running_rank_that_answered():
    assert watch_waiter(THREE, {}) == "node1"  # the first round: the master
    board = board_of({"node1": read("succeeded"), "node2": read(), "node3": read()})
    assert watch_waiter(THREE, board) == "node2"
    board = board_of({"node2": UNREACHABLE}, now=1100.0, board=board)
    assert watch_waiter(THREE, board) == "node3"
    board = board_of({"node3": UNREACHABLE}, now=1100.0, board=board)
    assert watch_waiter(THREE, board) is None  # no running rank answers: the round sleeps instead


def test_a_module_that_fails_on_a_node_never_read_fails_the_watch_at_once():
    failed = {"failed": True, "msg": "systemctl show instinct-finetune-sft.service failed: Access denied"}
    reads = {"node1": read(), "node2": failed, "node3": UNREACHABLE}
    assert first_read_failure({}, reads, THREE) == ("node2", failed["msg"])
    # Once read, a failed read is a missed round (kept until the rank is lost), as an unreachable node is.
    board = board_of({h: read() for h in THREE})
    assert first_read_failure(board, reads, THREE) is None
    assert first_read_failure({}, {"node1": read(), "node2": UNREACHABLE, "node3": read()}, THREE) is None
