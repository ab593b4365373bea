# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Choose the network interface RCCL/Gloo sockets use between nodes (pure functions, no I/O).

The ``fabric_iface`` module reads ``ip -j addr`` and ``ip -j route get PEER`` and hands the text
here. :func:`parse_ip_addr` and :func:`parse_route_get` are strict: output they do not fully
understand raises :class:`FabricIfaceError` rather than yielding a partial list, because a missing
interface would silently change which one is chosen. :func:`choose_fabric_iface` implements the
contract in docs/DESIGN (explicit ``ifname`` > the one interface in ``cidr`` > the interface of the
route to the peer > the only remaining candidate) and fails, listing what it saw, on anything
ambiguous or missing. :func:`rdma_netdevs` maps the chosen interface to its RDMA devices.
"""

from __future__ import absolute_import, division, print_function

import fnmatch
import ipaddress
import json
import re

from ansible_collections.instinct.finetune.plugins.module_utils._probe import ProbeError

__metaclass__ = type

RUNBOOK = "docs/runbooks/fabric-iface.md"
RUNBOOKS = {
    "unparsable": RUNBOOK,  # ip printed something that is not the JSON we expect
    "bad_option": RUNBOOK,  # an option value (cidr, exclude, mapping) is malformed
    "not_found": RUNBOOK,  # the explicit ifname does not exist
    "not_up": RUNBOOK,  # the explicit ifname is down
    "no_ipv4": RUNBOOK,  # the explicit ifname holds no usable IPv4 (IPv6 only, loopback, a bond port)
    "outside_cidr": RUNBOOK,  # the explicit ifname holds no address in cidr
    "no_match": RUNBOOK,  # no interface holds an address in cidr
    "ambiguous": RUNBOOK,  # more than one interface fits
    "bad_route": RUNBOOK,  # the route to the peer leads to no usable interface
    "no_candidate": RUNBOOK,  # nothing is left after the exclusions
}

DEFAULT_EXCLUDE = ("lo", "docker*", "veth*", "virbr*", "br-*")

_ADDRESS_TYPES = {"inet": ipaddress.IPv4Address, "inet6": ipaddress.IPv6Address}
_MAX_PREFIX = {"inet": 32, "inet6": 128}
_ROUTE_TYPES = ("unicast", "local")


class FabricIfaceError(ProbeError):
    """The interface list or route cannot be trusted, or no single fabric interface can be chosen."""

    RUNBOOKS = RUNBOOKS


def _loads(text, what, since):
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise FabricIfaceError("unparsable", f"The output of `{what}` is not UTF-8 text.") from None
    if not isinstance(text, str):
        raise FabricIfaceError("unparsable", f"The output of `{what}` must be text, not {type(text).__name__}.")
    try:
        return json.loads(text)
    except ValueError as err:
        snippet = text.strip().splitlines()[0][:80] if text.strip() else "(empty)"
        raise FabricIfaceError(
            "unparsable",
            f"The output of `{what}` is not JSON ({err.msg}; it starts with {snippet!r}). "
            f"iproute2 prints JSON here from version {since} on; older versions ignore -j.",
        ) from None


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_address(name, entry):
    if not isinstance(entry, dict):
        raise FabricIfaceError("unparsable", f"An addr_info entry of {name} is not an object.")
    family = entry.get("family")
    if family not in _ADDRESS_TYPES:
        return None, None  # other families (e.g. mpls) play no part here
    local = entry.get("local")
    prefixlen = entry.get("prefixlen")
    if not isinstance(local, str) or not _is_int(prefixlen) or not 0 <= prefixlen <= _MAX_PREFIX[family]:
        raise FabricIfaceError(
            "unparsable", f"An {family} address of {name} has no valid 'local' and 'prefixlen': {entry!r}."
        )
    try:
        address = _ADDRESS_TYPES[family](local.split("%", 1)[0])
    except ValueError:
        raise FabricIfaceError("unparsable", f"{name} lists {local!r} as an {family} address.") from None
    return family, {"address": str(address), "prefixlen": prefixlen}


def _parse_interface(entry):
    if not isinstance(entry, dict):
        raise FabricIfaceError("unparsable", f"An interface entry is not an object: {entry!r:.80}.")
    name = entry.get("ifname")
    if not isinstance(name, str) or not name:
        raise FabricIfaceError("unparsable", f"An interface entry has no 'ifname': {entry!r:.80}.")
    flags = entry.get("flags")
    if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
        raise FabricIfaceError("unparsable", f"{name} has no list of 'flags'.")
    mtu = entry.get("mtu")
    if not _is_int(mtu) or mtu <= 0:
        raise FabricIfaceError("unparsable", f"{name} has no integer 'mtu' (is this `ip -j addr`, not `ip -br -j`?).")
    operstate = entry.get("operstate")
    if not isinstance(operstate, str):
        raise FabricIfaceError("unparsable", f"{name} has no 'operstate'.")
    for key in ("link_type", "master"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise FabricIfaceError("unparsable", f"{name} has a non-text '{key}': {entry[key]!r}.")
    addr_info = entry.get("addr_info", [])
    if not isinstance(addr_info, list):
        raise FabricIfaceError("unparsable", f"{name} has an 'addr_info' that is not a list.")
    addresses = {"inet": [], "inet6": []}
    for item in addr_info:
        family, address = _parse_address(name, item)
        if family:
            addresses[family].append(address)
    up = "UP" in flags and (operstate == "UP" or (operstate == "UNKNOWN" and "LOWER_UP" in flags))
    return {
        "ifname": name,
        "up": up,
        "operstate": operstate,
        "mtu": mtu,
        "link_type": entry.get("link_type"),
        "master": entry.get("master"),
        "ipv4": addresses["inet"],
        "ipv6": addresses["inet6"],
    }


def parse_ip_addr(text):
    """Parse the whole output of ``ip -j addr`` (compact or ``-p`` pretty JSON).

    Returns a list, in ip's order, of ``{"ifname", "up", "operstate", "mtu", "link_type", "master",
    "ipv4": [{"address", "prefixlen"}], "ipv6": [{"address", "prefixlen"}]}``. ``up`` is true when
    the flags hold UP and the operstate is UP, or is UNKNOWN with LOWER_UP (loopback, tun, vxlan).
    ``master`` is the bond or bridge an interface is a port of, else None.

    Raises :class:`FabricIfaceError` (reason ``unparsable``) for text that is not JSON, not a list
    of interfaces, lists no interface at all, names one twice, or carries malformed addresses.
    """
    data = _loads(text, "ip -j addr", "4.14")
    if not isinstance(data, list):
        raise FabricIfaceError("unparsable", "`ip -j addr` did not print a JSON list of interfaces.")
    if not data:
        raise FabricIfaceError("unparsable", "`ip -j addr` listed no interface at all, not even lo.")
    interfaces = [_parse_interface(entry) for entry in data]
    seen = set()
    for interface in interfaces:
        if interface["ifname"] in seen:
            raise FabricIfaceError("unparsable", f"`ip -j addr` lists {interface['ifname']} twice.")
        seen.add(interface["ifname"])
    return interfaces


def _optional_address(route, key):
    value = route.get(key)
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise FabricIfaceError("unparsable", f"`ip -j route get` has {key} {value!r}, not an address.") from None


def parse_route_get(text):
    """Parse the output of ``ip -j route get PEER``.

    Returns ``{"dst", "dev", "prefsrc", "gateway", "type"}``: ``gateway`` is None when the peer is
    on-link, ``prefsrc`` None when ip printed none, ``type`` ``"unicast"`` (ip omits it) or
    ``"local"`` (the peer is an address of this very host; ``dev`` is then ``lo``).

    Raises :class:`FabricIfaceError` for text that is not one route object with a ``dev`` and a
    ``dst``, or a route of another type (broadcast, multicast, ...).
    """
    data = _loads(text, "ip -j route get", "4.17")
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], dict):
        raise FabricIfaceError("unparsable", "`ip -j route get` did not print a list holding one route object.")
    route = data[0]
    dev = route.get("dev")
    if not isinstance(dev, str) or not dev:
        raise FabricIfaceError("unparsable", f"`ip -j route get` printed a route without 'dev': {route!r:.120}.")
    dst = _optional_address(route, "dst")
    if dst is None:
        raise FabricIfaceError("unparsable", f"`ip -j route get` printed a route without 'dst': {route!r:.120}.")
    kind = route.get("type", "unicast")
    if kind not in _ROUTE_TYPES:
        raise FabricIfaceError(
            "bad_route", f"The route to {dst} is of type {kind!r}; the peer must be a unicast address of a node."
        )
    return {
        "dst": dst,
        "dev": dev,
        "prefsrc": _optional_address(route, "prefsrc"),
        "gateway": _optional_address(route, "gateway"),
        "type": kind,
    }


def _cidr(value):
    try:
        if not isinstance(value, str):
            raise TypeError(value)
        network = ipaddress.ip_network(value, strict=False)
    except (TypeError, ValueError):
        raise FabricIfaceError("bad_option", f"cidr {value!r} is not a network such as 10.10.0.0/16.") from None
    if network.version != 4:
        raise FabricIfaceError("bad_option", f"cidr {value} is IPv6; the RCCL socket fabric here is IPv4.")
    return network


def _excluded_by(interface, exclude):
    return next((pattern for pattern in exclude if fnmatch.fnmatchcase(interface["ifname"], pattern)), None)


def _usable_ipv4(interface):
    """IPv4 addresses other nodes could reach: not loopback (127/8)."""
    return [a for a in interface["ipv4"] if not ipaddress.IPv4Address(a["address"]).is_loopback]


def _global_ipv6(interface):
    return [a for a in interface["ipv6"] if not ipaddress.IPv6Address(a["address"]).is_link_local]


def _eligible(interface):
    """Up, a real (non-loopback) interface, not a port of a bond/bridge, holding a usable IPv4."""
    return (
        interface["up"]
        and interface["link_type"] != "loopback"
        and interface["master"] is None
        and bool(_usable_ipv4(interface))
    )


def _show(interface, addresses):
    return " ".join([interface["ifname"]] + [f"{a['address']}/{a['prefixlen']}" for a in addresses])


def _candidates(interfaces, exclude):
    return [i for i in interfaces if _eligible(i) and not _excluded_by(i, exclude)]


def _inventory(interfaces, exclude):
    """'candidates: a 10.0.0.1/24, b ...; not candidates: c 172.17.0.1/16 (excluded by docker*), ...'."""
    candidates = _candidates(interfaces, exclude)
    listed = ", ".join(_show(i, _usable_ipv4(i)) for i in candidates) or "none"
    others = []
    for interface in interfaces:
        if interface in candidates or interface["link_type"] == "loopback":
            continue
        ipv4, ipv6 = _usable_ipv4(interface), _global_ipv6(interface)
        if interface["master"] is not None:
            why = f"port of {interface['master']}"
        elif not (ipv4 or ipv6):
            continue  # no address worth mentioning (ifb0, a bare link-local)
        elif not interface["up"]:
            why = f"not up: operstate {interface['operstate']}"
        elif not ipv4:
            why = "IPv6 only"
        else:
            why = f"excluded by {_excluded_by(interface, exclude)}"
        others.append(f"{_show(interface, ipv4 or ipv6)} ({why})")
    text = f"candidates: {listed}"
    return text + (f"; not candidates: {', '.join(others)}" if others else "")


def _fail(reason, message, interfaces, exclude):
    raise FabricIfaceError(reason, f"fabric_iface: {message} {_inventory(interfaces, exclude)}.")


def _result(interface, address, reason):
    return {"ifname": interface["ifname"], "address": address["address"], "mtu": interface["mtu"], "reason": reason}


def _in(network, interface):
    return [a for a in _usable_ipv4(interface) if ipaddress.IPv4Address(a["address"]) in network]


def _explicit(interfaces, ifname, network, exclude):
    asked = f"ifname {ifname} was asked for, but"
    by_name = {i["ifname"]: i for i in interfaces}
    if ifname not in by_name:
        _fail("not_found", f"{asked} this host has no interface of that name.", interfaces, exclude)
    interface = by_name[ifname]
    if interface["master"] is not None:
        _fail(
            "no_ipv4",
            f"{asked} it is a port of {interface['master']}; name {interface['master']} instead.",
            interfaces,
            exclude,
        )
    if interface["link_type"] == "loopback":
        _fail("no_ipv4", f"{asked} it is the loopback interface, which other nodes cannot reach.", interfaces, exclude)
    if not interface["up"]:
        state = "down" if interface["operstate"] == "DOWN" else f"not up (operstate {interface['operstate']})"
        _fail("not_up", f"{asked} it is {state}.", interfaces, exclude)
    ipv4 = _usable_ipv4(interface)
    if not ipv4:
        only = ", ".join(f"{a['address']}/{a['prefixlen']}" for a in _global_ipv6(interface))
        detail = f" (it has only IPv6: {only})" if only else ""
        _fail(
            "no_ipv4",
            f"{asked} it holds no IPv4 address{detail}; the RCCL socket fabric here is IPv4.",
            interfaces,
            exclude,
        )
    if network is not None:
        inside = _in(network, interface)
        if not inside:
            _fail(
                "outside_cidr",
                f"{asked} none of its addresses ({_show(interface, ipv4)}) is in cidr {network}.",
                interfaces,
                exclude,
            )
        ipv4 = inside
    return _result(interface, ipv4[0], f"explicit ifname {ifname}")


def _subnet_holding(address, peer):
    """Whether ``peer`` lies in the subnet of one of the interface's addresses."""
    subnet = ipaddress.IPv4Network(f"{address['address']}/{address['prefixlen']}", strict=False)
    return ipaddress.IPv4Address(peer) in subnet


