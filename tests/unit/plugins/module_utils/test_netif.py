"""netif on recorded `ip -j` outputs (tests/fixtures/ip/SOURCES.md says where each one is from).

The multi-NIC fixture is real iproute2 output of a network namespace built on the build machine
(SOURCES.md lists the commands); the others come from public repositories, an issue, and the
build machine itself. No recorded output with a bond or a VLAN was found, so the bond rules are
checked on a small constructed interface list, marked as such below.
"""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.instinct.finetune.plugins.module_utils.netif import (
    DEFAULT_EXCLUDE,
    FabricIfaceError,
    choose_fabric_iface,
    parse_ip_addr,
    parse_route_get,
    rdma_netdevs,
)
from tests.unit.conftest import FIXTURES

IP = FIXTURES / "ip"
RUNBOOK = "docs/runbooks/fabric-iface.md"
MULTI = "buildmachine-netns-multinic.json"
# What every failure on the multi-NIC host lists after its own sentence.
MULTI_INVENTORY = (
    "candidates: ens50f0 10.10.0.11/16, ens50f1 10.20.0.11/16, eno1 192.168.1.11/24, vxlan100 10.99.0.11/24; "
    "not candidates: eno2 172.28.30.11/24 (not up: operstate DOWN), ens60f0 2001:db8:100::11/64 (IPv6 only), "
    "docker0 172.17.0.1/16 (excluded by docker*), veth3c1e2f0 (port of docker0)."
)


def read(name):
    return (IP / name).read_text(encoding="utf-8")


def interfaces(name):
    return parse_ip_addr(read(name))


def route(name):
    return parse_route_get(read(name))


def fails(reason, **kwargs):
    """Run choose_fabric_iface on the multi-NIC host, expect ``reason``; return the message."""
    return fails_on(MULTI, reason, **kwargs)


def fails_on(fixture, reason, **kwargs):
    with pytest.raises(FabricIfaceError) as err:
        choose_fabric_iface(interfaces(fixture), **kwargs)
    assert err.value.reason == reason
    assert err.value.runbook == RUNBOOK
    assert str(err.value).endswith(f"See {RUNBOOK}")
    return str(err.value)


# --------------------------------------------------------------------------- parse_ip_addr


# (fixture, [(ifname, up, operstate, mtu, link_type, master, [ipv4 address/prefix], [ipv6 address/prefix])])
PARSED = [
    (
        "rsys-desktop-docker-bridges.json",
        [
            ("lo", True, "UNKNOWN", 65536, "loopback", None, ["127.0.0.1/8"], ["::1/128"]),
            (
                "enp8s0",
                True,
                "UP",
                1500,
                "ether",
                None,
                ["192.168.0.6/24"],
                ["fd00:a84e:3f17:bf12:3d36:34b6:ccc3:1e56/64", "fe80::3d6e:4143:7f56:3bf9/64"],
            ),
            ("br-211476fe73de", False, "DOWN", 1500, "ether", None, ["172.18.0.1/16"], []),
            ("docker0", False, "DOWN", 1500, "ether", None, ["172.17.0.1/16"], []),
        ],
    ),
    (
        "cloud-init-sample-ipaddrshow.json",
        [
            ("lo", True, "UNKNOWN", 65536, "loopback", None, ["127.0.0.1/8"], ["::1/128"]),
            (
                "enp0s25",
                True,
                "UP",
                1500,
                "ether",
                None,
                ["192.168.2.18/24"],
                ["fe80::7777:2222:1111:eeee/64", "fe80::8107:2b92:867e:f8a6/64"],
            ),
        ],
    ),
    (
        "buildmachine-host.json",
        [
            ("lo", True, "UNKNOWN", 65536, "loopback", None, ["127.0.0.1/8"], ["::1/128"]),
            ("ifb0", False, "DOWN", 1500, "ether", None, [], []),
            ("ifb1", False, "DOWN", 1500, "ether", None, [], []),
            ("eth0", True, "UP", 1400, "ether", None, ["192.0.2.2/24"], ["fd00::2/64", "fe80::fc:ff:fe00:1/64"]),
            ("docker0", True, "UP", 1500, "ether", None, ["172.17.0.1/16"], ["fe80::42:adff:fe21:7ced/64"]),
            ("veth2549cb1", True, "UP", 1500, "ether", "docker0", [], ["fe80::6055:1eff:fef7:4e7d/64"]),
        ],
    ),
    (
        MULTI,
        [
            ("lo", True, "UNKNOWN", 65536, "loopback", None, ["127.0.0.1/8"], ["::1/128"]),
            ("ens50f0", True, "UP", 9000, "ether", None, ["10.10.0.11/16"], ["fe80::54bc:90ff:fe2a:d883/64"]),
            ("ens50f1", True, "UP", 9000, "ether", None, ["10.20.0.11/16"], ["fe80::8079:cbff:fe19:61ff/64"]),
            ("eno1", True, "UP", 1500, "ether", None, ["192.168.1.11/24"], ["fe80::ac7e:f8ff:fe06:3b7c/64"]),
            ("eno2", False, "DOWN", 1500, "ether", None, ["172.28.30.11/24"], []),
            (
                "ens60f0",
                True,
                "UP",
                1500,
                "ether",
                None,
                [],
                ["2001:db8:100::11/64", "fe80::6cf4:bdff:fe30:c462/64"],
            ),
            ("docker0", True, "UP", 1500, "ether", None, ["172.17.0.1/16"], ["fe80::3035:b8ff:fef3:69ea/64"]),
            ("veth3c1e2f0", True, "UP", 1500, "ether", "docker0", [], ["fe80::3035:b8ff:fef3:69ea/64"]),
            # vxlan: operstate UNKNOWN with UP and LOWER_UP counts as up, like lo and tun.
            ("vxlan100", True, "UNKNOWN", 8950, "ether", None, ["10.99.0.11/24"], ["fe80::283a:bff:fea4:5e46/64"]),
        ],
    ),
]


