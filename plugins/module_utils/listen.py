# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Where the collection's own listeners bind (pure): the node's management address.

Every service the collection starts on a node (the wheel server of the stack stage, node exporter,
Prometheus) binds one chosen address, never every address: the management address unless the
inventory names another. The rule is here once, so that a listener and the clients that reach it
(the peers that fetch wheels, Prometheus's scrape) agree on the address.
"""

from __future__ import absolute_import, division, print_function

import ipaddress

__metaclass__ = type

RUNBOOK = "docs/runbooks/fabric-iface.md"

# "Every address" as Prometheus, node exporter and Python's socket layer spell it.
ANY_ADDRESS = ("", "0.0.0.0", "::", "[::]", "*")  # noqa: S104 - recognised, never chosen


def _ipv4(value):
    try:
        return str(ipaddress.IPv4Address(str(value).strip()))
    except ValueError:
        return None


def management_address(host, ansible_host=None, ipv4_addresses=None, default_ipv4=None, explicit=""):
    """The node's management address: the address its own listeners bind.

    ``explicit`` (instinct_management_address) when set. Else ``ansible_host`` when it is an IPv4
    address the node holds (``ipv4_addresses``: the node's ``ansible_facts.all_ipv4_addresses``): the
    inventory reaches the node there over SSH, so it is the network the operator chose for managing
    it. Otherwise (a host name, an address the node does not hold such as a NAT or bastion address, or
    no ``ansible_host`` at all) the address of the node's default route
    (``ansible_facts.default_ipv4.address``). Raises ValueError naming the node, what
    was seen and the fix when neither gives an address.
    """
    if explicit and str(explicit).strip():
        if is_any_address(explicit):
            raise ValueError(
                f"{host}: instinct_management_address is {explicit!r}, every address: the management address is one "
                f"address of the node. Set it to the node's address on its management network. See {RUNBOOK}."
            )
        return str(explicit).strip()
    held = {_ipv4(address) for address in ipv4_addresses or []} - {None}
    chosen = _ipv4(ansible_host) if ansible_host else None
    if chosen and chosen in held:
        return chosen
    fallback = _ipv4(default_ipv4) if default_ipv4 else None
    if fallback:
        return fallback
    raise ValueError(
        f"{host}: no management address to bind the collection's listeners to: ansible_host is "
        f"{ansible_host!r} (not one of the node's IPv4 addresses {sorted(held)}) and the node has no default "
        f"IPv4 route (ansible_facts.default_ipv4 is {default_ipv4!r}). Set instinct_management_address for the "
        f"node in the inventory (the address of its management network). See {RUNBOOK}."
    )


def is_any_address(address):
    """True when ``address`` means every address (empty, 0.0.0.0, ::)."""
    return str(address if address is not None else "").strip() in ANY_ADDRESS


def client_address(listen_address):
    """The address a client on the same node uses to reach a listener bound to ``listen_address``:
    the address itself, or the loopback address when the listener binds every address."""
    if is_any_address(listen_address):
        return "127.0.0.1"
    address = str(listen_address).strip()
    # An IPv6 literal goes into a URL in brackets.
    if ":" in address and not address.startswith("["):
        return f"[{address}]"
    return address


def listen_spec(address, port):
    """``ADDRESS:PORT`` as Go's net.Listen takes it (Prometheus's and node exporter's
    --web.listen-address): ``:PORT`` for every address, brackets around an IPv6 literal."""
    if is_any_address(address):
        return f":{int(port)}"
    return f"{client_address(address)}:{int(port)}"
