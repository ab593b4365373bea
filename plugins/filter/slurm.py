"""Filters for Slurm: the batch script of a fine-tune and the cluster's configuration files (what keeps
nodes from taking a job is read from sinfo by the slurm_nodes_ready action)."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import slurm

__metaclass__ = type


class FilterModule:
    """Slurm filters."""

    def filters(self):
        return {
            "slurm_batch_script": _wrap(slurm.sbatch_script),
            "slurm_config_files": _wrap(slurm.slurm_config_files),
        }