def _by_cidr(interfaces, network, exclude, peer=None):
    matches = [(i, _in(network, i)) for i in _candidates(interfaces, exclude)]
    matches = [(i, inside) for i, inside in matches if inside]
    if not matches:
        _fail(
            "no_match",
            f"cidr {network} was asked for, but no candidate interface holds an IPv4 address in it.",
            interfaces,
            exclude,
        )
    if len(matches) == 1:
        interface, inside = matches[0]
        return _result(interface, inside[0], f"matched cidr {network}")
    # A cidr that spans a rail-optimised node's backend subnets (one per NIC) holds several
    # interfaces. Sockets need one, and every node must pick one on the same subnet: rails are
    # switched apart, so rail 1 of one node may not reach rail 2 of another. The master takes the
    # first rail by name; every other node the interface on the master's subnet.
    names = ", ".join(_show(i, inside) for i, inside in matches)
    if peer is None:
        interface, inside = min(matches, key=lambda match: _natural(match[0]["ifname"]))
        return _result(interface, inside[0], f"matched cidr {network}, first by name of {len(matches)} ({names})")
    try:
        ipaddress.IPv4Address(peer)
    except ValueError:
        raise FabricIfaceError("bad_option", f"peer must be an IPv4 address, not {peer!r:.80}.") from None
    beside = [(i, [a for a in inside if _subnet_holding(a, peer)]) for i, inside in matches]
    beside = [(i, inside) for i, inside in beside if inside]
    if len(beside) != 1:
        which = "none" if not beside else f"{len(beside)}"
        _fail(
            "ambiguous",
            f"cidr {network} was asked for, but {len(matches)} interfaces hold an address in it ({names}) and "
            f"{which} of them is on the subnet of the master's fabric address {peer}; set ifname for this host.",
            interfaces,
            exclude,
        )
    interface, inside = beside[0]
    return _result(interface, inside[0], f"matched cidr {network}, on the master's subnet ({peer})")


