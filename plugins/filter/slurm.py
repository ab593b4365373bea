"""Filters for Slurm: the batch script of a fine-tune, the allocation of checks and its steps, the
nodes' Slurm names and the cluster's configuration files (what keeps nodes from taking a job is read from sinfo by
the slurm_nodes_ready action)."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import slurm

__metaclass__ = type


class FilterModule:
    """Slurm filters."""

    def filters(self):
        return {
            "slurm_allocation_argv": _wrap(slurm.salloc_argv),
            "slurm_batch_script": _wrap(slurm.sbatch_script),
            "slurm_config_files": _wrap(slurm.slurm_config_files),
            "slurm_granted_job_id": _wrap(slurm.parse_salloc_granted),
            "slurm_node_names": _wrap(slurm.node_names),
            "slurm_step_prefix": _wrap(slurm.step_prefix),
        }
