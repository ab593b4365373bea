"""The verbs check: every port of NCCL_IB_HCA seen by libibverbs, ACTIVE, at the expected rate and
with a RoCE v2 GID at NCCL_IB_GID_INDEX, on the real ibv_devinfo recordings of tests/fixtures/rdma;
each problem names the node, the port, what was found, the fix and the runbook."""

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import parse_ibv_devinfo, verbs_check
from tests.unit.conftest import FIXTURES

RDMA = FIXTURES / "rdma"
RUNBOOK = "See docs/runbooks/fabric-bandwidth.md"


def devices(name):
    return parse_ibv_devinfo((RDMA / name).read_text())


def test_a_down_rail_is_refused_naming_the_node_the_port_and_the_fix():
    check = verbs_check(devices("ibv_devinfo-mlx5-cx7-roce-2port-down.txt"), ["mlx5_0:1"], node="node2")
    assert check["ports"] == [{"port": "mlx5_0:1", "seen": True, "state": "DOWN", "link_layer": "Ethernet",
                               "rate_gbps": None, "gid": None, "ok": False}]  # fmt: skip
    (problem,) = check["problems"]
    assert problem.startswith("node2: RDMA port mlx5_0:1 is DOWN in ibv_devinfo; RCCL needs it ACTIVE. ")
    assert "Check its cable, optics and switch port" in problem and "leave it out of fabric_rdma_hcas" in problem
    assert problem.endswith(RUNBOOK)


def test_a_device_asked_for_checks_each_of_its_ports():
    check = verbs_check(devices("ibv_devinfo-mlx4-cx2-ib-2port-port2-down.txt"), ["mlx4_0"], node="n1")
    assert [(v["port"], v["state"], v["ok"]) for v in check["ports"]] == [
        ("mlx4_0:1", "ACTIVE", True),
        ("mlx4_0:2", "DOWN", False),
    ]
    (problem,) = check["problems"]
    assert problem.startswith("n1: RDMA port mlx4_0:2 is DOWN")


def test_a_port_the_verbs_library_does_not_list_is_named_with_what_it_lists_and_the_stacks_to_install():
    check = verbs_check(devices("ibv_devinfo-ionic-pollara-8port-mi355x.txt"), ["ionic_0", "bnxt_re0"], node="n1")
    verdicts = [(v["port"], v["seen"], v["ok"]) for v in check["ports"]]
    assert verdicts == [("ionic_0:1", True, True), ("bnxt_re0", False, False)]
    (problem,) = check["problems"]
    assert problem.startswith("n1: RDMA port bnxt_re0 is not seen by the verbs library (ibv_devinfo lists ")
    assert "ionic_0:1 ACTIVE, ionic_1:1 ACTIVE" in problem and "libibverbs has no provider" in problem
    assert "Broadcom's libbnxt_re for Thor" in problem and problem.endswith(RUNBOOK)


def test_eight_healthy_pollara_rails_pass_and_plain_output_gives_no_rate_to_judge():
    check = verbs_check(devices("ibv_devinfo-ionic-pollara-8port-mi355x.txt"), [f"ionic_{n}:1" for n in range(8)],
                        rate_gbps=400, node="chi2766")  # fmt: skip
    assert check["problems"] == [] and all(v["ok"] and v["rate_gbps"] is None for v in check["ports"])


def test_a_port_slower_than_the_rails_is_refused_with_its_lanes():
    found = devices("ibv_devinfo-v-mlx5-cx6-roce-25g.txt")
    (problem,) = verbs_check(found, ["mlx5_0:1"], rate_gbps=400, node="h1")["problems"]
    assert problem.startswith(
        "h1: RDMA port mlx5_0:1 runs at 100 Gb/s (4X 25 Gb/s lanes), below the 400 Gb/s expected of the rails"
    )
    assert "fabric_rdma_rate_gbps" in problem and problem.endswith(RUNBOOK)
    assert verbs_check(found, ["mlx5_0:1"], rate_gbps=100, node="h1")["problems"] == []


def test_the_gid_index_must_hold_a_roce_v2_entry():
    found = devices("ibv_devinfo-v-mlx5-cx6-roce-25g.txt")
    good = verbs_check(found, ["mlx5_0:1"], gid_index="3", node="h1")
    assert good["problems"] == []
    assert good["ports"][0]["gid"] == {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:010b", "type": "RoCE v2"}
    (v1,) = verbs_check(found, ["mlx5_0:1"], gid_index="2", node="h1")["problems"]
    assert v1.startswith("h1: RDMA port mlx5_0:1's GID at index 2 (NCCL_IB_GID_INDEX) is RoCE v1 (0000:0000:")
    assert "its RoCE v2 GIDs with an IPv4 address are at 3. Set fabric_ib_gid_index" in v1
    (absent,) = verbs_check(found, ["mlx5_0:1"], gid_index=7, node="h1")["problems"]
    assert absent.startswith("h1: RDMA port mlx5_0:1 has no GID at index 7 (NCCL_IB_GID_INDEX); its RoCE v2 GIDs")
    assert absent.endswith(RUNBOOK)


def test_infiniband_and_plain_output_have_no_gid_to_judge():
    check = verbs_check(devices("ibv_devinfo-mlx5-cx6vf-ib-azure-hbv3.txt"), ["mlx5_ib0:1"], gid_index="3", node="hb")
    assert check["problems"] == [] and check["ports"][0]["ok"]
    check = verbs_check(devices("ibv_devinfo-mlx5-cx7-roce-10port-plus-bond.txt"), ["mlx5_0"], gid_index="3", node="x")
    assert check["problems"] == []


def test_nothing_asked_for_is_nothing_to_check():
    assert verbs_check([], [], node="n") == {"ports": [], "problems": []}