def _by_route(interfaces, route, exclude):
    if not isinstance(route, dict) or not isinstance(route.get("dev"), str) or not route.get("dst"):
        raise FabricIfaceError("bad_option", f"peer_route must come from parse_route_get, not {route!r:.80}.")
    peer, dev = route["dst"], route["dev"]
    by_name = {i["ifname"]: i for i in interfaces}
    if route.get("type") == "local" or (dev in by_name and by_name[dev]["link_type"] == "loopback"):
        # The peer is an address of this host (this node is MASTER_ADDR): use the interface holding it.
        owners = [i for i in _candidates(interfaces, exclude) if any(a["address"] == peer for a in i["ipv4"])]
        if len(owners) != 1:
            _fail(
                "bad_route",
                f"the route to {peer} is local, but no single up, not excluded interface holds {peer}.",
                interfaces,
                exclude,
            )
        address = next(a for a in owners[0]["ipv4"] if a["address"] == peer)
        return _result(owners[0], address, f"route to {peer} is local, on {owners[0]['ifname']}")
    interface = by_name.get(dev)
    if interface is None:
        _fail(
            "bad_route", f"the route to {peer} goes via {dev}, which `ip -j addr` does not list.", interfaces, exclude
        )
    pattern = _excluded_by(interface, exclude)
    if pattern:
        _fail("bad_route", f"the route to {peer} goes via {dev}, which is excluded by {pattern}.", interfaces, exclude)
    if not _eligible(interface):
        _fail(
            "bad_route",
            f"the route to {peer} goes via {dev}, which is not an up interface with an IPv4 address of its own.",
            interfaces,
            exclude,
        )
    ipv4 = _usable_ipv4(interface)
    address = next((a for a in ipv4 if a["address"] == route.get("prefsrc")), ipv4[0])
    via = f" (gateway {route['gateway']})" if route.get("gateway") else ""
    return _result(interface, address, f"route to {peer} via {dev}{via}")


