"""The rdma_verbs module through ansible, with a stand-in ibv_devinfo that replays a real recording
(tests/fixtures/rdma) or says what rdma-core's says on a node without RDMA devices, and without any
ibv_devinfo at all."""

import json

from tests.unit.conftest import FIXTURES, run_module

RDMA = FIXTURES / "rdma"


def stand_in(tmp_path, recording=None, stderr="", rc=0):
    """An ibv_devinfo that records its arguments, prints the recording and exits with ``rc``."""
    tool = tmp_path / "ibv_devinfo"
    (tmp_path / "stderr").write_text(stderr)
    body = f"cat '{RDMA / recording}'\n" if recording else ""
    tool.write_text(
        f"#!/bin/sh\necho \"$@\" > '{tmp_path / 'argv'}'\n{body}cat '{tmp_path / 'stderr'}' >&2\nexit {rc}\n"
    )
    tool.chmod(0o755)
    return str(tool)


def test_the_verbose_output_is_read_and_a_slow_port_is_a_problem_not_a_failure(tmp_path):
    args = {"ibv_devinfo_path": stand_in(tmp_path, "ibv_devinfo-v-mlx5-cx6-roce-25g.txt"), "hcas": ["mlx5_0"],
            "rate_gbps": 400, "gid_index": "3", "node": "h1"}  # fmt: skip
    rc, result = run_module("rdma_verbs", json.dumps(args))
    assert rc == 0, result
    assert (tmp_path / "argv").read_text().split() == ["-v"]
    assert result["rdma"] is True and result["changed"] is False
    assert result["msg"] == "1 RDMA port(s) seen, 1 checked, 1 problem(s)"
    assert result["devices"][0]["ports"][0]["rate_gbps"] == 100
    (verdict,) = result["ports"]
    assert (verdict["port"], verdict["ok"], verdict["gid"]["index"]) == ("mlx5_0:1", False, 3)
    (problem,) = result["problems"]
    assert problem.startswith("h1: RDMA port mlx5_0:1 runs at 100 Gb/s (4X 25 Gb/s lanes), below the 400 Gb/s")


def test_check_mode_runs_the_same_read(tmp_path):
    args = {"ibv_devinfo_path": stand_in(tmp_path, "ibv_devinfo-ionic-pollara-8port-mi355x.txt"),
            "hcas": ["ionic_[0-7]"], "node": "chi2766"}  # fmt: skip
    rc, result = run_module("rdma_verbs", json.dumps(args), extra=["--check"])
    assert rc == 0, result
    assert len(result["ports"]) == 8 and result["problems"] == [] and result["changed"] is False


def test_a_node_without_rdma_devices_has_no_rdma_ports_and_does_not_fail(tmp_path):
    # rdma-core's ibv_devinfo on such a node: "No IB devices found" on stderr, exit 255.
    args = {"ibv_devinfo_path": stand_in(tmp_path, stderr="No IB devices found\n", rc=255)}
    rc, result = run_module("rdma_verbs", json.dumps(args))
    assert rc == 0, result
    assert (result["rdma"], result["msg"], result["devices"]) == (False, "no RDMA ports", [])
    assert result["said"] == ["No IB devices found"]


def test_without_ibv_devinfo_nothing_asked_for_is_no_rdma_and_a_port_asked_for_fails_with_the_fix(tmp_path):
    missing = str(tmp_path / "absent" / "ibv_devinfo")
    rc, result = run_module("rdma_verbs", json.dumps({"ibv_devinfo_path": missing}))
    assert rc == 0, result
    assert (result["rdma"], result["msg"], result["ibv_devinfo_path"]) == (False, "no RDMA ports", "")
    rc, result = run_module("rdma_verbs", json.dumps({"ibv_devinfo_path": missing, "hcas": ["mlx5_0:1"], "node": "n1"}))
    assert rc != 0
    assert result["msg"].startswith("n1: ibv_devinfo (")
    assert "rdma-core, ibverbs-providers, libibverbs1, ibverbs-utils" in result["msg"]
    assert result["msg"].endswith("See docs/runbooks/fabric-bandwidth.md")


def test_a_port_the_verbs_library_does_not_list_quotes_its_warning(tmp_path):
    warning = "libibverbs: Warning: couldn't load driver 'libbnxt_re-rdmav34.so'\n"
    args = {"ibv_devinfo_path": stand_in(tmp_path, "ibv_devinfo-mlx5-cx7-roce-2port-down.txt", stderr=warning),
            "hcas": ["bnxt_re0"], "node": "n1"}  # fmt: skip
    rc, result = run_module("rdma_verbs", json.dumps(args))
    assert rc == 0, result
    (problem,) = result["problems"]
    assert (
        "ibv_devinfo lists mlx5_0:1 DOWN, mlx5_1:1 DOWN; it said: libibverbs: Warning: couldn't load driver" in problem
    )
