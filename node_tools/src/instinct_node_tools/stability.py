# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""instinct-stability-report: the stability verdict of a job's window, read back from Prometheus.

Why: the check operators trust most is a long run in which temperature and power stayed in the safe
range, no GPU fell off the bus, VRAM did not leak or spike, no error counter rose and the training
went on at a steady pace. Prometheus stores every one of those series (the GPU collector's and the
ranks' progress files, scraped through node exporter), but nobody reads them back: without this
tool an operator stares at 48 hours of curves per GPU. This tool reads the window, judges each GPU,
node and rank, and writes what a person looks at (plots, ``report.md``) and what a machine reads
(``report.json``).

The layers, each testable alone:

1. fetch: :class:`Prometheus` asks ``/api/v1/query_range`` for each metric of :data:`GPU_METRICS`,
   :data:`NODE_METRICS` and :data:`TRAINING_METRICS` over the window, with a step that keeps every
   series under Prometheus's 11,000 points (:func:`choose_step`);
2. parse: :func:`parse_matrix` turns one decoded response
   (``{"status": "success", "data": {"resultType": "matrix", "result": [...]}}``) into
   :class:`Series`; :func:`load_responses` reads a folder of recorded responses, one
   ``<metric>.json`` per query (what ``--save-responses`` writes, and what recorded fixtures hold);
3. verdicts: pure functions of the parsed series, the window and the thresholds
   (:func:`evaluate`), each returning ``{check, node, gpu, verdict, value, threshold, unit, source,
   detail, events}``;
4. plots (matplotlib, Agg backend; optional: the verdicts do not need it) and the report files.

Nodes are named by Prometheus's ``instance`` label, which the monitoring role sets to the inventory
name (plugins/module_utils/promconfig.py), so a verdict names a node as alerts and ``--limit`` do.
"""

import argparse
import base64
import bisect
import contextlib
import itertools
import json
import math
import os
import re
import ssl
import statistics
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime

from instinct_node_tools import __version__

TOOL = "instinct-stability-report"
EXIT_FAIL = 3
EXIT_ERROR = 1
# Prometheus refuses a range query when (end - start) / step > 11000 (web/api/v1/api.go: "exceeded
# maximum resolution of 11,000 points per timeseries"); choose_step keeps that ratio at 10,999 or less,
# so a series has at most 11,000 points.
MAX_POINTS = 11000
NODE_LABEL = "instance"
# The monitoring role's scrape jobs: the nodes' node exporters (monitoring_scrape_job), and AMD's
# device metrics exporter, whose series recording rules rename to the collector's names
# (plugins/module_utils/promconfig.py AMD_EXPORTER_JOB, roles/monitoring/files/instinct-amd-exporter.rules.yml).
DEFAULT_SCRAPE_JOBS = ("instinct_nodes", "instinct_amd_exporter")
# monitoring_scrape_interval and monitoring_gpu_interval (roles/monitoring/defaults/main.yml).
DEFAULT_SCRAPE_INTERVAL = 15

# Per GPU (labels gpu, and sensor or severity where the collector adds them; gpu_metrics.METRICS).
GPU_METRICS = (
    "instinct_gpu_temperature_celsius",
    "instinct_gpu_power_watts",
    "instinct_gpu_power_limit_watts",
    "instinct_gpu_vram_used_bytes",
    "instinct_gpu_vram_total_bytes",
    "instinct_gpu_utilization_ratio",
    "instinct_gpu_ecc_errors_total",
    "instinct_gpu_pcie_replays_total",
    "instinct_gpu_xgmi_error",
)
# Per node: the collector's own state, and Prometheus's ``up`` of the node's scrape.
NODE_METRICS = (
    "instinct_gpu_count",
    "instinct_gpu_expected_count",
    "instinct_gpu_collector_up",
    "instinct_gpu_collector_stale",
    "instinct_gpu_collector_last_success_timestamp_seconds",
    "up",
)
# Per rank (labels finetune_job, rank, local_rank, node_rank; progress.METRICS).
TRAINING_METRICS = (
    "instinct_finetune_step",
    "instinct_finetune_loss",
    "instinct_finetune_eval_loss",
    "instinct_finetune_tokens_per_second",
    "instinct_finetune_learning_rate",
    "instinct_finetune_last_step_timestamp_seconds",
    "instinct_finetune_running",
    "instinct_finetune_world_size",
)

GIB = 1024**3
_MI300X_STATIC = (
    "the limits 8x AMD Instinct MI300X report in amd-smi static --json (ROCm 7.2.1, "
    "limit.slowdown_hotspot_temperature 100 C, limit.slowdown_vram_temperature 105 C, edge N/A), recorded in "
    "https://github.com/huggingface/dell-ai/pull/54 and kept as tests/fixtures/smi/amdsmi-static-mi300x-8gpu.json; "
    "other models report others (MI210: hotspot 100 C, VRAM 94 C, edge 99 C, amdsmi-static-mi210.json)"
)
_VIOLATIONS = (
    "AMD SMI reports the share of time a GPU was throttled at its Package Power Tracking limit as a "
    "PVIOL (power violation): "
    "https://rocm.docs.amd.com/projects/amdsmi/en/develop/conceptual/gpu-violations.html"
)
_CHOICE = "project choice, no published figure: "

# name: (default, where it comes from). Every verdict states its threshold and this source; a
# --thresholds file overrides values (the source then says so).
THRESHOLDS = {
    "temperature_limit_c": (
        {"junction": 100.0, "memory": 105.0, "edge": None},
        "the GPU's slowdown (throttling) temperature per sensor (hbmN sensors use memory's): " + _MI300X_STATIC,
    ),
    "temperature_margin_c": (5.0, _CHOICE + "warn when a sensor came this close to its limit"),
    "power_limit_w": (None, "used only where a GPU reports no power cap (rocm-smi prints PwrCap Unsupported)"),
    "power_at_limit_ratio": (
        0.98,
        _CHOICE + "power at or above this share of the reported cap counts as time at the cap, a proxy for "
        "AMD's own counter, which the collector does not export (rocm-smi and amd-smi print whole watts); "
        + _VIOLATIONS,
    ),
    "power_throttle_warn_fraction": (
        0.10,
        _CHOICE + "warn when a GPU spent more than this share of the window at its cap",
    ),
    "power_over_limit_ratio": (
        1.05,
        _CHOICE + "fail when power stays above the cap times this for power_over_limit_seconds: the cap is not held",
    ),
    "power_over_limit_seconds": (
        60.0,
        _CHOICE + "longer than one reading; the monitoring role's power alert waits monitoring_alert_for (5m)",
    ),
    "gap_scrape_intervals": (
        3,
        _CHOICE + "a series missing for more than this many scrape intervals is a gap (one missed scrape is noise)",
    ),
    "collector_interval_s": (
        float(DEFAULT_SCRAPE_INTERVAL),
        "how often the GPU collector runs: the monitoring role's monitoring_gpu_interval (default 15 s); "
        "its last good sample older than gap_scrape_intervals of these (or of scrape intervals) is a gap",
    ),
    "gap_fail_fraction": (
        0.10,
        _CHOICE + "fail when gaps cover more than this share of the window: the verdict is blind",
    ),
    "vram_warmup_fraction": (
        0.2,
        _CHOICE + "the allocator grows while the first steps run; trends and spikes are judged after this share",
    ),
    "vram_leak_bytes_per_hour": (
        float(GIB),
        _CHOICE + "1 GiB/h is 48 GiB over a 48-hour run; a caching allocator at steady state stays flat",
    ),
    "vram_leak_min_r2": (0.8, _CHOICE + "the rise must be a sustained trend (least-squares R^2), not noise"),
    "vram_spike_iqr_factor": (
        3.0,
        _CHOICE + "a spike is a deviation from the local median larger than this many interquartile ranges",
    ),
    "vram_spike_min_bytes": (float(GIB), _CHOICE + "a flat series has an IQR of 0: smaller deviations are not spikes"),
    "vram_spike_window_s": (120.0, _CHOICE + "the local median is taken over this long on each side of a sample"),
    "training_interval_s": (300.0, _CHOICE + "steps/s, tokens/s and the slowest rank are given per interval this long"),
    "throughput_drop_ratio": (
        0.5,
        _CHOICE + "warn when an inner interval's rate falls below this share of the run's median interval",
    ),
    "straggler_lag_steps": (
        2,
        _CHOICE + "data-parallel ranks step together; a rank this many optimizer steps behind the median is straggling",
    ),
    "loss_spike_ratio": (1.5, _CHOICE + "a logged loss above this multiple of the rolling median of the previous ones"),
    "loss_window": (20, _CHOICE + "the rolling median covers this many previous logged losses"),
}


class StabilityError(Exception):
    """A response, a thresholds file or an argument that cannot be used (the message says which)."""


@dataclass
class Series:
    """One series of a range query: its labels and its samples in time order."""

    labels: dict
    times: list
    values: list

    def value_at(self, when):
        """The last value at or before ``when`` (None before the first sample)."""
        index = bisect.bisect_right(self.times, when) - 1
        return self.values[index] if index >= 0 else None


@dataclass
class Window:
    """The judged window (unix seconds), the query step and the scrape interval, in seconds."""

    start: float
    end: float
    step: float
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL

    @property
    def seconds(self):
        return max(self.end - self.start, 0.0)

    @property
    def interval(self):
        """How far apart two samples of a healthy series are in the query's answer."""
        return max(self.step, self.scrape_interval)


# ---------------------------------------------------------------------------------------------
# fetch


def choose_step(start, end, scrape_interval=DEFAULT_SCRAPE_INTERVAL, max_points=MAX_POINTS):
    """The query step in whole seconds: the scrape interval, or coarser where the window would give
    more than ``max_points`` points per series."""
    if end <= start:
        raise StabilityError(f"the window ends ({end}) before it starts ({start})")
    needed = math.ceil((end - start) / (max_points - 1))
    return max(math.ceil(scrape_interval), needed, 1)


def parse_time(text):
    """Unix seconds from a number or an RFC 3339 time (as Prometheus accepts both), or ``now`` (a
    running job's window ends when the report is made)."""
    if str(text).strip().lower() == "now":
        return time.time()
    try:
        return float(text)
    except ValueError:
        pass
    value = str(text).strip()
    # datetime.fromisoformat reads a trailing Z only from Python 3.11 on; nodes may run 3.10.
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise StabilityError(f"{text!r} is neither unix seconds nor an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise StabilityError(f"{text!r} has no time zone; add Z or an offset such as +00:00")
    return moment.timestamp()


def _promql_string(value):
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _re2_escape(value):
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", str(value))


def selector(equal=None, regex=None):
    """A PromQL label selector, ``{a="b",c=~"d|e"}``, with the values quoted and escaped."""
    parts = [f"{name}={_promql_string(value)}" for name, value in sorted((equal or {}).items())]
    parts += [f"{name}=~{_promql_string(value)}" for name, value in sorted((regex or {}).items())]
    return "{" + ",".join(parts) + "}"


def node_queries(scrape_jobs, instances):
    """PromQL of every GPU and node metric, limited to the scrape job and, when given, the nodes."""
    regex = {NODE_LABEL: "|".join(_re2_escape(name) for name in instances)} if instances else None
    regex = dict(regex or {}, job="|".join(_re2_escape(name) for name in scrape_jobs))
    return {name: name + selector(None, regex) for name in GPU_METRICS + NODE_METRICS}


def training_queries(job):
    return {name: name + selector({"finetune_job": job}) for name in TRAINING_METRICS}


class Prometheus:
    """Prometheus's HTTP API (range queries only), with optional basic auth and a CA file."""

    def __init__(self, url, auth=None, ca_file=None, timeout=120.0):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StabilityError(f"--prometheus {url!r} is not an http:// or https:// URL")
        # The URL is written into report.json and the result line: no password may ride in it.
        if parts.username is not None or parts.password is not None:
            raise StabilityError("--prometheus carries a user name or password: put user:password in --basic-auth-file")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
        if auth:
            self.headers["Authorization"] = "Basic " + base64.b64encode(auth.encode("utf-8")).decode("ascii")
        self.context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def query_range(self, query, start, end, step):
        """The decoded JSON answer of one range query; a StabilityError says why there is none."""
        # POST: a query naming many nodes can outgrow a URL; Prometheus takes the form body alike.
        body = urllib.parse.urlencode(
            {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}s"}
        )
        request = urllib.request.Request(  # noqa: S310 (the scheme was checked in __init__)
            self.url + "/api/v1/query_range", data=body.encode("ascii"), headers=self.headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as response:  # noqa: S310
                text = response.read()
        except urllib.error.HTTPError as error:
            # Prometheus explains a refused query (400, 422, 503) in the JSON body.
            said = error.read().decode("utf-8", "replace")
            with contextlib.suppress(ValueError, AttributeError):
                said = json.loads(said).get("error") or said
            raise StabilityError(f"{self.url}: {query}: HTTP {error.code}: {str(said)[:500]}") from None
        except (urllib.error.URLError, OSError) as error:
            raise StabilityError(f"cannot reach Prometheus at {self.url}: {getattr(error, 'reason', error)}") from None
        try:
            return json.loads(text)
        except ValueError:
            raise StabilityError(f"{self.url}: {query}: the answer is not JSON") from None


def job_nodes(data):
    """The nodes a job ran on: those its ranks reported from, else (no training series: a soak or a
    burn-in) every node Prometheus scraped (``up``)."""
    for names in (TRAINING_METRICS, ("up",)):
        found = {s.labels.get(NODE_LABEL) for name in names for s in data.get(name) or []} - {None, ""}
        if found:
            return sorted(found)
    return []


def fetch(prometheus, job, window, scrape_jobs=DEFAULT_SCRAPE_JOBS, instances=None):
    """Every metric's range-query answer over the window: ``({metric: decoded JSON}, nodes)``.

    The nodes are ``instances`` when given, else the ones the job's ranks report from, else every
    node of the scrape job (:func:`job_nodes`); the GPU and node metrics are asked for those only.
    """
    responses = {}
    for name, query in training_queries(job).items():
        responses[name] = prometheus.query_range(query, window.start, window.end, window.step)
    nodes = sorted(instances or []) or job_nodes(parse_responses(responses))
    for name, query in node_queries(scrape_jobs, nodes).items():
        responses[name] = prometheus.query_range(query, window.start, window.end, window.step)
    return responses, nodes or job_nodes(parse_responses(responses))


# ---------------------------------------------------------------------------------------------
# parse


def _number(value, where):
    """A sample value: Prometheus writes numbers as strings, NaN and +Inf/-Inf included."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise StabilityError(f"{where}: sample value {value!r} is not a number") from None


def parse_matrix(doc, what="range query"):
    """The series of one decoded ``/api/v1/query_range`` answer (text or bytes are decoded)."""
    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except ValueError:
            raise StabilityError(f"{what}: the answer is not JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        said = doc.get("error") if isinstance(doc, dict) else None
        raise StabilityError(f"{what}: Prometheus did not answer success: {said or str(doc)[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise StabilityError(f"{what}: the answer is not a matrix (a range query's result)")
    found = []
    for entry in data["result"]:
        labels = entry.get("metric") if isinstance(entry, dict) else None
        pairs = entry.get("values") if isinstance(entry, dict) else None
        if not isinstance(labels, dict) or not isinstance(pairs, list):
            raise StabilityError(f"{what}: a result lacks 'metric' or 'values'")
        found.append(_series(labels, pairs, f"{what} {labels}"))
    return found


def _series(labels, pairs, where):
    """One result's samples. The fast path first (a 48-hour answer holds millions of samples); the
    careful one says which sample is wrong."""
    try:
        times = [float(when) for when, value in pairs]
        values = [float(value) for when, value in pairs]
    except (TypeError, ValueError):
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise StabilityError(f"{where}: a sample is {pair!r}, not [time, value]") from None
            _number(pair[0], where)
            _number(pair[1], where)
        raise
    # Prometheus answers in time order; a merged or hand-made answer may not be.
    if any(later < earlier for earlier, later in itertools.pairwise(times)):
        points = sorted(zip(times, values, strict=True))
        times, values = [p[0] for p in points], [p[1] for p in points]
    return Series(dict(labels), times, values)


def parse_responses(responses):
    """``{metric: [Series]}`` from ``{metric: decoded JSON}``; metrics not asked for stay absent."""
    return {name: parse_matrix(doc, name) for name, doc in responses.items()}


def load_responses(folder):
    """``{metric: decoded JSON}`` from a folder of recorded answers named ``<metric>.json``."""
    known = set(GPU_METRICS + NODE_METRICS + TRAINING_METRICS)
    responses = {}
    for name in sorted(os.listdir(folder)):
        stem, extension = os.path.splitext(name)
        if extension == ".json" and stem in known:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                responses[stem] = json.load(handle)
    return responses


# ---------------------------------------------------------------------------------------------
# thresholds


def thresholds(overrides=None):
    """``{name: {"value", "source"}}``: the defaults of :data:`THRESHOLDS` with ``overrides`` applied."""
    merged = {name: {"value": value, "source": source} for name, (value, source) in THRESHOLDS.items()}
    for name, value in (overrides or {}).items():
        if name not in THRESHOLDS:
            raise StabilityError(f"unknown threshold {name!r}; known: {', '.join(sorted(THRESHOLDS))}")
        default = THRESHOLDS[name][0]
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise StabilityError(f"threshold {name} must be an object such as {json.dumps(default)}")
            given = dict(default, **value)
            bad = [key for key, limit in given.items() if limit is not None and not _is_number(limit)]
        else:
            given = value
            bad = [] if _is_number(value) or (value is None and default is None) else [name]
        if bad:
            raise StabilityError(f"threshold {name}: {', '.join(bad)} must be a number, not {value!r}")
        merged[name] = {"value": given, "source": "set by the thresholds file (default: " + THRESHOLDS[name][1] + ")"}
    return merged


def _constant(value):
    """An expected-count function that always answers ``value``."""
    return lambda when: value


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _value(limits, name):
    return limits[name]["value"]


# ---------------------------------------------------------------------------------------------
# verdicts

STATES = ("pass", "warn", "fail")


def verdict(check, node, gpu, state, **fields):
    """One verdict: the keys every consumer may rely on, whatever the check."""
    if state not in STATES:
        raise ValueError(f"verdict {state!r} is not one of {STATES}")
    record = {"check": check, "node": node, "gpu": gpu, "verdict": state}
    for key in ("value", "threshold", "unit", "source", "detail"):
        record[key] = fields.get(key)
    record["events"] = list(fields.get("events") or [])
    return record


def worst(verdicts):
    """The overall verdict: the worst of them (pass when there are none)."""
    return max((v["verdict"] for v in verdicts), key=STATES.index, default="pass")


def _node(series):
    return series.labels.get(NODE_LABEL, "")


def _group(series_list, *keys):
    """``{(label values...): Series}``; series that share the key (a relabelled restart) are merged."""
    grouped = {}
    for series in series_list or []:
        key = tuple(series.labels.get(name, "") for name in keys)
        if key in grouped:
            points = sorted(zip(grouped[key].times + series.times, grouped[key].values + series.values, strict=True))
            grouped[key] = Series(grouped[key].labels, [p[0] for p in points], [p[1] for p in points])
        else:
            grouped[key] = series
    return grouped


def _gpu_sort(key):
    return tuple((0, int(part), "") if str(part).isdigit() else (1, 0, str(part)) for part in key)


def _utc(when):
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(when))


def _gib(value):
    return f"{value / GIB:.2f} GiB"


def _duration(seconds):
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def sensor_limit(sensor, limits):
    """The limit of one temperature sensor: its own, else memory's for an HBM stack's (hbm0..)."""
    if sensor in limits:
        return limits[sensor]
    if sensor.startswith("hbm"):
        return limits.get("memory")
    return None


def check_temperature(data, window, limits):
    """Per GPU and sensor: fail when the peak reached the slowdown limit (the GPU throttles there),
    warn within the margin below it; the time spent at or above the limit is in the detail."""
    found = []
    table = _value(limits, "temperature_limit_c")
    margin = _value(limits, "temperature_margin_c")
    grouped = _group(data.get("instinct_gpu_temperature_celsius"), NODE_LABEL, "gpu", "sensor")
    for (node, gpu, sensor), series in sorted(grouped.items(), key=lambda item: _gpu_sort(item[0])):
        points = [(t, v) for t, v in zip(series.times, series.values, strict=True) if math.isfinite(v)]
        if not points:
            continue
        when, peak = max(points, key=lambda point: point[1])
        limit = sensor_limit(sensor, table)
        check = f"temperature_{sensor}"
        source = limits["temperature_limit_c"]["source"]
        if limit is None:
            found.append(
                verdict(
                    check,
                    node,
                    gpu,
                    "pass",
                    value=peak,
                    unit="C",
                    source=source,
                    detail=f"peak {peak:.1f} C at {_utc(when)}; no limit is known for the {sensor} sensor "
                    f"(set temperature_limit_c.{sensor}), so it is not judged",
                )
            )
            continue
        hot = [t for t, v in points if v >= limit]
        state = "fail" if hot else ("warn" if peak >= limit - margin else "pass")
        detail = f"peak {peak:.1f} C at {_utc(when)}; {_duration(len(hot) * window.step)} at or above {limit:g} C"
        events = [{"kind": "over_limit", "t": t, "gpu": gpu, "value": limit} for t in hot[:50]]
        found.append(
            verdict(
                check,
                node,
                gpu,
                state,
                value=peak,
                threshold=limit,
                unit="C",
                source=source,
                detail=detail,
                events=events,
            )
        )
    return found


def _longest_run(times, flags, step):
    """The longest stretch of consecutive flagged samples, in seconds (each sample stands for a step)."""
    longest = run = 0
    previous = None
    for when, flag in zip(times, flags, strict=True):
        contiguous = previous is not None and when - previous <= step * 1.5
        run = (run + 1 if contiguous else 1) if flag else 0
        longest = max(longest, run)
        previous = when
    return longest * step


def check_power(data, window, limits):
    """Per GPU, against the cap the GPU reports (``instinct_gpu_power_limit_watts``): the share of
    the window spent at the cap (power throttling) and any sustained draw over it."""
    found = []
    caps = _group(data.get("instinct_gpu_power_limit_watts"), NODE_LABEL, "gpu")
    fallback = _value(limits, "power_limit_w")
    at_ratio = _value(limits, "power_at_limit_ratio")
    over_ratio = _value(limits, "power_over_limit_ratio")
    for (node, gpu), series in sorted(
        _group(data.get("instinct_gpu_power_watts"), NODE_LABEL, "gpu").items(), key=lambda item: _gpu_sort(item[0])
    ):
        cap_series = caps.get((node, gpu))
        ratios = []
        for when, watts in zip(series.times, series.values, strict=True):
            cap = cap_series.value_at(when) if cap_series else None
            cap = cap if cap and cap > 0 else fallback
            if cap and math.isfinite(watts):
                ratios.append((when, watts / cap, cap))
        if not ratios:
            found.append(
                verdict(
                    "power_throttle",
                    node,
                    gpu,
                    "pass",
                    unit="share",
                    source=limits["power_limit_w"]["source"],
                    detail="no power cap reported (and power_limit_w not set): not judged",
                )
            )
            continue
        times = [r[0] for r in ratios]
        at_cap = [r[1] >= at_ratio for r in ratios]
        share = sum(at_cap) / len(ratios)
        warn_share = _value(limits, "power_throttle_warn_fraction")
        caps_seen = sorted({r[2] for r in ratios})
        found.append(
            verdict(
                "power_throttle",
                node,
                gpu,
                "warn" if share > warn_share else "pass",
                value=round(share, 4),
                threshold=warn_share,
                unit="share",
                source=limits["power_throttle_warn_fraction"]["source"],
                detail=f"{_duration(sum(at_cap) * window.step)} ({share:.1%} of the samples) at or above "
                f"{at_ratio:g} x the {'/'.join(f'{c:g}' for c in caps_seen)} W cap",
                events=[{"kind": "at_limit", "t": t, "gpu": gpu} for t, f in zip(times, at_cap, strict=True) if f][:50],
            )
        )
        over = [r[1] > over_ratio for r in ratios]
        sustained = _longest_run(times, over, window.step)
        peak = max(ratios, key=lambda r: r[1])
        need = _value(limits, "power_over_limit_seconds")
        found.append(
            verdict(
                "power_over_limit",
                node,
                gpu,
                "fail" if any(over) and sustained >= need else "pass",
                value=round(peak[1], 4),
                threshold=over_ratio,
                unit="x cap",
                source=limits["power_over_limit_ratio"]["source"],
                detail=f"peak {peak[1] * peak[2]:.0f} W = {peak[1]:.2f} x the {peak[2]:g} W cap at "
                f"{_utc(peak[0])}; "
                f"longest stretch over {over_ratio:g} x cap {_duration(sustained)} (fail from {need:g} s)",
            )
        )
    return found


def _gpu_samples(data, node):
    """``{gpu: sorted sample times}`` over every per-GPU metric of a node."""
    seen = {}
    for name in GPU_METRICS:
        for series in data.get(name) or []:
            if _node(series) == node and "gpu" in series.labels:
                seen.setdefault(series.labels["gpu"], set()).update(series.times)
    return {gpu: sorted(found) for gpu, found in seen.items()}


def _missing_at(data, node, when, tolerance):
    """``[(gpu, last sample before when)]`` of the GPUs the node reported in the window but not at
    ``when`` (a range query's answers share their timestamps, so a present GPU has one there)."""
    missing = []
    for gpu, found in _gpu_samples(data, node).items():
        index = bisect.bisect_left(found, when - tolerance)
        if index == len(found) or found[index] > when + tolerance:
            missing.append((gpu, found[index - 1] if index else None))
    return sorted(missing, key=lambda item: _gpu_sort((item[0],)))


def check_gpu_drops(data, window, limits, nodes=(), expected_gpus=None):
    """Per node: fail on any sample where ``instinct_gpu_count`` is below the expected count (the
    ``--expected-gpus`` given, else the node's ``instinct_gpu_expected_count``, else the most GPUs
    it reported in the window), naming the GPUs whose series ended before the node's others."""
    found = []
    counts = _group(data.get("instinct_gpu_count"), NODE_LABEL)
    expects = _group(data.get("instinct_gpu_expected_count"), NODE_LABEL)
    for node in sorted(set(nodes) | {key[0] for key in counts}):
        series = counts.get((node,))
        if series is None or not series.times:
            found.append(
                verdict(
                    "gpu_drop",
                    node,
                    None,
                    "fail",
                    source="instinct_gpu_count (GPU collector)",
                    detail="no instinct_gpu_count sample in the window: the GPU collector did not run or was "
                    "not scraped, so no GPU of this node can be judged",
                )
            )
            continue
        expected_series = expects.get((node,))
        if expected_gpus is not None:
            source, expect_at = "--expected-gpus", _constant(expected_gpus)
        elif expected_series is not None and expected_series.times:
            source = "instinct_gpu_expected_count (what rocminfo saw when the monitoring role ran)"
            expect_at = expected_series.value_at
        else:
            source = "the most GPUs the node reported in the window (no expected count)"
            expect_at = _constant(max(v for v in series.values if math.isfinite(v)))
        drops = []
        for when, count in zip(series.times, series.values, strict=True):
            expect = expect_at(when)
            if expect is None and expected_series is not None:
                expect = expected_series.values[0]
            if expect is not None and count < expect:
                drops.append((when, count, expect))
        expected_value = expect_at(series.times[-1]) or expect_at(series.times[0])
        if not drops:
            of = f" of {expected_value:g}" if expected_value is not None else ""
            found.append(
                verdict(
                    "gpu_drop",
                    node,
                    None,
                    "pass",
                    value=min(series.values),
                    threshold=expected_value,
                    unit="GPUs",
                    source=source,
                    detail=f"{min(series.values):g} or more{of} GPUs in every sample",
                )
            )
            continue
        first = drops[0]
        # The GPUs that left: reported in the window, but absent from the sample where the count fell.
        missing = _missing_at(data, node, first[0], window.step / 2)
        gone = [gpu for gpu, before in missing]
        gone_text = (
            "; ".join(
                f"GPU {gpu} absent from then on" if before is None else f"GPU {gpu} last reported at {_utc(before)}"
                for gpu, before in missing
            )
            or "every GPU seen in the window still had samples then (the collector listed fewer without naming which)"
        )
        found.append(
            verdict(
                "gpu_drop",
                node,
                ",".join(gone) or None,
                "fail",
                value=min(d[1] for d in drops),
                threshold=first[2],
                unit="GPUs",
                source=source,
                detail=f"instinct_gpu_count fell to {first[1]:g} (expected {first[2]:g}) at {_utc(first[0])}, "
                f"below expected for {_duration(len(drops) * window.step)}; {gone_text}",
                events=[{"kind": "drop", "t": first[0], "gpu": ",".join(gone) or None}],
            )
        )
    return found


def _spans(times, start, end, limit):
    """``[(from, to)]`` of the stretches longer than ``limit`` with no sample, edges of the window included."""
    spans = []
    edges = [start, *times, end]
    for before, after in itertools.pairwise(edges):
        if after - before > limit:
            spans.append((before, after))
    return spans


def _flagged_spans(series, predicate, step):
    spans = []
    for when, value in zip(series.times, series.values, strict=True):
        if predicate(value):
            if spans and when - spans[-1][1] <= step * 1.5:
                spans[-1] = (spans[-1][0], when)
            else:
                spans.append((when, when))
    return [(a, b + step) for a, b in spans]


def check_exporter_gaps(data, window, limits, nodes=()):
    """Per node: stretches without GPU data, whatever the cause: Prometheus could not scrape the node
    (``up == 0``), no ``instinct_gpu_count`` sample for longer than ``gap_scrape_intervals`` scrape
    intervals, the collector's readers all failing (``instinct_gpu_collector_up == 0``, stale) or its
    last good sample growing old. Warn on any; fail when they cover ``gap_fail_fraction`` of the window.

    Prometheus fills a missing scrape from the previous sample for up to 5 minutes (its lookback),
    so a short outage of a target that answers again shows up in ``up`` and in the collector's
    flags, not as missing points."""
    found = []
    gap_limit = window.interval * _value(limits, "gap_scrape_intervals")
    sources = {
        "up": ("scrape failed (up == 0)", lambda v: v == 0),
        "instinct_gpu_collector_up": ("every GPU reader failed (instinct_gpu_collector_up == 0)", lambda v: v == 0),
        "instinct_gpu_collector_stale": ("stale GPU values (instinct_gpu_collector_stale == 1)", lambda v: v == 1),
    }
    # The last good sample's age at a query step adds the collector timer's period and the scrape's.
    age_limit = _value(limits, "gap_scrape_intervals") * max(window.interval, _value(limits, "collector_interval_s"))

    def too_old(age):
        return age > age_limit

    counts = _group(data.get("instinct_gpu_count"), NODE_LABEL)
    for node in sorted(set(nodes) | {key[0] for key in counts}):
        reasons = []
        series = counts.get((node,))
        for span in _spans(series.times if series else [], window.start, window.end, gap_limit):
            reasons.append((span, f"no instinct_gpu_count sample for {_duration(span[1] - span[0])}"))
        for name, (text, predicate) in sources.items():
            flagged = _group(data.get(name), NODE_LABEL).get((node,))
            for span in _flagged_spans(flagged, predicate, window.step) if flagged else []:
                reasons.append((span, text))
        success = _group(data.get("instinct_gpu_collector_last_success_timestamp_seconds"), NODE_LABEL).get((node,))
        if success is not None:
            old = Series({}, success.times, [t - v for t, v in zip(success.times, success.values, strict=True)])
            for span in _flagged_spans(old, too_old, window.step):
                reasons.append((span, f"the collector's last good sample older than {age_limit:g} s"))
        covered = _covered([span for span, text in reasons])
        share = covered / window.seconds if window.seconds else 0.0
        state = "fail" if share > _value(limits, "gap_fail_fraction") else ("warn" if reasons else "pass")
        kinds = sorted({text for span, text in reasons})
        detail = (
            f"{_duration(covered)} ({share:.1%} of the window) without good GPU data: " + "; ".join(kinds)
            if reasons
            else f"a sample at least every {_duration(gap_limit)} throughout, collector up, nothing stale"
        )
        found.append(
            verdict(
                "exporter_gap",
                node,
                None,
                state,
                value=round(covered, 1),
                threshold=gap_limit,
                unit="s",
                source=limits["gap_scrape_intervals"]["source"],
                detail=detail,
                events=[{"kind": "gap", "t": span[0], "until": span[1], "gpu": None} for span, text in reasons][:200],
            )
        )
    return found


def _covered(spans):
    """Seconds covered by the union of ``spans``."""
    total = 0.0
    current = None
    for begin, finish in sorted(spans):
        if current is None or begin > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = [begin, finish]
        else:
            current[1] = max(current[1], finish)
    if current is not None:
        total += current[1] - current[0]
    return total


def _after_warmup(series, fraction):
    points = [(t, v) for t, v in zip(series.times, series.values, strict=True) if math.isfinite(v)]
    if not points:
        return []
    cut = points[0][0] + (points[-1][0] - points[0][0]) * fraction
    return [(t, v) for t, v in points if t >= cut]


def least_squares(points):
    """``(slope, intercept, r2)`` of a straight line through ``[(x, y)]``; r2 is 0 for a flat series."""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    slope, intercept = statistics.linear_regression(xs, ys)
    try:
        r2 = statistics.correlation(xs, ys) ** 2
    except statistics.StatisticsError:
        r2 = 0.0
    return slope, intercept, r2


# Fewer points than this after the warm-up cannot show a trend.
MIN_TREND_POINTS = 10


def check_vram_leak(data, window, limits):
    """Per GPU: the least-squares slope of VRAM used after the warm-up share of its samples; fail when
    it rises faster than ``vram_leak_bytes_per_hour`` as a sustained trend (R^2 at least
    ``vram_leak_min_r2``), with the projected time until the VRAM is full."""
    found = []
    totals = _group(data.get("instinct_gpu_vram_total_bytes"), NODE_LABEL, "gpu")
    rate_limit = _value(limits, "vram_leak_bytes_per_hour")
    min_r2 = _value(limits, "vram_leak_min_r2")
    source = limits["vram_leak_bytes_per_hour"]["source"]
    for (node, gpu), series in sorted(
        _group(data.get("instinct_gpu_vram_used_bytes"), NODE_LABEL, "gpu").items(), key=lambda item: _gpu_sort(item[0])
    ):
        points = _after_warmup(series, _value(limits, "vram_warmup_fraction"))
        if len(points) < MIN_TREND_POINTS:
            found.append(
                verdict(
                    "vram_leak",
                    node,
                    gpu,
                    "pass",
                    threshold=rate_limit,
                    unit="B/h",
                    source=source,
                    detail=f"only {len(points)} samples after the warm-up: too few to show a trend",
                )
            )
            continue
        hours = [((t - points[0][0]) / 3600.0, v) for t, v in points]
        slope, intercept, r2 = least_squares(hours)
        total = totals.get((node, gpu))
        total_bytes = total.values[-1] if total and total.values else None
        leaking = slope > rate_limit and r2 >= min_r2
        fitted_now = intercept + slope * hours[-1][0]
        if slope > 0 and total_bytes:
            to_full = (
                f"full ({_gib(total_bytes)}) in about {max(total_bytes - fitted_now, 0) / slope:.0f} h at this rate"
            )
        else:
            to_full = "not filling"
        found.append(
            verdict(
                "vram_leak",
                node,
                gpu,
                "fail" if leaking else "pass",
                value=round(slope, 1),
                threshold=rate_limit,
                unit="B/h",
                source=source,
                detail=f"VRAM used {'rose' if slope >= 0 else 'fell'} {_gib(abs(slope))}/h after the first "
                f"{_value(limits, 'vram_warmup_fraction'):.0%} of the run (R^2 {r2:.2f}, trend from R^2 "
                f"{min_r2:g}); {to_full}",
                events=[{"kind": "leak", "t": points[0][0], "until": points[-1][0], "gpu": gpu}] if leaking else [],
            )
        )
    return found


def _iqr(values):
    if len(values) < 2:
        return 0.0
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    return quartiles[2] - quartiles[0]


def check_vram_spikes(data, window, limits):
    """Per GPU, after the warm-up: the largest deviation of a sample above the median of its
    neighbours (``vram_spike_window_s`` each side), against ``vram_spike_iqr_factor`` times the
    run's interquartile range (at least ``vram_spike_min_bytes``). A level that changes and stays is
    not a spike; a short excursion is. Warn."""
    found = []
    half = max(1, round(_value(limits, "vram_spike_window_s") / window.interval))
    factor = _value(limits, "vram_spike_iqr_factor")
    floor = _value(limits, "vram_spike_min_bytes")
    for (node, gpu), series in sorted(
        _group(data.get("instinct_gpu_vram_used_bytes"), NODE_LABEL, "gpu").items(), key=lambda item: _gpu_sort(item[0])
    ):
        points = _after_warmup(series, _value(limits, "vram_warmup_fraction"))
        if len(points) < 3:
            continue
        values = [v for t, v in points]
        spread = _iqr(values)
        limit = max(factor * spread, floor)
        largest = (0.0, points[0][0], values[0])
        for index, (when, value) in enumerate(points):
            neighbours = values[max(0, index - half) : index] + values[index + 1 : index + 1 + half]
            deviation = value - statistics.median(neighbours) if neighbours else 0.0
            if deviation > largest[0]:
                largest = (deviation, when, value)
        spiked = largest[0] > limit
        found.append(
            verdict(
                "vram_spike",
                node,
                gpu,
                "warn" if spiked else "pass",
                value=round(largest[0], 1),
                threshold=round(limit, 1),
                unit="B",
                source=limits["vram_spike_iqr_factor"]["source"],
                detail=f"largest jump {_gib(largest[0])} above the local median at {_utc(largest[1])}; the run's "
                f"IQR is {_gib(spread)}, a spike from {_gib(limit)}",
                events=[{"kind": "spike", "t": largest[1], "gpu": gpu, "value": largest[2]}] if spiked else [],
            )
        )
    return found


def counter_increase(series):
    """How much a counter rose over its samples, counting a reset (a fall) as a restart from zero,
    as Prometheus's increase() does."""
    values = [v for v in series.values if math.isfinite(v)]
    rise = 0.0
    for before, after in itertools.pairwise(values):
        rise += after - before if after >= before else after
    return rise


def check_ras(data, window, limits):
    """Per GPU: the error counters that rose in the window. Uncorrectable ECC and an XGMI link error
    fail (results may be wrong, a link is down); correctable ECC and PCIe replays warn."""
    found = []
    ecc = _group(data.get("instinct_gpu_ecc_errors_total"), NODE_LABEL, "gpu", "severity")
    replays = _group(data.get("instinct_gpu_pcie_replays_total"), NODE_LABEL, "gpu")
    xgmi = _group(data.get("instinct_gpu_xgmi_error"), NODE_LABEL, "gpu")
    gpus = {key[:2] for key in ecc} | set(replays) | set(xgmi)
    for node, gpu in sorted(gpus, key=_gpu_sort):
        parts, state, events = [], "pass", []
        for severity, bad in (("uncorrectable", "fail"), ("correctable", "warn")):
            series = ecc.get((node, gpu, severity))
            if series is not None:
                rise = counter_increase(series)
                parts.append(f"ECC {severity} +{rise:g}")
                if rise > 0:
                    state = max(state, bad, key=STATES.index)
                    events.append({"kind": f"ecc_{severity}", "t": series.times[-1], "gpu": gpu})
        if (node, gpu) in replays:
            rise = counter_increase(replays[(node, gpu)])
            parts.append(f"PCIe replays +{rise:g}")
            state = max(state, "warn" if rise > 0 else "pass", key=STATES.index)
        if (node, gpu) in xgmi:
            series = xgmi[(node, gpu)]
            errors = [t for t, v in zip(series.times, series.values, strict=True) if v >= 1]
            parts.append(f"XGMI error in {len(errors)} samples" if errors else "XGMI no error")
            if errors:
                state = "fail"
                events.append({"kind": "xgmi_error", "t": errors[0], "gpu": gpu})
        found.append(
            verdict(
                "ras",
                node,
                gpu,
                state,
                value=None,
                threshold=0,
                unit="errors",
                source="any rise of a hardware error counter in the window (increase() > 0)",
                detail="; ".join(parts),
                events=events,
            )
        )
    return found


# ---------------------------------------------------------------------------------------------
# training


def _ranks(data, name):
    """``{rank: Series}`` of one training metric (rank labels as Prometheus gives them)."""
    return {key[0]: s for key, s in _group(data.get(name), "rank").items()}


def _rank_sort(rank):
    return (0, int(rank), "") if str(rank).isdigit() else (1, 0, str(rank))


def throughput_intervals(data, window, length):
    """Per interval of ``length`` seconds: the job's steps/s (from the most advanced rank's global
    step), its tokens/s (the ranks' shares summed) and the slowest rank (fewest steps, then fewest
    tokens/s; None when all ranks advanced alike)."""
    steps = _ranks(data, "instinct_finetune_step")
    tokens = _ranks(data, "instinct_finetune_tokens_per_second")
    if not steps:
        return []
    first = min(s.times[0] for s in steps.values() if s.times)
    last = max(s.times[-1] for s in steps.values() if s.times)
    intervals = []
    begin = first
    while begin < last:
        finish = min(begin + length, last)
        advance = {}
        for rank, series in steps.items():
            before, after = series.value_at(begin), series.value_at(finish)
            if after is not None:
                advance[rank] = after - (before if before is not None else after)
        rates = {}
        for rank, series in tokens.items():
            # bisect: a 48-hour window has 11,000 samples per rank and hundreds of intervals.
            low, high = bisect.bisect_left(series.times, begin), bisect.bisect_right(series.times, finish)
            inside = [v for v in series.values[low:high] if math.isfinite(v)]
            if inside:
                rates[rank] = statistics.fmean(inside)
        job_advance = max(advance.values()) if advance else 0.0
        slowest = None
        if advance and len(set(advance.values())) > 1:
            slowest = min(advance, key=lambda r: (advance[r], rates.get(r, 0.0)))
        elif len(rates) > 1 and max(rates.values()) > min(rates.values()):
            slowest = min(rates, key=rates.get)
        intervals.append(
            {
                "start": begin,
                "end": finish,
                "steps_per_second": job_advance / (finish - begin) if finish > begin else 0.0,
                "tokens_per_second": sum(rates.values()) if rates else None,
                "slowest_rank": slowest,
            }
        )
        begin = finish
    return intervals


def check_throughput(data, window, limits):
    """The job: steps/s and tokens/s per interval; warn when an inner interval (the first and last are
    start-up and wind-down) ran below ``throughput_drop_ratio`` of the median interval. The value is
    the slowest inner interval's rate (the median's when there is none), the threshold the ratio
    times the median."""
    intervals = throughput_intervals(data, window, _value(limits, "training_interval_s"))
    if not intervals:
        return []
    use_tokens = all(i["tokens_per_second"] is not None for i in intervals)
    key = "tokens_per_second" if use_tokens else "steps_per_second"
    median = statistics.median(i[key] for i in intervals)
    ratio = _value(limits, "throughput_drop_ratio")
    inner = intervals[1:-1]
    slow = [i for i in inner if median > 0 and i[key] < ratio * median]
    slowest = min((i[key] for i in inner), default=median)
    unit = "tokens/s" if use_tokens else "steps/s"
    detail = (
        f"median {median:.4g} {unit} over {len(intervals)} intervals of "
        f"{_duration(_value(limits, 'training_interval_s'))}; steps/s "
        f"{min(i['steps_per_second'] for i in intervals):.4g} to {max(i['steps_per_second'] for i in intervals):.4g}"
    )
    if slow:
        detail += "; slow: " + ", ".join(f"{_utc(i['start'])} {i[key]:.4g} {unit}" for i in slow[:5])
    return [
        verdict(
            "training_throughput",
            None,
            None,
            "warn" if slow else "pass",
            value=round(slowest, 4),
            threshold=round(ratio * median, 4),
            unit=unit,
            source=limits["throughput_drop_ratio"]["source"],
            detail=detail,
            events=[{"kind": "slow", "t": i["start"], "until": i["end"], "gpu": None} for i in slow],
        )
    ]


def check_stragglers(data, window, limits):
    """Per rank: how many optimizer steps it fell behind the median of the ranks at any sample; warn
    beyond ``straggler_lag_steps``. The GPU named is the rank's local rank (the GPU it drives)."""
    steps = _ranks(data, "instinct_finetune_step")
    if len(steps) < 2:
        return []
    limit = _value(limits, "straggler_lag_steps")
    times = sorted({t for s in steps.values() for t in s.times})
    lags = {rank: [] for rank in steps}
    for when in times:
        now = {rank: s.value_at(when) for rank, s in steps.items()}
        now = {rank: v for rank, v in now.items() if v is not None and math.isfinite(v)}
        if len(now) < 2:
            continue
        middle = statistics.median(now.values())
        for rank, value in now.items():
            lags[rank].append((when, middle - value))
    found = []
    for rank in sorted(steps, key=_rank_sort):
        labels = steps[rank].labels
        worst_lag = max(lags[rank], key=lambda p: p[1], default=(None, 0.0))
        behind = [t for t, lag in lags[rank] if lag > limit]
        detail = f"at most {worst_lag[1]:g} steps behind the median of the ranks"
        if behind:
            detail += f", more than {limit:g} in {len(behind)} samples from {_utc(behind[0])}"
        found.append(
            verdict(
                "straggler",
                _node(steps[rank]),
                labels.get("local_rank"),
                "warn" if behind else "pass",
                value=worst_lag[1],
                threshold=limit,
                unit="steps",
                source=limits["straggler_lag_steps"]["source"],
                detail=f"rank {rank}: {detail}",
                events=[{"kind": "straggler", "t": behind[0], "gpu": labels.get("local_rank")}] if behind else [],
            )
        )
    return found


def logged_values(series):
    """The values a gauge took when they changed: a logged loss stays in the file until the next
    logging step, so Prometheus repeats it at every scrape."""
    logged = []
    for when, value in zip(series.times, series.values, strict=True):
        if not logged or not (value == logged[-1][1] or (math.isnan(value) and math.isnan(logged[-1][1]))):
            logged.append((when, value))
    return logged


def check_loss(data, window, limits):
    """Per rank: fail on a NaN or infinite training loss; warn on a spike, a logged loss above
    ``loss_spike_ratio`` times the median of the previous ``loss_window`` ones."""
    found = []
    ratio = _value(limits, "loss_spike_ratio")
    width = int(_value(limits, "loss_window"))
    for rank, series in sorted(_ranks(data, "instinct_finetune_loss").items(), key=lambda item: _rank_sort(item[0])):
        logged = logged_values(series)
        bad = [(t, v) for t, v in logged if not math.isfinite(v)]
        spikes = []
        for index, (when, value) in enumerate(logged):
            before = [v for t, v in logged[max(0, index - width) : index] if math.isfinite(v)]
            if len(before) >= 3 and math.isfinite(value) and value > ratio * statistics.median(before):
                spikes.append((when, value, statistics.median(before)))
        finite = [v for t, v in logged if math.isfinite(v)]
        last = finite[-1] if finite else None
        parts = [f"{len(logged)} logged losses, last {last:.4g}" if last is not None else "no finite loss"]
        if bad:
            parts.append(f"{bad[0][1]} at {_utc(bad[0][0])} ({len(bad)} non-finite)")
        parts += [f"spike {v:.4g} vs median {m:.4g} at {_utc(t)}" for t, v, m in spikes[:3]]
        state = "fail" if bad else ("warn" if spikes else "pass")
        events = [{"kind": "nan", "t": t, "gpu": None} for t, v in bad[:20]]
        events += [{"kind": "loss_spike", "t": t, "gpu": None, "value": v} for t, v, m in spikes[:20]]
        found.append(
            verdict(
                "training_loss",
                _node(series),
                series.labels.get("local_rank"),
                state,
                value=last,
                threshold=ratio,
                unit="loss",
                source=limits["loss_spike_ratio"]["source"],
                detail=f"rank {rank}: " + "; ".join(parts),
                events=events,
            )
        )
    return found


def check_eval_loss(data, window, limits):
    """The job's last evaluation loss (the ranks agree; the first rank's is given); fail when it is
    NaN or infinite. No evaluation in the window is said, not judged."""
    ranks = _ranks(data, "instinct_finetune_eval_loss")
    if not ranks:
        return []
    rank = min(ranks, key=_rank_sort)
    series = ranks[rank]
    if not series.values:
        return []
    last = series.values[-1]
    state = "pass" if math.isfinite(last) else "fail"
    logged = logged_values(series)
    return [
        verdict(
            "eval_loss",
            _node(series),
            None,
            state,
            value=last,
            unit="loss",
            source="the evaluation loss the Trainer logged (instinct_finetune_eval_loss)",
            detail=f"last eval loss {last:.4g} at {_utc(series.times[-1])} (rank {rank}); "
            f"{len(logged)} evaluations logged: " + ", ".join(f"{v:.4g}" for t, v in logged[-5:]),
        )
    ]


CHECKS = (
    check_temperature,
    check_power,
    check_vram_leak,
    check_vram_spikes,
    check_ras,
    check_throughput,
    check_stragglers,
    check_loss,
    check_eval_loss,
)


def evaluate(data, window, limits=None, nodes=(), expected_gpus=None):
    """Every verdict of the window, node checks first, then per GPU, then the training's."""
    limits = limits or thresholds()
    found = check_gpu_drops(data, window, limits, nodes, expected_gpus)
    found += check_exporter_gaps(data, window, limits, nodes)
    for check in CHECKS:
        found += check(data, window, limits)
    return found


# ---------------------------------------------------------------------------------------------
# plots


def _pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display), or None when not installed:
    the verdicts do not need it."""
    try:
        import matplotlib  # noqa: PLC0415 (optional: the report is written without plots)
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("_") or "node"


_EVENT_STYLE = {
    "drop": {"color": "red", "linestyle": "--", "label": "GPU dropped"},
    "straggler": {"color": "orange", "linestyle": ":", "label": "straggler"},
    "nan": {"color": "purple", "linestyle": "--", "label": "NaN/inf loss"},
}


def _draw_events(axis, events, start, marks):
    """Drops and NaNs as vertical lines, gaps and slow stretches as shaded spans, spikes as crosses."""
    for event in events:
        x = (event["t"] - start) / 3600.0
        kind = event["kind"]
        if kind in _EVENT_STYLE:
            axis.axvline(x, linewidth=1.2, **_EVENT_STYLE[kind])
        elif kind == "leak":
            axis.axvspan(
                x, (event["until"] - start) / 3600.0, color="red", alpha=0.08, label=f"VRAM leak (GPU {event['gpu']})"
            )
        elif kind in ("gap", "slow") and event.get("until") is not None:
            axis.axvspan(
                x,
                (event["until"] - start) / 3600.0,
                color="grey",
                alpha=0.25,
                label="no GPU data" if kind == "gap" else "slow interval",
            )
        elif kind in marks and event.get("value") is not None:
            axis.plot(
                [x],
                [event["value"] * marks[kind]],
                "x",
                color="red",
                markersize=10,
                markeredgewidth=2,
                label=kind.replace("_", " "),
            )


def _finish(plt, figure, axis, path):
    handles, labels = axis.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        axis.legend(unique.values(), unique.keys(), fontsize="small", loc="best", ncol=2)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_gpu_metric(plt, path, spec):
    """One chart, every GPU of a node as a line. ``spec``: title, ylabel, start (unix s), scale
    (values are multiplied by it), series ({gpu: Series}), hlines ([(y, label)], unscaled) and
    events (the node's verdict events)."""
    figure, axis = plt.subplots(figsize=(11, 5))
    scale = spec.get("scale", 1.0)
    start = spec["start"]
    for gpu in sorted(spec["series"], key=lambda g: _gpu_sort((g,))):
        series = spec["series"][gpu]
        axis.plot(
            [(t - start) / 3600.0 for t in series.times],
            [v * scale for v in series.values],
            linewidth=1,
            label=f"GPU {gpu}",
        )
    for number, (value, label) in enumerate(spec.get("hlines") or []):
        axis.axhline(
            value * scale,
            color="black" if number == 0 else "dimgrey",
            linestyle="-." if number else "-",
            linewidth=1.2,
            label=label,
        )
    _draw_events(axis, spec.get("events") or [], start, {"spike": scale})
    if spec.get("from_zero"):
        axis.set_ylim(bottom=0)
    axis.set_title(spec["title"])
    axis.set_xlabel(f"hours since {_utc(start)}")
    axis.set_ylabel(spec["ylabel"])
    _finish(plt, figure, axis, path)
    return path


def _node_events(verdicts, node, kinds):
    return [e for v in verdicts if v["node"] == node for e in v["events"] if e["kind"] in kinds]


def _node_specs(data, window, limits, verdicts, node):
    """``[(file stem, spec)]`` of one node's charts: temperature per sensor, power, VRAM, utilization."""
    specs = []
    common = _node_events(verdicts, node, ("drop", "gap"))

    def gpus_of(name, **match):
        return {
            s.labels.get("gpu", "?"): s
            for s in data.get(name) or []
            if _node(s) == node and all(s.labels.get(k) == v for k, v in match.items())
        }

    sensors = sorted(
        {s.labels.get("sensor", "") for s in data.get("instinct_gpu_temperature_celsius") or [] if _node(s) == node}
    )
    table = _value(limits, "temperature_limit_c")
    for sensor in sensors:
        limit = sensor_limit(sensor, table)
        hlines = []
        if limit is not None:
            hlines = [
                (limit, f"slowdown limit {limit:g} C"),
                (limit - _value(limits, "temperature_margin_c"), "warn from"),
            ]
        specs.append(
            (
                f"temperature-{_safe(sensor)}",
                {
                    "title": f"{node}: {sensor} temperature",
                    "ylabel": "C",
                    "series": gpus_of("instinct_gpu_temperature_celsius", sensor=sensor),
                    "hlines": hlines,
                    "events": common,
                },
            )
        )
    caps = sorted({v for s in gpus_of("instinct_gpu_power_limit_watts").values() for v in s.values if v > 0})
    specs.append(
        (
            "power",
            {
                "title": f"{node}: socket power",
                "ylabel": "W",
                "series": gpus_of("instinct_gpu_power_watts"),
                "hlines": [(c, f"power cap {c:g} W") for c in caps],
                "from_zero": True,
                "events": common,
            },
        )
    )
    totals = sorted({v for s in gpus_of("instinct_gpu_vram_total_bytes").values() for v in s.values if v > 0})
    specs.append(
        (
            "vram",
            {
                "title": f"{node}: VRAM used",
                "ylabel": "GiB",
                "scale": 1.0 / GIB,
                "series": gpus_of("instinct_gpu_vram_used_bytes"),
                "hlines": [(c, f"VRAM total {c / GIB:.0f} GiB") for c in totals],
                "events": common + _node_events(verdicts, node, ("spike", "leak")),
                "from_zero": True,
            },
        )
    )
    specs.append(
        (
            "utilization",
            {
                "title": f"{node}: GPU busy",
                "ylabel": "%",
                "scale": 100.0,
                "series": gpus_of("instinct_gpu_utilization_ratio"),
                "from_zero": True,
                "events": common,
            },
        )
    )
    return [(stem, dict(spec, start=window.start)) for stem, spec in specs if spec["series"]]


MAX_LEGEND_RANKS = 16


def plot_training(plt, path, data, window, verdicts):
    """The job: loss (every rank, events marked) with the evaluation losses, tokens/s per rank and
    the global step per rank (a straggler's line falls behind)."""
    figure, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    start = window.start
    panels = (
        ("instinct_finetune_loss", "loss", axes[0]),
        ("instinct_finetune_tokens_per_second", "tokens/s (rank's share)", axes[1]),
        ("instinct_finetune_step", "global step", axes[2]),
    )
    for name, label, axis in panels:
        ranks = sorted(_ranks(data, name).items(), key=lambda item: _rank_sort(item[0]))
        for rank, series in ranks:
            xs = [(t - start) / 3600.0 for t in series.times]
            axis.plot(
                xs,
                [v if math.isfinite(v) else float("nan") for v in series.values],
                linewidth=1,
                # A legend of more ranks than this would hide the chart.
                label=f"rank {rank} ({_node(series)})" if len(ranks) <= MAX_LEGEND_RANKS else None,
            )
        axis.set_ylabel(label)
    for rank, series in _ranks(data, "instinct_finetune_eval_loss").items():
        logged = logged_values(series)
        axes[0].plot(
            [(t - start) / 3600.0 for t, v in logged],
            [v for t, v in logged],
            "o",
            color="black",
            markersize=5,
            label="eval loss" if rank == min(_ranks(data, "instinct_finetune_eval_loss"), key=_rank_sort) else None,
        )
    events = [e for v in verdicts if v["check"] in ("training_loss", "training_throughput") for e in v["events"]]
    _draw_events(axes[0], events, start, {"loss_spike": 1.0})
    _draw_events(axes[2], [e for v in verdicts if v["check"] == "straggler" for e in v["events"]], start, {})
    axes[0].set_title("training")
    axes[2].set_xlabel(f"hours since {_utc(start)}")
    for axis in axes[1:]:
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize="small", ncol=2)
        axis.grid(alpha=0.3)
    _finish(plt, figure, axes[0], path)
    return path


def write_plots(folder, data, window, verdicts, spec):
    """Every chart as a PNG under ``folder``; returns ``(paths, why none)``. ``spec``: limits (the
    thresholds) and nodes."""
    plt = _pyplot()
    if plt is None:
        return [], "matplotlib is not installed (pip install 'instinct-node-tools[plots]')"
    os.makedirs(folder, exist_ok=True)
    paths = []
    seen = {_node(s) for name in GPU_METRICS for s in data.get(name) or []}
    for node in sorted((set(spec.get("nodes") or ()) | seen) - {""}):
        for stem, chart in _node_specs(data, window, spec.get("limits") or thresholds(), verdicts, node):
            paths.append(plot_gpu_metric(plt, os.path.join(folder, f"{_safe(node)}-{stem}.png"), chart))
    if data.get("instinct_finetune_loss") or data.get("instinct_finetune_step"):
        paths.append(plot_training(plt, os.path.join(folder, "training.png"), data, window, verdicts))
    return paths, None


# ---------------------------------------------------------------------------------------------
# the report


def _jsonable(value):
    """JSON has no NaN or infinity: they are written as the strings Prometheus uses."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return value


def _cell(value, unit):
    if value is None:
        return "—"
    if isinstance(value, float) and not math.isfinite(value):
        return str(_jsonable(value))
    if unit == "B":
        return _gib(value)
    if unit == "B/h":
        return _gib(value) + "/h"
    if unit == "share":
        return f"{value:.1%}"
    if isinstance(value, float):
        value = f"{value:.4g}"
    return f"{value} {unit}".strip() if unit and unit not in ("errors", "loss") else str(value)


# Thresholds that are not in the unit of their value.
_THRESHOLD_TEXT = {"training_loss": "{:g} x the rolling median"}


def _threshold_cell(row):
    if row["threshold"] is not None and row["check"] in _THRESHOLD_TEXT:
        return _THRESHOLD_TEXT[row["check"]].format(row["threshold"])
    return _cell(row["threshold"], row["unit"])


def _escape(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def report_markdown(report, plot_folder="plots"):
    """``report.md``: the verdict, the table (failures first) and the plots, linked."""
    order = {"fail": 0, "warn": 1, "pass": 2}
    lines = [
        f"# Stability report: {report['job']}",
        "",
        f"**Verdict: {report['verdict'].upper()}** "
        f"({report['counts']['fail']} fail, {report['counts']['warn']} warn, {report['counts']['pass']} pass)",
        "",
        f"Window: {report['window']['start_utc']} to {report['window']['end_utc']} "
        f"({_duration(report['window']['end'] - report['window']['start'])}, step {report['window']['step']:g} s); "
        f"nodes: {', '.join(report['nodes']) or 'none'}.",
        "",
        "| node | GPU | check | value | threshold | verdict | detail |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = sorted(
        report["verdicts"],
        key=lambda v: (order[v["verdict"]], v["node"] or "", _gpu_sort((v["gpu"] or "",)), v["check"]),
    )
    for row in rows:
        verdict_cell = {"fail": "**FAIL**", "warn": "WARN", "pass": "pass"}[row["verdict"]]
        lines.append(
            f"| {_escape(row['node'] or 'job')} | {_escape(row['gpu'] if row['gpu'] is not None else '—')} | "
            f"{row['check']} | {_escape(_cell(row['value'], row['unit']))} | "
            f"{_escape(_threshold_cell(row))} | {verdict_cell} | {_escape(row['detail'] or '')} |"
        )
    lines += ["", "## Plots", ""]
    if report["plots"]:
        for path in report["plots"]:
            name = os.path.basename(path)
            lines += [f"![{name}]({plot_folder}/{name})", ""]
    else:
        lines += [f"No plots: {report['plots_skipped']}.", ""]
    lines += ["## Thresholds", "", "| threshold | value | source |", "|---|---|---|"]
    for name, item in report["thresholds"].items():
        lines.append(f"| {name} | {_escape(json.dumps(item['value']))} | {_escape(item['source'])} |")
    return "\n".join(lines) + "\n"


def build_report(job, window, verdicts, limits, spec):
    """The content of ``report.json``. ``spec``: nodes, expected_gpus, prometheus (URL or the folder
    of recorded answers), plots, plots_skipped, intervals."""
    counts = {state: sum(1 for v in verdicts if v["verdict"] == state) for state in STATES}
    return _jsonable(
        {
            "tool": TOOL,
            "version": __version__,
            "job": job,
            "source": spec.get("prometheus"),
            "window": {
                "start": window.start,
                "end": window.end,
                "step": window.step,
                "scrape_interval": window.scrape_interval,
                "start_utc": _utc(window.start),
                "end_utc": _utc(window.end),
            },
            "nodes": list(spec.get("nodes") or []),
            "expected_gpus": spec.get("expected_gpus"),
            "verdict": worst(verdicts),
            "counts": counts,
            "verdicts": verdicts,
            "thresholds": limits,
            "training": {"intervals": spec.get("intervals") or []},
            "plots": [os.path.join("plots", os.path.basename(p)) for p in spec.get("plots") or []],
            "plots_skipped": spec.get("plots_skipped"),
        }
    )


def write_report(out, job, window, data, spec):
    """Judge, plot and write ``report.json`` and ``report.md`` under ``out``; returns the report.
    ``spec``: limits (see :func:`thresholds`), nodes, expected_gpus, prometheus (where the data came from)."""
    limits = spec.get("limits") or thresholds()
    os.makedirs(out, exist_ok=True)
    verdicts = evaluate(data, window, limits, spec.get("nodes") or (), spec.get("expected_gpus"))
    plots, skipped = write_plots(os.path.join(out, "plots"), data, window, verdicts, dict(spec, limits=limits))
    intervals = throughput_intervals(data, window, _value(limits, "training_interval_s"))
    report = build_report(
        job, window, verdicts, limits, dict(spec, plots=plots, plots_skipped=skipped, intervals=intervals)
    )
    with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1, allow_nan=False)
        handle.write("\n")
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8") as handle:
        handle.write(report_markdown(report))
    return report


# ---------------------------------------------------------------------------------------------
# the command line


def read_basic_auth(path):
    """``user:password`` from the first line of a file (as curl's -u takes it)."""
    with open(path, encoding="utf-8") as handle:
        line = handle.readline().rstrip("\r\n")
    if ":" not in line or not line.split(":", 1)[0]:
        raise StabilityError(f"{path}: the first line must be user:password")
    return line


def read_thresholds(path):
    if not path:
        return thresholds()
    try:
        with open(path, encoding="utf-8") as handle:
            overrides = json.load(handle)
    except (OSError, ValueError) as error:
        raise StabilityError(f"--thresholds {path}: {error}") from None
    if not isinstance(overrides, dict):
        raise StabilityError(f"--thresholds {path}: must hold a JSON object of threshold: value")
    return thresholds(overrides)


def _parser():
    parser = argparse.ArgumentParser(prog=TOOL, description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", help="Prometheus's URL, e.g. https://monitor.example:9090")
    source.add_argument("--responses", help="a folder of recorded answers, <metric>.json each (offline)")
    parser.add_argument("--job", required=True, help="the fine-tune job (label finetune_job)")
    parser.add_argument("--start", required=True, help="unix seconds or RFC 3339")
    parser.add_argument("--end", required=True, help="unix seconds or RFC 3339")
    parser.add_argument("--out", required=True, help="the folder the report is written to")
    parser.add_argument("--expected-gpus", type=int, help="GPUs every node should have (default: what each reports)")
    parser.add_argument("--thresholds", help="a JSON file of threshold: value overriding the defaults")
    parser.add_argument("--basic-auth-file", help="a file whose first line is user:password")
    parser.add_argument("--ca-file", help="the CA that signed Prometheus's certificate")
    parser.add_argument("--instance", action="append", help="judge this node (repeat; default: the job's nodes)")
    parser.add_argument(
        "--scrape-job",
        action="append",
        help=f"Prometheus's job label of the nodes' exporters (repeat; default: {', '.join(DEFAULT_SCRAPE_JOBS)})",
    )
    parser.add_argument("--scrape-interval", type=float, default=DEFAULT_SCRAPE_INTERVAL, help="seconds")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per query")
    parser.add_argument("--save-responses", action="store_true", help="keep every answer under OUT/responses/")
    return parser


def _result(fields):
    print(f"{TOOL}: {json.dumps(fields, sort_keys=True)}", flush=True)


def run(args):
    start, end = parse_time(args.start), parse_time(args.end)
    window = Window(start, end, choose_step(start, end, args.scrape_interval), args.scrape_interval)
    limits = read_thresholds(args.thresholds)
    nodes = sorted(args.instance or [])
    if args.responses:
        responses = load_responses(args.responses)
        source = os.path.abspath(args.responses)
        nodes = nodes or job_nodes(parse_responses(responses))
    else:
        auth = read_basic_auth(args.basic_auth_file) if args.basic_auth_file else None
        prometheus = Prometheus(args.prometheus, auth=auth, ca_file=args.ca_file, timeout=args.timeout)
        responses, nodes = fetch(prometheus, args.job, window, args.scrape_job or DEFAULT_SCRAPE_JOBS, nodes)
        source = prometheus.url
    if args.save_responses:
        folder = os.path.join(args.out, "responses")
        os.makedirs(folder, exist_ok=True)
        for name, doc in responses.items():
            with open(os.path.join(folder, f"{name}.json"), "w", encoding="utf-8") as handle:
                json.dump(doc, handle)
    data = parse_responses(responses)
    spec = {"nodes": nodes, "expected_gpus": args.expected_gpus, "prometheus": source}
    return write_report(args.out, args.job, window, data, dict(spec, limits=limits))


def cli(argv=None):
    """Prints one result line, ``instinct-stability-report: {json}``; exits 0 on pass or warn, 3 on
    fail, 1 when no report could be made (Prometheus unreachable, a bad answer or argument)."""
    args = _parser().parse_args(argv)
    try:
        report = run(args)
    except (StabilityError, OSError) as error:
        _result({"verdict": None, "error": str(error), "job": args.job})
        return EXIT_ERROR
    _result(
        {
            "verdict": report["verdict"],
            "job": args.job,
            "counts": report["counts"],
            "failed": sorted(
                {f"{v['check']}@{v['node'] or 'job'}" for v in report["verdicts"] if v["verdict"] == "fail"}
            ),
            "report": os.path.join(os.path.abspath(args.out), "report.json"),
            "plots": len(report["plots"]),
        }
    )
    return EXIT_FAIL if report["verdict"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(cli())
