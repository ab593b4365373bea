"""Filters for fine-tune jobs: the files of a job, its checks, and its state across the nodes."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import jobspec, jobstate, rank_threads

__metaclass__ = type


def finetune_plan(hostvars, ranks, status_var="finetune_status_raw", wanted="", *, settings=None, force=False):  # noqa: PLR0913
    """jobstate.plan_launch over the status each rank registered (``settings``, ``force``: by name)."""
    statuses = {host: hostvars[host][status_var] for host in ranks}
    return jobstate.plan_launch(statuses, ranks, wanted, settings, force)


def finetune_job_conflict(hostvars, hosts, job, host="", runbook="docs/runbooks/finetune-job.md"):
    """jobstate.other_jobs_problem over the running_jobs result each node registered as
    finetune_running_jobs."""
    running = {node: (hostvars[node].get("finetune_running_jobs") or {}).get("jobs") or [] for node in hosts}
    return jobstate.other_jobs_problem(running, job, host, runbook)


def finetune_round(hostvars, ranks, status_var="finetune_final"):
    """jobstate.round_summary over the finetune_job_status result each rank registered."""
    return jobstate.round_summary({host: hostvars[host][status_var] for host in ranks}, ranks)


class FilterModule:
    """Fine-tune job filters."""

    def filters(self):
        return {
            "finetune_job_files": _wrap(jobspec.job_files),
            "finetune_eval_args": _wrap(jobspec.eval_args),
            "finetune_dataset_info": _wrap(jobspec.dataset_info),
            "finetune_job_problems": _wrap(jobspec.job_problems),
            "finetune_device_problems": _wrap(jobspec.device_problems),
            "finetune_plan": _wrap(finetune_plan),
            "finetune_job_conflict": _wrap(finetune_job_conflict),
            "finetune_round": _wrap(finetune_round),
            "finetune_launch_record": _wrap(jobstate.launch_record),
            "rank_order": _wrap(jobstate.rank_order),
            "perplexity": _wrap(jobspec.perplexity),
            "env_file": _wrap(jobspec.parse_env_file),
            "finetune_omp_threads": _wrap(rank_threads.omp_threads),
        }
