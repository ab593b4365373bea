# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The fabric's all-reduce gate: rccl-tests' table, bus bandwidth as rccl-tests computes it, the
thresholds that apply to a cluster, and the verdict.

Bus bandwidth (rccl-tests' ``AllReduceGetBw``, ``doc/PERFORMANCE.md``): for an all-reduce of S bytes
that takes t seconds among n ranks, ``algbw = S / t`` and ``busbw = algbw * 2 * (n - 1) / n``, in
GB/s (10^9 bytes). It is the figure that compares with the hardware's link speed whatever n is,
which is why one threshold can serve several cluster sizes.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

RUNBOOK = "docs/runbooks/fabric-bandwidth.md"

_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<oop_time>[\d.]+)\s+(?P<oop_algbw>[\d.]+)\s+(?P<oop_busbw>[\d.]+)\s+(?P<oop_wrong>\S+)"
    r"\s+(?P<ip_time>[\d.]+)\s+(?P<ip_algbw>[\d.]+)\s+(?P<ip_busbw>[\d.]+)\s+(?P<ip_wrong>\S+)\s*$"
)
_RANK = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\d+)"
)
_HEADER = re.compile(r"^# nThread (?P<threads>\d+) nGpus (?P<gpus>\d+) minBytes (?P<min>\d+) maxBytes (?P<max>\d+)")
_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*(?P<avg>[\d.]+)")
_BOUNDS = re.compile(r"^# Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>\w+)")


class RcclPerfError(ValueError):
    """An output this collection cannot read as an rccl-tests table."""


def _wrong(text):
    # "N/A" when rccl-tests ran without validation (-c 0).
    return None if text == "N/A" else int(text)


def parse_rccl_tests(text):
    """Read an ``all_reduce_perf`` (or any rccl-tests/nccl-tests) output.

    Returns ``{"ranks": [{rank, host, device}], "rows": [{size, count, type, redop, out_of_place:
    {time_us, algbw, busbw, wrong}, in_place: {...}}], "avg_busbw", "out_of_bounds", "bounds_ok",
    "max_bytes"}``; values absent from an excerpt are None. Raises RcclPerfError when no row is found
    or a row cannot be read."""
    ranks, rows = [], []
    avg = bounds = bounds_ok = max_bytes = None
    for line in str(text).splitlines():
        found = _RANK.match(line)
        if found:
            ranks.append({"rank": int(found["rank"]), "host": found["host"], "device": int(found["device"])})
            continue
        found = _HEADER.match(line)
        if found:
            max_bytes = int(found["max"])
            continue
        found = _AVG.match(line)
        if found:
            avg = float(found["avg"])
            continue
        found = _BOUNDS.match(line)
        if found:
            bounds, bounds_ok = int(found["count"]), found["verdict"] == "OK"
            continue
        if line.lstrip().startswith("#") or not line.strip() or not line.lstrip()[0].isdigit():
            continue
        found = _ROW.match(line)
        if not found:
            raise RcclPerfError(f"an rccl-tests row that cannot be read: {line.strip()!r}")
        row = {"size": int(found["size"]), "count": int(found["count"]), "type": found["type"], "redop": found["redop"]}
        for side, prefix in (("out_of_place", "oop"), ("in_place", "ip")):
            row[side] = {
                "time_us": float(found[f"{prefix}_time"]),
                "algbw": float(found[f"{prefix}_algbw"]),
                "busbw": float(found[f"{prefix}_busbw"]),
                "wrong": _wrong(found[f"{prefix}_wrong"]),
            }
        rows.append(row)
    if not rows:
        raise RcclPerfError("no rccl-tests result row in the output (did all_reduce_perf run?)")
    return {
        "ranks": ranks,
        "rows": rows,
        "avg_busbw": avg,
        "out_of_bounds": bounds,
        "bounds_ok": bounds_ok,
        "max_bytes": max_bytes,
    }


def bus_bandwidth(size_bytes, seconds, nranks):
    """rccl-tests' all-reduce bus bandwidth in GB/s (10^9 bytes per second)."""
    if seconds <= 0 or nranks < 1:
        raise ValueError(f"bus bandwidth needs a positive time and at least one rank (got {seconds} s, {nranks})")
    algbw = size_bytes / 1.0e9 / seconds
    return algbw * 2 * (nranks - 1) / nranks


def thresholds_for(table, gpu_model, nodes, gpus_per_node=None):
    """The entry of ``table`` (a list of ``{gpu, gpus_per_node, min_nodes, max_nodes, busbw_gbps:
    {bytes: GB/s}, tolerance, source}``) for this GPU model, node count and GPUs per node, or None:
    the first whose ``gpu`` is in the model's name (case-insensitive), whose node range holds
    ``nodes`` and whose ``gpus_per_node`` (when it sets one) is the cluster's. A cluster of another
    shape (one GPU per node, say, whose world of one has no bus bandwidth) is not judged."""
    model = str(gpu_model or "").lower()
    for entry in table or []:
        if str(entry.get("gpu", "")).lower() not in model or not model:
            continue
        wanted = entry.get("gpus_per_node")
        if wanted is not None and (gpus_per_node is None or int(gpus_per_node) != int(wanted)):
            continue
        low, high = int(entry.get("min_nodes", 1)), entry.get("max_nodes")
        if nodes >= low and (high is None or nodes <= int(high)):
            return entry
    return None


