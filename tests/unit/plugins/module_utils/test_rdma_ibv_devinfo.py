"""`ibv_devinfo` and `ibv_devinfo -v` read into devices and ports, on every real recording in
tests/fixtures/rdma (SOURCES.md, section 5): ConnectX-7 RoCE with a bond, ConnectX-7 with both ports
down, AMD Pensando Pollara (ionic), ConnectX-6 VF and ConnectX-2 on InfiniBand (one port down), and the
verbose form of a ConnectX-6 RoCE port with its GID table. Each expected value was read off the file."""

import re

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import (
    IbvDevinfoError,
    parse_ibv_devinfo,
    ports_from_ibv_devinfo,
    rate_from_sysfs,
    roce_gid_index,
)
from tests.unit.conftest import FIXTURES

RDMA = FIXTURES / "rdma"
ALL = sorted(path.name for path in RDMA.glob("ibv_devinfo*.txt"))


def devinfo(name):
    return parse_ibv_devinfo((RDMA / name).read_text())


def plain_port(number, state, link_layer, mtu):
    """A port as plain ibv_devinfo (no -v) shows it: no width, speed, rate, GIDs or physical state."""
    return {"port": number, "state": state, "phys_state": "", "link_layer": link_layer, "active_mtu": mtu,
            "width": None, "speed": None, "rate_gbps": None, "gids": None}  # fmt: skip


def test_every_recording_is_read():
    assert ALL == [
        "ibv_devinfo-ionic-pollara-8port-mi355x.txt",
        "ibv_devinfo-mlx4-cx2-ib-2port-port2-down.txt",
        "ibv_devinfo-mlx5-cx6vf-ib-azure-hbv3.txt",
        "ibv_devinfo-mlx5-cx7-roce-10port-plus-bond.txt",
        "ibv_devinfo-mlx5-cx7-roce-2port-down.txt",
        "ibv_devinfo-v-mlx5-cx6-roce-25g.txt",
    ]
    assert all(devinfo(name) for name in ALL)


def test_connectx7_roce_ten_ports_and_a_bond_in_the_order_listed():
    devices = devinfo("ibv_devinfo-mlx5-cx7-roce-10port-plus-bond.txt")
    assert [d["device"] for d in devices] == [
        "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7",
        "mlx5_bond_0",
    ]  # fmt: skip
    assert devices[0] == {
        "device": "mlx5_0", "transport": "InfiniBand", "fw_ver": "28.42.1000", "vendor_id": "0x02c9",
        "vendor_part_id": 4129, "board_id": "MT_0000000838", "node_guid": "e09d:7303:000d:1fc0",
        "ports": [plain_port(1, "ACTIVE", "Ethernet", 4096)],
    }  # fmt: skip
    # The second card: another board and firmware; mlx5_11 is its second port.
    assert [(d["board_id"], d["fw_ver"], d["node_guid"]) for d in devices[3:5]] == [
        ("MT_0000001045", "28.39.2048", "58a2:e103:00b3:2274"),
        ("MT_0000001045", "28.39.2048", "58a2:e103:00b3:2275"),
    ]
    assert {d["board_id"] for d in devices[:10]} == {"MT_0000000838", "MT_0000001045"}
    assert all(d["ports"] == [plain_port(1, "ACTIVE", "Ethernet", 4096)] for d in devices[:10])
    # The bond: a ConnectX-6 Lx at MTU 1024.
    assert devices[10] == {
        "device": "mlx5_bond_0", "transport": "InfiniBand", "fw_ver": "26.43.2026", "vendor_id": "0x02c9",
        "vendor_part_id": 4127, "board_id": "MT_0000000531", "node_guid": "7c8c:0903:0004:2b52",
        "ports": [plain_port(1, "ACTIVE", "Ethernet", 1024)],
    }  # fmt: skip


def test_connectx7_with_both_ports_down():
    devices = devinfo("ibv_devinfo-mlx5-cx7-roce-2port-down.txt")
    assert [(d["device"], d["node_guid"], d["ports"]) for d in devices] == [
        ("mlx5_0", "9c63:c003:00d5:edf6", [plain_port(1, "DOWN", "Ethernet", 1024)]),
        ("mlx5_1", "9c63:c003:00d5:edf7", [plain_port(1, "DOWN", "Ethernet", 1024)]),
    ]
    assert {(d["fw_ver"], d["board_id"], d["vendor_part_id"]) for d in devices} == {
        ("28.44.1036", "MT_0000000834", 4129)
    }


def test_pollara_ionic_has_no_board_id():
    devices = devinfo("ibv_devinfo-ionic-pollara-8port-mi355x.txt")
    assert [d["device"] for d in devices] == [f"ionic_{n}" for n in range(8)]
    assert [d["node_guid"] for d in devices] == [
        "0690:81ff:fe36:b328", "0690:81ff:fe36:a5a8", "0690:81ff:fe36:9648", "0690:81ff:fe36:5880",
        "0690:81ff:fe36:9420", "0690:81ff:fe36:6360", "0690:81ff:fe36:aec0", "0690:81ff:fe36:86d0",
    ]  # fmt: skip
    for device in devices:
        assert {k: v for k, v in device.items() if k not in ("device", "node_guid")} == {
            "transport": "InfiniBand", "fw_ver": "1.117.1-a-63", "vendor_id": "0x1dd8", "vendor_part_id": 4098,
            "board_id": "", "ports": [plain_port(1, "ACTIVE", "Ethernet", 4096)],
        }  # fmt: skip


