"""Which RDMA ports RCCL is given and with which RoCE GID index, read from real recorded sysfs
trees, `rdma link` and `show_gids` outputs (tests/fixtures/rdma/SOURCES.md)."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import (
    RdmaError,
    choose_rails,
    gid_index_problems,
    gids_from_show_gids,
    nearest_port_warnings,
    ports_from_rdma_link,
    ports_from_sysfs,
    roce_gid_index,
)
from tests.unit.conftest import FIXTURES

RDMA = FIXTURES / "rdma"
H100_TREE = RDMA / "gpud_testdata_sys-class-infiniband-h100.0"


def text(name):
    return (RDMA / name).read_text()


def tree(root):
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def with_gids(ports, table):
    return [dict(p, gids=table.get((p["device"], p["port"]), [])) for p in ports]


def test_a_recorded_h100_tree_has_eight_infiniband_rails_and_an_ethernet_bond():
    ports = ports_from_sysfs(tree(H100_TREE))
    assert len(ports) == 9 and all(p["state"] == "ACTIVE" for p in ports)
    rails = [p for p in ports if p["link_layer"] == "InfiniBand"]
    assert [p["device"] for p in rails] == [f"mlx5_{n}" for n in (0, 1, 4, 5, 6, 7, 8, 9)]
    (bond,) = [p for p in ports if p["link_layer"] == "Ethernet"]
    assert bond["device"] == "mlx5_bond_0"


def test_the_bond_is_left_out_of_the_recorded_tree_and_a_pattern_picks_the_same_rails():
    ports = ports_from_sysfs(tree(H100_TREE))
    assert [p["rate_gbps"] for p in ports] == [400] * 8 + [200]  # "400 Gb/sec (4X NDR)", "200 Gb/sec (2X NDR)"
    choice = choose_rails(ports, gpus=8)
    assert choice["hcas"] == [f"mlx5_{n}:1" for n in (0, 1, 4, 5, 6, 7, 8, 9)] and choice["problems"] == []
    assert (choice["link_layer"], choice["rate_gbps"]) == ("InfiniBand", 400)
    assert choice["left_out"] == [{"port": "mlx5_bond_0:1", "why": "a bond (bonded device): not a rail"}]
    listed = choose_rails(ports, ["mlx5_[0-9]"])
    assert listed["hcas"] == choice["hcas"] and listed["link_layer"] == "InfiniBand"
    assert listed["left_out"] == [{"port": "mlx5_bond_0:1", "why": "not in fabric_rdma_hcas"}]
    # InfiniBand: no RoCE GID index.
    assert roce_gid_index([p for p in ports if f"{p['device']}:{p['port']}" in choice["hcas"]]) is None
    # Named by the operator, the bond joins and the link layers mix: refused, naming them.
    (problem,) = choose_rails(ports, ["mlx5_*"])["problems"]
    assert "mix link layers (Ethernet: mlx5_bond_0:1; InfiniBand: mlx5_0:1, " in problem
    assert "fabric_rdma_hcas" in problem and "docs/runbooks/fabric-bandwidth.md" in problem


def test_eight_roce_rails_with_the_management_port_left_out_and_the_down_port_skipped():
    ports = ports_from_rdma_link(text("rdma-link_oci-gpu-node_10x-mlx5_1down.txt"))
    assert len(ports) == 10 and [p["state"] for p in ports].count("DOWN") == 1
    choice = choose_rails(ports, exclude_netdevs=["eth0"], gpus=8)
    assert choice["hcas"] == [f"mlx5_{n}:1" for n in (0, 1, 2, 3, 5, 6, 7, 8)] and choice["problems"] == []
    assert (choice["link_layer"], choice["rate_gbps"]) == ("Ethernet", None)  # rdma link gives no rate
    assert choice["left_out"] == [
        {"port": "mlx5_4:1", "why": "the management NIC's port (netdev eth0)"},
        {"port": "mlx5_9:1", "why": "not active (DOWN)"},
    ]
    # Asked for by name, a down port is refused before any launch.
    (problem,) = choose_rails(ports, ["mlx5_8", "mlx5_9"])["problems"]
    assert "not active: mlx5_9:1 (DOWN)" in problem


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("rdma-link_j-strawhat-rdma-demo_connectx-vpi_eth-active_ib-down.txt", ["mlx5_0:1"]),  # one port
        ("rdma-link_gb10-connectx7_4port_2down.txt", ["roceP2p1s0f0:1", "rocep1s0f0:1"]),  # two of four
        ("rdma-link_ucx-issue-11048_bnxt_re_2port_1down.txt", ["bnxt_re0:1"]),
    ],
)
def test_every_active_port_is_chosen_and_a_down_one_is_not(name, expected):
    choice = choose_rails(ports_from_rdma_link(text(name)))
    assert choice["hcas"] == expected and choice["link_layer"] == "Ethernet" and choice["problems"] == []
    assert all(entry["why"].startswith("not active (DOWN)") for entry in choice["left_out"])


def test_a_recorded_mix_of_infiniband_and_roce_ports_is_refused():
    ports = ports_from_rdma_link(text("rdma-link_openshift-doc_10x-mlx5_ib-and-roce_mixed-down.txt"))
    assert {p["link_layer"] for p in ports if p["state"] == "ACTIVE"} == {"", "InfiniBand", "Ethernet"}
    (problem,) = choose_rails(ports)["problems"]
    assert "mix link layers" in problem
    # The one RoCE port, asked for, is fine.
    choice = choose_rails(ports, ["mlx5_7:1"])
    assert (choice["hcas"], choice["link_layer"], choice["problems"]) == (["mlx5_7:1"], "Ethernet", [])


def test_a_node_without_rdma_keeps_sockets_and_one_with_every_port_down_fails():
    assert choose_rails([], gpus=8) == {
        "hcas": [], "rate_gbps": None, "max_rate_gbps": None, "link_layer": "", "left_out": [], "problems": []
    }  # fmt: skip
    ports = [p for p in ports_from_rdma_link(text("rdma-link_oci-gpu-node_10x-mlx5_1down.txt")) if p["state"] == "DOWN"]
    (problem,) = choose_rails(ports)["problems"]
    assert "none is active and usable (mlx5_9:1 DOWN)" in problem


def test_the_gid_index_is_the_roce_v2_entry_with_an_ipv4_address():
    host = gids_from_show_gids(text("show_gids_nccl-issue-1131_h100-host_excerpt.txt"))
    ports = [{"device": d, "port": p, "state": "ACTIVE", "link_layer": "Ethernet", "netdev": ""} for d, p in host]
    assert roce_gid_index(with_gids(ports, host)) == 3
    # A sparse table in a pod: IPv4 entries before the link-local ones.
    sparse = gids_from_show_gids(text("show_gids_nccl-pr-1587_sparse-gid-table_pod.txt"))
    assert roce_gid_index(with_gids([dict(ports[0], device="mlx5_0")], sparse)) == 7


def test_the_gid_index_from_a_recorded_sysfs_gid_table():
    lines = [
        line.split(None, 3) for line in text("sysfs-gid-table_soft-roce-rxe_node-0.txt").splitlines() if line.strip()
    ]
    files = {"rxe0/ports/1/state": "4: ACTIVE", "rxe0/ports/1/link_layer": "Ethernet"}
    for index, v1_or_v2, version, gid in lines:
        files[f"rxe0/ports/1/gids/{index}"] = gid
        files[f"rxe0/ports/1/gid_attrs/types/{index}"] = f"{v1_or_v2} {version}"
    (port,) = ports_from_sysfs(files)
    assert [g["type"] for g in port["gids"]] == ["RoCE v2"] * 3
    assert roce_gid_index([port]) == 1


def test_ports_or_nodes_that_disagree_on_the_gid_index_are_refused():
    pod1 = gids_from_show_gids(text("show_gids_multus-cni-issue-1100_pod1_mlx5_4_idx4-5.txt"))
    pod2 = gids_from_show_gids(text("show_gids_multus-cni-issue-1100_pod2_mlx5_4_idx6-7.txt"))
    port = {"device": "mlx5_4", "port": 1, "state": "ACTIVE", "link_layer": "Ethernet", "netdev": "net1"}
    first, second = roce_gid_index(with_gids([port], pod1)), roce_gid_index(with_gids([port], pod2))
    assert (first, second) == (5, 7)
    (problem,) = gid_index_problems({"node1": first, "node2": second, "node3": None})
    assert "GID indexes differ (node1 5, node2 7)" in problem and "fabric_ib_gid_index" in problem
    assert gid_index_problems({"node1": 3, "node2": 3, "node3": None}) == []
    # Two ports of one node that disagree.
    other = dict(port, device="mlx5_5")
    table = {("mlx5_4", 1): pod1[("mlx5_4", 1)], ("mlx5_5", 1): pod2[("mlx5_4", 1)]}
    with pytest.raises(RdmaError, match=r"differs between the ports \(mlx5_4:1 5, mlx5_5:1 7\)"):
        roce_gid_index(with_gids([port, other], table))


def test_gpus_whose_nearest_port_is_left_out_are_warned_about():
    ports = ports_from_rdma_link(text("rdma-link_oci-gpu-node_10x-mlx5_1down.txt"))
    # The recorded listing has no NUMA nodes: four ports on each socket, as on a two-socket node.
    for index, port in enumerate(ports):
        port["numa_node"] = 0 if index < 5 else 1
    gpus = [0, 0, 0, 0, 1, 1, 1, 1]
    hcas = choose_rails(ports, exclude_netdevs=["eth0"])["hcas"]
    assert nearest_port_warnings(ports, hcas, gpus) == []
    (warning,) = nearest_port_warnings(ports, ["mlx5_0:1", "mlx5_1:1"], gpus)
    assert warning.startswith("4 GPU(s) on NUMA node 1: their nearest active RDMA port(s) mlx5_5:1, mlx5_6:1, ")
    assert "crosses sockets" in warning
    # Unknown NUMA nodes say nothing.
    assert nearest_port_warnings(ports, [], [None, -1]) == []
