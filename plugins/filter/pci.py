"""Filters over lspci output."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.module_utils.pci import parse_lspci_paths

__metaclass__ = type


def lspci_paths(text):
    try:
        return parse_lspci_paths(text)
    except ValueError as err:
        raise AnsibleFilterError(f"lspci_paths: {err}") from err


class FilterModule:
    """PCI filters."""

    def filters(self):
        return {"lspci_paths": lspci_paths}