def gate_problems(measured, entry, hosts):
    """What the all-reduce gate objects to: at every size the entry sets a threshold for and the run
    measured, the bus bandwidth (``{bytes: GB/s}``, in-place as cvs compares) must reach ``threshold *
    (1 - tolerance)``. Sizes beyond the run's largest are not judged, but a run that reaches none of
    them is a problem itself (the gate would prove nothing). Each problem is a sentence naming the
    nodes, the size, both figures, the threshold's source and the runbook."""
    if entry is None:
        return []
    tolerance = float(entry.get("tolerance", 0))
    measured = {int(size): float(value) for size, value in (measured or {}).items()}
    names = ", ".join(hosts)
    source = entry.get("source", "no source")
    limits = sorted((int(size), float(value)) for size, value in entry["busbw_gbps"].items())
    judged = [(size, threshold) for size, threshold in limits if size in measured]
    if not judged:
        smallest = limits[0][0]
        return [
            f"{names}: the all-reduce was measured up to {max(measured, default=0)} bytes, but {entry['gpu']} "
            f"nodes are judged at {smallest} bytes and more ({source}); set fabric_allreduce_max_bytes to at "
            f"least {smallest}. See {RUNBOOK}"
        ]
    problems = []
    for size, threshold in judged:
        required = threshold * (1 - tolerance)
        if measured[size] < required:
            problems.append(
                f"{names}: all-reduce bus bandwidth {measured[size]:.1f} GB/s at {size} bytes, below the "
                f"{required:.1f} GB/s required ({threshold:.1f} less {tolerance:.0%}; {source}). See {RUNBOOK}"
            )
    return problems


def measured_busbw(parsed):
    """The in-place bus bandwidth of each size of a parsed table (what cvs compares)."""
    return {row["size"]: row["in_place"]["busbw"] for row in parsed["rows"]}


def allreduce_layout(hosts, gpus_by_host, smoke_sizes_mb, max_bytes, judged=True):
    """Who runs which ranks of the fabric all-reduce, and at which sizes.

    ``hosts`` in rank order (the master first); ``gpus_by_host``: how many GPUs torch sees on each
    (0 without one). Every GPU gets a rank (one process per node without a GPU). On a cluster of GPU
    nodes the sizes go on from the smoke sizes, doubling from 64 MiB up to ``max_bytes``, so that the
    gate's sizes are measured (only when ``judged``: a threshold applies); without GPUs (Gloo over
    CPU) only the smoke sizes run. Returns
    ``{"ranks": {host: {"first", "local"}}, "world", "sizes_mb", "gpu"}``. A cluster that mixes nodes
    with and without GPUs cannot run one all-reduce: ValueError names them."""
    gpus = {host: int(gpus_by_host.get(host) or 0) for host in hosts}
    without = [host for host in hosts if gpus[host] == 0]
    if without and len(without) < len(hosts):
        raise ValueError(
            f"torch sees no GPU on {', '.join(without)} but GPUs on the other nodes: one all-reduce cannot mix "
            "RCCL and Gloo ranks"
        )
    ranks, first = {}, 0
    for host in hosts:
        ranks[host] = {"first": first, "local": gpus[host]}
        first += max(gpus[host], 1)
    gpu = not without
    sizes = [float(size) for size in smoke_sizes_mb]
    if gpu and judged:
        size = 64.0
        while size * 1024 * 1024 <= int(max_bytes):
            if size not in sizes:
                sizes.append(size)
            size *= 2
    return {"ranks": ranks, "world": first, "sizes_mb": sorted(sizes), "gpu": gpu}


def rccl_tests_argv(binary, hosts, gpus_per_node, max_bytes, mpi=None):
    """The command that runs rccl-tests' ``all_reduce_perf`` over every GPU of ``hosts`` (the fabric
    addresses, the master first), from 1 MiB doubling up to ``max_bytes``.

    On one node a single process drives every GPU (``-g N``), as rccl-tests runs without MPI. On
    several, Open MPI starts one process per GPU on each node (``-g 1``, ``--host ADDR:N``), as
    ROCm's cluster validation suite runs it. ``mpi``: ``mpirun`` (the launcher, default ``mpirun``),
    ``env_names`` (the environment variables every rank gets, ``-x``) and ``args`` (before the
    program, for example ``--mca btl_tcp_if_include eth1``)."""
    gpus = int(gpus_per_node)
    if gpus < 1 or not hosts:
        raise ValueError(f"all_reduce_perf needs GPUs on every node (gpus_per_node {gpus_per_node}, hosts {hosts})")
    sizes = ["-b", str(1 << 20), "-e", str(int(max_bytes)), "-f", "2"]
    if len(hosts) == 1:
        return [binary, *sizes, "-g", str(gpus)]
    mpi = mpi or {}
    exported = [arg for name in mpi.get("env_names") or [] for arg in ("-x", name)]
    placement = ["--np", str(gpus * len(hosts)), "--host", ",".join(f"{host}:{gpus}" for host in hosts)]
    launcher = [mpi.get("mpirun") or "mpirun", *placement, "--bind-to", "numa", *exported, *(mpi.get("args") or [])]
    return [*launcher, binary, *sizes, "-g", "1"]
