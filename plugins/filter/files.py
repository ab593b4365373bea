"""Filters that describe files for the file_state module."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

__metaclass__ = type

ATTRIBUTES = ("state", "checksum", "owner", "group", "mode")


def file_entries(paths, **attributes):
    """One file_state entry per path, each with the same attributes (state, checksum, owner, group, mode)."""
    unknown = sorted(set(attributes) - set(ATTRIBUTES))
    if unknown:
        known = ", ".join(ATTRIBUTES)
        raise AnsibleFilterError(f"file_entries: unknown attribute {', '.join(unknown)}; known: {known}")
    if isinstance(paths, str):
        paths = [paths]
    return [dict(attributes, path=str(path)) for path in paths]


class FilterModule:
    """file_state filters."""

    def filters(self):
        return {"file_entries": file_entries}
