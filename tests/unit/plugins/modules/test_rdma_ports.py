"""The rdma_ports module through ansible, on a real recorded /sys/class/infiniband tree (gpud's H100
node: eight InfiniBand rails and an Ethernet bond) and on a node without RDMA."""

import json

from tests.unit.conftest import FIXTURES, run_module

H100_TREE = FIXTURES / "rdma" / "gpud_testdata_sys-class-infiniband-h100.0"


def test_the_rails_named_by_a_glob_are_chosen_from_the_recorded_tree():
    rc, result = run_module("rdma_ports", json.dumps({"class_dir": str(H100_TREE), "hcas": ["mlx5_[0-9]"]}))
    assert rc == 0, result
    assert result["hcas"] == [f"mlx5_{n}:1" for n in (0, 1, 4, 5, 6, 7, 8, 9)]
    assert result["link_layer"] == "InfiniBand" and result["gid_index"] == ""
    assert len(result["ports"]) == 9 and result["changed"] is False


def test_the_rails_of_the_recorded_tree_are_its_eight_400g_ports_and_the_bond_is_left_out_saying_why(tmp_path):
    args = {"class_dir": str(H100_TREE), "gpus": 8, "net_dir": str(tmp_path)}
    rc, result = run_module("rdma_ports", json.dumps(args))
    assert rc == 0, result
    assert result["hcas"] == [f"mlx5_{n}:1" for n in (0, 1, 4, 5, 6, 7, 8, 9)]
    assert (result["rate_gbps"], result["link_layer"], result["problems"]) == (400, "InfiniBand", [])
    assert result["left_out"] == [{"port": "mlx5_bond_0:1", "why": "a bond (bonded device): not a rail"}]


def test_more_rails_than_gpus_fail_naming_them_and_the_fix(tmp_path):
    args = {"class_dir": str(H100_TREE), "gpus": 4, "net_dir": str(tmp_path)}
    rc, result = run_module("rdma_ports", json.dumps(args))
    assert rc != 0
    assert result["msg"].startswith("8 RDMA rail(s) at 400 Gb/s (mlx5_0:1, mlx5_1:1, ")
    assert "for 4 GPUs" in result["msg"] and "fabric_rdma_hcas" in result["msg"]
    assert "docs/runbooks/fabric-bandwidth.md" in result["msg"]
    # Listed by the operator, four of them are taken as they are.
    rc, result = run_module("rdma_ports", json.dumps(dict(args, hcas=["mlx5_[0-5]"])))
    assert rc == 0, result
    assert result["hcas"] == ["mlx5_0:1", "mlx5_1:1", "mlx5_4:1", "mlx5_5:1"]


def test_a_node_without_rdma_gets_no_port(tmp_path):
    rc, result = run_module("rdma_ports", json.dumps({"class_dir": str(tmp_path / "absent")}))
    assert rc == 0, result
    assert (result["hcas"], result["link_layer"], result["gid_index"], result["ports"]) == ([], "", "", [])
    assert (result["rate_gbps"], result["left_out"], result["problems"]) == (None, [], [])
