"""Filters for where the collection's listeners bind (module_utils/listen.py)."""

from __future__ import absolute_import, division, print_function

from collections.abc import Mapping

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import listen

__metaclass__ = type


def _get(mapping, *keys):
    value = mapping
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def management_address(host_vars, explicit=""):
    """listen.management_address of one node, read from its host variables and facts; ``explicit``
    (instinct_management_address) wins when set."""
    host_vars = host_vars or {}
    return listen.management_address(
        host=str(host_vars.get("inventory_hostname", "this node")),
        ansible_host=_get(host_vars, "ansible_host"),
        ipv4_addresses=_get(host_vars, "ansible_facts", "all_ipv4_addresses") or [],
        default_ipv4=_get(host_vars, "ansible_facts", "default_ipv4", "address"),
        explicit=explicit,
    )


class FilterModule:
    """Listener filters."""

    def filters(self):
        return {
            "management_address": _wrap(management_address),
            "listen_spec": _wrap(listen.listen_spec),
            "client_address": _wrap(listen.client_address),
        }
