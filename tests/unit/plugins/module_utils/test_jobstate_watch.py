"""Watching a running job (module_utils/jobstate.py, issue 17): what a node reads of its ranks'
progress and processes, and the round that decides for the whole job, stall included."""

import os
import signal
import subprocess
import time
from pathlib import Path

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import (
    idle_seconds,
    parse_rank_progress,
    process_state,
    running_job_names,
    stall_message,
    watch_round,
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
