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


def merge(texts, table, labels):
    """The samples of several exposition texts (the ranks' files), each series once.

    Only samples with exactly the label names ``labels`` are kept: a file with other labels can
    neither break the merged family nor push the other files' samples out.
    """
    wanted = set(labels)
    seen = set()
    merged = []
    for text in texts:
        for name, found, value in read_samples(text, table):
            if set(found) != wanted:
                continue
            ordered = {key: found[key] for key in labels}
            key = (name, tuple(ordered.items()))
            if key not in seen:
                seen.add(key)
                merged.append((name, ordered, value))
    return merged
