"""The textfiles as prometheus_client writes them (instinct_node_tools.exposition): the metric
contract, escaping, the merge of the ranks' progress files (a hostile or broken rank file included),
and what the controller's summary reads back of the GPU textfile."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.instinct.finetune.plugins.module_utils import gpu_metrics
from instinct_node_tools import exposition, progress
from tests.unit.conftest import FIXTURES

SMI = FIXTURES / "smi"
LABELS = 'finetune_job="a",rank="0",local_rank="0",node_rank="0"'
RANK0 = f"""# HELP instinct_finetune_step Optimizer steps done (global step).
# TYPE instinct_finetune_step gauge
instinct_finetune_step{{{LABELS}}} 17
# HELP instinct_finetune_loss Training loss.
# TYPE instinct_finetune_loss gauge
instinct_finetune_loss{{{LABELS}}} 2.5
"""
RANK1 = RANK0.replace('rank="0",local_rank="0",node_rank="0"', 'rank="1",local_rank="0",node_rank="1"')


def merged_text(texts):
    return exposition.render(progress.METRICS, exposition.merge(texts, progress.METRICS, progress.LABELS))


def samples(text):
    """{(name, frozenset(labels)): value} of an exposition text, read by prometheus_client's parser."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def rank_labels(rank):
    return frozenset({"finetune_job": "a", "rank": str(rank), "local_rank": "0", "node_rank": str(rank)}.items())


def test_a_metric_name_outside_the_contract_is_refused():
    with pytest.raises(KeyError, match="instinct_gpu_fan_rpm"):
        exposition.render(gpu_metrics.METRICS, [("instinct_gpu_fan_rpm", {}, 1)])


def test_label_values_are_escaped():
    record = gpu_metrics.empty_record(0)
    record["model"] = 'AMD "Instinct"\\MI300X'
    text = exposition.render(gpu_metrics.METRICS, gpu_metrics.gpu_samples([record]))
    assert 'model="AMD \\"Instinct\\"\\\\MI300X"' in text


def test_rank_files_merge_into_one_declaration_per_family():
    merged = merged_text([RANK0, RANK1, "garbage that is no sample {\n"])
    assert merged.count("# TYPE instinct_finetune_step gauge") == 1
    assert merged.count("# HELP instinct_finetune_loss") == 1
    assert samples(merged) == {
        ("instinct_finetune_step", rank_labels(0)): 17,
        ("instinct_finetune_loss", rank_labels(0)): 2.5,
        ("instinct_finetune_step", rank_labels(1)): 17,
        ("instinct_finetune_loss", rank_labels(1)): 2.5,
    }
    assert "garbage" not in merged
    # The family's samples follow its declaration.
    lines = merged.splitlines()
    assert lines.index("# TYPE instinct_finetune_loss gauge") < min(
        n for n, line in enumerate(lines) if line.startswith("instinct_finetune_loss{")
    )


def test_no_rank_file_merges_to_nothing():
    assert exposition.merge([], progress.METRICS, progress.LABELS) == []
    assert exposition.merge(["", "# just a comment\n"], progress.METRICS, progress.LABELS) == []


def test_a_hostile_rank_file_cannot_put_foreign_metrics_or_broken_lines_into_the_merged_textfile():
    foreign = (
        # Another textfile's family (node exporter drops every file of a family declared twice) and a
        # metric of node exporter's own, beside one sample of the contract.
        "# HELP instinct_gpu_collector_up 1 when the collector read the GPUs.\n"
        "# TYPE instinct_gpu_collector_up gauge\n"
        "instinct_gpu_collector_up 0\n"
        'node_textfile_scrape_error{file="x"} 1\n'
        'instinct_finetune_step{finetune_job="b",rank="0",local_rank="0",node_rank="0"} 5\n'
    )
    c_labels = LABELS.replace('"a"', '"c"')
    broken_line = f"instinct_finetune_loss{{{c_labels} 2.5"
    broken = f"instinct_finetune_step{{{c_labels}}} 3\n{broken_line}\n"
    timestamped = RANK1.replace("} 17", "} 17 1700000000000")
    merged = merged_text([RANK0, foreign, broken, timestamped])
    names = {name for name, _labels in samples(merged)}
    assert names == {"instinct_finetune_step", "instinct_finetune_loss"}
    assert "instinct_gpu_" not in merged and "node_textfile" not in merged
    # The broken line is not copied (the parser refuses its file); the well-formed sample of the
    # foreign file is kept; node exporter refuses client-side timestamps: none is copied.
    values = samples(merged)
    assert broken_line not in merged
    assert not any(name == "instinct_finetune_loss" and ("finetune_job", "c") in labels for name, labels in values)
    assert values[("instinct_finetune_step", rank_labels(0))] == 17
    b_labels = frozenset({"finetune_job": "b", "rank": "0", "local_rank": "0", "node_rank": "0"}.items())
    assert values[("instinct_finetune_step", b_labels)] == 5
    assert values[("instinct_finetune_step", rank_labels(1))] == 17
    assert all(
        sample.timestamp is None for family in text_string_to_metric_families(merged) for sample in family.samples
    )
    assert "1700000000000" not in merged


def test_a_label_value_cannot_inject_a_line():
    value = 'a\\"} 1\\ninstinct_gpu_collector_up 0'  # escaped as the format escapes: a quote, a newline
    hostile = f'instinct_finetune_step{{finetune_job="{value}",rank="0",local_rank="0",node_rank="0"}} 3\n'
    merged = merged_text([hostile])
    assert not any(line.startswith("instinct_gpu_") for line in merged.splitlines())
    ((name, labels),) = samples(merged)
    assert name == "instinct_finetune_step"
    assert dict(labels)["finetune_job"] == 'a"} 1\ninstinct_gpu_collector_up 0'


def test_textfile_summary_reads_back_what_the_collector_writes():
    records = gpu_metrics.read_rocm_smi_plain(
        (SMI / "rocmsmi-concise-8gpu.txt").read_text(), (SMI / "rocmsmi-use-meminfo-vram-8gpu.txt").read_text()
    )
    good = {"source": "rocm-smi", "records": records[:7], "at": 1.0}

    def textfile(**kwargs):
        return exposition.render(gpu_metrics.METRICS, gpu_metrics.gpu_textfile_samples(good, expected=8, **kwargs))

    assert gpu_metrics.textfile_summary(textfile()) == {
        "up": True,
        "stale": False,
        "source": "rocm-smi",
        "gpus": 7,
        "expected": 8,
    }
    stale = gpu_metrics.textfile_summary(textfile(up=False))
    assert (stale["up"], stale["stale"]) == (False, True)
    assert gpu_metrics.textfile_summary("") == dict.fromkeys(("up", "stale", "source", "gpus", "expected"))


def test_a_rank_file_with_other_labels_cannot_push_out_the_other_ranks():
    # Sorted first, with one label more: were the first file's label set taken for the family, every
    # good rank would be left out.
    extra = 'instinct_finetune_step{finetune_job="a",rank="9",local_rank="0",node_rank="0",x="1"} 99\n'
    merged = merged_text([extra, RANK0, RANK1])
    values = samples(merged)
    assert values[("instinct_finetune_step", rank_labels(0))] == 17
    assert values[("instinct_finetune_step", rank_labels(1))] == 17
    assert 'x="1"' not in merged
