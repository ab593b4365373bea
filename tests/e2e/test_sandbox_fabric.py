"""The fabric stage on the sandbox's three networks: a management network that carries the default
route and two rail networks that fabric_cidr spans, as on a rail-optimised node. The socket
interface (one rail, the same on every node), the env file every launch reads,
the all-reduce between both nodes over that interface, and a wrong interface refused on its host
before anything is launched. (This was molecule's fabric scenario; the sandbox runs the same role
on nodes already converged.)"""

import ipaddress
import re

import pytest
from cluster import NODES, ROOT, SMOKE_TASK, debug_messages, ip_json, node, sandbox

# inventories/sandbox/group_vars/all.yml's fabric_cidr: both rails.
FABRIC = ipaddress.ip_network("172.29.20.0/23")


def env_file(host):
    content = node(host, "cat", "/etc/instinct-finetune/rccl.env").stdout
    return dict(line.split("=", 1) for line in content.splitlines() if line and line[0] != "#")


def figures(converged):
    """Each node's all-reduce line as the fabric role shows it: rank, world, backend, NIC."""
    shown = debug_messages(converged, "Show the all-reduce figures")
    assert sorted(shown) == NODES, converged.debug
    parsed = {}
    for host, (line, results) in shown.items():
        match = re.search(r"rank (\d+) of (\d+), (\w+) over (\S+): latency (\S+) us", line)
        assert match, line
        rank, world, backend, ifname, latency = match.groups()
        parsed[host] = {"rank": int(rank), "world": int(world), "backend": backend, "ifname": ifname,
                        "latency_us": float(latency), "results": results}  # fmt: skip
    return parsed


def test_the_fabric_nic_is_chosen_by_cidr_and_it_is_not_the_default_route(converged):
    for host, shown in figures(converged).items():
        nic = shown["ifname"]
        (link,) = ip_json(host, "addr", "show", "dev", nic)
        addresses = [a["local"] for a in link["addr_info"] if a["family"] == "inet"]
        assert any(ipaddress.ip_address(a) in FABRIC for a in addresses), (host, nic, addresses)
        default = ip_json(host, "route", "show", "default")
        assert default and all(route["dev"] != nic for route in default), (host, default)


def test_with_two_rails_in_the_cidr_every_node_takes_the_masters_rail(converged):
    nics = {host: shown["ifname"] for host, shown in figures(converged).items()}
    subnets = set()
    for host in NODES:
        rails = [a for link in ip_json(host, "addr", "show") for a in link["addr_info"]
                 if a["family"] == "inet" and ipaddress.ip_address(a["local"]) in FABRIC]  # fmt: skip
        assert len(rails) == 2, (host, rails)  # two rails; the management NIC is outside the cidr
        (link,) = ip_json(host, "addr", "show", "dev", nics[host])
        (chosen,) = [a for a in link["addr_info"] if a["family"] == "inet"]
        subnets.add(ipaddress.ip_network(f"{chosen['local']}/{chosen['prefixlen']}", strict=False))
    assert len(subnets) == 1, subnets  # rails are switched apart: one subnet for every node's sockets
    choices = debug_messages(converged, "Show the choice")
    assert "matched cidr 172.29.20.0/23, first by name of 2" in choices[NODES[0]]
    for host in NODES[1:]:
        assert "matched cidr 172.29.20.0/23, on the master's subnet" in choices[host], choices[host]


def test_the_env_file_holds_the_fabric_nic_and_the_master_on_it(converged):
    nics = {host: shown["ifname"] for host, shown in figures(converged).items()}
    for host in NODES:
        mode = node(host, "stat", "-c", "%a %U", "/etc/instinct-finetune/rccl.env").stdout.split()
        assert mode == ["644", "root"]
        env = env_file(host)
        # "=": that interface only, not every name it is a prefix of; Gloo takes the name itself.
        assert env["NCCL_SOCKET_IFNAME"] == "=" + nics[host]
        assert env["GLOO_SOCKET_IFNAME"] == nics[host]
        # The simulated nodes show MI300X GPUs (gfx942): AMD's training settings for that arch.
        amd = {"TORCH_NCCL_HIGH_PRIORITY": "1", "GPU_MAX_HW_QUEUES": "2", "HSA_NO_SCRATCH_RECLAIM": "1",
               "RCCL_MSCCL_ENABLE": "0", "NCCL_MIN_NCHANNELS": "112", "HIP_FORCE_DEV_KERNARG": "1"}  # fmt: skip
        assert {k: env.get(k) for k in amd} == amd
        assert "HSA_FORCE_FINE_GRAIN_PCIE" not in env  # for PCIe-connected GPUs; MI300X's are on xGMI
        assert env["PYTORCH_HIP_ALLOC_CONF"] == env["PYTORCH_ALLOC_CONF"] == "max_split_size_mb:512"
        assert ipaddress.ip_address(env["MASTER_ADDR"]) in FABRIC
        assert env["MASTER_PORT"] == "29500"
        assert "NCCL_IB_HCA" not in env  # no RDMA devices in a container
        assert "NCCL_CROSS_NIC" not in env and "NCCL_DMABUF_ENABLE" not in env  # RDMA-only settings
        # The RCCL environment stays in the unit and the checks: a login shell does not get it.
        out = node(host, "bash", "-lc", "echo ${NCCL_SOCKET_IFNAME:-unset}").stdout.strip()
        assert out == "unset"
        assert node(host, "test", "-e", "/etc/profile.d/instinct-rccl.sh", check=False).returncode == 1
    masters = {env_file(host)["MASTER_ADDR"] for host in NODES}
    (link,) = ip_json(NODES[0], "addr", "show", "dev", nics[NODES[0]])
    assert masters == {a["local"] for a in link["addr_info"] if a["family"] == "inet"}


