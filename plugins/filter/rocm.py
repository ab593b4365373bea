"""Filters for ROCm release data (see roles/rocm/vars/main.yml)."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.module_utils import rocm_release as rr

__metaclass__ = type


def rocm_release(version, releases):
    try:
        return rr.rocm_release(version, releases)
    except ValueError as err:
        raise AnsibleFilterError(str(err)) from err


def rocm_release_problem(version, releases):
    """What is wrong with ``version`` for this release map, or an empty string."""
    try:
        rr.rocm_release(version, releases)
    except ValueError as err:
        return str(err)
    return ""


class FilterModule:
    """ROCm release filters."""

    def filters(self):
        return {"rocm_release": rocm_release, "rocm_release_problem": rocm_release_problem}
