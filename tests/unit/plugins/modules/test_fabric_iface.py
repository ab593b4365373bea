"""Run the real fabric_iface module through ansible, with ip_path pointing at a script that prints
recorded `ip -j` outputs (tests/fixtures/ip), and check the facts a playbook would get."""

import stat

from tests.unit.conftest import FIXTURES
from tests.unit.conftest import run_module as conftest_run_module

IP = FIXTURES / "ip"


def fake_ip(tmp_path, addr, route=None, route_rc=0):
    script = tmp_path / "ip"
    route_part = f"cat '{IP / route}'" if route else "echo 'RTNETLINK answers: Network is unreachable' >&2"
    script.write_text(
        "#!/bin/sh\n"
        f"if [ \"$2\" = addr ]; then cat '{IP / addr}'; exit 0; fi\n"
        f'if [ "$2" = route ]; then {route_part}; exit {route_rc}; fi\n'
        "exit 2\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def run(args):
    return conftest_run_module("fabric_iface", args)


def test_cidr_picks_the_fabric_nic_of_a_multi_nic_node(tmp_path):
    rc, result = run(f"ip_path={fake_ip(tmp_path, 'buildmachine-netns-multinic.json')} cidr=10.10.0.0/16")
    assert rc == 0, result
    assert result["changed"] is False
    assert result["ansible_facts"] == {
        "fabric_ifname": "ens50f0",
        "fabric_address": "10.10.0.11",
        "fabric_mtu": 9000,
        "fabric_reason": "matched cidr 10.10.0.0/16",
        "fabric_rdma_devices": [],
    }


def test_route_to_the_peer_decides_without_cidr(tmp_path):
    script = fake_ip(tmp_path, "buildmachine-netns-multinic.json", "buildmachine-netns-route-get-via-gateway.json")
    rc, result = run(f"ip_path={script} peer=10.30.0.5")
    assert rc == 0, result
    facts = result["ansible_facts"]
    assert facts["fabric_ifname"] == "eno1"
    assert facts["fabric_reason"] == "route to 10.30.0.5 via eno1 (gateway 192.168.1.1)"


def test_no_route_to_the_peer_fails_with_the_fix(tmp_path):
    script = fake_ip(tmp_path, "buildmachine-netns-multinic.json", route_rc=2)
    rc, result = run(f"ip_path={script} peer=10.30.0.5")
    assert rc != 0
    assert "no route to the peer 10.30.0.5" in result["msg"]
    assert "Network is unreachable" in result["msg"]
    assert result["runbook"] == "docs/runbooks/fabric-iface.md"


def test_a_wrong_explicit_interface_fails_listing_the_candidates(tmp_path):
    rc, result = run(f"ip_path={fake_ip(tmp_path, 'buildmachine-netns-multinic.json')} ifname=eth9")
    assert rc != 0
    assert "eth9" in result["msg"]
    assert "ens50f0 10.10.0.11/16" in result["msg"]
    assert "docs/runbooks/fabric-iface.md" in result["msg"]


def test_ambiguous_without_any_hint(tmp_path):
    rc, result = run(f"ip_path={fake_ip(tmp_path, 'buildmachine-netns-multinic.json')}")
    assert rc != 0
    assert result["reason"] == "ambiguous"
    assert "set ifname or cidr" in result["msg"]


def test_with_a_cidr_spanning_rails_the_peers_subnet_decides_without_a_route_lookup(tmp_path):
    # route_rc=2: a route lookup would fail the module; with a cidr, the peer only breaks the tie.
    script = fake_ip(tmp_path, "buildmachine-netns-multinic.json", route_rc=2)
    rc, result = run(f"ip_path={script} cidr=10.0.0.0/8 peer=10.20.0.12")
    assert rc == 0, result
    assert result["ansible_facts"]["fabric_ifname"] == "ens50f1"
    assert result["ansible_facts"]["fabric_reason"] == "matched cidr 10.0.0.0/8, on the master's subnet (10.20.0.12)"
