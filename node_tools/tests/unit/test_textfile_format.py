"""prometheus_client's textfiles read back by the parser node exporter reads them with.

node exporter's textfile collector (and Prometheus) parse the text format with Go's
``expfmt.TextParser``; ``promtool check metrics`` parses its input with that parser and then lints
it: exit 1 is a parse error (node exporter would drop the whole file), exit 3 lint problems only.
The files are what the installed package writes: the collector's ``instinct_gpu.prom`` from the
real recorded rocm-smi output, a rank's progress file, and the collector's merged
``instinct_finetune.prom``. Each is also parsed back with prometheus_client's parser and its values
compared with what went in."""

import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.monitoring.promql import promtool

# The recorded values (tests/fixtures/smi/SOURCES.md), written out here rather than read back through
# the parsers.
TEMPERATURE = [43.0, 41.0, 45.0, 41.0, 44.0, 42.0, 45.0, 43.0]
POWER = [155.0, 155.0, 159.0, 155.0, 160.0, 157.0, 160.0, 158.0]
# promtool's lint of the GPU textfile: names the alert rules and the dashboard use (a rename would
# break them), reported by the linter, not by the parser.
GPU_LINT = {
    'instinct_gpu_count non-histogram and non-summary metrics should not have "_count" suffix',
    'instinct_gpu_expected_count non-histogram and non-summary metrics should not have "_count" suffix',
}

# One rank's training, as the launcher's callback reports it: (clock, call, arguments).
WRITE_RANK = """
import sys
from instinct_node_tools.progress import Progress

rank, path = sys.argv[1], sys.argv[2]
clock = iter([1000.0, 1010.0])
labels = {"finetune_job": "sft", "rank": rank, "local_rank": "0", "node_rank": rank}
progress = Progress(labels, world_size=2, clock=lambda: next(clock))
progress.begin(global_step=0, max_steps=40, tokens_seen=0)
progress.step(global_step=1, epoch=0.05, tokens_seen=4000)
progress.log({"loss": 6.5, "learning_rate": 0.002})
progress.write(path)
"""


def check_metrics(text):
    """promtool's verdict on ``text``: the lint problems, after asserting that it parsed."""
    proc = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False, timeout=60
    )
    said = (proc.stdout + proc.stderr).strip()
    assert proc.returncode in (0, 3), f"promtool could not parse it (exit {proc.returncode}): {said}\n{text}"
    assert "error while linting" not in said
    return set(said.splitlines()) if said else set()


def parsed(text):
    """{(name, frozenset(labels)): value}, asserting what node exporter's textfile collector requires
    beyond the format: no client-side timestamp, and one declaration per family."""
    families = list(text_string_to_metric_families(text))
    names = [family.name for family in families]
    assert len(names) == len(set(names))
    assert text.endswith("\n")
    out = {}
    for family in families:
        for sample in family.samples:
            assert sample.timestamp is None, sample
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def rank_labels(rank):
    return frozenset({"finetune_job": "sft", "rank": str(rank), "local_rank": "0", "node_rank": str(rank)}.items())


RANK_VALUES = {
    "instinct_finetune_running": 1,
    "instinct_finetune_step": 1,
    "instinct_finetune_total_steps": 40,
    "instinct_finetune_epoch": 0.05,
    "instinct_finetune_loss": 6.5,
    "instinct_finetune_learning_rate": 0.002,
    "instinct_finetune_input_tokens_total": 4000,
    "instinct_finetune_tokens_per_second": 200,  # 4000 tokens of the job in 10 s, over 2 ranks
    "instinct_finetune_world_size": 2,
    "instinct_finetune_last_step_timestamp_seconds": 1010,
}