def flat(addresses):
    return [f"{a['address']}/{a['prefixlen']}" for a in addresses]


@pytest.mark.parametrize(("fixture", "expected"), PARSED)
def test_recorded_outputs_parse_to_exact_interfaces(fixture, expected):
    parsed = interfaces(fixture)
    got = [
        (i["ifname"], i["up"], i["operstate"], i["mtu"], i["link_type"], i["master"], flat(i["ipv4"]), flat(i["ipv6"]))
        for i in parsed
    ]
    assert got == expected
    assert all(set(i) == {"ifname", "up", "operstate", "mtu", "link_type", "master", "ipv4", "ipv6"} for i in parsed)


def test_compact_and_pretty_json_parse_the_same():
    assert read(MULTI).startswith('[{"ifindex":1,')  # compact, as `ip -j` prints it
    assert read("cloud-init-sample-ipaddrshow.json").startswith("[\n    {\n")  # pretty
    for name in (MULTI, "cloud-init-sample-ipaddrshow.json", "rsys-desktop-docker-bridges.json"):
        data = json.loads(read(name))
        assert parse_ip_addr(json.dumps(data, indent=4)) == parse_ip_addr(json.dumps(data)) == interfaces(name)


def test_bytes_are_read_as_utf8():
    assert parse_ip_addr(read(MULTI).encode("utf-8")) == interfaces(MULTI)


def test_a_missing_addr_info_is_no_addresses():
    data = json.loads(read("rsys-desktop-docker-bridges.json"))
    del data[3]["addr_info"]
    assert parse_ip_addr(json.dumps(data))[3]["ipv4"] == []


def test_other_address_families_are_skipped():
    data = json.loads(read("rsys-desktop-docker-bridges.json"))
    data[1]["addr_info"].append({"family": "mpls", "local": "100", "prefixlen": 20})
    assert flat(parse_ip_addr(json.dumps(data))[1]["ipv4"]) == ["192.168.0.6/24"]


