# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""How many CPU threads each training rank of a node gets (OMP_NUM_THREADS in its launch environment).

torchrun sets ``OMP_NUM_THREADS=1`` for every rank when it starts more than one per node and the
variable is unset (``torch/distributed/run.py``). That one thread is what torch's CPU work and
DeepSpeed's CPU Adam get: the optimizer's ``#pragma omp parallel for`` loops (v0.16.9
``csrc/includes/cpu_adam.h``, ``csrc/adam/cpu_adam_impl.cpp``) name no thread count, so OpenMP takes
``OMP_NUM_THREADS``. With the optimizer offloaded, one thread per rank makes every step wait on the CPU.
The node's physical cores are shared out evenly between its ranks (hyper-threads add little to these
vector loops), as DeepSpeed's own launcher does with ``--bind_cores_to_rank``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

RUNBOOK = "docs/runbooks/finetune-job.md"


def _count(facts, name):
    value = facts.get(name)
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def usable_cores(facts):
    """Physical cores this node's ranks may run on, from Ansible's processor facts.

    ``processor_count`` sockets x ``processor_cores`` cores each; when the CPUs the process may use
    (``processor_nproc``, its affinity: a container's cpuset, a Slurm allocation) are fewer than the
    node's (``processor_vcpus``), those CPUs over ``processor_threads_per_core``. None when unknown."""
    facts = facts or {}
    sockets, cores = _count(facts, "processor_count"), _count(facts, "processor_cores")
    physical = sockets * cores if sockets and cores else None
    vcpus, nproc = _count(facts, "processor_vcpus"), _count(facts, "processor_nproc")
    per_core = _count(facts, "processor_threads_per_core") or 1
    if nproc and vcpus and nproc < vcpus:
        allowed = max(1, nproc // per_core)
        return min(physical, allowed) if physical else allowed
    return physical or (max(1, vcpus // per_core) if vcpus else None)


def omp_threads(facts, ranks, override="", host=""):
    """The OMP_NUM_THREADS of each of the node's ``ranks``: ``{"threads", "cores", "ranks", "source"}``.

    ``override`` (finetune_omp_num_threads): empty for the node's usable physical cores divided by
    its ranks (at least 1), or a positive whole number taken as it is."""
    where = f"{host}: " if host else ""
    try:
        ranks = int(ranks)
    except (TypeError, ValueError):
        ranks = 0
    if ranks < 1:
        raise ValueError(f"{where}{ranks!r} ranks per node: expected a positive whole number. See {RUNBOOK}")
    cores = usable_cores(facts)
    if override not in (None, ""):
        text = str(override).strip()
        if isinstance(override, bool) or not text.isdigit() or int(text) < 1:
            raise ValueError(
                f"{where}finetune_omp_num_threads is {override!r}: set a positive whole number of threads per "
                f"rank, or leave it empty for the node's physical cores divided by its ranks. See {RUNBOOK}"
            )
        return {"threads": int(text), "cores": cores, "ranks": ranks, "source": "finetune_omp_num_threads"}
    if cores is None:
        raise ValueError(
            f"{where}the node's processor facts do not give its core count ({facts!r}); set "
            f"finetune_omp_num_threads. See {RUNBOOK}"
        )
    return {
        "threads": max(1, cores // ranks),
        "cores": cores,
        "ranks": ranks,
        "source": f"{cores} physical cores / {ranks} ranks",
    }
