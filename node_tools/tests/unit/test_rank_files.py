"""What root reads of the training account's folders (instinct_node_tools.rank_files): the pattern
walked one component at a time without following a link, the owner, link count, kind and size of
every file, and the labels a rank file may carry. The collector's own tests (test_gpu_collector.py)
run the installed console script on the same cases as the timer runs it."""

import os

import pytest

from instinct_node_tools import exposition, progress, rank_files


def rank_line(job, rank, step=9):
    return f'instinct_finetune_step{{finetune_job="{job}",rank="{rank}",local_rank="0",node_rank="0"}} {step}\n'


@pytest.fixture
def jobs(tmp_path):
    """A jobs folder with job a's metrics folder."""
    folder = tmp_path / "jobs"
    (folder / "a" / "metrics").mkdir(parents=True)
    return folder


def pattern(jobs):
    return str(jobs / "*" / "metrics" / "rank*.prom")


def this_account():
    """The training account of these tests: whoever runs them (their files are its files)."""
    import pwd  # noqa: PLC0415 - only here

    return pwd.getpwuid(os.geteuid()).pw_name


def test_the_pattern_splits_at_its_first_wildcard():
    assert rank_files._split("/var/lib/instinct-finetune/jobs/*/metrics/rank*.prom") == (
        "/var/lib/instinct-finetune/jobs",
        ["*", "metrics", "rank*.prom"],
    )
    # Without a wildcard the last component is still a name opened without following a link.
    assert rank_files._split("/srv//m/rank0.prom") == ("/srv/m", ["rank0.prom"])
    assert rank_files._split("jobs/*/rank*.prom") == ("jobs", ["*", "rank*.prom"])
    assert rank_files._split("rank*.prom") == (".", ["rank*.prom"])


def test_good_files_are_read_and_what_glob_skips_is_skipped(jobs):
    metrics = jobs / "a" / "metrics"
    (metrics / "rank0.prom").write_text(rank_line("a", 0))
    (metrics / "rank1.prom").write_text(rank_line("a", 1))
    (metrics / ".rank2.prom").write_text(rank_line("a", 2))  # hidden: glob skips it too
    (metrics / "rank0.prom.1234.5678").write_text("half written")  # prometheus_client's temp name
    (jobs / "README").write_text("a file beside the job folders")  # matches *, is no folder: skipped
    (jobs / "b").mkdir()  # a job folder without metrics
    files, problems = rank_files.read(pattern(jobs), rank_files.Owners(this_account()))
    assert [path for path, _text in files] == [f"{metrics}/rank0.prom", f"{metrics}/rank1.prom"]
    assert files[0][1] == rank_line("a", 0)
    assert problems == []
    # No jobs folder yet: nothing, and nothing to say.
    assert rank_files.read(str(jobs / "none" / "*" / "rank*.prom"), rank_files.Owners("root")) == ([], [])


def test_no_link_is_followed_at_any_level(jobs, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "metrics").mkdir(parents=True)
    (elsewhere / "metrics" / "rank0.prom").write_text(rank_line("l", 0))
    (jobs / "l").symlink_to(elsewhere)  # a job folder that is a link
    (jobs / "m").mkdir()
    (jobs / "m" / "metrics").symlink_to(elsewhere / "metrics")  # a metrics folder that is a link
    (jobs / "a" / "metrics" / "rank0.prom").symlink_to(elsewhere / "metrics" / "rank0.prom")
    files, problems = rank_files.read(pattern(jobs), rank_files.Owners(this_account()))
    assert files == []
    assert problems == [
        f"{jobs}/a/metrics/rank0.prom: a link (to {elsewhere}/metrics/rank0.prom), not followed",
        f"{jobs}/l: a link (to {elsewhere}), not followed",
        f"{jobs}/m/metrics: a link (to {elsewhere}/metrics), not followed",
    ]