def test_infiniband_a_connectx6_vf_and_a_two_port_connectx2_with_port_2_down():
    assert devinfo("ibv_devinfo-mlx5-cx6vf-ib-azure-hbv3.txt") == [
        {"device": "mlx5_ib0", "transport": "InfiniBand", "fw_ver": "20.31.1014", "vendor_id": "0x02c9",
         "vendor_part_id": 4124, "board_id": "MT_0000000223", "node_guid": "0015:5dff:fe33:ff56",
         "ports": [plain_port(1, "ACTIVE", "InfiniBand", 4096)]}
    ]  # fmt: skip
    assert devinfo("ibv_devinfo-mlx4-cx2-ib-2port-port2-down.txt") == [
        {"device": "mlx4_0", "transport": "InfiniBand", "fw_ver": "2.7.000", "vendor_id": "0x02c9",
         "vendor_part_id": 26428, "board_id": "MT_0D80120009", "node_guid": "0002:c903:0007:d550",
         "ports": [plain_port(1, "ACTIVE", "InfiniBand", 4096), plain_port(2, "DOWN", "InfiniBand", 4096)]}
    ]  # fmt: skip


def test_the_verbose_form_gives_the_rate_and_the_gid_table_written_out_as_sysfs_writes_it():
    (device,) = devinfo("ibv_devinfo-v-mlx5-cx6-roce-25g.txt")
    assert {k: v for k, v in device.items() if k != "ports"} == {
        "device": "mlx5_0", "transport": "InfiniBand", "fw_ver": "20.24.4702", "vendor_id": "0x02c9",
        "vendor_part_id": 4123, "board_id": "MT_0000000225", "node_guid": "b859:9f03:0037:8268",
    }  # fmt: skip
    # "active_width: 4X (2)" and "active_speed: 25.0 Gbps (32)": four lanes of 25 Gb/s.
    assert device["ports"] == [
        {"port": 1, "state": "ACTIVE", "phys_state": "LINK_UP", "link_layer": "Ethernet", "active_mtu": 4096,
         "width": 4, "speed": 25, "rate_gbps": 100,
         "gids": [
             {"index": 0, "gid": "fe80:0000:0000:0000:ba59:9fff:fe37:8268", "type": "RoCE v1"},
             {"index": 1, "gid": "fe80:0000:0000:0000:ba59:9fff:fe37:8268", "type": "RoCE v2"},  # fe80::ba59:...
             {"index": 2, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:010b", "type": "RoCE v1"},
             {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:010b", "type": "RoCE v2"},  # ::ffff:192.168.1.11
         ]},
    ]  # fmt: skip
    # The same rule as for sysfs tables: the RoCE v2 entry with an IPv4 address.
    assert roce_gid_index(ports_from_ibv_devinfo([device])) == 3


def test_tabs_as_ibv_devinfo_prints_them_read_as_the_recordings_spaces():
    text = (RDMA / "ibv_devinfo-mlx4-cx2-ib-2port-port2-down.txt").read_text()
    tabbed = "\n".join(line.replace(" " * 8, "\t") for line in text.splitlines())
    assert parse_ibv_devinfo(tabbed) == devinfo("ibv_devinfo-mlx4-cx2-ib-2port-port2-down.txt")


def test_no_device_is_an_empty_list():
    # ibv_devinfo writes "No IB devices found" to stderr and nothing to stdout.
    assert parse_ibv_devinfo("") == []


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda t: t.replace("hca_id: mlx5_1\n", "", 1), "mlx5_0 has its transport line after its ports"),
        (lambda t: t.replace("hca_id: mlx5_1", "hca_id: mlx5_0", 1), "mlx5_0 is listed twice"),
        (lambda t: t.replace("                port:   1\n", "", 1), "mlx5_0 has a port's state line outside a port"),
        (
            lambda t: t.replace("phys_port_cnt:                  1", "phys_port_cnt:                  2", 1),
            "mlx5_0 lists port(s) 1, its phys_port_cnt says 2",
        ),
        (lambda t: t[: t.index("link_layer")], "mlx5_0 port 1 has no link_layer line"),
    ],
)
def test_an_output_that_lost_or_merged_lines_is_refused_naming_the_device(mangle, message):
    text = (RDMA / "ibv_devinfo-mlx5-cx7-roce-2port-down.txt").read_text()
    with pytest.raises(IbvDevinfoError, match=re.escape("ibv_devinfo's output cannot be read: " + message)) as err:
        parse_ibv_devinfo(mangle(text))
    assert "docs/runbooks/fabric-bandwidth.md" in str(err.value)


def test_a_value_whose_text_and_code_disagree_is_unknown():
    text = (RDMA / "ibv_devinfo-v-mlx5-cx6-roce-25g.txt").read_text()
    (device,) = parse_ibv_devinfo(text.replace("PORT_ACTIVE (4)", "PORT_ACTIVE (1)").replace("4X (2)", "4X (1)"))
    port = device["ports"][0]
    assert (port["state"], port["width"], port["speed"], port["rate_gbps"]) == ("", None, 25, None)


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("400 Gb/sec (4X NDR)\n", 400),  # gpud's H100 tree, mlx5_0..9
        ("200 Gb/sec (2X NDR)\n", 200),  # the same tree's mlx5_bond_0
        ("100 Gb/sec (4X EDR)", 100),  # the kernel's rate_show forms for EDR and SDR (".5" for half rates)
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("", None),
        ("invalid", None),
    ],
)
def test_the_sysfs_rate_in_gbps(text, gbps):
    assert rate_from_sysfs(text) == gbps
