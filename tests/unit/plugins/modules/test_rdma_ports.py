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


def test_every_active_port_of_the_recorded_tree_mixes_link_layers_and_fails_naming_them():
    rc, result = run_module("rdma_ports", json.dumps({"class_dir": str(H100_TREE)}))
    assert rc != 0
    assert "mix link layers (Ethernet: mlx5_bond_0:1; InfiniBand: mlx5_0:1" in result["msg"]
    assert "docs/runbooks/fabric-bandwidth.md" in result["msg"]


def test_a_node_without_rdma_gets_no_port(tmp_path):
    rc, result = run_module("rdma_ports", json.dumps({"class_dir": str(tmp_path / "absent")}))
    assert rc == 0, result
    assert (result["hcas"], result["link_layer"], result["gid_index"], result["ports"]) == ([], "", "", [])
