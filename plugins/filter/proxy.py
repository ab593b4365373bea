"""Filters for the site's proxy (module_utils/proxy.py): the environment every stage's outside-facing
tasks get, and the apt snippet preflight writes from it."""

from __future__ import absolute_import, division, print_function

from collections.abc import Mapping

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import proxy

__metaclass__ = type


def _get(mapping, *keys):
    value = mapping
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        try:
            value = value.get(key)
        except Exception:  # a variable of another host that does not template is no address
            return None
    return value if isinstance(value, str) else None


def proxy_node_addresses(hosts, hostvars):
    """What each node is reached by, read from its host variables and facts (none is probed here)."""
    nodes = []
    for host in hosts or []:
        try:
            hv = hostvars[host]
        except KeyError:
            hv = {}
        nodes.append(
            {
                "name": str(host),
                "ansible_host": _get(hv, "ansible_host"),
                "management": _get(hv, "ansible_facts", "default_ipv4", "address"),
                # Set by the inventory only (its default rule picks ansible_host or the address above).
                "listen": _get(hv, "instinct_management_address"),
                "fabric": _get(hv, "fabric_address"),
                "cidr": _get(hv, "fabric_cidr"),
            }
        )
    return nodes


def proxy_env(hosts, hostvars, http_proxy, https_proxy, no_proxy, extra=(), host="this node"):  # noqa: PLR0913, PLR0917 - positional for the filter
    """proxy.proxy_environment for the nodes ``hosts`` (normally groups['all']) as ``hostvars`` knows them."""
    # Every task of every node templates this: without a proxy the nodes' addresses are not read at
    # all, so a run without one does not pay for a walk over every host's variables per task.
    addresses = proxy_node_addresses(hosts, hostvars) if (http_proxy or https_proxy) else []
    return proxy.proxy_environment(http_proxy, https_proxy, no_proxy, addresses, extra=extra or (), host=host)


class FilterModule:
    """Proxy filters."""

    def filters(self):
        return {
            "proxy_env": _wrap(proxy_env),
            "proxy_apt_conf": _wrap(proxy.apt_proxy_conf),
            "proxy_secret": _wrap(proxy.is_secret),
        }
