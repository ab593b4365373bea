"""Filters for ROCm release data (instinct_rocm_releases, roles/common/defaults/main.yml) and the ROCm a node has."""

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


def rocm_downgrade_problem(dpkg_query, release_info, check_driver=True):
    """Why installing ``release_info`` would downgrade what ``dpkg_query`` says is installed, or ``""``."""
    return rr.downgrade_problem(rr.parse_dpkg_query(dpkg_query), release_info, check_driver)


def rocm_existing_release(dpkg_query, releases, check_driver=True):
    """``{info, problem, installed}``: the release entry of the installed ROCm (None with a problem)."""
    installed = rr.parse_dpkg_query(dpkg_query)
    try:
        info, problem = rr.existing_release(installed, releases, check_driver), ""
    except ValueError as err:
        info, problem = None, str(err)
    return {"info": info, "problem": problem, "installed": rr.installed_releases(installed)}


class FilterModule:
    """ROCm release filters."""

    def filters(self):
        return {
            "rocm_release": rocm_release,
            "rocm_release_problem": rocm_release_problem,
            "rocm_downgrade_problem": rocm_downgrade_problem,
            "rocm_existing_release": rocm_existing_release,
        }
