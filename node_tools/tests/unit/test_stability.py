"""The stability report (instinct_node_tools.stability, the instinct-stability-report console script):
every verdict, the plots, report.json and report.md, the command line and its Prometheus client.

What is real and what is assembled here: no range-query answer recorded from a Prometheus is in the
fixtures yet (tests/fixtures/prometheus/ will hold the sandbox's). Every GPU value below comes from
a real single recording in tests/fixtures/smi (see its SOURCES.md), read with the collection's own
parsers (gpu_metrics.read_rocm_smi_plain / read_rocm_smi_json, rocm_smi.parse_rocm_smi_concise) and
turned into the samples the GPU collector exports (gpu_metrics.gpu_textfile_samples); the training
values replay the real trainer_log.jsonl of the sandbox job (tests/fixtures/finetune) through the
ranks' progress writer (progress.Progress). The time series, though, are ASSEMBLED from those single
recordings: a steady run repeats one recording, and a leak, a drop, a spike, a throttle, a gap, a
straggler or a bad loss is a stated change of it at stated times. Prometheus's answer is then built
in its own shape (``{"status": "success", "data": {"resultType": "matrix", ...}}``, values as
strings, ``instance`` and ``job`` labels added as a scrape adds them).
"""

import copy
import http.server
import json
import math
import threading
import urllib.parse
from pathlib import Path
from typing import ClassVar

import pytest

from instinct_node_tools import gpu_metrics, progress, rocm_smi, stability

ROOT = Path(__file__).resolve().parents[3]
SMI = ROOT / "tests" / "fixtures" / "smi"
TRAINER_LOG = ROOT / "tests" / "fixtures" / "finetune" / "trainer_log.jsonl"
GIB = 1024**3
START = 1_780_000_000.0
STEP = 60.0
HOURS = 6
SCRAPE_JOB = "instinct_nodes"


# ---------------------------------------------------------------------------------------------
# real recordings -> the collector's records


def mi300_8gpu_idle():
    """8 GPUs (DID 0x74a2) at idle: ms-swift's `rocm-smi` concise table and `rocm-smi -u --showmeminfo
    vram` of the same node (junction 41-45 C, 155-160 W of a 650 W cap, 297 MB of 206 GB VRAM used)."""
    return gpu_metrics.read_rocm_smi_plain(
        (SMI / "rocmsmi-concise-8gpu.txt").read_text(), (SMI / "rocmsmi-use-meminfo-vram-8gpu.txt").read_text()
    )


def mi300x_8gpu_loaded():
    """8x MI300X VF (ROCm/ROCm issue 4268): GPUs 0-3 under load at 308-322 W of a 750 W cap, 4-6 idle,
    GPU 7's SMU not answering (N/A). Only the concise table was recorded, so no VRAM."""
    records = []
    for gpu in rocm_smi.parse_rocm_smi_concise((SMI / "rocmsmi-concise-8gpu-pwrcap-unsupported.txt").read_text())[
        "gpus"
    ]:
        record = gpu_metrics.empty_record(gpu["index"])
        if gpu["temperature_c"] is not None:
            record["temperatures"]["junction"] = gpu["temperature_c"]
        record["power_w"] = gpu["power_w"]
        record["power_limit_w"] = gpu["power_limit_w"]
        records.append(record)
    return records


def mi100_4gpu():
    """4x MI100 (Telegraf's rocm-smi JSON, ROCm 6.0.2): edge, junction and memory sensors, PCIe replays 0."""
    return gpu_metrics.read_rocm_smi_json((SMI / "rocmsmi-mi100-4gpu-rocm602.json").read_text())


# ---------------------------------------------------------------------------------------------
# records over time -> Prometheus's range-query answers


def times(hours=HOURS, step=STEP):
    return [START + step * number for number in range(int(hours * 3600 / step) + 1)]


class Scrapes:
    """What Prometheus stores from the nodes' exporters: one list of (name, labels, value) per
    scrape, turned into range-query answers by :meth:`responses`."""

    def __init__(self):
        self.series = {}

    def add(self, when, instance, samples, up=1):
        self._sample("up", {"instance": instance, "job": SCRAPE_JOB}, when, up)
        if not up:
            return
        for name, labels, value in samples:
            if value is not None:
                self._sample(name, dict(labels, instance=instance, job=SCRAPE_JOB), when, value)

    def add_gpus(self, when, instance, records, **collector):
        """One collector run: the textfile samples the collector writes for these records.
        ``collector``: expected (GPUs, default 8), up (False: every reader failed, the sample is
        written again marked stale) and at (the time of that last good sample)."""
        sample = {"source": "rocm-smi", "records": records, "at": collector.get("at") or when}
        samples = gpu_metrics.gpu_textfile_samples(
            sample, expected=collector.get("expected", 8), up=collector.get("up", True)
        )
        self.add(when, instance, samples)

    def _sample(self, name, labels, when, value):
        key = (name, tuple(sorted(labels.items())))
        self.series.setdefault(key, []).append((when, value))

    def responses(self):
        answers = {}
        for (name, labels), points in sorted(self.series.items()):
            answer = answers.setdefault(name, {"status": "success", "data": {"resultType": "matrix", "result": []}})
            values = [[when, prometheus_value(value)] for when, value in points]
            answer["data"]["result"].append({"metric": dict(labels, __name__=name), "values": values})
        for name in stability.GPU_METRICS + stability.NODE_METRICS + stability.TRAINING_METRICS:
            answers.setdefault(name, {"status": "success", "data": {"resultType": "matrix", "result": []}})
        return answers

    def data(self):
        return stability.parse_responses(json.loads(json.dumps(self.responses())))


