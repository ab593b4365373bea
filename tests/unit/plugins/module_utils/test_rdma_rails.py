"""Which RDMA ports are rails (issue 29, "NIC choice"): the fastest active ports of one link layer, no
bond, one per GPU unless the operator lists them; every other port is reported with why. Built from
the real recordings of tests/fixtures/rdma (SOURCES.md); where a recording lacks a case (no node
recorded with a 100G port among 400G rails), a recorded tree is changed in one file, said where."""

import shutil

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import (
    choose_rails,
    parse_ibv_devinfo,
    ports_from_ibv_devinfo,
    ports_from_rdma_link,
    ports_from_sysfs,
)
from ansible_collections.instinct.finetune.plugins.module_utils.sysfs import (
    read_bonding_masters,
    read_infiniband_class,
)
from tests.unit.conftest import FIXTURES

RDMA = FIXTURES / "rdma"
H100_TREE = RDMA / "gpud_testdata_sys-class-infiniband-h100.0"
BOND = {"port": "mlx5_bond_0:1", "why": "a bond (bonded device): not a rail"}


def verbs_ports(name):
    return ports_from_ibv_devinfo(parse_ibv_devinfo((RDMA / name).read_text()))


def test_a_recorded_h200_node_with_ten_roce_ports_and_a_bond_has_more_ports_than_gpus():
    # DeepEP#355: eight ConnectX-7 rails, a second dual-port ConnectX-7 (mlx5_10, mlx5_11) and the
    # frontend bond mlx5_bond_0, all active; plain ibv_devinfo gives no rate.
    ports = verbs_ports("ibv_devinfo-mlx5-cx7-roce-10port-plus-bond.txt")
    choice = choose_rails(ports, gpus=8)
    assert choice["left_out"] == [BOND]
    assert choice["hcas"] == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_10:1", "mlx5_11:1", "mlx5_3:1", "mlx5_4:1",
                              "mlx5_5:1", "mlx5_6:1", "mlx5_7:1"]  # fmt: skip
    (problem,) = choice["problems"]
    assert problem.startswith("10 RDMA rail(s) at unknown (mlx5_0:1, mlx5_1:1, ")
    assert "for 8 GPUs: RCCL pairs each GPU with a rail of its own. Left out: mlx5_bond_0:1: a bond" in problem
    assert "list the ports RCCL is to use in fabric_rdma_hcas. See docs/runbooks/fabric-bandwidth.md" in problem
    # The operator names the eight rails: accepted, the second card and the bond reported as left out.
    listed = choose_rails(ports, ["mlx5_[0-7]"], gpus=8)
    assert listed["problems"] == [] and listed["hcas"] == [f"mlx5_{n}:1" for n in range(8)]
    assert [entry["port"] for entry in listed["left_out"]] == ["mlx5_10:1", "mlx5_11:1", "mlx5_bond_0:1"]
    assert {entry["why"] for entry in listed["left_out"]} == {"not in fabric_rdma_hcas"}


def test_a_netdev_that_is_a_bonding_master_is_no_rail(tmp_path):
    # The OCI node's rdma link listing; the net tree is built here with eth0 (mlx5_4's netdev) a bond.
    (tmp_path / "bonding_masters").write_text("eth0\n")
    (tmp_path / "rdma0").mkdir()
    bonds = read_bonding_masters(str(tmp_path))
    assert bonds == ["eth0"]
    ports = ports_from_rdma_link((RDMA / "rdma-link_oci-gpu-node_10x-mlx5_1down.txt").read_text())
    choice = choose_rails(ports, gpus=8, bonds=bonds)
    assert choice["problems"] == [] and len(choice["hcas"]) == 8 and "mlx5_4:1" not in choice["hcas"]
    assert {"port": "mlx5_4:1", "why": "a bond (netdev eth0 is a bonding master): not a rail"} in choice["left_out"]


