# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Pure helpers for building the training stack: arch lists and build parallelism."""

from __future__ import absolute_import, division, print_function

import hashlib
import json
import re

__metaclass__ = type

_GFX = re.compile(r"^(gfx[0-9a-f]+)(?::[A-Za-z0-9_-]+[+-])*$")

# A hipcc job compiling PyTorch's heaviest ROCm units (flash attention, composable kernel GEMMs)
# peaks around 3-4 GiB of resident memory; 4 GiB per job keeps a build off the OOM killer on
# nodes of any size while still using every core of a well-provisioned MI300X host.
GIB_PER_BUILD_JOB = 4


def pytorch_rocm_arch(archs):
    """``["gfx942", "gfx90a:xnack-"]`` -> ``"gfx90a;gfx942"`` (PYTORCH_ROCM_ARCH syntax)."""
    if isinstance(archs, str):
        archs = [a for a in re.split(r"[;,\s]+", archs) if a]
    if not archs:
        raise ValueError("no gfx arch given: a PyTorch built for no arch runs on no GPU")
    names = set()
    for arch in archs:
        match = _GFX.match(str(arch).strip())
        if not match:
            raise ValueError(f"'{arch}' is not a gfx target name (expected e.g. gfx942 or gfx90a)")
        names.add(match.group(1))
    return ";".join(sorted(names))


def build_jobs(cores, memory_mb, gib_per_job=GIB_PER_BUILD_JOB):
    """A safe MAX_JOBS: one per core, but no more than memory allows at ``gib_per_job`` each; >= 1."""
    try:
        cores = int(cores)
        memory_mb = int(memory_mb)
        gib_per_job = float(gib_per_job)
    except (TypeError, ValueError) as err:
        raise ValueError(f"build_jobs needs numbers (cores, memory in MB): {err}") from err
    if cores < 1 or memory_mb < 1 or gib_per_job <= 0:
        raise ValueError(f"build_jobs needs positive cores and memory, got cores={cores}, memory_mb={memory_mb}")
    by_memory = int(memory_mb // (gib_per_job * 1024))
    return max(1, min(cores, by_memory))


def ds_wheel_key(arch_key, torch_version, rocm_release, ops_env):
    """The name of a DeepSpeed wheel's build: what its compiled ops were built against, so that a
    change of any of them builds a new wheel instead of reusing one that no longer loads.

    ``arch_key``: the arch set (``gfx942``, ``gfx90a-gfx942``) or ``cpu``; ``torch_version``:
    torch's version with its local label (``2.13.0+rocm7.0``: the ops link against that torch's
    C++ ABI); ``rocm_release``: the node's ROCm (hipcc and the HIP runtime; empty on a CPU node);
    ``ops_env``: the op switches (``DS_BUILD_*``), hashed. Returns
    ``ARCH-torchVERSION-rocmRELEASE-opsHASH`` (``+`` written ``_``), safe as a folder name and a URL."""
    if not str(torch_version or "").strip():
        raise ValueError("DeepSpeed's wheel key needs torch's version: its ops are built against it")
    ops = hashlib.sha256(json.dumps(ops_env or {}, sort_keys=True).encode("utf-8")).hexdigest()[:8]
    release = str(rocm_release or "").strip() or "none"
    parts = [str(arch_key).replace(";", "-"), f"torch{str(torch_version).strip()}", f"rocm{release}"]
    # No "+": pip records the file a wheel came from as a URL (direct_url.json), where "+" is
    # written %2B, and the installed wheel would no longer match its own folder.
    return "-".join(re.sub(r"[^0-9A-Za-z._-]", "_", part) for part in parts) + f"-ops{ops}"