# Each argument is one of the fabric_iface module's options, passed as it came.
def choose_fabric_iface(  # noqa: PLR0913
    interfaces, ifname=None, cidr=None, peer_route=None, exclude=DEFAULT_EXCLUDE, *, peer=None
):
    """Choose the interface RCCL/Gloo sockets use, from :func:`parse_ip_addr`'s list.

    In this order (the first option given decides):

    1. ``ifname``: it must exist, be up and hold an IPv4 address (in ``cidr`` too, when one is
       given). ``exclude`` does not apply. Reason ``"explicit ifname ens50f0"``.
    2. ``cidr``: the one candidate holding an IPv4 address in it. Reason
       ``"matched cidr 10.10.0.0/16"``. When several do (a cidr spanning the backend subnets of a
       rail-optimised node), the one whose subnet holds ``peer`` (the master's fabric address) on
       the other nodes, and on the master (no ``peer``) the first by name.
    3. ``peer_route`` (from :func:`parse_route_get`): the interface the route leaves by. Reason
       ``"route to 10.10.0.1 via ens50f0"`` (with `` (gateway X)`` when routed), or, when the peer
       is this host's own address, ``"route to 10.10.0.11 is local, on ens50f0"``.
    4. Otherwise the only candidate left. Reason ``"only candidate"``.

    A candidate is up, not loopback, not a port of a bond or bridge (the bond itself is the
    candidate), holds an IPv4 address outside 127/8, and matches none of the ``exclude`` globs.
    IPv6-only interfaces are never candidates. Returns ``{"ifname", "address", "mtu", "reason"}``;
    ``address`` is the interface's first IPv4 address (the one in ``cidr``, or the route's source,
    when those apply).

    Raises :class:`FabricIfaceError` when the choice is missing or ambiguous; the message says what
    was asked, why it failed, and lists the candidates and the other addressed interfaces.
    """
    if isinstance(exclude, str) or not all(isinstance(pattern, str) for pattern in exclude):
        raise FabricIfaceError("bad_option", f"exclude must be a list of globs, not {exclude!r}.")
    exclude = tuple(exclude)
    network = _cidr(cidr) if cidr is not None else None
    if ifname is not None:
        return _explicit(interfaces, ifname, network, exclude)
    if network is not None:
        return _by_cidr(interfaces, network, exclude, peer)
    if peer_route is not None:
        return _by_route(interfaces, peer_route, exclude)
    candidates = _candidates(interfaces, exclude)
    if len(candidates) == 1:
        return _result(candidates[0], _usable_ipv4(candidates[0])[0], "only candidate")
    after = f"after excluding {', '.join(exclude)}" if exclude else "with nothing excluded"
    if not candidates:
        _fail(
            "no_candidate",
            f"no ifname, cidr or peer was given, and no up interface with an IPv4 address is left {after}.",
            interfaces,
            exclude,
        )
    _fail(
        "ambiguous",
        f"no ifname, cidr or peer was given, and {len(candidates)} up interfaces hold IPv4 addresses {after}; "
        "set ifname or cidr.",
        interfaces,
        exclude,
    )
    return None  # unreachable: _fail always raises


