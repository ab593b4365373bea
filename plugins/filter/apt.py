"""Filters over apt's output, to install exact versions from one repository."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.module_utils import apt_versions

__metaclass__ = type


def apt_pinned_specs(packages, madison, source_prefix):
    try:
        return apt_versions.pinned_specs(packages, apt_versions.madison_versions(madison, source_prefix))
    except ValueError as err:
        raise AnsibleFilterError(f"apt_pinned_specs: {err} ({source_prefix})") from err


class FilterModule:
    """apt filters."""

    def filters(self):
        return {
            "apt_madison_versions": apt_versions.madison_versions,
            "apt_pinned_specs": apt_pinned_specs,
        }
