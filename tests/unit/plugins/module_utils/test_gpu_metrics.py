"""gpu_metrics: the GPU collector's readers on real recordings, its textfile's samples and its
fallback order. The textfile itself (prometheus_client), the merge of the fine-tune ranks' progress
files and what the summary reads back are tested with the node tools package (node_tools/tests)."""

import json
from pathlib import Path

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils import gpu_metrics
from ansible_collections.instinct.finetune.plugins.module_utils.gpu_metrics import (
    AMDSMI_METRIC,
    METRICS,
    ROCM_SMI_CONCISE,
    ROCM_SMI_JSON,
    ROCM_SMI_USE_VRAM,
    ToolFailed,
    gpu_textfile_samples,
    read_amdsmi,
    read_gpus,
    read_rocm_smi_json,
    read_rocm_smi_plain,
)

SMI = Path(__file__).parents[3] / "fixtures" / "smi"
CONCISE = (SMI / "rocmsmi-concise-8gpu.txt").read_text()
USE_VRAM = (SMI / "rocmsmi-use-meminfo-vram-8gpu.txt").read_text()
MI100_JSON = (SMI / "rocmsmi-mi100-4gpu-rocm602.json").read_text()
STATIC_MI300X = (SMI / "amdsmi-static-mi300x-8gpu.json").read_text()

# The recorded values (SOURCES.md), written out here rather than read back through the parsers.
TEMPERATURE = [43.0, 41.0, 45.0, 41.0, 44.0, 42.0, 45.0, 43.0]
POWER = [155.0, 155.0, 159.0, 155.0, 160.0, 157.0, 160.0, 158.0]


def samples(listed):
    """{(name, frozenset(labels)): value} of ``[(name, labels, value)]``, each series once; a value of
    None (not measured) is left out, as the textfile writer leaves it out."""
    out = {}
    for name, labels, value in listed:
        key = (name, frozenset((k, str(v)) for k, v in labels.items()))
        assert key not in out, f"{key} twice"
        if value is not None:
            out[key] = value
    return out


def test_rocm_smi_plain_views_of_the_8_gpu_mi300x_node():
    records = read_rocm_smi_plain(CONCISE, USE_VRAM)
    assert [r["index"] for r in records] == list(range(8))
    assert [r["temperatures"] for r in records] == [{"junction": t} for t in TEMPERATURE]
    assert [r["power_w"] for r in records] == POWER
    assert {r["power_limit_w"] for r in records} == {650.0}
    assert {r["vram_total_bytes"] for r in records} == {206141652992}
    assert [r["vram_used_bytes"] for r in records] == [297611264] + [297623552] * 7
    assert {r["utilization_percent"] for r in records} == {0}
    # Not in these views: left out, not zero.
    assert {r["ecc_uncorrectable"] for r in records} == {None}


def test_rocm_smi_json_of_the_mi100_node_reads_every_sensor_and_the_replay_count():
    records = read_rocm_smi_json(MI100_JSON)
    assert len(records) == 4
    first = records[0]
    assert first["temperatures"] == {"edge": 53.0, "junction": 55.0, "memory": 53.0}
    assert first["power_w"] == 36.0 and first["power_limit_w"] == 290.0
    assert first["vram_total_bytes"] == 34342961152 and first["vram_used_bytes"] == 6750208
    assert first["utilization_percent"] == 0 and first["pcie_replays"] == 0
    assert first["model"] == "Arcturus GL-XL [Instinct MI100]" and first["bdf"] == "0000:83:00.0"


def amdsmi_metric(gpus=2):
    """An ``amd-smi metric --json`` document built here (no real recording of one from an Instinct
    node exists: tests/fixtures/smi/SOURCES.md). Key names as in AMD's CLI (amdsmi_commands.py)."""
    entries = []
    for gpu in range(gpus):
        entries.append(
            {
                "gpu": gpu,
                "usage": {"gfx_activity": {"value": 87, "unit": "%"}, "umc_activity": {"value": 40, "unit": "%"}},
                "power": {"socket_power": {"value": 612 + gpu, "unit": "W"}, "throttle_status": "N/A"},
                "temperature": {
                    "edge": "N/A",
                    "hotspot": {"value": 71 + gpu, "unit": "C"},
                    "mem": {"value": 60, "unit": "C"},
                },
                "ecc": {"total_correctable_count": 3, "total_uncorrectable_count": gpu},
                "pcie": {"replay_count": 12, "width": 16},
                "xgmi_err": "N/A",
                "mem_usage": {
                    "total_vram": {"value": 196592, "unit": "MB"},
                    "used_vram": {"value": 150000, "unit": "MB"},
                },
            }
        )
    return json.dumps({"gpu_data": entries})