def mutated(change):
    data = json.loads(read("rsys-desktop-docker-bridges.json"))
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "is not JSON"),
        ('Object "-j" is unknown, try "ip help".', "is not JSON"),  # what an iproute2 without -j prints
        ("{}", "JSON list of interfaces"),
        ("[]", "no interface at all"),
        ("[1]", "not an object"),
        (read("rsys-desktop-docker-bridges.json")[:-200], "is not JSON"),  # cut short
        (mutated(lambda d: d.append(d[1])), "lists enp8s0 twice"),
        (mutated(lambda d: d[1].pop("ifname")), "has no 'ifname'"),
        (mutated(lambda d: d[1].pop("mtu")), "has no integer 'mtu'"),
        (mutated(lambda d: d[1].update(mtu=True)), "has no integer 'mtu'"),
        (mutated(lambda d: d[1].update(flags="UP")), "has no list of 'flags'"),
        (mutated(lambda d: d[1].pop("operstate")), "has no 'operstate'"),
        (mutated(lambda d: d[1].update(master=3)), "non-text 'master'"),
        (mutated(lambda d: d[1].update(addr_info={})), "not a list"),
        (mutated(lambda d: d[1]["addr_info"].append("x")), "not an object"),
        (mutated(lambda d: d[1]["addr_info"][0].update(prefixlen=33)), "no valid 'local' and 'prefixlen'"),
        (mutated(lambda d: d[1]["addr_info"][0].update(local="192.168.0.300")), "as an inet address"),
        (mutated(lambda d: d[1]["addr_info"][1].update(local="192.168.0.6")), "as an inet6 address"),
    ],
)
def test_output_that_is_not_ip_j_addr_is_an_error(text, detail):
    with pytest.raises(FabricIfaceError) as err:
        parse_ip_addr(text)
    assert err.value.reason == "unparsable"
    assert detail in str(err.value)
    assert str(err.value).endswith(f"See {RUNBOOK}")


@pytest.mark.parametrize("value", [None, 42, b"\xff\xfe"])
def test_non_text_is_an_error(value):
    with pytest.raises(FabricIfaceError, match=r"must be text|not UTF-8"):
        parse_ip_addr(value)


# --------------------------------------------------------------------------- parse_route_get


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        (
            "dci-route-get-via-gateway.json",
            ("169.55.126.1", "baremetal", "169.55.126.157", "169.55.126.145", "unicast"),
        ),
        ("dci-route-get-local.json", ("169.55.126.157", "lo", "169.55.126.157", None, "local")),
        ("buildmachine-route-get-1.1.1.1.json", ("1.1.1.1", "eth0", "192.0.2.2", "192.0.2.1", "unicast")),
        ("buildmachine-route-get-local.json", ("127.0.0.1", "lo", "127.0.0.1", None, "local")),
        ("buildmachine-netns-route-get-onlink.json", ("10.10.0.1", "ens50f0", "10.10.0.11", None, "unicast")),
        (
            "buildmachine-netns-route-get-via-gateway.json",
            ("10.30.0.5", "eno1", "192.168.1.11", "192.168.1.1", "unicast"),
        ),
        ("buildmachine-netns-route-get-local.json", ("10.10.0.11", "lo", "10.10.0.11", None, "local")),
        ("buildmachine-netns-route-get-docker0.json", ("172.17.0.5", "docker0", "172.17.0.1", None, "unicast")),
        ("buildmachine-netns-route-get-ipv6only-dev.json", ("10.40.0.5", "ens60f0", "10.10.0.11", None, "unicast")),
    ],
)
def test_recorded_routes_parse_exactly(fixture, expected):
    dst, dev, prefsrc, gateway, kind = expected
    assert route(fixture) == {"dst": dst, "dev": dev, "prefsrc": prefsrc, "gateway": gateway, "type": kind}


def one_route(change):
    data = json.loads(read("dci-route-get-via-gateway.json"))
    change(data[0])
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "reason", "detail"),
    [
        ("", "unparsable", "is not JSON"),
        # ip prints this on stderr and nothing on stdout when there is no route at all.
        ("RTNETLINK answers: Network is unreachable", "unparsable", "is not JSON"),
        ("[]", "unparsable", "one route object"),
        (json.dumps(json.loads(read("dci-route-get-via-gateway.json")) * 2), "unparsable", "one route object"),
        (one_route(lambda r: r.pop("dev")), "unparsable", "without 'dev'"),
        (one_route(lambda r: r.pop("dst")), "unparsable", "without 'dst'"),
        (one_route(lambda r: r.update(gateway="fe80::1::1")), "unparsable", "not an address"),
        (one_route(lambda r: r.update(prefsrc=5)), "unparsable", "not an address"),
        (one_route(lambda r: r.update(type="broadcast")), "bad_route", "type 'broadcast'"),
    ],
)
def test_output_that_is_not_one_route_is_an_error(text, reason, detail):
    with pytest.raises(FabricIfaceError) as err:
        parse_route_get(text)
    assert err.value.reason == reason
    assert detail in str(err.value)


# --------------------------------------------------------------------------- choose: explicit ifname