def test_a_folder_swapped_for_a_link_after_it_was_looked_at_is_not_entered(jobs, tmp_path, monkeypatch):
    """The stat that tells a link from a folder and the open are two calls: the open refuses a link
    itself (O_NOFOLLOW), so a swap between them gets nowhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "rank0.prom").write_text(rank_line("a", 0))
    metrics = jobs / "a" / "metrics"
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        found = real_stat(path, *args, **kwargs)
        if path == "metrics":
            metrics.rmdir()
            metrics.symlink_to(elsewhere)
        return found

    monkeypatch.setattr(rank_files.os, "stat", stat_then_swap)
    files, problems = rank_files.read(pattern(jobs), rank_files.Owners(this_account()))
    assert files == []
    assert problems == [f"{metrics}: cannot open it: Not a directory"]


def test_fifos_hard_links_and_oversized_files_are_refused(jobs, tmp_path):
    metrics = jobs / "a" / "metrics"
    os.mkfifo(metrics / "rank0.prom")
    other = tmp_path / "other.prom"
    other.write_text(rank_line("a", 1))
    os.link(other, metrics / "rank1.prom")
    (metrics / "rank2.prom").write_text("#" * (rank_files.MAX_BYTES + 1))
    (metrics / "rank3.prom").write_text("#" * rank_files.MAX_BYTES)  # at the cap: read
    files, problems = rank_files.read(pattern(jobs), rank_files.Owners(this_account()))
    assert [path for path, _text in files] == [f"{metrics}/rank3.prom"]
    assert problems == [
        f"{metrics}/rank0.prom: a FIFO, not a regular file",
        f"{metrics}/rank1.prom: 2 hard links: it may be another file than the rank's",
        f"{metrics}/rank2.prom: {rank_files.MAX_BYTES + 1} bytes, more than a rank file's {rank_files.MAX_BYTES}",
    ]


def test_past_the_cap_on_files_the_rest_are_named_not_read(jobs, monkeypatch):
    monkeypatch.setattr(rank_files, "MAX_FILES", 2)
    metrics = jobs / "a" / "metrics"
    for rank in range(3):
        (metrics / f"rank{rank}.prom").write_text(rank_line("a", rank))
    files, problems = rank_files.read(pattern(jobs), rank_files.Owners(this_account()))
    assert len(files) == 2
    assert problems == [f"{metrics}/rank2.prom: not read: more than 2 rank files on the node"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another account (chown) needs root")
def test_a_rank_file_of_any_account_but_the_training_one_is_refused_roots_included(jobs):
    """Root's file in the account's folder (review of issue 32: it was read) and another account's are
    refused; the folders above them may be root's."""
    metrics = jobs / "a" / "metrics"
    os.chown(metrics, 34567, -1)
    (metrics / "rank0.prom").write_text(rank_line("a", 0))
    (metrics / "rank1.prom").write_text(rank_line("a", 1))
    (metrics / "rank2.prom").write_text(rank_line("a", 2))
    os.chown(metrics / "rank1.prom", 34567, -1)
    os.chown(metrics / "rank2.prom", 45678, -1)
    files, problems = rank_files.read(pattern(jobs), owners_of(34567))
    assert [path for path, _text in files] == [str(metrics / "rank1.prom")]
    assert problems == [
        f"{metrics}/rank0.prom: owned by uid 0 (root), not by the training account trainer (uid 34567), "
        "which the ranks run as",
        f"{metrics}/rank2.prom: owned by uid 45678, not by the training account trainer (uid 34567), "
        "which the ranks run as",
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another account (chown) needs root")
def test_a_folder_of_another_account_is_refused(jobs):
    metrics = jobs / "a" / "metrics"
    (metrics / "rank0.prom").write_text(rank_line("a", 0))
    os.chown(metrics, 45678, -1)
    files, problems = rank_files.read(pattern(jobs), owners_of(34567))
    assert files == []
    assert problems == [f"{metrics}: owned by uid 45678, neither the training account trainer (uid 34567) nor root"]


def owners_of(uid):
    """The Owners of a training account "trainer" of this uid, which this machine lacks."""
    owners = rank_files.Owners("no-such-account-here")
    owners.account, owners.training_uid, owners.uids = "trainer", uid, {0, uid}
    return owners


def test_a_rank_file_speaks_for_its_job_and_rank_only():
    assert rank_files.expected_labels("/j/my-job.v2/metrics/rank12.prom") == {"finetune_job": "my-job.v2", "rank": "12"}
    assert rank_files.expected_labels("/j/a/metrics/rank-x.prom") is None
    assert rank_files.expected_labels("/j/a/metrics/rank.prom") is None


def test_collect_merges_the_samples_each_file_may_carry_and_says_what_it_dropped(jobs):
    metrics = jobs / "a" / "metrics"
    (metrics / "rank0.prom").write_text(rank_line("a", 0, 5) + rank_line("a", 1, 6))
    (metrics / "rank1.prom").write_text(rank_line("a", 1, 7))
    (metrics / "rank-x.prom").write_text(rank_line("a", 0, 8))
    merged, problems = rank_files.collect(pattern(jobs), this_account())
    assert merged == [
        ("instinct_finetune_step", {"finetune_job": "a", "rank": "0", "local_rank": "0", "node_rank": "0"}, 5),
        ("instinct_finetune_step", {"finetune_job": "a", "rank": "1", "local_rank": "0", "node_rank": "0"}, 7),
    ]
    assert problems == [
        f"{metrics}/rank-x.prom: not read: not a rank file's name (rank<N>.prom)",
        f"{metrics}/rank0.prom: dropped samples whose rank is not '0': '1'",
    ]


def test_sift_never_logs_what_a_refused_file_holds():
    # prometheus_client's own error quotes the line ("could not convert string to float: 'HF_TOKEN=...'").
    kept, dropped = exposition.sift("export HF_TOKEN=hf_secretvalue\n", progress.METRICS, progress.LABELS)
    assert kept == []
    assert dropped == ["dropped the whole file: it is not in the Prometheus text format (its content is not logged)"]


def test_sift_names_at_most_a_few_of_many_dropped_metrics_and_cuts_long_ones():
    text = "".join(f"injected_{n} 1\n" for n in range(1000)) + "x" * 500 + " 1\n"
    kept, dropped = exposition.sift(text, progress.METRICS, progress.LABELS)
    assert kept == []
    (line,) = dropped
    assert line.startswith("dropped metrics that are not progress metrics: 'injected_0', 'injected_1'")
    assert line.endswith(" and 996 more")
    assert len(line) < 200
    (line,) = exposition.sift("x" * 500 + " 1\n", progress.METRICS, progress.LABELS)[1]
    assert "x" * exposition.SHOWN_CHARS + "..." in line and "x" * (exposition.SHOWN_CHARS + 1) not in line


def test_sift_keeps_a_series_once_and_says_it_was_given_twice():
    kept, dropped = exposition.sift(
        rank_line("a", 0, 1) + rank_line("a", 0, 2), progress.METRICS, progress.LABELS, {"finetune_job": "a"}
    )
    assert [value for _name, _labels, value in kept] == [1]
    assert dropped == ["dropped series given twice (the first kept): 'instinct_finetune_step'"]