def test_amdsmi_metric_with_the_static_output_of_the_mi300x_node():
    records = read_amdsmi(amdsmi_metric(2), STATIC_MI300X)
    assert records[1]["temperatures"] == {"junction": 72, "memory": 60}
    assert records[1]["power_w"] == 613
    assert records[1]["vram_total_bytes"] == 196592 * 1024 * 1024
    assert records[1]["vram_used_bytes"] == 150000 * 1024 * 1024
    assert records[1]["utilization_percent"] == 87
    assert (records[1]["ecc_correctable"], records[1]["ecc_uncorrectable"]) == (3, 1)
    assert records[1]["pcie_replays"] == 12
    # From the recorded amd-smi static: power cap, model and bus address of gpu 1.
    assert records[1]["power_limit_w"] == 750
    assert records[1]["model"] == "AMD Instinct MI300X"
    assert records[1]["bdf"] == "0000:3d:00.0"


def test_amdsmi_counter_that_is_not_a_number_is_refused():
    bad = json.loads(amdsmi_metric(1))
    bad["gpu_data"][0]["ecc"]["total_uncorrectable_count"] = "7"
    with pytest.raises(gpu_metrics.SmiError, match="total_uncorrectable_count"):
        read_amdsmi(json.dumps(bad))


class Tools:
    """A stand-in for running amd-smi/rocm-smi: answers from a dict, fails for the rest."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, tool, args):
        self.calls.append((tool, tuple(args)))
        if (tool, tuple(args)) not in self.answers:
            raise ToolFailed(f"{tool} {' '.join(args)} exited 1")
        return self.answers[(tool, tuple(args))]


def test_read_gpus_prefers_amdsmi():
    tools = Tools({("amd-smi", AMDSMI_METRIC): amdsmi_metric(2), ("rocm-smi", ROCM_SMI_CONCISE): CONCISE})
    source, records, problems = read_gpus(tools)
    assert (source, len(records), problems) == ("amd-smi", 2, [])
    assert tools.calls == [("amd-smi", AMDSMI_METRIC)]


def test_read_gpus_falls_back_to_rocm_smi_json_then_to_its_plain_views():
    tools = Tools({("rocm-smi", ROCM_SMI_JSON): MI100_JSON})
    source, records, problems = read_gpus(tools)
    assert source == "rocm-smi --json" and len(records) == 4
    assert problems == ["amd-smi: amd-smi metric --json exited 1"]

    tools = Tools({("rocm-smi", ROCM_SMI_CONCISE): CONCISE, ("rocm-smi", ROCM_SMI_USE_VRAM): USE_VRAM})
    source, records, problems = read_gpus(tools)
    assert source == "rocm-smi" and len(records) == 8
    assert len(problems) == 2 and problems[1].startswith("rocm-smi --json: rocm-smi --showtemp")


def test_without_the_vram_view_the_concise_table_alone_counts_the_gpus():
    """ROCm/ROCm#5231's node (one MI300X VF of an 8-GPU host) has no recorded VRAM view: the concise
    table still gives the GPU count, the temperature and the power; VRAM and busy % stay unknown (left
    out of the textfile, never 0), and the problem says why."""
    one = (SMI / "rocmsmi-concise-1gpu-mi300xvf.txt").read_text()
    source, records, problems = read_gpus(Tools({("rocm-smi", ROCM_SMI_CONCISE): one}))
    assert source == "rocm-smi" and [r["index"] for r in records] == [0]
    assert records[0]["temperatures"] == {"junction": 39.0}
    assert (records[0]["power_w"], records[0]["power_limit_w"]) == (191.0, 750.0)
    assert (records[0]["vram_used_bytes"], records[0]["utilization_percent"]) == (None, None)
    assert problems[-1].startswith("rocm-smi: rocm-smi -u --showmeminfo vram exited 1; the concise table alone")
    values = samples(gpu_textfile_samples({"source": source, "records": records, "at": 1.0}, expected=8))
    assert values[("instinct_gpu_count", frozenset())] == 1
    assert values[("instinct_gpu_expected_count", frozenset())] == 8
    assert not any(name == "instinct_gpu_vram_used_bytes" for name, _labels in values)


def test_read_gpus_reports_why_every_reader_failed():
    # amd-smi answers with something that is not its JSON; rocm-smi's views are cut short.
    tools = Tools(
        {
            ("amd-smi", AMDSMI_METRIC): "WARNING: not a JSON document",
            ("rocm-smi", ROCM_SMI_CONCISE): CONCISE.split("End of ROCm SMI Log")[0],
            ("rocm-smi", ROCM_SMI_USE_VRAM): USE_VRAM,
        }
    )
    source, records, problems = read_gpus(tools)
    assert (source, records) == (None, [])
    assert [p.split(":")[0] for p in problems] == ["amd-smi", "rocm-smi --json", "rocm-smi"]
    assert "cut short" in problems[2]


def test_the_textfile_of_a_fresh_sample():
    records = read_rocm_smi_plain(CONCISE, USE_VRAM)
    listed = gpu_textfile_samples({"source": "rocm-smi", "records": records, "at": 1700000000.5}, expected=8)
    values = samples(listed)
    for gpu, temperature in enumerate(TEMPERATURE):
        labels = frozenset({("gpu", str(gpu)), ("sensor", "junction")})
        assert values[("instinct_gpu_temperature_celsius", labels)] == temperature
        assert values[("instinct_gpu_power_watts", frozenset({("gpu", str(gpu))}))] == POWER[gpu]
    assert values[("instinct_gpu_count", frozenset())] == 8
    assert values[("instinct_gpu_expected_count", frozenset())] == 8
    assert values[("instinct_gpu_collector_up", frozenset())] == 1
    assert values[("instinct_gpu_collector_stale", frozenset())] == 0
    assert values[("instinct_gpu_collector_last_success_timestamp_seconds", frozenset())] == 1700000000.5
    assert values[("instinct_gpu_collector_source_info", frozenset({("tool", "rocm-smi")}))] == 1
    # Values the views do not carry are absent (None, left out of the file), never written as 0.
    assert not any(name == "instinct_gpu_ecc_errors_total" for name, _value in values)
    assert {value for name, _labels, value in listed if name == "instinct_gpu_ecc_errors_total"} <= {None}
    # Every sample is of a family of the contract (the writer refuses any other name).
    assert {name for name, _labels, _value in listed} <= set(METRICS)


def test_the_textfile_keeps_the_last_good_sample_marked_stale():
    records = read_rocm_smi_plain(CONCISE, USE_VRAM)
    good = {"source": "rocm-smi", "records": records, "at": 1700000000.0}
    values = samples(gpu_textfile_samples(good, expected=8, up=False))
    assert values[("instinct_gpu_collector_up", frozenset())] == 0
    assert values[("instinct_gpu_collector_stale", frozenset())] == 1
    assert values[("instinct_gpu_collector_last_success_timestamp_seconds", frozenset())] == 1700000000.0
    assert values[("instinct_gpu_temperature_celsius", frozenset({("gpu", "2"), ("sensor", "junction")}))] == 45


def test_the_textfile_before_any_good_sample_says_only_that_the_collector_is_down():
    assert samples(gpu_textfile_samples(None, expected=8, up=False)) == {
        ("instinct_gpu_collector_up", frozenset()): 0,
        ("instinct_gpu_expected_count", frozenset()): 8,
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("AMDSMI_XGMI_STATUS_NO_ERRORS", 0),
        ("NO_ERRORS", 0),
        (0, 0),
        ("AMDSMI_XGMI_STATUS_ERROR", 1),
        ("MULTIPLE_ERRORS", 1),
        (2, 1),
        ("N/A", None),
    ],
)
def test_xgmi_status_names_of_old_and_new_amdsmi(value, expected):
    document = json.loads(amdsmi_metric(1))
    document["gpu_data"][0]["xgmi_err"] = value
    assert read_amdsmi(json.dumps(document))[0]["xgmi_error"] == expected