def test_explicit_ifname_wins_over_cidr_and_route():
    chosen = choose_fabric_iface(
        interfaces(MULTI),
        ifname="ens50f0",
        cidr="10.10.0.0/16",
        peer_route=route("buildmachine-netns-route-get-via-gateway.json"),
    )
    assert chosen == {"ifname": "ens50f0", "address": "10.10.0.11", "mtu": 9000, "reason": "explicit ifname ens50f0"}


def test_explicit_ifname_ignores_the_exclusions():
    assert choose_fabric_iface(interfaces(MULTI), ifname="docker0") == {
        "ifname": "docker0",
        "address": "172.17.0.1",
        "mtu": 1500,
        "reason": "explicit ifname docker0",
    }


def test_explicit_ifname_in_its_cidr():
    chosen = choose_fabric_iface(interfaces(MULTI), ifname="ens50f1", cidr="10.20.0.0/16")
    assert chosen == {"ifname": "ens50f1", "address": "10.20.0.11", "mtu": 9000, "reason": "explicit ifname ens50f1"}


@pytest.mark.parametrize(
    ("kwargs", "reason", "sentence"),
    [
        ({"ifname": "ens9"}, "not_found", "ifname ens9 was asked for, but this host has no interface of that name."),
        ({"ifname": "eno2"}, "not_up", "ifname eno2 was asked for, but it is down."),
        (
            {"ifname": "ens60f0"},
            "no_ipv4",
            "ifname ens60f0 was asked for, but it holds no IPv4 address (it has only IPv6: 2001:db8:100::11/64); "
            "the RCCL socket fabric here is IPv4.",
        ),
        (
            {"ifname": "veth3c1e2f0"},
            "no_ipv4",
            "ifname veth3c1e2f0 was asked for, but it is a port of docker0; name docker0 instead.",
        ),
        (
            {"ifname": "lo"},
            "no_ipv4",
            "ifname lo was asked for, but it is the loopback interface, which other nodes cannot reach.",
        ),
        (
            {"ifname": "ens50f0", "cidr": "10.20.0.0/16"},
            "outside_cidr",
            "ifname ens50f0 was asked for, but none of its addresses (ens50f0 10.10.0.11/16) is in cidr 10.20.0.0/16.",
        ),
    ],
)
def test_explicit_ifname_failures_say_why_and_list_the_candidates(kwargs, reason, sentence):
    message = fails(reason, **kwargs)
    assert message == f"fabric_iface: {sentence} {MULTI_INVENTORY} See {RUNBOOK}"


def test_explicit_ifname_that_is_not_up_for_another_operstate():
    data = json.loads(read(MULTI))
    data[1]["operstate"] = "LOWERLAYERDOWN"
    with pytest.raises(FabricIfaceError, match=r"but it is not up \(operstate LOWERLAYERDOWN\)\."):
        choose_fabric_iface(parse_ip_addr(json.dumps(data)), ifname="ens50f0")


# --------------------------------------------------------------------------- choose: cidr


@pytest.mark.parametrize(
    ("fixture", "cidr", "expected"),
    [
        (MULTI, "10.10.0.0/16", ("ens50f0", "10.10.0.11", 9000, "matched cidr 10.10.0.0/16")),
        (MULTI, "10.20.0.0/16", ("ens50f1", "10.20.0.11", 9000, "matched cidr 10.20.0.0/16")),
        # Host bits are accepted and dropped.
        (MULTI, "10.10.0.11/16", ("ens50f0", "10.10.0.11", 9000, "matched cidr 10.10.0.0/16")),
        (MULTI, "192.168.1.0/24", ("eno1", "192.168.1.11", 1500, "matched cidr 192.168.1.0/24")),
        (
            "rsys-desktop-docker-bridges.json",
            "192.168.0.0/16",
            ("enp8s0", "192.168.0.6", 1500, "matched cidr 192.168.0.0/16"),
        ),
    ],
)
def test_the_one_interface_in_cidr_is_chosen(fixture, cidr, expected):
    ifname, address, mtu, reason = expected
    # cidr decides even when a route to the peer points elsewhere.
    peer = route("buildmachine-netns-route-get-via-gateway.json")
    chosen = choose_fabric_iface(interfaces(fixture), cidr=cidr, peer_route=peer)
    assert chosen == {"ifname": ifname, "address": address, "mtu": mtu, "reason": reason}


