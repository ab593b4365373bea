"""Helpers of the monitoring tests: the metric names the exporters write, the names a PromQL expression
reads, and the promtool binary."""

import os
import re
import shutil
import subprocess
from pathlib import Path

from ansible_collections.instinct.finetune.plugins.module_utils import gpu_metrics
from instinct_node_tools import progress

ROOT = Path(__file__).resolve().parents[3]
LOCAL_PROMTOOL = ROOT / ".cache" / "promtool" / "promtool"

# Every name an alert or a panel may read: the GPU collector's, the fine-tune ranks' (the node tools'
# progress writer), and Prometheus's own `up`. A name outside this set would be a renamed or misspelt
# metric: an empty panel or a disarmed alert.
KNOWN_METRICS = frozenset(gpu_metrics.METRICS) | frozenset(progress.METRICS) | {"up"}

_KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# A name followed by "(" is a function; by "by"/"without", an aggregation ("max by (gpu) (...)").
_IDENTIFIER = re.compile(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\(|\s+(?:by|without)\b)?")


def metric_names(expr):
    """The metric names a PromQL expression reads (functions, keywords, labels and numbers left out)."""
    text = _STRING.sub('""', expr)
    text = _GRAFANA_VARIABLE.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _LABEL_LIST.sub(r"\1", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def unknown_metrics(expr):
    names = metric_names(expr)
    assert names, f"no metric name found in {expr!r}"
    return names - KNOWN_METRICS


def promtool():
    """The promtool to run: $PROMTOOL, else the one on PATH, else .cache/promtool/promtool."""
    candidates = [os.environ.get("PROMTOOL"), shutil.which("promtool"), str(LOCAL_PROMTOOL)]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise AssertionError(
        "promtool not found (looked at $PROMTOOL, PATH and .cache/promtool/promtool): "
        "run scripts/ensure-promtool.sh (or set PROMTOOL=/path/to/promtool)"
    )


def run_promtool(*args, cwd=None):
    proc = subprocess.run([promtool(), *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr
