"""The fine-tune ranks' progress export (instinct_node_tools.progress) and the instinct-progress
console script the training unit runs around each launch."""

import re
import stat

import pytest

from instinct_node_tools import progress as progress_module

Progress = progress_module.Progress

LABELS = {"finetune_job": "tiny", "rank": "1", "local_rank": "0", "node_rank": "1"}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def values(text):
    return {name: float(value) for name, value in re.findall(r"^(\w+)\{[^}]*\} (\S+)$", text, re.M)}


def test_a_rank_reports_step_loss_and_its_share_of_the_tokens_per_second():
    clock = Clock()
    progress = Progress(LABELS, world_size=2, clock=clock)
    progress.begin(global_step=0, max_steps=40, tokens_seen=0)
    clock.now = 1010.0
    progress.step(global_step=1, epoch=0.05, tokens_seen=4000)
    progress.log({"loss": 6.5, "learning_rate": 0.002, "epoch": 0.05})
    text = progress.render()
    got = values(text)
    assert got["instinct_finetune_running"] == 1
    assert got["instinct_finetune_step"] == 1 and got["instinct_finetune_total_steps"] == 40
    assert got["instinct_finetune_loss"] == 6.5 and got["instinct_finetune_learning_rate"] == 0.002
    # 4000 tokens of the whole job in 10 s, shared by 2 ranks.
    assert got["instinct_finetune_tokens_per_second"] == 200
    assert got["instinct_finetune_last_step_timestamp_seconds"] == 1010
    assert 'instinct_finetune_step{finetune_job="tiny",local_rank="0",node_rank="1",rank="1"} 1.0' in text

    clock.now = 1015.0
    progress.step(global_step=2, epoch=0.1, tokens_seen=6000)
    progress.log({"eval_loss": 5.9})
    progress.end()
    got = values(progress.render())
    assert got["instinct_finetune_tokens_per_second"] == 200  # 2000 tokens in 5 s over 2 ranks
    assert got["instinct_finetune_eval_loss"] == 5.9 and got["instinct_finetune_loss"] == 6.5
    assert got["instinct_finetune_running"] == 0 and got["instinct_finetune_input_tokens_total"] == 6000


def test_a_resumed_rank_starts_from_its_global_step_and_skips_the_rate_without_token_counts():
    progress = Progress(LABELS, world_size=2, clock=Clock())
    progress.begin(global_step=25, max_steps=400, tokens_seen=0)
    progress.step(global_step=26, epoch=None, tokens_seen=0)
    got = values(progress.render())
    assert got["instinct_finetune_step"] == 26
    assert "instinct_finetune_tokens_per_second" not in got and "instinct_finetune_epoch" not in got


def test_labels_are_required_and_escaped():
    with pytest.raises(ValueError, match="node_rank"):
        Progress({"finetune_job": "x", "rank": "0", "local_rank": "0"}, world_size=1)
    progress = Progress(dict(LABELS, finetune_job='a"b'), world_size=1, clock=Clock())
    progress.begin(0, 1, 0)
    assert 'finetune_job="a\\"b"' in progress.render()


def test_the_file_is_replaced_whole_and_readable_by_the_collector(tmp_path):
    path = tmp_path / "rank0.prom"
    progress = Progress(LABELS, world_size=2, clock=Clock())
    progress.begin(1, 40, 0)
    progress.write(str(path))
    progress.step(2, None, 0)
    progress.write(str(path))
    assert path.read_text() == progress.render()
    assert values(path.read_text())["instinct_finetune_step"] == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["rank0.prom"]  # no temporary file left beside it


def test_after_a_launch_every_rank_file_says_it_no_longer_runs(node_tools, tmp_path):
    """What the unit's ExecStopPost runs (the installed instinct-progress): a killed rank's file
    still said running 1."""
    for rank, running in ((0, 1), (1, 0)):
        progress = Progress(dict(LABELS, rank=str(rank)), world_size=2, clock=Clock())
        progress.begin(10, 40, 0)
        if not running:
            progress.end()
        progress.write(str(tmp_path / f"rank{rank}.prom"))
    (tmp_path / "notes.txt").write_text("instinct_finetune_running 1\n")
    done = node_tools.run("instinct-progress", "stopped", tmp_path)
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        got = values((tmp_path / f"rank{rank}.prom").read_text())
        assert got["instinct_finetune_running"] == 0 and got["instinct_finetune_step"] == 10
    assert (tmp_path / "notes.txt").read_text() == "instinct_finetune_running 1\n"
    done = node_tools.run("instinct-progress", "clear", tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_script_refuses_an_unknown_action_and_skips_a_missing_folder(node_tools, tmp_path):
    done = node_tools.run("instinct-progress", "remove", tmp_path)
    assert done.returncode != 0 and "usage: instinct-progress stopped|clear FOLDER" in done.stderr
    # The unit's ExecStopPost runs before the job ever wrote its metrics folder.
    done = node_tools.run("instinct-progress", "stopped", tmp_path / "absent")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "absent").exists()