def test_a_cidr_spanning_several_rails_gives_the_master_the_first_by_name():
    chosen = choose_fabric_iface(interfaces(MULTI), cidr="10.0.0.0/8")
    assert chosen["ifname"] == "ens50f0" and chosen["address"] == "10.10.0.11"
    assert chosen["reason"] == (
        "matched cidr 10.0.0.0/8, first by name of 3 "
        "(ens50f0 10.10.0.11/16, ens50f1 10.20.0.11/16, vxlan100 10.99.0.11/24)"
    )


@pytest.mark.parametrize(
    ("peer", "expected"),
    [("10.10.0.12", "ens50f0"), ("10.20.255.1", "ens50f1"), ("10.99.0.200", "vxlan100")],
)
def test_a_cidr_spanning_several_rails_gives_the_other_nodes_the_masters_subnet(peer, expected):
    chosen = choose_fabric_iface(interfaces(MULTI), cidr="10.0.0.0/8", peer=peer)
    assert chosen["ifname"] == expected
    assert chosen["reason"] == f"matched cidr 10.0.0.0/8, on the master's subnet ({peer})"


def test_a_node_with_no_rail_on_the_masters_subnet_is_ambiguous():
    message = fails("ambiguous", cidr="10.0.0.0/8", peer="10.30.0.1")
    assert message == (
        "fabric_iface: cidr 10.0.0.0/8 was asked for, but 3 interfaces hold an address in it "
        "(ens50f0 10.10.0.11/16, ens50f1 10.20.0.11/16, vxlan100 10.99.0.11/24) and none of them is on the "
        "subnet of the master's fabric address 10.30.0.1; set ifname for this host. "
        f"{MULTI_INVENTORY} See {RUNBOOK}"
    )


def test_a_peer_that_is_not_an_address_is_refused():
    with pytest.raises(FabricIfaceError, match=r"peer must be an IPv4 address, not 'node1'"):
        choose_fabric_iface(interfaces(MULTI), cidr="10.0.0.0/8", peer="node1")


@pytest.mark.parametrize("cidr", ["10.50.0.0/16", "172.17.0.0/16", "172.28.30.0/24", "10.40.0.0/16"])
def test_cidr_matching_no_candidate_fails(cidr):
    # 172.17.0.0/16 is docker0's (excluded) and 172.28.30.0/24 is eno2's (down): listed, not chosen.
    message = fails("no_match", cidr=cidr)
    assert message == (
        f"fabric_iface: cidr {cidr} was asked for, but no candidate interface holds an IPv4 address in it. "
        f"{MULTI_INVENTORY} See {RUNBOOK}"
    )


@pytest.mark.parametrize(
    ("cidr", "detail"),
    [("ten-ten", "is not a network"), ("10.10.0.0/33", "is not a network"), (10, "is not a network")],
)
def test_a_malformed_cidr_is_an_error(cidr, detail):
    with pytest.raises(FabricIfaceError, match=detail) as err:
        choose_fabric_iface(interfaces(MULTI), cidr=cidr)
    assert err.value.reason == "bad_option"


def test_an_ipv6_cidr_is_refused():
    with pytest.raises(FabricIfaceError, match="is IPv6; the RCCL socket fabric here is IPv4") as err:
        choose_fabric_iface(interfaces(MULTI), cidr="2001:db8:100::/64")
    assert err.value.reason == "bad_option"


# --------------------------------------------------------------------------- choose: route to the peer


@pytest.mark.parametrize(
    ("fixture", "route_fixture", "expected"),
    [
        (
            MULTI,
            "buildmachine-netns-route-get-onlink.json",
            ("ens50f0", "10.10.0.11", 9000, "route to 10.10.0.1 via ens50f0"),
        ),
        (
            MULTI,
            "buildmachine-netns-route-get-via-gateway.json",
            ("eno1", "192.168.1.11", 1500, "route to 10.30.0.5 via eno1 (gateway 192.168.1.1)"),
        ),
        # On MASTER_ADDR itself the route is local (dev lo): the interface holding the address wins.
        (
            MULTI,
            "buildmachine-netns-route-get-local.json",
            ("ens50f0", "10.10.0.11", 9000, "route to 10.10.0.11 is local, on ens50f0"),
        ),
        (
            "buildmachine-host.json",
            "buildmachine-route-get-1.1.1.1.json",
            ("eth0", "192.0.2.2", 1400, "route to 1.1.1.1 via eth0 (gateway 192.0.2.1)"),
        ),
    ],
)
def test_the_interface_of_the_route_to_the_peer_is_chosen(fixture, route_fixture, expected):
    ifname, address, mtu, reason = expected
    chosen = choose_fabric_iface(interfaces(fixture), peer_route=route(route_fixture))
    assert chosen == {"ifname": ifname, "address": address, "mtu": mtu, "reason": reason}


