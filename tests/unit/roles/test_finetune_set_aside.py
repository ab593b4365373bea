"""The set-aside step of the finetune role (roles/finetune/tasks/set-aside.yml) through ansible-playbook on
a local node (issue 32): a fresh start of a job whose checkpoints not every node has moves its output
folder aside, and keeps only the newest finetune_set_aside_keep set-aside folders of the job: before,
every such start left one more folder on the node for good. Another job's folders are not touched."""

import os
import pwd

import pytest

from tests.unit.conftest import role_step_playbook, run_local_play

JOB = "tiny"


def set_aside(tmp_path, keep):
    job = tmp_path / "jobs" / JOB
    (job / "output" / "checkpoint-20").mkdir(parents=True)
    (job / "output" / "checkpoint-20" / "rank0.pt").write_text("rank 0's only copy")
    for stamp in ("20261201T000000", "20261202T000000", "20261203T000000"):
        (job / f"output.set-aside-{stamp}").mkdir()
    # A link among them: listed as a link, never a folder, so never followed or removed as one.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep-me").write_text("not the job's")
    (job / "output.set-aside-20261130T000000").symlink_to(outside)
    other = tmp_path / "jobs" / "other"
    (other / "output.set-aside-20261101T000000").mkdir(parents=True)
    playbook = tmp_path / "play.yml"
    playbook.write_text(role_step_playbook("finetune", "set-aside.yml", "Set aside the job's checkpoints"))
    proc = run_local_play(playbook, {
        "instinct_user": pwd.getpwuid(os.geteuid()).pw_name, "finetune_job_name": JOB,
        "finetune_root": str(tmp_path / "jobs"), "finetune_set_aside_keep": keep,
    })  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return job, other, outside


@pytest.mark.parametrize("keep", [1, 2, 0])
def test_the_output_is_set_aside_and_only_the_newest_set_aside_folders_are_kept(tmp_path, keep):
    job, other, outside = set_aside(tmp_path, keep)
    assert not (job / "output").exists()
    folders = sorted(path.name for path in job.iterdir() if path.is_dir() and not path.is_symlink())
    kept = max(keep, 1)  # the one just set aside is always kept
    assert len(folders) == kept, folders
    newest = folders[-1]
    assert newest > "output.set-aside-20261203T000000"  # the one this run set aside
    assert (job / newest / "checkpoint-20" / "rank0.pt").read_text() == "rank 0's only copy"
    if kept == 2:
        assert folders[0] == "output.set-aside-20261203T000000"
    assert (job / "output.set-aside-20261130T000000").is_symlink() and (outside / "keep-me").exists()
    assert (other / "output.set-aside-20261101T000000").is_dir()