@pytest.fixture
def written(gpu_node):
    """The three files, written by the installed package: (gpu, rank 0's, merged)."""
    # The job's folder is named after it, as the finetune role names it: the collector keeps only
    # the samples whose finetune_job is that name.
    metrics = gpu_node.jobs / "sft" / "metrics"
    metrics.mkdir(parents=True)
    for rank in (0, 1):
        done = subprocess.run(
            [str(gpu_node.tools.python), "-c", WRITE_RANK, str(rank), str(metrics / f"rank{rank}.prom")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    _log, gpu = gpu_node.collect(gpu_node.recorded_rocm_smi(), gpu_node.missing("no-amd-smi"))
    merged = (gpu_node.textfile / "instinct_finetune.prom").read_text()
    return gpu, (metrics / "rank0.prom").read_text(), merged


def test_the_gpu_textfile_parses_as_node_exporter_parses_it_with_the_recorded_values(written):
    gpu, _rank, _merged = written
    assert check_metrics(gpu) == GPU_LINT
    values = parsed(gpu)
    for index in range(8):
        gpu_label = ("gpu", str(index))
        junction = frozenset({gpu_label, ("sensor", "junction")})
        assert values[("instinct_gpu_temperature_celsius", junction)] == TEMPERATURE[index]
        assert values[("instinct_gpu_power_watts", frozenset({gpu_label}))] == POWER[index]
    assert values[("instinct_gpu_count", frozenset())] == 8
    assert values[("instinct_gpu_expected_count", frozenset())] == 8
    assert values[("instinct_gpu_collector_up", frozenset())] == 1
    assert values[("instinct_gpu_collector_stale", frozenset())] == 0
    assert values[("instinct_gpu_collector_source_info", frozenset({("tool", "rocm-smi")}))] == 1
    # What rocm-smi's plain views do not carry is left out, never written as 0.
    assert "instinct_gpu_ecc_errors_total" not in gpu


def test_a_ranks_progress_file_parses_as_node_exporter_parses_it(written):
    _gpu, rank, _merged = written
    assert check_metrics(rank) == set()
    assert parsed(rank) == {(name, rank_labels(0)): value for name, value in RANK_VALUES.items()}
    # The counter keeps its _total name in the text format (what the dashboard queries).
    assert "# TYPE instinct_finetune_input_tokens_total counter" in rank


def test_the_merged_progress_textfile_parses_and_holds_every_ranks_samples(written):
    gpu, rank, merged = written
    assert check_metrics(merged) == set()
    assert parsed(merged) == {
        (name, rank_labels(index)): value for index in (0, 1) for name, value in RANK_VALUES.items()
    }
    assert parsed(rank).items() <= parsed(merged).items()
    # node exporter serves both files in one registry: no family may be declared in both.
    gpu_names = {family.name for family in text_string_to_metric_families(gpu)}
    assert not gpu_names & {family.name for family in text_string_to_metric_families(merged)}


def test_a_hostile_rank_file_is_not_copied_into_the_merged_textfile(gpu_node):
    """A rank file (or anything matching the collector's glob) with a foreign metric and a broken line."""
    good = gpu_node.jobs / "sft" / "metrics" / "rank0.prom"
    good.parent.mkdir(parents=True)
    done = subprocess.run(
        [str(gpu_node.tools.python), "-c", WRITE_RANK, "0", str(good)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    hostile = gpu_node.jobs / "b" / "metrics"
    hostile.mkdir(parents=True)
    (hostile / "rank0.prom").write_text(
        "# TYPE instinct_gpu_collector_up gauge\ninstinct_gpu_collector_up 0\nnode_load1 99\n"
        'instinct_finetune_step{finetune_job="b",rank="0",local_rank="0",node_rank="0"} 5\n'
    )
    (hostile / "rank1.prom").write_text(
        'instinct_finetune_step{finetune_job="b",rank="1",local_rank="0",node_rank="1"} 5\n'
        'instinct_finetune_loss{finetune_job="b",rank="1" 2.5\n'
    )
    _log, gpu = gpu_node.collect(gpu_node.recorded_rocm_smi(), gpu_node.missing("no-amd-smi"))
    merged = (gpu_node.textfile / "instinct_finetune.prom").read_text()
    assert check_metrics(merged) == set()
    values = parsed(merged)
    assert {name for name, _labels in values} <= set(RANK_VALUES)
    assert "instinct_gpu_collector_up" not in merged and "node_load1" not in merged
    assert 'rank="1" 2.5' not in merged
    # The good rank's samples are all there; the collector's own file still says it is up.
    assert {(name, rank_labels(0)): value for name, value in RANK_VALUES.items()}.items() <= values.items()
    assert parsed(gpu)[("instinct_gpu_collector_up", frozenset())] == 1