def _natural(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def rdma_netdevs(mapping, ifname, interfaces=()):
    """The RDMA devices that sit on the chosen interface, for NCCL_IB_HCA-style settings.

    ``mapping`` is ``{ib_device: [netdev, ...]}``, what a module reads from
    ``/sys/class/infiniband/<ib_device>/device/net/`` (or what ``ibdev2netdev`` prints). A device
    belongs to ``ifname`` when one of its netdevs is ``ifname`` itself or, given ``interfaces``
    from :func:`parse_ip_addr`, a port of it (a RoCE LAG's ``mlx5_bond_0`` lists the bond's
    slaves, not the bond). Returns the device names in natural order (``mlx5_2`` before
    ``mlx5_10``); an empty list when none does.
    """
    if not isinstance(mapping, dict):
        raise FabricIfaceError("bad_option", f"The RDMA mapping must be a dict, not {type(mapping).__name__}.")
    wanted = {ifname} | {i["ifname"] for i in interfaces if i.get("master") == ifname}
    found = []
    for device, netdevs in mapping.items():
        if not isinstance(device, str) or not isinstance(netdevs, (list, tuple)):
            raise FabricIfaceError("bad_option", f"RDMA device {device!r} must map to a list of netdevs.")
        if wanted.intersection(netdevs):
            found.append(device)
    return sorted(found, key=_natural)