@pytest.mark.parametrize(
    ("route_fixture", "sentence"),
    [
        (
            "buildmachine-netns-route-get-docker0.json",
            "the route to 172.17.0.5 goes via docker0, which is excluded by docker*.",
        ),
        (
            "buildmachine-netns-route-get-ipv6only-dev.json",
            "the route to 10.40.0.5 goes via ens60f0, which is not an up interface with an IPv4 address of its own.",
        ),
        # A route from another host's output names a device this host's list lacks.
        (
            "dci-route-get-via-gateway.json",
            "the route to 169.55.126.1 goes via baremetal, which `ip -j addr` does not list.",
        ),
        (
            "dci-route-get-local.json",
            "the route to 169.55.126.157 is local, but no single up, not excluded interface holds 169.55.126.157.",
        ),
    ],
)
def test_a_route_to_no_usable_interface_fails(route_fixture, sentence):
    message = fails("bad_route", peer_route=route(route_fixture))
    assert message == f"fabric_iface: {sentence} {MULTI_INVENTORY} See {RUNBOOK}"


def test_a_local_route_to_loopback_on_the_build_machine_fails():
    message = fails_on("buildmachine-host.json", "bad_route", peer_route=route("buildmachine-route-get-local.json"))
    assert "the route to 127.0.0.1 is local, but no single up, not excluded interface holds 127.0.0.1." in message
    assert "candidates: eth0 192.0.2.2/24;" in message


@pytest.mark.parametrize("peer_route", [{}, {"dev": "eno1"}, "10.10.0.1", ["eno1"]])
def test_a_peer_route_not_from_parse_route_get_is_an_error(peer_route):
    with pytest.raises(FabricIfaceError, match="peer_route must come from parse_route_get") as err:
        choose_fabric_iface(interfaces(MULTI), peer_route=peer_route)
    assert err.value.reason == "bad_option"


# --------------------------------------------------------------------------- choose: the only candidate


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        # docker0 and br-... are down anyway; the desktop NIC is the one left.
        ("rsys-desktop-docker-bridges.json", ("enp8s0", "192.168.0.6", 1500)),
        ("cloud-init-sample-ipaddrshow.json", ("enp0s25", "192.168.2.18", 1500)),
        # docker0 is up with a container's veth in it, and excluded; ifb0/ifb1 are down.
        ("buildmachine-host.json", ("eth0", "192.0.2.2", 1400)),
    ],
)
def test_the_only_candidate_is_chosen(fixture, expected):
    ifname, address, mtu = expected
    chosen = choose_fabric_iface(interfaces(fixture))
    assert chosen == {"ifname": ifname, "address": address, "mtu": mtu, "reason": "only candidate"}


def test_several_candidates_are_ambiguous():
    message = fails("ambiguous")
    assert message == (
        "fabric_iface: no ifname, cidr or peer was given, and 4 up interfaces hold IPv4 addresses after excluding "
        f"lo, docker*, veth*, virbr*, br-*; set ifname or cidr. {MULTI_INVENTORY} See {RUNBOOK}"
    )


def test_without_exclusions_docker0_becomes_a_candidate():
    message = fails_on("buildmachine-host.json", "ambiguous", exclude=[])
    assert message == (
        "fabric_iface: no ifname, cidr or peer was given, and 2 up interfaces hold IPv4 addresses with nothing "
        "excluded; set ifname or cidr. candidates: eth0 192.0.2.2/24, docker0 172.17.0.1/16; "
        f"not candidates: veth2549cb1 (port of docker0). See {RUNBOOK}"
    )


def test_no_candidate_left_fails_and_lists_what_was_excluded():
    message = fails_on("rsys-desktop-docker-bridges.json", "no_candidate", exclude=["lo", "enp*"])
    assert message == (
        "fabric_iface: no ifname, cidr or peer was given, and no up interface with an IPv4 address is left after "
        "excluding lo, enp*. candidates: none; not candidates: enp8s0 192.168.0.6/24 (excluded by enp*), "
        "br-211476fe73de 172.18.0.1/16 (not up: operstate DOWN), docker0 172.17.0.1/16 (not up: operstate DOWN). "
        f"See {RUNBOOK}"
    )


