"""instinct-gpu-collector, the installed console script run as the node's timer runs it, with
amd-smi and rocm-smi stood in for by scripts that print the real recordings (or fail): see
``GpuNode`` in node_tools/tests/conftest.py."""

import os
import re

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
