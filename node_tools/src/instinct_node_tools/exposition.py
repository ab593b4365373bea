# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Prometheus textfiles written with prometheus_client: the GPU sample, a rank's progress, the merge.

Each writer builds metric families from ``(name, labels, value)`` samples and a table of
``name: (type, help)`` (the collector's :data:`gpu_metrics.METRICS`, the launcher's
:data:`progress.METRICS`); prometheus_client renders them and ``write_to_textfile`` replaces the file
atomically (written beside it, then renamed), so node exporter never reads half of one.
"""

import os

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

_FAMILY = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}


class _Samples:
    """A prometheus_client collector of fixed samples, families in the order of ``table``."""

    def __init__(self, table, samples):
        self.table = table
        self.samples = samples

    def collect(self):
        families = {}
        for name, labels, value in self.samples:
            if name not in self.table:
                raise KeyError(f"{name} is not a metric of this textfile (add it to its METRICS)")
            if value is None:
                continue
            keys = tuple(labels)
            family = families.get(name)
            if family is None:
                kind, text = self.table[name]
                family = families[name] = (_FAMILY[kind](name, text, labels=keys), keys)
            if family[1] != keys:
                raise ValueError(f"{name}: labels {keys} differ from {family[1]} in one family")
            family[0].add_metric([str(labels[key]) for key in keys], float(value))
        for name in self.table:
            if name in families:
                yield families[name][0]


def registry(table, samples):
    """A registry holding ``samples`` (``[(name, {label: value}, number)]``)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Samples(table, samples))
    return reg


def render(table, samples):
    """The exposition text of ``samples``, as node exporter will read it."""
    return generate_latest(registry(table, samples)).decode("utf-8")


def write(path, table, samples):
    """Replace the textfile ``path`` with ``samples``; readable by node exporter (mode 0644)."""
    write_to_textfile(path, registry(table, samples))
    os.chmod(path, 0o644)


def read_samples(text, table):
    """``[(name, labels, value)]`` of an exposition text, keeping only the families of ``table``.

    What a rank wrote is parsed, not copied: a line that is not a well-formed sample of a known
    family never reaches node exporter's textfile (a broken or hostile rank file cannot poison it).
    """
    samples = []
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError):
        return samples
    for family in families:
        for sample in family.samples:
            if sample.name in table:
                samples.append((sample.name, dict(sample.labels), sample.value))
    return samples


# How many names (or label values) a reason for dropping samples shows before it only counts the
# rest, and how many characters of each: a hostile file may hold thousands, and long ones; the
# journal gets the reason, not the file.
SHOWN_ITEMS = 5
SHOWN_CHARS = 60


def _show(value):
    """A name or label value as a warning quotes it: escaped, and cut at SHOWN_CHARS characters."""
    return repr(value[:SHOWN_CHARS] + ("..." if len(value) > SHOWN_CHARS else ""))


def _reasons(dropped):
    lines = []
    for why, found in dropped.items():
        items = list(found)
        shown = ", ".join(_show(item) for item in items[:SHOWN_ITEMS])
        more = f" and {len(items) - SHOWN_ITEMS} more" if len(items) > SHOWN_ITEMS else ""
        lines.append(f"dropped {why}: {shown}{more}")
    return lines


def _why(sample, table, labels, expect):
    """``(reason, item)`` for a sample that may not pass (the item: what the warning names), else None."""
    if sample.name not in table:
        return "metrics that are not progress metrics", sample.name
    if set(sample.labels) != set(labels):
        return f"samples whose labels are not exactly {', '.join(labels)}", sample.name
    for key, value in expect.items():
        if sample.labels[key] != value:
            return f"samples whose {key} is not {_show(value)}", sample.labels[key]
    return None


def sift(text, table, labels, expect=None):
    """``(kept, dropped)``: what of one exposition text (a rank's file) may reach node exporter.

    ``kept``: ``[(name, {label: value}, number)]``, the samples of ``table``'s families whose label
    names are exactly ``labels`` (in that order) and whose label values are those of ``expect``
    (``{label: value}``), each series once. ``dropped``: one line per reason for the rest, naming
    the metrics or the label values (never the samples' values). A text the parser refuses is
    dropped whole, and the parser's own error is not repeated: it quotes the offending line, which
    may be anything (a secret).
    """
    expect = expect or {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError):
        return [], ["dropped the whole file: it is not in the Prometheus text format (its content is not logged)"]
    seen = set()
    kept = []
    dropped = {}
    for family in families:
        for sample in family.samples:
            ordered = {key: sample.labels.get(key) for key in labels}
            series = (sample.name, tuple(ordered.items()))
            refused = _why(sample, table, labels, expect)
            if refused is None and series in seen:
                refused = ("series given twice (the first kept)", sample.name)
            if refused is not None:
                # A dict as an ordered set: a hostile file may name thousands.
                dropped.setdefault(refused[0], {})[refused[1]] = None
                continue
            seen.add(series)
            kept.append((sample.name, ordered, sample.value))
    return kept, _reasons(dropped)


def combine(groups):
    """One list of the samples of several ``sift`` results (the ranks' files), each series once."""
    seen = set()
    merged = []
    for samples in groups:
        for name, labels, value in samples:
            key = (name, tuple(labels.items()))
            if key not in seen:
                seen.add(key)
                merged.append((name, labels, value))
    return merged


def merge(texts, table, labels):
    """The samples of several exposition texts (the ranks' files), each series once.

    Only samples with exactly the label names ``labels`` are kept: a file with other labels can
    neither break the merged family nor push the other files' samples out.
    """
    return combine(sift(text, table, labels)[0] for text in texts)
