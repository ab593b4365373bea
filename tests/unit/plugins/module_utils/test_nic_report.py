"""preflight's NIC report: every NIC with its NUMA node and RDMA ports, the ports RCCL would be
given, and the GPUs per NUMA node. RDMA ports come from real recordings (tests/fixtures/rdma); the
/sys/class/net trees are built here, since each of their files holds one word."""

import json

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import (
    choose_rails,
    netdevs_from_sysfs,
    nic_report,
    nic_report_lines,
    ports_from_rdma_link,
    ports_from_sysfs,
)
from ansible_collections.instinct.finetune.plugins.module_utils.sysfs import (
    pci_numa_nodes,
    read_infiniband_class,
    read_net_class,
)
from tests.unit.conftest import FIXTURES, run_module

RDMA = FIXTURES / "rdma"
H100_TREE = RDMA / "gpud_testdata_sys-class-infiniband-h100.0"


def net_tree(root, nics):
    """A /sys/class/net tree: each NIC a folder whose ``device`` links to its PCI device."""
    pci = root / "devices"
    for name, (address, state, speed, numa) in nics.items():
        device = pci / address
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{numa}\n")
        folder = root / "net" / name
        folder.mkdir(parents=True)
        (folder / "device").symlink_to(device)
        (folder / "operstate").write_text(f"{state}\n")
        if speed is not None:
            (folder / "speed").write_text(f"{speed}\n")
    (root / "net" / "lo").mkdir()  # no device: not a NIC
    (root / "net" / "lo" / "operstate").write_text("unknown\n")
    return root / "net"


def oci_ports():
    """The recorded OCI GPU node's ten RDMA links, rdma0..rdma7 on mlx5_0..3, 5..8 (NUMA 0 for the first
    four, 1 for the rest, as on a two-socket node), eth0 the frontend, eth1 down."""
    ports = ports_from_rdma_link((RDMA / "rdma-link_oci-gpu-node_10x-mlx5_1down.txt").read_text())
    for port in ports:
        rail = port["netdev"][4:] if port["netdev"].startswith("rdma") else ""
        port["numa_node"] = (0 if int(rail) < 4 else 1) if rail else 0
    return ports


def test_the_nics_of_a_net_tree_are_read_with_their_numa_node_and_a_down_link_has_no_speed(tmp_path):
    net = net_tree(tmp_path, {"rdma0": ("0000:0c:00.0", "up", 400000, 0), "eth1": ("0000:9a:00.1", "down", -1, 1),
                              "rdma10": ("0000:d1:00.0", "up", 400000, -1)})  # fmt: skip
    nics = netdevs_from_sysfs(read_net_class(str(net)))
    assert [n["name"] for n in nics] == ["eth1", "rdma0", "rdma10"]  # natural order, lo left out
    assert nics[0] == {"name": "eth1", "pci": "0000:9a:00.1", "state": "DOWN", "numa_node": 1, "speed_mbps": None}
    assert nics[1]["speed_mbps"] == 400000 and nics[1]["numa_node"] == 0
    assert nics[2]["numa_node"] is None  # the kernel's -1: unknown
    assert pci_numa_nodes(str(tmp_path / "devices"), ["0c:00.0", "0000:9a:00.1", "ff:00.0"]) == [0, 1, None]


def test_each_nic_shows_its_rdma_port_and_whether_rccl_gets_it():
    ports = oci_ports()
    nics = [{"name": n, "pci": "", "state": "UP", "numa_node": None, "speed_mbps": None} for n in ("eth0", "rdma0")]
    hcas = choose_rails(ports, exclude_netdevs=["eth0"], gpus=8)["hcas"]
    report = nic_report(nics, ports, hcas, [0, 0, 0, 0, 1, 1, 1, 1])
    rows = {row["name"]: row for row in report["nics"]}
    assert rows["eth0"]["rdma"] == ["mlx5_4:1 ACTIVE Ethernet"] and rows["eth0"]["in_hcas"] is False
    assert rows["rdma0"]["rdma"] == ["mlx5_0:1 ACTIVE Ethernet, in NCCL_IB_HCA"] and rows["rdma0"]["in_hcas"]
    # The ports whose netdev is not among the NICs given still appear, by netdev.
    assert rows["eth1"]["rdma"] == ["mlx5_9:1 DOWN Ethernet"]
    assert sum(row["in_hcas"] for row in report["nics"]) == 8
    assert report["gpus_by_numa"] == {"0": 4, "1": 4} and report["warnings"] == []


