"""Filters over OpenPGP key blocks."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.module_utils.openpgp import key_fingerprints

__metaclass__ = type


def openpgp_fingerprints(armored, errors="strict"):
    try:
        return key_fingerprints(str(armored))
    except ValueError as err:
        if errors == "empty":
            return []
        raise AnsibleFilterError(f"openpgp_fingerprints: {err}") from err


class FilterModule:
    """OpenPGP filters."""

    def filters(self):
        return {"openpgp_fingerprints": openpgp_fingerprints}