def test_the_default_exclusions_are_the_documented_ones():
    assert DEFAULT_EXCLUDE == ("lo", "docker*", "veth*", "virbr*", "br-*")


@pytest.mark.parametrize("exclude", ["docker*", [1], ("lo", None)])
def test_exclude_must_be_a_list_of_globs(exclude):
    with pytest.raises(FabricIfaceError, match="exclude must be a list of globs") as err:
        choose_fabric_iface(interfaces(MULTI), exclude=exclude)
    assert err.value.reason == "bad_option"


# --------------------------------------------------------------------------- bonds (constructed)

# No recorded `ip -j addr` with a bond was found (see SOURCES.md). These entries are constructed in
# the shape parse_ip_addr returns, with the interface names of the ibdev2netdev fixture.
BOND_HOST = [
    {
        "ifname": "ens12f0np0",
        "up": True,
        "operstate": "UP",
        "mtu": 9000,
        "link_type": "ether",
        "master": "bond0",
        "ipv4": [],
        "ipv6": [],
    },
    {
        "ifname": "ens12f1np1",
        "up": True,
        "operstate": "UP",
        "mtu": 9000,
        "link_type": "ether",
        "master": "bond0",
        "ipv4": [],
        "ipv6": [],
    },
    {
        "ifname": "bond0",
        "up": True,
        "operstate": "UP",
        "mtu": 9000,
        "link_type": "ether",
        "master": None,
        "ipv4": [{"address": "10.10.0.21", "prefixlen": 16}],
        "ipv6": [],
    },
]


def test_the_bond_is_the_candidate_not_its_slaves():
    assert choose_fabric_iface(BOND_HOST) == {
        "ifname": "bond0",
        "address": "10.10.0.21",
        "mtu": 9000,
        "reason": "only candidate",
    }


def test_naming_a_bond_slave_points_at_the_bond():
    with pytest.raises(FabricIfaceError) as err:
        choose_fabric_iface(BOND_HOST, ifname="ens12f0np0")
    assert str(err.value) == (
        "fabric_iface: ifname ens12f0np0 was asked for, but it is a port of bond0; name bond0 instead. "
        "candidates: bond0 10.10.0.21/16; not candidates: ens12f0np0 (port of bond0), ens12f1np1 (port of bond0). "
        f"See {RUNBOOK}"
    )


# --------------------------------------------------------------------------- rdma_netdevs


def ibdev2netdev(text):
    """``mlx5_1 port 1 ==> ens12f0np0 (Up)`` lines -> ``{ib_device: [netdev, ...]}``."""
    mapping = {}
    for line in text.splitlines():
        device, _port, _number, arrow, netdev, _state = line.split()
        assert arrow == "==>"
        mapping.setdefault(device, []).append(netdev)
    return mapping


H20 = ibdev2netdev(read("ibdev2netdev-h20-roce-bond.txt"))


def test_the_ibdev2netdev_fixture_maps_as_recorded():
    assert H20 == {
        "mlx5_0": ["ibs108"],
        "mlx5_1": ["ens12f0np0"],
        "mlx5_2": ["ens12f1np1"],
        "mlx5_3": ["ibs110"],
        "mlx5_4": ["ibs112"],
        "mlx5_7": ["ibs114"],
        "mlx5_bond_0": ["bond0"],
    }


@pytest.mark.parametrize(
    ("ifname", "devices"),
    [("bond0", ["mlx5_bond_0"]), ("ens12f0np0", ["mlx5_1"]), ("ibs110", ["mlx5_3"]), ("eno1", [])],
)
def test_rdma_devices_on_the_chosen_interface(ifname, devices):
    assert rdma_netdevs(H20, ifname) == devices


def test_rdma_devices_on_a_bonds_slaves_belong_to_the_bond():
    # sysfs lists a RoCE LAG's slave netdevs under /sys/class/infiniband/mlx5_bond_0/device/net/.
    sysfs = {"mlx5_bond_0": ["ens12f0np0"], "mlx5_3": ["ibs110"]}
    assert rdma_netdevs(sysfs, "bond0") == []
    assert rdma_netdevs(sysfs, "bond0", BOND_HOST) == ["mlx5_bond_0"]


