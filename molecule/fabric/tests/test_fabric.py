"""Verify the fabric role on two nodes with a management and a fabric network."""

import ipaddress
import json

import pytest

FABRIC = ipaddress.ip_network("172.30.60.0/24")


@pytest.fixture(scope="module")
def facts(host):
    return json.loads(host.file("/root/fabric-facts.json").content_string)


def addresses(host):
    return {
        link["ifname"]: [a["local"] for a in link.get("addr_info", []) if a["family"] == "inet"]
        for link in json.loads(host.check_output("ip -j addr"))
    }


def test_the_fabric_nic_is_chosen_and_it_is_not_the_default_route(host, facts):
    nic = facts["fabric_ifname"]
    assert ipaddress.ip_address(facts["fabric_address"]) in FABRIC
    assert facts["fabric_address"] in addresses(host)[nic]
    assert facts["fabric_reason"] == "matched cidr 172.30.60.0/24"
    default = json.loads(host.check_output("ip -j route show default"))
    assert default and all(route["dev"] != nic for route in default)


def test_the_env_file_holds_the_fabric_nic(host, facts):
    env_file = host.file("/etc/instinct-finetune/rccl.env")
    assert env_file.mode == 0o644 and env_file.user == "root"
    env = dict(line.split("=", 1) for line in env_file.content_string.splitlines() if line and line[0] != "#")
    assert env["NCCL_SOCKET_IFNAME"] == facts["fabric_ifname"]
    assert env["GLOO_SOCKET_IFNAME"] == facts["fabric_ifname"]
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["HSA_FORCE_FINE_GRAIN_PCIE"] == "1"
    assert env["PYTORCH_HIP_ALLOC_CONF"] == env["PYTORCH_ALLOC_CONF"] == "max_split_size_mb:512"
    assert ipaddress.ip_address(env["MASTER_ADDR"]) in FABRIC
    assert env["MASTER_PORT"] == "29500"
    assert "NCCL_IB_HCA" not in env  # no RDMA devices in a container
    profile = host.file("/etc/profile.d/instinct-rccl.sh")
    assert profile.mode == 0o644
    out = host.run("bash -lc 'echo $NCCL_SOCKET_IFNAME'")
    assert out.stdout.strip() == facts["fabric_ifname"]


def test_the_all_reduce_ran_across_both_nodes_over_the_fabric_nic(host, facts):
    result = facts["fabric_smoke_result"]
    assert result["world_size"] == 2
    assert result["backend"] == "gloo"
    assert result["ifname"] == facts["fabric_ifname"]
    assert [r["size_mb"] for r in result["results"]] == [1, 8, 32]
    assert all(r["busbw_gbps"] > 0 and r["time_ms"] > 0 for r in result["results"])
    assert result["latency_us"] > 0


def test_ranks_are_master_first(host, facts):
    rank = facts["fabric_smoke_result"]["rank"]
    assert rank == (0 if host.backend.get_hostname() == "instinct-fabric-node1" else 1)


def test_the_stack_roles_installed_their_packages_on_lists_that_were_empty_and_new(host):
    # The prepare emptied /var/lib/apt/lists and touched it just before the converge
    # (molecule/resources/containers/fresh-apt.yml): an age check would have trusted them.
    emptied_at = int(host.file("/var/lib/instinct-test/apt-emptied-at").content_string)
    assert host.package("python3-packaging").is_installed
    indexes = host.check_output("find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -printf '%C@\\n'")
    times = [float(t) for t in indexes.split()]
    assert times, "apt's lists hold no Packages index after the converge"
    # ctime, not mtime: apt gives an index the server's Last-Modified time.
    assert min(times) >= emptied_at - 1, "the lists were not refreshed after they were emptied"
