"""instinct-gpu-collector, the installed console script run as the node's timer runs it, with
amd-smi and rocm-smi stood in for by scripts that print the real recordings (or fail): see
``GpuNode`` in node_tools/tests/conftest.py."""

import os
import pwd
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.instinct.finetune.plugins.module_utils.gpu_metrics import textfile_summary


def value(text, line_start):
    """The value of the one sample line that starts with ``line_start`` (name and labels)."""
    (match,) = re.findall(rf"^{re.escape(line_start)} (\S+)$", text, re.M)
    return float(match)


def samples(text):
    """{(name, frozenset(labels)): value} of an exposition text, read by prometheus_client's parser."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_failing_amd_smi_falls_back_to_rocm_smi_then_to_the_last_good_sample(gpu_node):
    amd_smi = gpu_node.tool("amd-smi", 'echo "AMDSMI_STATUS_NOT_INIT: driver not initialized" >&2; exit 1\n')
    rocm_smi = gpu_node.recorded_rocm_smi()

    log, text = gpu_node.collect(rocm_smi, amd_smi)
    assert value(text, "instinct_gpu_collector_up") == 1
    assert value(text, "instinct_gpu_collector_stale") == 0
    assert value(text, "instinct_gpu_count") == 8
    assert value(text, 'instinct_gpu_temperature_celsius{gpu="6",sensor="junction"}') == 45
    assert value(text, 'instinct_gpu_collector_source_info{tool="rocm-smi"}') == 1
    # Why amd-smi was passed over is logged once...
    assert "AMDSMI_STATUS_NOT_INIT" in log
    log, text = gpu_node.collect(rocm_smi, amd_smi)
    assert log == ""  # ...not on every tick.

    good_at = value(text, "instinct_gpu_collector_last_success_timestamp_seconds")
    broken = gpu_node.tool(
        "rocm-smi-broken", 'echo "ERROR:root:Driver not initialized (amdgpu not found in modules)" >&2; exit 1\n'
    )
    log, text = gpu_node.collect(broken, amd_smi)
    assert value(text, "instinct_gpu_collector_up") == 0
    assert value(text, "instinct_gpu_collector_stale") == 1
    assert value(text, "instinct_gpu_collector_last_success_timestamp_seconds") == good_at
    assert value(text, 'instinct_gpu_power_watts{gpu="4"}') == 160
    assert "no tool could read the GPUs (keeping the last good sample, marked stale)" in log
    assert "amdgpu not found in modules" in log
    # What the run's summary reads of the node's textfile (module_utils, controller side).
    assert textfile_summary(text) == {"up": False, "stale": True, "source": "rocm-smi", "gpus": 8, "expected": 8}

    log, text = gpu_node.collect(rocm_smi, amd_smi)
    assert value(text, "instinct_gpu_collector_stale") == 0
    assert value(text, "instinct_gpu_collector_last_success_timestamp_seconds") > good_at
    assert textfile_summary(text) == {"up": True, "stale": False, "source": "rocm-smi", "gpus": 8, "expected": 8}


def test_without_any_tool_and_no_past_sample_only_the_collector_state_is_written(gpu_node):
    log, text = gpu_node.collect(gpu_node.missing("no-rocm-smi"), gpu_node.missing("no-amd-smi"))
    assert "no good sample yet" in log and "is not installed" in log
    assert value(text, "instinct_gpu_collector_up") == 0
    assert value(text, "instinct_gpu_expected_count") == 8
    assert "instinct_gpu_temperature_celsius" not in text


def test_the_ranks_progress_files_are_merged_and_removed_with_them(gpu_node):
    rocm_smi = gpu_node.recorded_rocm_smi()
    metrics = gpu_node.jobs / "a" / "metrics"
    for rank in (0, 1):
        (metrics / f"rank{rank}.prom").write_text(
            "# HELP instinct_finetune_step Optimizer steps done (global step).\n"
            "# TYPE instinct_finetune_step gauge\n"
            f'instinct_finetune_step{{finetune_job="a",rank="{rank}",local_rank="0",node_rank="{rank}"}} 9\n'
        )
    gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"))
    merged = (gpu_node.textfile / "instinct_finetune.prom").read_text()
    assert merged.count("# TYPE instinct_finetune_step gauge") == 1
    assert merged.count("instinct_finetune_step{") == 2
    labels = [{"finetune_job": "a", "rank": str(rank), "local_rank": "0", "node_rank": str(rank)} for rank in (0, 1)]
    assert samples(merged) == {("instinct_finetune_step", frozenset(each.items())): 9 for each in labels}
    for path in metrics.iterdir():
        path.unlink()
    gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"))
    assert not (gpu_node.textfile / "instinct_finetune.prom").exists()


def test_with_amds_exporter_serving_the_gpus_only_the_expected_count_is_written(gpu_node):
    rocm_smi = gpu_node.recorded_rocm_smi()
    gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"))
    log, text = gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"), "--skip-gpus")
    assert log == ""
    assert [line for line in text.splitlines() if not line.startswith("#")] == ["instinct_gpu_expected_count 8.0"]


def test_root_reads_no_link_fifo_oversized_or_undecodable_rank_file(gpu_node, tmp_path):
    """The metrics folder belongs to the training account; the collector runs as root. A link to a
    root-only file, a FIFO, a huge file and bytes that are not UTF-8 must neither leak, hang nor stop the
    merge: the well-formed rank still gets through."""
    rocm_smi = gpu_node.recorded_rocm_smi()
    metrics = gpu_node.jobs / "a" / "metrics"
    good = 'instinct_finetune_step{finetune_job="a",rank="0",local_rank="0",node_rank="0"} 9\n'
    (metrics / "rank0.prom").write_text("# TYPE instinct_finetune_step gauge\n" + good)
    secret = tmp_path / "secrets.env"
    secret.write_text('instinct_finetune_step{finetune_job="a",rank="1",local_rank="0",node_rank="0"} 77\n')
    (metrics / "rank1.prom").symlink_to(secret)
    os.mkfifo(metrics / "rank2.prom")
    (metrics / "rank3.prom").write_bytes(b"instinct_finetune_step" + b"\xff\xfe" * 10 + b" 1\n")
    (metrics / "rank4.prom").write_text("#" * (2 << 20))
    said, _gpu = gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"))
    merged = (gpu_node.textfile / "instinct_finetune.prom").read_text()
    rank0 = {"finetune_job": "a", "rank": "0", "local_rank": "0", "node_rank": "0"}
    assert samples(merged) == {("instinct_finetune_step", frozenset(rank0.items())): 9}
    assert "77" not in merged
    assert "rank1.prom" in said and "rank2.prom" in said and "rank4.prom" in said, said


def rank_line(job, rank, step, name="instinct_finetune_step"):
    return f'{name}{{finetune_job="{job}",rank="{rank}",local_rank="0",node_rank="0"}} {step}\n'


def rank_labels(job, rank):
    return frozenset({"finetune_job": job, "rank": str(rank), "local_rank": "0", "node_rank": "0"}.items())


def test_a_linked_rank_file_or_metrics_folder_leaks_no_secret(gpu_node, tmp_path):
    """Issue 32, finding 4, as reproduced: the training account links rank0.prom to a root-only file
    holding the job's token; before, root copied its `export HF_TOKEN=...` line into the
    world-readable textfile. A linked metrics folder (glob follows those) is the same attack."""
    rocm_smi = gpu_node.recorded_rocm_smi()
    secret = tmp_path / "secrets.env"
    secret.write_text("export HF_TOKEN=hf_leakedTOKENvalue\n")
    secret.chmod(0o600)
    (gpu_node.jobs / "a" / "metrics" / "rank0.prom").symlink_to(secret)
    # A root-only folder of well-formed progress lines, behind job b's metrics folder.
    hidden = tmp_path / "root-only"
    hidden.mkdir(mode=0o700)
    (hidden / "rank0.prom").write_text(rank_line("b", 0, 41))
    (gpu_node.jobs / "b").mkdir()
    (gpu_node.jobs / "b" / "metrics").symlink_to(hidden)
    (gpu_node.jobs / "c" / "metrics").mkdir(parents=True)
    (gpu_node.jobs / "c" / "metrics" / "rank0.prom").write_text(rank_line("c", 0, 9))

    said, _gpu = gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"))
    merged = (gpu_node.textfile / "instinct_finetune.prom").read_text()
    assert samples(merged) == {("instinct_finetune_step", rank_labels("c", 0)): 9}
    assert "hf_leakedTOKENvalue" not in merged and "HF_TOKEN" not in merged
    # The journal says what was refused, and never what a refused file holds.
    assert f"{gpu_node.jobs}/a/metrics/rank0.prom: a link (to {secret}), not followed" in said, said
    assert f"{gpu_node.jobs}/b/metrics: a link (to {hidden}), not followed" in said, said
    assert "hf_leakedTOKENvalue" not in said


def test_a_hard_link_to_another_file_is_not_read(gpu_node, tmp_path):
    """A hard link is no symlink (O_NOFOLLOW does not see it): a rank file with a second name may be
    any file of the same filesystem, so a rank file must have exactly one."""
    rocm_smi = gpu_node.recorded_rocm_smi()
    elsewhere = tmp_path / "elsewhere.prom"
    elsewhere.write_text(rank_line("a", 1, 77))
    os.link(elsewhere, gpu_node.jobs / "a" / "metrics" / "rank1.prom")
    (gpu_node.jobs / "a" / "metrics" / "rank0.prom").write_text(rank_line("a", 0, 9))
    said, _gpu = gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"))
    merged = (gpu_node.textfile / "instinct_finetune.prom").read_text()
    assert samples(merged) == {("instinct_finetune_step", rank_labels("a", 0)): 9}
    assert "rank1.prom: 2 hard links" in said, said


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another account (chown) needs root")
def test_only_the_training_accounts_files_in_its_or_roots_folders_are_read(gpu_node):
    rocm_smi = gpu_node.recorded_rocm_smi()
    metrics = gpu_node.jobs / "a" / "metrics"
    training = pwd.getpwnam("nobody").pw_uid  # the training account of this test
    stranger = 23456  # any other account
    for rank, owner in ((0, training), (1, 0), (2, stranger)):
        path = metrics / f"rank{rank}.prom"
        path.write_text(rank_line("a", rank, 10 + rank))
        os.chown(path, owner, -1)
    # A job folder another account made (in a jobs folder it can write to) is not entered at all.
    foreign = gpu_node.jobs / "f" / "metrics"
    foreign.mkdir(parents=True)
    (foreign / "rank0.prom").write_text(rank_line("f", 0, 5))
    os.chown(gpu_node.jobs / "f", stranger, -1)

    said, _gpu = gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"), "--training-user", "nobody")
    merged = (gpu_node.textfile / "instinct_finetune.prom").read_text()
    # rank1.prom is root's: the ranks run as the training account, so root's file in its folder was
    # put there by something else (it was read before the review of issue 32).
    assert samples(merged) == {("instinct_finetune_step", rank_labels("a", 0)): 10}
    not_training = f"not by the training account nobody (uid {training}), which the ranks run as"
    assert f"{metrics}/rank1.prom: owned by uid 0 (root), {not_training}" in said, said
    assert f"{metrics}/rank2.prom: owned by uid {stranger}, {not_training}" in said, said
    owners = f"owned by uid {stranger}, neither the training account nobody (uid {training}) nor root"
    assert f"{gpu_node.jobs}/f: {owners}" in said, said


def test_injected_metrics_and_another_jobs_or_ranks_samples_are_dropped_with_a_warning(gpu_node):
    """A job may write anything into its rank file: only the progress metrics with the progress
    labels get through, and only for the job and rank the file's place names; the journal says what
    was dropped, once per change."""
    rocm_smi = gpu_node.recorded_rocm_smi()
    metrics = gpu_node.jobs / "a" / "metrics"
    (metrics / "rank0.prom").write_text(
        "# TYPE instinct_finetune_step gauge\n"
        + rank_line("a", 0, 9)
        # Another textfile's metric (the GPU collector's), and one of node exporter's own.
        + "instinct_gpu_collector_up 0\n"
        + 'node_textfile_scrape_error{file="x"} 1\n'
        # Samples speaking for another job and another rank, and one with a label more.
        + rank_line("b", 0, 500)
        + rank_line("a", 7, 500)
        + 'instinct_finetune_loss{finetune_job="a",rank="0",local_rank="0",node_rank="0",x="1"} 3\n'
    )
    (metrics / "rank1.prom").write_text(rank_line("a", 1, 9))

    said, gpu = gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"))
    merged = (gpu_node.textfile / "instinct_finetune.prom").read_text()
    assert samples(merged) == {
        ("instinct_finetune_step", rank_labels("a", 0)): 9,
        ("instinct_finetune_step", rank_labels("a", 1)): 9,
    }
    assert value(gpu, "instinct_gpu_collector_up") == 1  # the GPU textfile is the collector's own
    rank0 = f"{metrics}/rank0.prom"
    assert (
        f"{rank0}: dropped metrics that are not progress metrics: 'instinct_gpu_collector_up', "
        "'node_textfile_scrape_error'" in said
    ), said
    assert f"{rank0}: dropped samples whose finetune_job is not 'a': 'b'" in said, said
    assert f"{rank0}: dropped samples whose rank is not '0': '7'" in said, said
    assert f"{rank0}: dropped samples whose labels are not exactly" in said and "instinct_finetune_loss" in said
    assert "rank1.prom" not in said
    # Once per change, not on every tick of the timer.
    said, _gpu = gpu_node.collect(rocm_smi, gpu_node.missing("no-amd-smi"))
    assert said == ""
