"""The all-reduce gate's reading of rccl-tests (real recorded outputs, tests/fixtures/rccl) and its
verdict against thresholds (the fabric role's defaults, whose sources are ROCm/cvs and AMD's blog)."""

import json

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils.rccl_perf import (
    RcclPerfError,
    allreduce_layout,
    bus_bandwidth,
    gate_problems,
    measured_busbw,
    parse_rccl_tests,
    rccl_tests_argv,
    thresholds_for,
)
from tests.unit.conftest import FIXTURES, ROOT

RCCL = FIXTURES / "rccl"
ONE_NODE = (RCCL / "rccl-tests-all_reduce-mi300x-1node-8proc-aac8.txt").read_text()
TWO_NODES = (RCCL / "rccl-tests-all_reduce-mi300x-2node-16rank-aac10.txt").read_text()
EXCERPT = (RCCL / "rccl-tests-all_reduce-mi355x-2node-16rank-aac14-EXCERPT.txt").read_text()
TABLE = yaml.safe_load((ROOT / "roles" / "fabric" / "defaults" / "main.yml").read_text())["fabric_allreduce_thresholds"]
GIB = 1 << 30


def test_a_one_node_run_is_read_whole():
    parsed = parse_rccl_tests(ONE_NODE)
    assert [r["rank"] for r in parsed["ranks"]] == list(range(8))
    assert {r["device"] for r in parsed["ranks"]} == set(range(8))
    assert parsed["rows"][0]["size"] == 8 and parsed["rows"][-1]["size"] == 8 * GIB
    assert parsed["max_bytes"] == 8 * GIB
    assert parsed["avg_busbw"] == pytest.approx(110.464)
    assert parsed["bounds_ok"] is True and parsed["out_of_bounds"] == 0
    assert measured_busbw(parsed)[8 * GIB] == pytest.approx(315.91)
    assert all(row["in_place"]["wrong"] == 0 for row in parsed["rows"])


def test_a_two_node_run_names_both_hosts_and_sixteen_ranks():
    parsed = parse_rccl_tests(TWO_NODES)
    assert len(parsed["ranks"]) == 16
    assert sorted({r["host"] for r in parsed["ranks"]}) == ["gpu-53", "gpu-56"]
    assert measured_busbw(parsed)[8 * GIB] == pytest.approx(356.00)
    assert measured_busbw(parsed)[16 * GIB] == pytest.approx(357.41)


def test_an_excerpt_without_header_or_trailer_still_gives_its_rows():
    parsed = parse_rccl_tests(EXCERPT)
    assert parsed["avg_busbw"] is None and parsed["bounds_ok"] is None
    assert len(parsed["ranks"]) == 16 and parsed["rows"]


@pytest.mark.parametrize("text", [ONE_NODE, TWO_NODES, EXCERPT])
def test_every_recorded_row_agrees_with_rccl_tests_bus_bandwidth_formula(text):
    parsed = parse_rccl_tests(text)
    ranks = len(parsed["ranks"])
    for row in parsed["rows"]:
        for side in ("out_of_place", "in_place"):
            figures = row[side]
            if figures["algbw"] < 1:  # two decimals: the small sizes round to 0.00
                continue
            computed = bus_bandwidth(row["size"], figures["time_us"] / 1e6, ranks)
            assert computed == pytest.approx(figures["busbw"], rel=0.01, abs=0.02), (row["size"], side)


def test_output_without_a_table_is_refused():
    with pytest.raises(RcclPerfError, match="no rccl-tests result row"):
        parse_rccl_tests("# nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor)\nTest failure common.cu:1\n")
    with pytest.raises(RcclPerfError, match="cannot be read"):
        parse_rccl_tests(ONE_NODE.replace("    23841  180.15", "    23841  abc"))


def test_the_default_thresholds_carry_their_source_and_the_recorded_runs_pass_them():
    for entry in TABLE:
        assert entry["source"] and entry["busbw_gbps"], entry
    one = thresholds_for(TABLE, "AMD Instinct MI300X", 1, 8)
    two = thresholds_for(TABLE, "AMD Instinct MI300X", 2, 8)
    assert one is not two and one is not None and two is not None
    assert gate_problems(measured_busbw(parse_rccl_tests(ONE_NODE)), one, ["node1"]) == []
    assert gate_problems(measured_busbw(parse_rccl_tests(TWO_NODES)), two, ["gpu-53", "gpu-56"]) == []
    # The cvs figures are for two nodes; ROCm's cvs configuration says so itself.
    cvs = json.loads((RCCL / "cvs-rccl_config.json").read_text())["rccl"]["results"]["all_reduce_perf"]["bus_bw"]
    assert {int(k): float(v) for k, v in cvs.items()} == {int(k): float(v) for k, v in two["busbw_gbps"].items()}
    # No threshold for a CPU node or an unknown model: no gate.
    assert thresholds_for(TABLE, "", 2, 8) is None and thresholds_for(TABLE, "cpu", 2, 0) is None
    # Another shape of node is not judged: one GPU a node (a world of one has no bus bandwidth), or four.
    assert thresholds_for(TABLE, "AMD Instinct MI300X", 1, 1) is None
    assert thresholds_for(TABLE, "AMD Instinct MI300X", 2, 4) is None
    assert thresholds_for(TABLE, "AMD Instinct MI300X", 2) is None