def test_the_all_reduce_ran_master_first_across_both_nodes_over_the_fabric_nic(converged):
    shown = figures(converged)
    assert [shown[host]["rank"] for host in NODES] == [0, 1]
    for host in NODES:
        assert shown[host]["world"] == 2 and shown[host]["backend"] == "gloo"
        assert shown[host]["latency_us"] > 0
        results = shown[host]["results"]
        assert [r["size_mb"] for r in results] == [1, 8, 32]
        assert all(r["busbw_gbps"] > 0 and r["time_ms"] > 0 for r in results)


def test_the_verbs_check_finds_no_rdma_ports_and_rccl_is_left_on_sockets(converged):
    """A container has no RDMA device: the verbs check says so on every node instead of failing, nothing
    goes into NCCL_IB_HCA, and the RCCL INFO-log proof is skipped on Gloo ranks, saying why."""
    shown = debug_messages(converged, "Say that RCCL uses sockets on a node without RDMA ports")
    assert sorted(shown) == NODES, converged.debug
    nics = {host: shown_["ifname"] for host, shown_ in figures(converged).items()}
    for host, msg in shown.items():
        assert msg == f"{host}: no RDMA ports; RCCL uses sockets over {nics[host]}", msg
        assert "NCCL_IB_HCA" not in env_file(host)
    skipped = debug_messages(converged, "Say why RCCL's INFO log is not checked on ranks without a GPU")
    assert len(skipped) == 1 and "the ranks run Gloo over CPU" in next(iter(skipped.values()))


def test_site_yml_ran_on_apt_lists_that_were_empty_and_new(converged):
    # The session emptied /var/lib/apt/lists just before site.yml (fresh_apt): a check by age
    # would have trusted them.
    for host in NODES:
        emptied_at = int(node(host, "cat", "/var/lib/instinct-test/apt-emptied-at").stdout)
        found = node(host, "find", "/var/lib/apt/lists", "-maxdepth", "1", "-name", "*_Packages*", "-printf", "%C@\\n")
        times = [float(t) for t in found.stdout.split()]
        assert times, f"{host}: apt's lists hold no Packages index after site.yml"
        # ctime, not mtime: apt gives an index the server's Last-Modified time.
        assert min(times) >= emptied_at - 1, f"{host}: the lists were not refreshed after they were emptied"


@pytest.fixture(scope="module")
def bad_interface(converged):
    return sandbox.run_playbook(
        ROOT / "tests" / "e2e" / "playbooks" / "bad-interface.yml", cmdline=sandbox.site_cmdline(), quiet=True
    )


def test_a_wrong_interface_fails_on_its_node_before_anything_is_launched(bad_interface):
    assert bad_interface.rc != 0
    assert bad_interface.failed_hosts() == [NODES[1]]
    (failure,) = [f for f in bad_interface.failures if f["host"] == NODES[1]]
    assert "eth9" in failure["msg"] and "docs/runbooks/fabric-iface.md" in failure["msg"], failure
    # node1 stopped with it (any_errors_fatal), and neither node changed anything.
    assert bad_interface.changed == {}
    # Nothing was launched, not even the reachability listener.
    assert bad_interface.ran("Choose the other nodes' fabric interfaces") == [NODES[1]]
    assert bad_interface.ran("Listen on the master's port for every other node") == []
    assert bad_interface.ran(SMOKE_TASK) == []


def test_preflight_reported_the_nics_against_the_gpus(converged):
    # The containers' interfaces are veths, with no device behind them: no NIC, no RDMA port. The
    # simulated GPUs' PCI addresses are not in the container's /sys/bus/pci: their NUMA node is unknown.
    reports = debug_messages(converged, "Report the NICs against the GPUs")
    assert sorted(reports) == NODES
    for lines in reports.values():
        assert lines == ["NIC | PCI | state | speed | NUMA | RDMA ports", "GPUs by NUMA node: NUMA unknown: 8"]