def test_gpus_whose_nearest_rails_are_left_out_are_warned_about_in_the_report():
    ports = oci_ports()
    report = nic_report([], ports, ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"], [0, 0, 0, 0, 1, 1, 1, 1])
    (warning,) = report["warnings"]
    assert warning.startswith("4 GPU(s) on NUMA node 1: their nearest active RDMA port(s) mlx5_5:1")


def test_infiniband_ports_without_a_netdev_are_rows_of_their_own_and_the_lines_show_them():
    ports = ports_from_sysfs(read_infiniband_class(str(H100_TREE)))
    hcas = choose_rails(ports, ["mlx5_[0-9]"])["hcas"]
    lines = nic_report_lines(nic_report([], ports, hcas, [None, None]))
    assert lines[0] == "NIC | PCI | state | speed | NUMA | RDMA ports"
    assert "mlx5_0:1 | - | ACTIVE | - | - | mlx5_0:1 ACTIVE InfiniBand, in NCCL_IB_HCA" in lines
    assert "mlx5_bond_0:1 | - | ACTIVE | - | - | mlx5_bond_0:1 ACTIVE Ethernet" in lines
    assert lines[-1] == "GPUs by NUMA node: NUMA unknown: 2"


def test_the_module_reports_and_does_not_fail_on_a_choice_the_fabric_role_would_refuse(tmp_path):
    net = net_tree(tmp_path, {"eno1": ("0000:01:00.0", "up", 1000, 0)})
    args = {"net_dir": str(net), "class_dir": str(H100_TREE), "pci_dir": str(tmp_path / "devices"),
            "gpu_pci_addresses": ["01:00.0"]}  # fmt: skip
    rc, result = run_module("nic_report", json.dumps(args))
    assert rc == 0, result
    # Eight InfiniBand rails (the Ethernet bond left out) for the one GPU listed: the fabric role refuses.
    assert result["hcas"] == [] and result["problem"].startswith("8 RDMA rail(s) at 400 Gb/s (mlx5_0:1, ")
    assert "for 1 GPUs" in result["problem"] and "mlx5_bond_0:1: a bond" in result["problem"]
    assert result["left_out"] == [{"port": "mlx5_bond_0:1", "why": "a bond (bonded device): not a rail"}]
    assert result["nics"][0]["name"] == "eno1" and result["gpus_by_numa"] == {"0": 1}
    assert result["changed"] is False and result["lines"][1].startswith("eno1 | 0000:01:00.0 | UP | 1 Gb/s | 0 | none")


def test_the_module_returns_the_numa_warnings_under_a_name_ansible_leaves_alone(tmp_path):
    # Two ports on NUMA node 1, GPUs there, and RCCL asked to use only the port on node 0.
    net = net_tree(tmp_path, {"eno1": ("0000:01:00.0", "up", 1000, 0)})
    args = {"net_dir": str(net), "class_dir": str(H100_TREE), "pci_dir": str(tmp_path / "devices"),
            "gpu_pci_addresses": ["01:00.0"], "hcas": ["mlx5_0"]}  # fmt: skip
    rc, result = run_module("nic_report", json.dumps(args))
    assert rc == 0, result
    assert result["hcas"] == ["mlx5_0:1"] and result["problem"] == ""
    # The recorded tree has no NUMA nodes: nothing to warn about, and the key is there to say so.
    assert result["numa_warnings"] == []