def test_the_verdict_at_above_and_below_the_threshold():
    entry = {"gpu": "MI300X", "busbw_gbps": {8 * GIB: 330.0}, "tolerance": 0.05, "source": "cvs"}
    required = 330.0 * 0.95
    assert gate_problems({8 * GIB: required}, entry, ["a", "b"]) == []
    assert gate_problems({8 * GIB: 400.0}, entry, ["a", "b"]) == []
    (problem,) = gate_problems({8 * GIB: required - 0.5}, entry, ["a", "b"])
    assert problem.startswith("a, b: all-reduce bus bandwidth 313.0 GB/s at 8589934592 bytes, below the 313.5 GB/s")
    assert "(330.0 less 5%; cvs)" in problem and "docs/runbooks/fabric-bandwidth.md" in problem


def test_a_run_too_small_for_any_threshold_is_a_problem_not_a_pass():
    entry = {"gpu": "MI300X", "busbw_gbps": {8 * GIB: 330.0, 16 * GIB: 350.0}, "tolerance": 0.05, "source": "cvs"}
    (problem,) = gate_problems({GIB: 340.0}, entry, ["a"])
    assert "measured up to 1073741824 bytes" in problem and "fabric_allreduce_max_bytes" in problem
    # Sizes beyond the run's largest are left out, the others judged.
    assert gate_problems({8 * GIB: 340.0}, entry, ["a"]) == []
    assert gate_problems({}, None, ["a"]) == []


def test_every_gpu_of_every_node_gets_a_rank_and_the_gate_sizes_are_measured():
    layout = allreduce_layout(["n1", "n2"], {"n1": 8, "n2": 8}, [1, 8, 32], 8 * GIB)
    assert layout["world"] == 16 and layout["gpu"] is True
    assert layout["ranks"] == {"n1": {"first": 0, "local": 8}, "n2": {"first": 8, "local": 8}}
    assert layout["sizes_mb"] == [1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    # The sizes the default thresholds judge are among them.
    entry = thresholds_for(TABLE, "AMD Instinct MI300X", 2, 8)
    measured = {int(size * 1024 * 1024) for size in layout["sizes_mb"]}
    assert 8 * GIB in measured and set(entry["busbw_gbps"]) & measured


def test_nodes_without_a_gpu_run_one_gloo_rank_each_at_the_smoke_sizes():
    layout = allreduce_layout(["n1", "n2", "n3"], {"n1": 0, "n2": 0}, [1, 8, 32], 8 * GIB)
    assert layout["world"] == 3 and layout["gpu"] is False
    assert [layout["ranks"][h]["first"] for h in ("n1", "n2", "n3")] == [0, 1, 2]
    assert layout["sizes_mb"] == [1, 8, 32]


def test_nodes_of_different_gpu_counts_get_consecutive_ranks_and_a_mix_is_refused():
    layout = allreduce_layout(["n1", "n2"], {"n1": 8, "n2": 4}, [1], 64 << 20)
    assert layout["ranks"]["n2"] == {"first": 8, "local": 4} and layout["world"] == 12
    with pytest.raises(ValueError, match="no GPU on n2 but GPUs on the other nodes"):
        allreduce_layout(["n1", "n2"], {"n1": 8, "n2": 0}, [1], GIB)


def test_gpu_nodes_without_a_threshold_stay_at_the_smoke_sizes():
    layout = allreduce_layout(["n1", "n2"], {"n1": 4, "n2": 4}, [1, 8, 32], 8 * GIB, judged=False)
    assert layout["sizes_mb"] == [1, 8, 32] and layout["world"] == 8


def test_the_command_for_two_nodes_runs_one_mpi_rank_per_gpu_as_the_recorded_run_did():
    mpi = {"env_names": ["NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"], "args": ["--mca", "btl", "^openib"]}
    argv = rccl_tests_argv("/opt/rccl-tests/build/all_reduce_perf", ["10.1.0.1", "10.1.0.2"], 8, 16 * GIB, mpi)
    assert argv[:5] == ["mpirun", "--np", "16", "--host", "10.1.0.1:8,10.1.0.2:8"]
    assert argv[argv.index("-x") : argv.index("-x") + 4] == ["-x", "NCCL_IB_HCA", "-x", "NCCL_SOCKET_IFNAME"]
    assert argv[argv.index("--mca") : argv.index("--mca") + 3] == ["--mca", "btl", "^openib"]
    program = argv[argv.index("/opt/rccl-tests/build/all_reduce_perf") :]
    assert program[1:] == ["-b", "1048576", "-e", str(16 * GIB), "-f", "2", "-g", "1"]
    # The recorded two-node run was launched the same way: one GPU per process, sizes doubling, 16 ranks.
    header = TWO_NODES.splitlines()[0]
    assert "nGpus 1 " in header and "step: 2(factor)" in header and f"maxBytes {16 * GIB}" in header
    assert len(parse_rccl_tests(TWO_NODES)["ranks"]) == int(argv[2])


def test_the_command_for_one_node_drives_every_gpu_from_one_process_and_no_gpu_is_refused():
    assert rccl_tests_argv("all_reduce_perf", ["10.1.0.1"], 8, 8 * GIB) == [
        "all_reduce_perf", "-b", "1048576", "-e", str(8 * GIB), "-f", "2", "-g", "8",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="needs GPUs on every node"):
        rccl_tests_argv("all_reduce_perf", ["10.1.0.1"], 0, 8 * GIB)