def test_a_100g_port_among_400g_rails_is_left_out_and_then_the_rails_are_too_few(tmp_path):
    # gpud's H100 tree with one file changed: mlx5_9's rate as the kernel writes a 4X EDR port's.
    root = tmp_path / "infiniband"
    shutil.copytree(H100_TREE, root)
    (root / "mlx5_9" / "ports" / "1" / "rate").write_text("100 Gb/sec (4X EDR)\n")
    ports = ports_from_sysfs(read_infiniband_class(str(root)))
    choice = choose_rails(ports, gpus=8)
    assert choice["hcas"] == [f"mlx5_{n}:1" for n in (0, 1, 4, 5, 6, 7, 8)]
    assert (choice["rate_gbps"], choice["link_layer"]) == (400, "InfiniBand")
    assert choice["left_out"] == [BOND, {"port": "mlx5_9:1", "why": "slower: 100 Gb/s, the rails run at 400 Gb/s"}]
    (problem,) = choice["problems"]
    assert problem.startswith("7 RDMA rail(s) at 400 Gb/s (mlx5_0:1, ") and "for 8 GPUs" in problem
    assert "mlx5_9:1: slower: 100 Gb/s, the rails run at 400 Gb/s" in problem
    # Without a GPU count (a CPU node), the seven fast ones are the rails and nothing is refused.
    assert choose_rails(ports)["problems"] == []
    # Listed by the operator, the slow port is taken, and the rails' rate is the slowest one's.
    listed = choose_rails(ports, ["mlx5_[0-9]"], gpus=8)
    assert listed["problems"] == [] and len(listed["hcas"]) == 8 and listed["rate_gbps"] == 100


def test_fewer_ports_than_gpus_are_refused_and_accepted_when_listed():
    # ucx#11048: a Broadcom node with bnxt_re0 active and bnxt_re1 down.
    ports = ports_from_rdma_link((RDMA / "rdma-link_ucx-issue-11048_bnxt_re_2port_1down.txt").read_text())
    choice = choose_rails(ports, gpus=8)
    assert choice["hcas"] == ["bnxt_re0:1"] and choice["left_out"] == [
        {"port": "bnxt_re1:1", "why": "not active (DOWN)"}
    ]
    (problem,) = choice["problems"]
    assert problem.startswith("1 RDMA rail(s) at unknown (bnxt_re0:1) for 8 GPUs")
    assert "Left out: bnxt_re1:1: not active (DOWN). Bring the missing rails up, or list the ports" in problem
    listed = choose_rails(ports, ["bnxt_re0"], gpus=8)
    assert (listed["hcas"], listed["problems"]) == (["bnxt_re0:1"], [])


def test_eight_pollara_rails_for_eight_gpus():
    choice = choose_rails(verbs_ports("ibv_devinfo-ionic-pollara-8port-mi355x.txt"), gpus=8)
    assert choice == {"hcas": [f"ionic_{n}:1" for n in range(8)], "rate_gbps": None, "max_rate_gbps": None,
                      "link_layer": "Ethernet",
                      "left_out": [], "problems": []}  # fmt: skip


def test_a_node_whose_ports_are_all_down_is_refused_naming_them():
    (problem,) = choose_rails(verbs_ports("ibv_devinfo-mlx5-cx7-roce-2port-down.txt"), gpus=2)["problems"]
    assert "none is active and usable (mlx5_0:1 DOWN, mlx5_1:1 DOWN)" in problem


def test_a_listed_port_that_is_down_is_refused():
    ports = verbs_ports("ibv_devinfo-mlx4-cx2-ib-2port-port2-down.txt")
    (problem,) = choose_rails(ports, ["mlx4_0"])["problems"]
    assert problem.startswith("RDMA port(s) asked for are not active: mlx4_0:2 (DOWN)")
    assert choose_rails(ports, ["mlx4_0:1"])["hcas"] == ["mlx4_0:1"]


def test_the_verbs_check_expects_every_listed_rail_at_the_fastest_rails_rate():
    """A port that trained down (a 100G among 400G rails the operator listed) lowers the slowest rate,
    not what each rail is checked against."""
    ports = [
        {"device": f"mlx5_{n}", "port": 1, "state": "ACTIVE", "link_layer": "Ethernet", "netdev": f"eth{n}",
         "rate_gbps": 100 if n == 7 else 400, "gids": [], "numa_node": None}
        for n in range(8)
    ]  # fmt: skip
    choice = choose_rails(ports, [f"mlx5_{n}" for n in range(8)], gpus=8)
    assert (choice["rate_gbps"], choice["max_rate_gbps"]) == (100, 400)
