"""Filters for what a finished job leaves for a post-mortem (module_utils/postmortem.py)."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import postmortem

__metaclass__ = type


class FilterModule:
    """Post-mortem filters."""

    def filters(self):
        return {"finetune_manifest": _wrap(postmortem.manifest)}