def prometheus_value(value):
    """A sample value as Prometheus writes it in JSON: a string, NaN and +Inf included."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def window(hours=HOURS):
    return stability.Window(START, START + hours * 3600, STEP, 15)


def steady(scrapes, instance, records, expected=8, hours=HOURS):
    for when in times(hours):
        scrapes.add_gpus(when, instance, records, expected=expected)


def find(verdicts, check, node=None, gpu=None):
    found = [
        v
        for v in verdicts
        if v["check"] == check and (node is None or v["node"] == node) and (gpu is None or v["gpu"] == gpu)
    ]
    assert found, f"no {check} verdict for {node} GPU {gpu}: {[(v['check'], v['node'], v['gpu']) for v in verdicts]}"
    return found


def only(verdicts, check, node=None, gpu=None):
    found = find(verdicts, check, node, gpu)
    assert len(found) == 1, found
    return found[0]


def not_passing(verdicts):
    return sorted((v["check"], v["node"], v["gpu"], v["verdict"]) for v in verdicts if v["verdict"] != "pass")


# ---------------------------------------------------------------------------------------------
# the metric names and the query


def test_the_report_reads_only_names_the_collector_and_the_progress_writer_export():
    exported = set(gpu_metrics.METRICS) | set(progress.METRICS) | {"up"}
    asked = set(stability.GPU_METRICS + stability.NODE_METRICS + stability.TRAINING_METRICS)
    assert asked <= exported, asked - exported


def test_the_step_keeps_every_series_under_prometheuss_11000_points():
    # 48 hours at a 15 s scrape would be 11,521 points: the step grows to 16 s.
    step = stability.choose_step(START, START + 48 * 3600, 15)
    assert step == 16
    assert 48 * 3600 / step + 1 <= 11000
    assert stability.choose_step(START, START + 3600, 15) == 15
    with pytest.raises(stability.StabilityError):
        stability.choose_step(START, START - 1)


def test_queries_quote_the_job_and_escape_node_names():
    queries = stability.node_queries(["instinct_nodes", "instinct_amd_exporter"], ["gpu-node.1", 'od"d'])
    assert queries["instinct_gpu_count"] == (
        'instinct_gpu_count{instance=~"gpu-node\\\\.1|od\\"d",job=~"instinct_nodes|instinct_amd_exporter"}'
    )
    assert stability.training_queries('my "job"')["instinct_finetune_loss"] == (
        'instinct_finetune_loss{finetune_job="my \\"job\\""}'
    )


def test_times_are_unix_seconds_or_rfc3339_with_a_zone():
    assert stability.parse_time("1780000000") == START
    assert stability.parse_time("2026-05-28T20:26:40Z") == START
    with pytest.raises(stability.StabilityError, match="no time zone"):
        stability.parse_time("2026-05-28T20:26:40")


def test_a_matrix_answer_parses_with_nan_and_infinity_and_other_answers_are_refused():
    doc = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"rank": "0"}, "values": [[START + 60, "+Inf"], [START, "NaN"]]}],
        },
    }
    (series,) = stability.parse_matrix(json.dumps(doc))
    assert series.times == [START, START + 60]
    assert math.isnan(series.values[0]) and series.values[1] == math.inf
    with pytest.raises(stability.StabilityError, match="not a matrix"):
        stability.parse_matrix({"status": "success", "data": {"resultType": "vector", "result": []}})
    with pytest.raises(stability.StabilityError, match="exceeded maximum resolution"):
        stability.parse_matrix(
            {"status": "error", "errorType": "bad_data", "error": "exceeded maximum resolution of 11,000 points"}
        )


def test_thresholds_override_by_name_and_refuse_unknown_names_and_non_numbers():
    limits = stability.thresholds({"temperature_limit_c": {"memory": 94}, "vram_leak_min_r2": 0.9})
    assert limits["temperature_limit_c"]["value"] == {"junction": 100.0, "memory": 94, "edge": None}
    assert limits["vram_leak_min_r2"]["value"] == 0.9
    assert "thresholds file" in limits["vram_leak_min_r2"]["source"]
    assert "huggingface/dell-ai/pull/54" in stability.thresholds()["temperature_limit_c"]["source"]
    with pytest.raises(stability.StabilityError, match="unknown threshold"):
        stability.thresholds({"temperature": 90})
    with pytest.raises(stability.StabilityError, match="must be a number"):
        stability.thresholds({"loss_spike_ratio": "2"})


def test_the_default_temperature_limits_are_what_the_recorded_mi300x_reports():
    """The defaults are the slowdown limits in the real amd-smi static recording of 8x MI300X."""
    static = json.loads((SMI / "amdsmi-static-mi300x-8gpu.json").read_text())
    limit = static["gpu_data"][0]["limit"]
    defaults = stability.THRESHOLDS["temperature_limit_c"][0]
    assert defaults["junction"] == limit["slowdown_hotspot_temperature"]["value"] == 100
    assert defaults["memory"] == limit["slowdown_vram_temperature"]["value"] == 105
    assert defaults["edge"] is None and limit["slowdown_edge_temperature"] == "N/A"


# ---------------------------------------------------------------------------------------------
# GPU verdicts


def test_a_steady_run_of_the_recorded_8_gpu_node_passes_every_check():
    """Series assembled from one real recording (ms-swift's 8-GPU node) repeated for 6 hours."""
    scrapes = Scrapes()
    steady(scrapes, "node-a", mi300_8gpu_idle())
    verdicts = stability.evaluate(scrapes.data(), window(), nodes=["node-a"])
    assert not_passing(verdicts) == []
    assert stability.worst(verdicts) == "pass"
    junction = only(verdicts, "temperature_junction", "node-a", "2")
    assert junction["value"] == 45.0 and junction["threshold"] == 100.0
    throttle = only(verdicts, "power_throttle", "node-a", "6")
    assert throttle["value"] == 0 and "650 W cap" in throttle["detail"]
    assert len(find(verdicts, "vram_leak", "node-a")) == 8
    assert only(verdicts, "gpu_drop", "node-a")["detail"] == "8 or more of 8 GPUs in every sample"


def test_vram_rising_after_the_warm_up_is_a_leak_naming_node_and_gpu_with_slope_and_time_to_full():
    """Assembled from the real 8-GPU recording: GPU 3's real used VRAM (297623552 B) grows 3 GiB
    per hour after the first hour; its real total (206141652992 B) gives the time to full."""
    records = mi300_8gpu_idle()
    scrapes = Scrapes()
    for when in times():
        current = copy.deepcopy(records)
        hours = (when - START) / 3600
        current[3]["vram_used_bytes"] += int(max(hours - 1, 0) * 3 * GIB)
        scrapes.add_gpus(when, "node-a", current)
    verdicts = stability.evaluate(scrapes.data(), window(), nodes=["node-a"])
    leak = only(verdicts, "vram_leak", "node-a", "3")
    assert leak["verdict"] == "fail"
    assert leak["value"] == pytest.approx(3 * GIB, rel=0.01)
    assert leak["threshold"] == GIB and leak["unit"] == "B/h"
    # 191.98 GiB total, about 15 GiB used at the end: about 59 hours to full at 3 GiB/h.
    assert "full (191.98 GiB) in about 59 h" in leak["detail"], leak["detail"]
    assert not_passing(verdicts) == [("vram_leak", "node-a", "3", "fail")]


def test_a_short_vram_excursion_is_a_spike_and_a_level_that_stays_is_not():
    """Assembled from the real 8-GPU recording: GPU 5 jumps 40 GiB for one sample at 3 h; GPU 6
    steps up 40 GiB at 4 h and stays there (the allocator keeping a larger pool)."""
    records = mi300_8gpu_idle()
    scrapes = Scrapes()
    spike_at = START + 3 * 3600
    for when in times():
        current = copy.deepcopy(records)
        if when == spike_at:
            current[5]["vram_used_bytes"] += 40 * GIB
        if when >= START + 4 * 3600:
            current[6]["vram_used_bytes"] += 40 * GIB
        scrapes.add_gpus(when, "node-a", current)
    verdicts = stability.evaluate(scrapes.data(), window(), nodes=["node-a"])
    spike = only(verdicts, "vram_spike", "node-a", "5")
    assert spike["verdict"] == "warn"
    assert spike["value"] == pytest.approx(40 * GIB)
    assert spike["events"] == [{"kind": "spike", "t": spike_at, "gpu": "5", "value": 297623552 + 40 * GIB}]
    assert only(verdicts, "vram_spike", "node-a", "6")["verdict"] == "pass"
    assert not_passing(verdicts) == [("vram_spike", "node-a", "5", "warn")]


def test_power_at_the_reported_cap_is_throttling_and_over_it_fails():
    """Assembled from the real loaded MI300X recording (issue 4268, 750 W cap): GPU 2 draws its cap
    for the middle two hours (30 % of the window), GPU 1 draws 820 W for 10 minutes. GPU 7, whose SMU
    did not answer in the recording, has no power series and no power verdict."""
    records = mi300x_8gpu_loaded()
    scrapes = Scrapes()
    for when in times():
        current = copy.deepcopy(records)
        if START + 2 * 3600 <= when < START + 3.8 * 3600:
            current[2]["power_w"] = 750.0
        if START + 5 * 3600 <= when < START + 5 * 3600 + 600:
            current[1]["power_w"] = 820.0
        scrapes.add_gpus(when, "node-b", current)
    verdicts = stability.evaluate(scrapes.data(), window(), nodes=["node-b"])
    throttle = only(verdicts, "power_throttle", "node-b", "2")
    assert throttle["verdict"] == "warn"
    assert throttle["value"] == pytest.approx(108 / 361, abs=0.001)
    assert throttle["threshold"] == 0.10 and "750 W cap" in throttle["detail"]
    over = only(verdicts, "power_over_limit", "node-b", "1")
    assert over["verdict"] == "fail"
    assert over["value"] == pytest.approx(820 / 750, abs=0.0001)
    assert "longest stretch over 1.05 x cap 10.0 min" in over["detail"]
    assert not [v for v in verdicts if v["check"].startswith("power") and v["gpu"] == "7"]
    assert not_passing(verdicts) == [
        ("power_over_limit", "node-b", "1", "fail"),
        ("power_throttle", "node-b", "2", "warn"),
    ]


def test_each_temperature_sensor_is_judged_against_its_own_limit():
    """Assembled from the real 4x MI100 recording (edge, junction, memory): GPU 1's memory sensor
    reaches 106 C for 3 minutes, GPU 2's junction 97 C (within 5 C of 100 C). Edge has no default
    limit (MI300X reports none) and is reported, not judged, unless given."""
    records = mi100_4gpu()
    scrapes = Scrapes()
    for when in times():
        current = copy.deepcopy(records)
        if START + 3600 <= when < START + 3600 + 180:
            current[1]["temperatures"]["memory"] = 106.0
        if when == START + 7200:
            current[2]["temperatures"]["junction"] = 97.0
        scrapes.add_gpus(when, "mi100", current, expected=4)
    verdicts = stability.evaluate(scrapes.data(), window(), nodes=["mi100"])
    memory = only(verdicts, "temperature_memory", "mi100", "1")
    assert memory["verdict"] == "fail" and memory["value"] == 106.0 and memory["threshold"] == 105.0
    assert "3.0 min at or above 105 C" in memory["detail"]
    assert only(verdicts, "temperature_junction", "mi100", "2")["verdict"] == "warn"
    edge = only(verdicts, "temperature_edge", "mi100", "1")
    assert edge["verdict"] == "pass" and edge["threshold"] is None and "not judged" in edge["detail"]
    assert edge["value"] == 55.0
    # With the limits the MI210 recording reports for its edge sensor (99 C), edge is judged.
    limits = stability.thresholds({"temperature_limit_c": {"edge": 99}})
    edge = only(stability.evaluate(scrapes.data(), window(), limits), "temperature_edge", "mi100", "1")
    assert edge["threshold"] == 99 and edge["verdict"] == "pass"
    assert not_passing(verdicts) == [
        ("temperature_junction", "mi100", "2", "warn"),
        ("temperature_memory", "mi100", "1", "fail"),
    ]


def test_a_gpu_that_disappears_mid_run_fails_naming_the_node_and_the_gpu():
    """Assembled from the real 8-GPU recording: from 3 h on the collector lists only GPUs 0-6 (what
    it exports when a reader sees 7), so instinct_gpu_count falls from 8 to 7 and GPU 7's series end.
    node-a keeps all 8 and passes."""
    records = mi300_8gpu_idle()
    scrapes = Scrapes()
    dropped_at = START + 3 * 3600
    for when in times():
        scrapes.add_gpus(when, "node-a", records)
        scrapes.add_gpus(when, "node-b", records if when < dropped_at else records[:7])
    verdicts = stability.evaluate(scrapes.data(), window(), nodes=["node-a", "node-b"])
    drop = only(verdicts, "gpu_drop", "node-b")
    assert drop["verdict"] == "fail"
    assert drop["gpu"] == "7" and drop["value"] == 7 and drop["threshold"] == 8
    assert "fell to 7 (expected 8) at 2026-05-28 23:26:40Z, below expected for 3.0 h" in drop["detail"]
    assert "GPU 7 last reported at 2026-05-28 23:25:40Z" in drop["detail"]
    assert drop["events"] == [{"kind": "drop", "t": dropped_at, "gpu": "7"}]
    assert only(verdicts, "gpu_drop", "node-a")["verdict"] == "pass"
    assert not_passing(verdicts) == [("gpu_drop", "node-b", "7", "fail")]


def test_a_gpu_that_leaves_and_comes_back_is_still_a_drop_naming_it():
    """Assembled from the real 8-GPU recording: GPU 2 is missing from the collector's list for 10
    minutes from 2 h (GPUs 0, 1 and 3-7 listed), then back."""
    records = mi300_8gpu_idle()
    scrapes = Scrapes()
    for when in times():
        away = START + 2 * 3600 <= when < START + 2 * 3600 + 600
        scrapes.add_gpus(when, "node-a", records[:2] + records[3:] if away else records)
    drop = only(stability.evaluate(scrapes.data(), window(), nodes=["node-a"]), "gpu_drop", "node-a")
    assert drop["verdict"] == "fail" and drop["gpu"] == "2"
    assert "below expected for 10.0 min; GPU 2 last reported at 2026-05-28 22:25:40Z" in drop["detail"]


def test_the_expected_count_comes_from_the_argument_before_the_node():
    """Assembled from the real 8-GPU recording, collector told to expect 8: asked for 9, it fails."""
    scrapes = Scrapes()
    steady(scrapes, "node-a", mi300_8gpu_idle(), hours=1)
    verdicts = stability.evaluate(scrapes.data(), window(1), nodes=["node-a"], expected_gpus=9)
    drop = only(verdicts, "gpu_drop", "node-a")
    assert drop["verdict"] == "fail" and drop["threshold"] == 9 and drop["source"] == "--expected-gpus"


def test_a_node_that_sent_nothing_fails():
    scrapes = Scrapes()
    steady(scrapes, "node-a", mi300_8gpu_idle(), hours=1)
    verdicts = stability.evaluate(scrapes.data(), window(1), nodes=["node-a", "node-z"])
    assert only(verdicts, "gpu_drop", "node-z")["verdict"] == "fail"
    assert only(verdicts, "exporter_gap", "node-z")["verdict"] == "fail"


def test_scrape_failures_and_collector_failures_are_gaps():
    """Assembled from the real 8-GPU recording: node-a cannot be scraped for 20 minutes from 1 h
    (up == 0, no other series); node-b's readers all fail for 10 minutes from 4 h (the collector
    writes the last good sample again, collector_up 0 and stale 1, as gpu_textfile_samples does)."""
    records = mi300_8gpu_idle()
    scrapes = Scrapes()
    for when in times():
        if START + 3600 <= when < START + 3600 + 1200:
            scrapes.add(when, "node-a", [], up=0)
        else:
            scrapes.add_gpus(when, "node-a", records)
        failing = START + 4 * 3600 <= when < START + 4 * 3600 + 600
        scrapes.add_gpus(when, "node-b", records, up=not failing, at=START + 4 * 3600 - 60 if failing else None)
    verdicts = stability.evaluate(scrapes.data(), window(), nodes=["node-a", "node-b"])
    gap_a = only(verdicts, "exporter_gap", "node-a")
    assert gap_a["verdict"] == "warn"
    assert (
        "scrape failed (up == 0)" in gap_a["detail"] and "no instinct_gpu_count sample for 21.0 min" in gap_a["detail"]
    )
    assert gap_a["value"] == pytest.approx(1260)
    gap_b = only(verdicts, "exporter_gap", "node-b")
    assert gap_b["verdict"] == "warn"
    assert "every GPU reader failed" in gap_b["detail"] and "stale GPU values" in gap_b["detail"]
    assert "last good sample older than 180 s" in gap_b["detail"]
    # A gap over 10 % of the window is a blind report: fail.
    limits = stability.thresholds({"gap_fail_fraction": 0.05})
    assert only(stability.evaluate(scrapes.data(), window(), limits), "exporter_gap", "node-a")["verdict"] == "fail"


def test_error_counters_that_rose_are_named_per_gpu():
    """Assembled from the real MI100 recording (PCIe replay count 0 on every card): GPU 0's replays
    rise to 3; GPU 3 gets uncorrectable ECC counts 0 -> 2 (the recording has no ECC counters, so
    those values are set here, as amd-smi's ecc.total_uncorrectable_count would give them)."""
    records = mi100_4gpu()
    for record in records:
        record["ecc_correctable"] = record["ecc_uncorrectable"] = 0
    scrapes = Scrapes()
    for when in times():
        current = copy.deepcopy(records)
        if when >= START + 3600:
            current[0]["pcie_replays"] = 3
        if when >= START + 5 * 3600:
            current[3]["ecc_uncorrectable"] = 2
        scrapes.add_gpus(when, "mi100", current, expected=4)
    verdicts = stability.evaluate(scrapes.data(), window(), nodes=["mi100"])
    assert only(verdicts, "ras", "mi100", "0")["verdict"] == "warn"
    assert "PCIe replays +3" in only(verdicts, "ras", "mi100", "0")["detail"]
    ecc = only(verdicts, "ras", "mi100", "3")
    assert ecc["verdict"] == "fail" and "ECC uncorrectable +2" in ecc["detail"]
    assert only(verdicts, "ras", "mi100", "1")["verdict"] == "pass"


def test_a_counter_reset_counts_as_a_restart_from_zero():
    series = stability.Series({}, [1, 2, 3, 4], [5.0, 7.0, 1.0, 2.0])
    assert stability.counter_increase(series) == 2 + 1 + 1


# ---------------------------------------------------------------------------------------------
# training verdicts


def trainer_log():
    return [json.loads(line) for line in TRAINER_LOG.read_text().splitlines()]


def replay_training(scrapes, change=None, seconds_per_step=60.0):
    """The sandbox job's real trainer_log.jsonl (40 steps, loss every 2, eval at 20 and 40) replayed
    through the progress writer of two ranks (node1 rank 0, node2 rank 1, as in that run), one step
    per ``seconds_per_step`` instead of the recorded 0.2 s; each step is scraped once. The log has
    no token count: 4096 tokens per step are assumed. ``change(rank, step, logs)`` may alter what a
    rank logs (returns the logs) or hold it back (returns None: the rank did not step)."""
    clock = {"now": START}
    ranks = {}
    for rank, instance in ((0, "node1"), (1, "node2")):
        labels = {"finetune_job": "sandbox-tiny", "rank": str(rank), "local_rank": "0", "node_rank": str(rank)}
        ranks[rank] = (progress.Progress(labels, world_size=2, clock=lambda: clock["now"]), instance)
        ranks[rank][0].begin(0, 40, 0)
    logs = {}
    for entry in trainer_log():
        logs.setdefault(entry["current_steps"], {}).update(
            {key: entry[key] for key in ("loss", "eval_loss", "lr") if key in entry}
        )
    done = {0: 0, 1: 0}
    for step in range(1, 41):
        clock["now"] = START + step * seconds_per_step
        for rank, (writer, instance) in ranks.items():
            logged = dict(logs.get(step, {}))
            if "lr" in logged:
                logged["learning_rate"] = logged.pop("lr")
            if change is not None:
                logged = change(rank, step, logged)
            if logged is not None:
                done[rank] += 1
                writer.step(done[rank], done[rank] / 27, done[rank] * 4096)
                writer.log(logged)
            scrapes.add(clock["now"], instance, progress.samples(writer.labels, writer.values))
    return scrapes


def training_window():
    return stability.Window(START, START + 41 * 60, STEP, 15)


def test_the_recorded_training_run_passes_with_its_throughput_and_eval_loss():
    """The real sandbox trainer log, replayed: steady steps, loss 6.52 -> 4.24, eval 4.878 then 4.548."""
    data = replay_training(Scrapes()).data()
    verdicts = stability.evaluate(data, training_window())
    assert not_passing(verdicts) == []
    throughput = only(verdicts, "training_throughput")
    # One step a minute at 4096 tokens a step: 68.3 tokens/s for the job, each of the two ranks
    # reporting its half (progress.py divides the job's rate by the world size).
    assert "steps/s 0.01667 to 0.01667" in throughput["detail"], throughput["detail"]
    assert throughput["unit"] == "tokens/s" and throughput["value"] == pytest.approx(4096 / 60, rel=0.01)
    loss = only(verdicts, "training_loss", "node1")
    assert loss["value"] == pytest.approx(4.244116306304932) and "20 logged losses" in loss["detail"]
    evaluation = only(verdicts, "eval_loss")
    assert evaluation["value"] == pytest.approx(4.547991752624512)
    assert "2 evaluations logged: 4.878, 4.548" in evaluation["detail"]
    intervals = stability.throughput_intervals(data, training_window(), 300)
    assert len(intervals) == 8 and all(i["slowest_rank"] is None for i in intervals)


def test_a_rank_that_falls_behind_is_a_straggler_and_the_slowest_rank_of_its_intervals():
    """The real trainer log replayed; rank 1 (node2) does not step from step 10 to 15 and stays six
    steps behind rank 0 from then on."""

    def lag(rank, step, logs):
        return None if rank == 1 and 10 <= step <= 15 else logs

    data = replay_training(Scrapes(), change=lag).data()
    verdicts = stability.evaluate(data, training_window())
    straggler = only(verdicts, "straggler", "node2")
    assert straggler["verdict"] == "warn" and straggler["gpu"] == "0"
    # Two ranks: the median is halfway, so six steps behind the leader is three behind the median.
    assert straggler["value"] == 3.0 and straggler["threshold"] == 2
    assert "more than 2 in 27 samples from 2026-05-28 20:40:40Z" in straggler["detail"]
    limits = stability.thresholds({"straggler_lag_steps": 3})
    assert only(stability.evaluate(data, training_window(), limits), "straggler", "node2")["verdict"] == "pass"
    assert only(verdicts, "straggler", "node1")["verdict"] == "pass"
    intervals = stability.throughput_intervals(data, training_window(), 300)
    assert intervals[1]["slowest_rank"] == "1" and intervals[2]["slowest_rank"] == "1"


def test_a_nan_loss_fails_and_a_loss_spike_warns():
    """The real trainer log replayed; rank 0 logs NaN at step 30; rank 1 logs three times the real
    loss at step 24 (a spike against the median of the losses before it)."""

    def spoil(rank, step, logs):
        if rank == 0 and step == 30:
            return dict(logs, loss=float("nan"))
        if rank == 1 and step == 24:
            return dict(logs, loss=logs["loss"] * 3)
        return logs

    data = replay_training(Scrapes(), change=spoil).data()
    verdicts = stability.evaluate(data, training_window())
    nan = only(verdicts, "training_loss", "node1")
    assert nan["verdict"] == "fail" and "nan at" in nan["detail"]
    spike = only(verdicts, "training_loss", "node2")
    assert spike["verdict"] == "warn" and "spike 13.83 vs median 5.434" in spike["detail"]
    assert spike["events"][0]["kind"] == "loss_spike"


# ---------------------------------------------------------------------------------------------
# plots and the report


def assert_png(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 400 and height >= 300, (path, width, height)


def incident_run():
    """Two nodes assembled from the real recordings: node-a (8-GPU idle recording) with GPU 3
    leaking and GPU 5 spiking, node-b (the same recording) losing GPU 7 at 3 h, and the sandbox
    job's real trainer log replayed on them at one step a minute."""
    records = mi300_8gpu_idle()
    scrapes = Scrapes()
    for when in times():
        current = copy.deepcopy(records)
        current[3]["vram_used_bytes"] += int(max((when - START) / 3600 - 1, 0) * 3 * GIB)
        if when == START + 3 * 3600:
            current[5]["vram_used_bytes"] += 40 * GIB
        scrapes.add_gpus(when, "node-a", current)
        scrapes.add_gpus(when, "node-b", records if when < START + 3 * 3600 else records[:7])
    return scrapes


def test_the_report_writes_plots_a_verdict_table_and_json(tmp_path):
    pytest.importorskip("matplotlib")
    scrapes = incident_run()
    data = scrapes.data()
    report = stability.write_report(
        str(tmp_path), "incident", window(), data, {"nodes": ["node-a", "node-b"], "prometheus": "recorded"}
    )
    assert report["verdict"] == "fail"
    names = sorted(Path(p).name for p in report["plots"])
    assert names == [
        "node-a-power.png",
        "node-a-temperature-junction.png",
        "node-a-utilization.png",
        "node-a-vram.png",
        "node-b-power.png",
        "node-b-temperature-junction.png",
        "node-b-utilization.png",
        "node-b-vram.png",
    ]
    for name in names:
        assert_png(tmp_path / "plots" / name)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["verdict"] == "fail" and saved["counts"]["fail"] == 2
    assert saved["window"]["start_utc"] == "2026-05-28 20:26:40Z"
    assert saved["thresholds"]["vram_leak_bytes_per_hour"]["value"] == GIB
    assert all(set(v) >= {"check", "node", "gpu", "verdict", "value", "threshold", "source", "detail"}
               for v in saved["verdicts"])  # fmt: skip
    markdown = (tmp_path / "report.md").read_text()
    assert "**Verdict: FAIL** (2 fail, 1 warn," in markdown
    assert "| node | GPU | check | value | threshold | verdict | detail |" in markdown
    table = [line for line in markdown.splitlines() if line.startswith("| node-")]
    # Failures first: the leak and the drop, each naming its node and GPU.
    assert table[0].startswith("| node-a | 3 | vram_leak | 3.00 GiB/h | 1.00 GiB/h | **FAIL** |")
    assert table[1].startswith("| node-b | 7 | gpu_drop | 7 GPUs | 8 GPUs | **FAIL** |")
    assert table[2].startswith("| node-a | 5 | vram_spike | 40.00 GiB |")
    assert "![node-a-vram.png](plots/node-a-vram.png)" in markdown


def test_the_training_plot_is_written_with_the_ranks(tmp_path):
    pytest.importorskip("matplotlib")

    def spoil(rank, step, logs):
        return dict(logs, loss=logs["loss"] * 3) if rank == 1 and step == 24 else logs

    data = replay_training(Scrapes(), change=spoil).data()
    report = stability.write_report(str(tmp_path), "sandbox-tiny", training_window(), data, {})
    assert report["plots"] == ["plots/training.png"]
    assert_png(tmp_path / "plots" / "training.png")
    assert report["verdict"] == "warn"
    assert len(report["training"]["intervals"]) == 8


def test_without_matplotlib_the_report_says_why_it_has_no_plots(tmp_path, monkeypatch):
    monkeypatch.setattr(stability, "_pyplot", lambda: None)
    scrapes = Scrapes()
    steady(scrapes, "node-a", mi300_8gpu_idle(), hours=1)
    report = stability.write_report(str(tmp_path), "job", window(1), scrapes.data(), {"nodes": ["node-a"]})
    assert report["plots"] == [] and "matplotlib is not installed" in report["plots_skipped"]
    assert "No plots: matplotlib is not installed" in (tmp_path / "report.md").read_text()


# ---------------------------------------------------------------------------------------------
# the command line and the Prometheus client


def write_responses(folder, scrapes):
    folder.mkdir()
    for name, answer in scrapes.responses().items():
        (folder / f"{name}.json").write_text(json.dumps(answer))
    return folder


def run_cli(capsys, *args):
    code = stability.cli([str(arg) for arg in args])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("instinct-stability-report: "), out
    return code, json.loads(out[0].split(": ", 1)[1])


def test_the_cli_exits_3_on_a_failing_verdict_and_0_on_a_passing_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(stability, "_pyplot", lambda: None)
    failing = write_responses(tmp_path / "failing", incident_run())
    common = ("--job", "incident", "--start", START, "--end", START + HOURS * 3600)
    code, result = run_cli(capsys, "--responses", failing, *common, "--out", tmp_path / "out1", "--scrape-interval", 60)
    assert code == 3
    assert result["verdict"] == "fail" and result["failed"] == ["gpu_drop@node-b", "vram_leak@node-a"]
    assert result["report"] == str(tmp_path / "out1" / "report.json")
    scrapes = Scrapes()
    steady(scrapes, "node-a", mi300_8gpu_idle())
    passing = write_responses(tmp_path / "passing", scrapes)
    code, result = run_cli(capsys, "--responses", passing, *common, "--out", tmp_path / "out2", "--scrape-interval", 60)
    assert code == 0 and result["verdict"] == "pass"
    (tmp_path / "limits.json").write_text(json.dumps({"temperature_limit_c": {"junction": 44}}))
    code, result = run_cli(
        capsys, "--responses", passing, *common, "--out", tmp_path / "out3", "--thresholds", tmp_path / "limits.json",
        "--scrape-interval", 60,
    )  # fmt: skip
    assert code == 3 and result["failed"] == ["temperature_junction@node-a"]


class FakePrometheus(http.server.BaseHTTPRequestHandler):
    """Prometheus's /api/v1/query_range on 127.0.0.1: answers from recorded-shape answers by metric
    name, asks for basic auth, and remembers the queries."""

    answers: ClassVar[dict] = {}
    asked: ClassVar[list] = []

    def do_POST(self):
        body = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        type(self).asked.append(
            {key: value[0] for key, value in body.items()} | {"auth": self.headers["Authorization"]}
        )
        if self.headers["Authorization"] != "Basic b3BzOnMzY3JldA==":
            self.reply(401, {"status": "error", "error": "Unauthorized"})
            return
        if self.path != "/api/v1/query_range":
            self.reply(404, {"status": "error", "error": "not found"})
            return
        name = body["query"][0].split("{", 1)[0]
        if name == "instinct_gpu_xgmi_error" and "break" in type(self).answers:
            self.reply(400, {"status": "error", "errorType": "bad_data", "error": "exceeded maximum resolution"})
            return
        self.reply(200, type(self).answers[name])

    def reply(self, code, doc):
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_prometheus():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakePrometheus.asked = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_cli_queries_prometheus_with_basic_auth_and_the_jobs_nodes(tmp_path, capsys, monkeypatch, fake_prometheus):
    monkeypatch.setattr(stability, "_pyplot", lambda: None)
    scrapes = replay_training(Scrapes())
    for when in times(1):
        scrapes.add_gpus(when, "node1", mi300_8gpu_idle())
        scrapes.add_gpus(when, "node2", mi300_8gpu_idle())
        scrapes.add_gpus(when, "unrelated", mi300_8gpu_idle())
    FakePrometheus.answers = scrapes.responses()
    (tmp_path / "auth").write_text("ops:s3cret\n")
    args = ("--prometheus", fake_prometheus + "/", "--job", "sandbox-tiny", "--start", START, "--end", START + 3600,
            "--scrape-interval", 60)  # fmt: skip
    code, result = run_cli(capsys, *args, "--out", tmp_path / "out", "--basic-auth-file", tmp_path / "auth")
    assert code == 0, result
    asked = FakePrometheus.asked
    assert len(asked) == len(stability.TRAINING_METRICS + stability.GPU_METRICS + stability.NODE_METRICS)
    assert asked[0]["query"] == 'instinct_finetune_step{finetune_job="sandbox-tiny"}'
    assert {a["step"] for a in asked} == {"60s"} and asked[0]["start"] == f"{START:.3f}"
    assert asked[-1]["query"] == 'up{instance=~"node1|node2",job=~"instinct_nodes|instinct_amd_exporter"}'
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["nodes"] == ["node1", "node2"] and report["source"] == fake_prometheus
    # A refused query (Prometheus's own error message) ends with exit 1 and says why.
    FakePrometheus.answers = dict(FakePrometheus.answers, **{"break": True})
    code, result = run_cli(capsys, *args, "--out", tmp_path / "out2", "--basic-auth-file", tmp_path / "auth")
    assert code == 1 and result["verdict"] is None
    assert "HTTP 400: exceeded maximum resolution" in result["error"]
    code, result = run_cli(capsys, "--prometheus", "http://ops:s3cret@127.0.0.1:1", *args[2:], "--out", tmp_path / "x")
    assert code == 1 and "s3cret" not in result["error"] and "--basic-auth-file" in result["error"]
    (tmp_path / "wrong").write_text("ops:nope\n")
    code, result = run_cli(capsys, *args, "--out", tmp_path / "out3", "--basic-auth-file", tmp_path / "wrong")
    assert code == 1 and "HTTP 401: Unauthorized" in result["error"]


def test_saved_responses_load_back_as_recorded_fixtures_will(tmp_path, capsys, monkeypatch, fake_prometheus):
    """What --save-responses writes is the folder layout tests/fixtures/prometheus/ will use."""
    monkeypatch.setattr(stability, "_pyplot", lambda: None)
    scrapes = Scrapes()
    steady(scrapes, "node1", mi300_8gpu_idle(), hours=1)
    FakePrometheus.answers = scrapes.responses()
    (tmp_path / "auth").write_text("ops:s3cret\n")
    code = run_cli(
        capsys, "--prometheus", fake_prometheus, "--job", "none", "--start", START, "--end", START + 3600,
        "--out", tmp_path / "out", "--basic-auth-file", tmp_path / "auth", "--save-responses", "--scrape-interval", 60,
    )[0]  # fmt: skip
    assert code == 0
    saved = stability.load_responses(tmp_path / "out" / "responses")
    assert set(saved) == set(stability.GPU_METRICS + stability.NODE_METRICS + stability.TRAINING_METRICS)
    assert saved == {name: scrapes.responses()[name] for name in saved}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    # No training series: the nodes are every node of the scrape job.
    assert report["nodes"] == ["node1"]


# Real answers of the sandbox's Prometheus for the sandbox job's window (tests/fixtures/prometheus/SOURCES.md).
RECORDED = ROOT / "tests" / "fixtures" / "prometheus" / "sandbox-tiny"
RECORDED_WINDOW = stability.Window(1796627559.0, 1796627663.0, 15.0)
SANDBOX_NODES = ("instinct-sandbox-node1", "instinct-sandbox-node2")


def test_every_verdict_runs_on_the_sandboxs_recorded_answers_and_judges_every_gpu_and_rank():
    """The recorded range-query answers, parsed as the tool parses a live Prometheus's: both nodes' 8
    GPUs are judged on every GPU check, both ranks on the training checks, and the steady recorded GPU
    values pass (the one warning is the 15 s sampling of a 40-step job: a rank a few steps behind)."""
    data = stability.parse_responses(stability.load_responses(str(RECORDED)))
    verdicts = stability.evaluate(data, RECORDED_WINDOW, stability.thresholds(), SANDBOX_NODES, expected_gpus=8)
    checks = {v["check"] for v in verdicts}
    every = ("gpu_drop", "exporter_gap", "temperature_junction", "power_over_limit", "power_throttle", "vram_leak",
             "vram_spike", "training_loss", "training_throughput", "straggler", "eval_loss")  # fmt: skip
    assert set(every) <= checks, sorted(set(every) - checks)
    for check in ("temperature_junction", "power_throttle", "vram_leak"):
        gpus = {(v["node"], v["gpu"]) for v in verdicts if v["check"] == check}
        assert gpus == {(node, str(gpu)) for node in SANDBOX_NODES for gpu in range(8)}, (check, sorted(gpus))
    drops = {v["node"]: v["verdict"] for v in verdicts if v["check"] == "gpu_drop"}
    assert drops == dict.fromkeys(SANDBOX_NODES, "pass")
    peaks = {(v["node"], v["gpu"]): v["value"] for v in verdicts if v["check"] == "temperature_junction"}
    # tests/fixtures/smi/rocmsmi-concise-8gpu.txt's junction temperatures, on both nodes.
    assert [peaks[(SANDBOX_NODES[0], str(gpu))] for gpu in range(8)] == [43, 41, 45, 41, 44, 42, 45, 43]
    assert {v["verdict"] for v in verdicts if v["check"] != "straggler"} == {"pass"}
    assert stability.worst(verdicts) in ("pass", "warn")


def test_the_recorded_answers_with_one_gpu_gone_mid_job_fail_naming_the_node_and_gpu():
    """The same real answers, with GPU 7 of node2 taken out of every per-GPU series and the node's
    count lowered to 7 from the middle of the window on: the drop fails, naming node2 and GPU 7."""
    responses = stability.load_responses(str(RECORDED))
    middle = (RECORDED_WINDOW.start + RECORDED_WINDOW.end) / 2
    for name, doc in responses.items():
        for series in doc["data"]["result"]:
            labels = series["metric"]
            if labels.get("instance") != SANDBOX_NODES[1]:
                continue
            if name == "instinct_gpu_count":
                series["values"] = [[t, "7" if float(t) >= middle else v] for t, v in series["values"]]
            elif labels.get("gpu") == "7":
                series["values"] = [[t, v] for t, v in series["values"] if float(t) < middle]
    data = stability.parse_responses(responses)
    verdicts = stability.evaluate(data, RECORDED_WINDOW, stability.thresholds(), SANDBOX_NODES, expected_gpus=8)
    (drop,) = [v for v in verdicts if v["check"] == "gpu_drop" and v["node"] == SANDBOX_NODES[1]]
    assert drop["verdict"] == "fail", drop
    assert "7" in drop["detail"], drop["detail"]
    assert [v["verdict"] for v in verdicts if v["check"] == "gpu_drop" and v["node"] == SANDBOX_NODES[0]] == ["pass"]