def test_rdma_devices_come_in_natural_order():
    assert rdma_netdevs({"mlx5_10": ["bond0"], "mlx5_2": ["bond0"], "mlx5_bond_0": ["bond0"]}, "bond0") == [
        "mlx5_2",
        "mlx5_10",
        "mlx5_bond_0",
    ]


@pytest.mark.parametrize("mapping", [["mlx5_0"], {"mlx5_0": "ib0"}, {0: ["ib0"]}])
def test_a_malformed_rdma_mapping_is_an_error(mapping):
    with pytest.raises(FabricIfaceError) as err:
        rdma_netdevs(mapping, "ib0")
    assert err.value.reason == "bad_option"


# --------------------------------------------------------------------------- fuzz

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=20)
JSONISH = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=30,
)
# Interface-shaped objects reach past the first checks: real keys, values of any JSON type.
KEYS = ["ifname", "flags", "mtu", "operstate", "link_type", "master", "addr_info"]
ADDRESS = st.fixed_dictionaries(
    {},
    optional={
        "family": st.sampled_from(["inet", "inet6", "mpls"]) | SCALARS,
        "local": st.sampled_from(["10.10.0.11", "fe80::1", "::1", "300.1.1.1", "fe80::1%eth0"]) | SCALARS,
        "prefixlen": st.integers(-1, 129) | SCALARS,
    },
)
INTERFACE = st.fixed_dictionaries(
    {},
    optional={
        "ifname": st.sampled_from(["lo", "eth0", "docker0", "bond0", ""]) | SCALARS,
        "flags": st.lists(st.sampled_from(["UP", "LOWER_UP", "LOOPBACK", "SLAVE"]) | SCALARS, max_size=4) | SCALARS,
        "mtu": st.integers(-1, 70000) | SCALARS,
        "operstate": st.sampled_from(["UP", "DOWN", "UNKNOWN"]) | SCALARS,
        "link_type": st.sampled_from(["ether", "loopback"]) | SCALARS,
        "master": st.sampled_from(["bond0", "docker0"]) | SCALARS,
        "addr_info": st.lists(ADDRESS | JSONISH, max_size=4) | SCALARS,
    },
)


def parse_or_refuse(text):
    try:
        parsed = parse_ip_addr(text)
    except FabricIfaceError as err:
        assert err.reason == "unparsable"
        assert str(err).endswith(f"See {RUNBOOK}")
        return
    # Whatever parses must also be safe to choose from: a result or a FabricIfaceError.
    assert all(isinstance(i["mtu"], int) and isinstance(i["up"], bool) for i in parsed)
    try:
        chosen = choose_fabric_iface(parsed)
    except FabricIfaceError as err:
        assert err.reason in {"no_candidate", "ambiguous"}
    else:
        assert chosen["reason"] == "only candidate"


@FUZZ
@given(JSONISH)
def test_arbitrary_json_is_parsed_or_refused(value):
    parse_or_refuse(json.dumps(value))


@FUZZ
@given(st.lists(INTERFACE | JSONISH, max_size=6))
def test_interface_shaped_json_is_parsed_or_refused(value):
    parse_or_refuse(json.dumps(value))


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_is_parsed_or_refused(text):
    parse_or_refuse(text)


@pytest.mark.parametrize("fixture", [MULTI, "buildmachine-host.json", "rsys-desktop-docker-bridges.json"])
@FUZZ
@given(data=st.data())
def test_damaged_recorded_output_is_parsed_or_refused(fixture, data):
    entries = json.loads(read(fixture))
    index = data.draw(st.integers(0, len(entries) - 1))
    key = data.draw(st.sampled_from(KEYS))
    if data.draw(st.booleans()):
        entries[index].pop(key, None)
    else:
        entries[index][key] = data.draw(JSONISH)
    parse_or_refuse(json.dumps(entries))


@FUZZ
@given(
    JSONISH
    | st.lists(st.fixed_dictionaries({}, optional=dict.fromkeys(["dst", "dev", "prefsrc", "gateway", "type"], SCALARS)))
)
def test_arbitrary_json_is_a_route_or_refused(value):
    try:
        parsed = parse_route_get(json.dumps(value))
    except FabricIfaceError as err:
        assert err.reason in {"unparsable", "bad_route"}
        return
    assert set(parsed) == {"dst", "dev", "prefsrc", "gateway", "type"}
