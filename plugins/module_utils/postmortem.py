# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""What a finished job leaves for a post-mortem beside its logs (pure functions): the versions of the
stack it trained on, the fabric's all-reduce figure, its wall time and GPU-hours, as one JSON document
(``manifest.json`` in the job's collect folder).

Everything is read on the master node without running the stack: the venv's ``*.dist-info`` folder
names (``torch-2.7.1+rocm6.4.1.dist-info``), ``<rocm>/.info/version``, ``dpkg-query``'s lines for
the ROCm packages, the amdgpu module's ``/sys/module/amdgpu/version``, the Trainer's
``all_results.json`` and the fabric stage's all-reduce result of the same run (instinct-allreduce's
JSON line), each None where the node has none.
"""

from __future__ import absolute_import, division, print_function

import json
import re

__metaclass__ = type

MANIFEST_VERSION = 1
# The venv's distributions the manifest names (their dist-info names are normalised with "_").
DISTRIBUTIONS = ("torch", "deepspeed", "llamafactory", "transformers", "accelerate", "peft")
# The system packages that carry the GPU stack (AMD's apt repository).
PACKAGES = ("rocm-core", "rccl", "amdgpu-dkms")
_DIST_INFO = re.compile(r"^(?P<name>[^-/]+)-(?P<version>[^-/]+)\.dist-info/?$")


def dist_versions(paths):
    """``{name: version}`` from dist-info folder paths or names, names lower-cased with ``-`` and
    ``.`` as ``_`` (how wheels spell them). A name seen twice (two site-packages) keeps the first."""
    versions = {}
    for path in paths or []:
        match = _DIST_INFO.match(str(path).rstrip("/").rsplit("/", 1)[-1])
        if match:
            name = re.sub(r"[-_.]+", "_", match.group("name")).lower()
            versions.setdefault(name, match.group("version"))
    return versions


def dpkg_versions(text):
    """``{package: version}`` from ``dpkg-query -W -f '${Package}\\t${Version}\\n'`` lines; a package
    known to dpkg but not installed has an empty version and is left out."""
    versions = {}
    for line in (text or "").splitlines():
        name, _sep, version = line.partition("\t")
        if name.strip() and version.strip():
            versions[name.strip()] = version.strip()
    return versions


def fabric_figure(result):
    """The all-reduce bus bandwidth the fabric stage measured at its largest message (the size its gate
    judges), from instinct-allreduce's JSON result; None where the run measured none."""
    if not isinstance(result, dict) or not result.get("results"):
        return None
    rows = [row for row in result["results"] if isinstance(row, dict) and row.get("busbw_gbps") is not None]
    if not rows:
        return None
    largest = max(rows, key=lambda row: row.get("size_bytes") or 0)
    return {
        "busbw_gbps": float(largest["busbw_gbps"]),
        "size_bytes": largest.get("size_bytes"),
        "world_size": result.get("world_size"),
        "backend": result.get("backend"),
        "ifname": result.get("ifname"),
        "latency_us": result.get("latency_us"),
    }


def _text(value):
    value = "" if value is None else str(value).strip()
    return value or None


def run_time(results, world_size, device):
    """Wall time of the training (the Trainer's ``train_runtime``, seconds, of the launch that finished
    the job: a resumed job's earlier launches are not in it), and what it cost: ranks x hours, and GPU
    hours where the ranks ran on GPUs (one GPU per rank), 0 on CPU ranks."""
    seconds = None
    if isinstance(results, dict) and results.get("train_runtime") is not None:
        seconds = float(results["train_runtime"])
    ranks = int(world_size or 0)
    rank_hours = round(ranks * seconds / 3600, 4) if seconds is not None else None
    gpu_hours = None if rank_hours is None else (rank_hours if device != "cpu" else 0.0)
    return {"wall_time_seconds": seconds, "ranks": ranks, "rank_hours": rank_hours, "gpu_hours": gpu_hours}


def _previous(text):
    try:
        previous = json.loads(text) if isinstance(text, str) and text.strip() else text
    except ValueError:
        return None
    return previous if isinstance(previous, dict) else None


def manifest(job, read):
    """The post-mortem manifest of ``job`` (its name) from what was ``read`` on the master node:

    - ``nodes`` (the job's hosts in rank order), ``device`` (``rocm`` or ``cpu``), ``world_size``;
    - ``dist_infos`` (the venv's dist-info paths), ``rocm_version`` (``<rocm>/.info/version``),
      ``dpkg`` (dpkg-query's lines), ``amdgpu_module`` (``/sys/module/amdgpu/version``);
    - ``results`` (the Trainer's ``all_results.json``, a mapping or its text), ``allreduce`` (the
      fabric stage's result of this run, or None);
    - ``files``: the job's files copied beside the manifest;
    - ``previous``: the manifest already in the collect folder (its text, or None).

    A manifest describes one finished run of the job as it was first collected: when ``previous``
    is of the same job and the same finished run (the Trainer's results give the same wall time), it
    is returned as it is. A later site.yml measures the fabric again and may find a newer stack; neither
    is what the job ran on, and rewriting the manifest would make every re-run report a change. A run
    without the fabric stage (finetune.yml alone) has no figure and keeps the earlier one for the same
    reason; a resumed job's new results make a new manifest.
    """
    results = read.get("results")
    if isinstance(results, str):
        try:
            results = json.loads(results) if results.strip() else None
        except ValueError:
            results = None
    dists = dist_versions(read.get("dist_infos"))
    packages = dpkg_versions(read.get("dpkg"))
    versions = {
        "rocm": _text(read.get("rocm_version")) or packages.get("rocm-core"),
        "amdgpu_driver": _text(read.get("amdgpu_module")),
        "amdgpu_dkms": packages.get("amdgpu-dkms"),
        "rccl": packages.get("rccl"),
    }
    versions.update({name: dists.get(name) for name in DISTRIBUTIONS})
    device = read.get("device") or "rocm"
    times = run_time(results, read.get("world_size"), device)
    previous = _previous(read.get("previous"))
    if (
        previous
        and previous.get("job") == job
        and times["wall_time_seconds"] is not None
        and previous.get("wall_time_seconds") == times["wall_time_seconds"]
    ):
        return previous
    return {
        "manifest_version": MANIFEST_VERSION,
        "job": job,
        "nodes": list(read.get("nodes") or []),
        "device": device,
        "versions": versions,
        "fabric_allreduce": fabric_figure(read.get("allreduce")),
        **times,
        "files": sorted(read.get("files") or []),
    }
