"""Filters for Slurm: the batch script of a fine-tune, the cluster's configuration files, and what
keeps nodes from taking a job (read from sinfo)."""

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
            "slurm_node_problems": _wrap(slurm.node_problems),
        }
