"""The all-reduce gate's reading of rccl-tests (real recorded outputs, tests/fixtures/rccl), its floor
(the fabric role's defaults, from AMD's Instinct system acceptance guide, REFERENCE-FIGURES.md) and
verdict, the rule that wrong sums always fail, and the rccl-tests command for one and two nodes."""

import shlex
import sys

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils.rccl_perf import (
    RcclPerfError,
    allreduce_layout,
    bus_bandwidth,
    correctness_problems,
    fabric_floor,
    gate_verdict,
    judge_rccl_tests,
    link_rate_gbps,
    measured_busbw,
    nic_model,
    parse_rccl_tests,
    rail_rates,
    rccl_tests_argv,
)
from tests.unit.conftest import FIXTURES, ROOT

RCCL = FIXTURES / "rccl"
ONE_NODE = (RCCL / "rccl-tests-all_reduce-mi300x-1node-8proc-aac8.txt").read_text()
TWO_NODES = (RCCL / "rccl-tests-all_reduce-mi300x-2node-16rank-aac10.txt").read_text()
EXCERPT = (RCCL / "rccl-tests-all_reduce-mi355x-2node-16rank-aac14-EXCERPT.txt").read_text()
FAILED = (RCCL / "nccl-tests-all_reduce-gh200-2node-wrong-FAILED-nccltests369.txt").read_text()
GATE = yaml.safe_load((ROOT / "roles" / "fabric" / "defaults" / "main.yml").read_text())["fabric_allreduce_thresholds"]
GIB = 1 << 30
MI300X = "AMD Instinct MI300X"
CX7 = [f"mlx5_{i}:1" for i in range(8)]
RUNBOOK = "docs/runbooks/fabric-bandwidth.md"


def floor(model, nodes, gpus, rails, nic):
    return fabric_floor(model, nodes, gpus, rails, nic, GATE["references"], GATE["efficiency"], GATE["size_bytes"])


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


def test_the_failed_recording_is_read_with_its_wrong_counts_and_verdict():
    parsed = parse_rccl_tests(FAILED)
    assert parsed["out_of_bounds"] == 4 and parsed["bounds_ok"] is False
    assert parsed["avg_busbw"] == pytest.approx(4.79995)
    wrong = [(r["size"], r["out_of_place"]["wrong"], r["in_place"]["wrong"]) for r in parsed["rows"]
             if r["out_of_place"]["wrong"] or r["in_place"]["wrong"]]  # fmt: skip
    assert wrong == [(1048576, 96, 32)]
    assert [r["host"] for r in parsed["ranks"]] == ["gpu-1-1", "gpu-1-7"]


def test_wrong_sums_always_fail_whatever_the_floor():
    (problem,) = correctness_problems(parse_rccl_tests(FAILED), ["gpu-1-1", "gpu-1-7"])
    assert problem == (
        "gpu-1-1, gpu-1-7: all_reduce_perf returned wrong sums (1048576 bytes: #wrong 96 out-of-place and 32 "
        "in-place; '# Out of bounds values : 4 FAILED'): data is corrupted on a GPU, in its memory or on the fabric; "
        f"whatever the bandwidth, the run fails. See {RUNBOOK}"
    )
    # No floor at all, or one that only warns: the wrong sums are still a failure.
    for gate in (None, floor(MI300X, 8, 8, [400] * 8, "mlx5")):
        judged = judge_rccl_tests(FAILED, gate, ["gpu-1-1", "gpu-1-7"])
        assert judged["parsed"] and judged["wrong"] == [problem]
    # A FAILED verdict without a row showing #wrong still fails; the healthy recordings have neither.
    only_verdict = FAILED.replace("      96 ", "       0 ").replace("      32\n", "       0\n")
    (problem,) = correctness_problems(parse_rccl_tests(only_verdict), ["a"])
    assert "no row shows #wrong; '# Out of bounds values : 4 FAILED'" in problem
    for text in (ONE_NODE, TWO_NODES, EXCERPT):
        assert correctness_problems(parse_rccl_tests(text), ["a"]) == []


def test_the_default_gate_cites_amds_acceptance_guide_and_derives_its_efficiency_from_it():
    assert GATE["size_bytes"] == 8 * GIB
    # 304 GB/s on two MI300X nodes of 8 x 400G NICs (8 x 400 / 8 = 400 GB/s a node): 0.76 of the line rate.
    assert GATE["efficiency"]["value"] == pytest.approx(304 / (8 * 400 / 8))
    assert "acceptance guide" in GATE["efficiency"]["source"]
    for ref in GATE["references"]:
        assert ref["source"].startswith("AMD Instinct system acceptance guide") and ref["busbw_gbps"] > 0, ref
    figures = (RCCL / "REFERENCE-FIGURES.md").read_text()
    assert "Allreduce performance of 304 GB/s or greater for MI300X" in figures
    assert "metric of **304 GB/s** for MI300X or **350 GB/s**" in figures


def test_the_floor_table_for_2_and_8_nodes_of_400g_200g_and_a_fabric_without_reference():
    """The rows bench/bench_fabric_gate.py prints (issue 29's acceptance), each with its reason."""
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_fabric_gate  # noqa: PLC0415 - the bench script, imported where it is checked

    rows = [(label, nodes, f["busbw_gbps"], f["enforce"]) for label, nodes, f in bench_fabric_gate.table()]
    assert rows == [
        ("one node (xGMI)", 1, 304.0, True),
        ("8x400G CX-7", 2, 304.0, True),
        ("8x400G CX-7", 8, 304.0, False),
        ("8x200G CX-7", 2, 152.0, False),
        ("8x200G CX-7", 8, 152.0, False),
        ("8x100G E810 (no reference)", 2, 76.0, False),
        ("8x100G E810 (no reference)", 8, 76.0, False),
    ]
    basis = {(label, nodes): f["basis"] for label, nodes, f in bench_fabric_gate.table()}
    assert basis[("8x400G CX-7", 2)] == (
        "published figure for 2 nodes of 8 x AMD Instinct MI300X, 8 x 400G mlx5 (its conditions match)"
    )
    assert basis[("8x400G CX-7", 8)] == (
        "8 x 400G mlx5: 3200 Gb/s = 400 GB/s line rate x 0.76 efficiency = 304 GB/s; the published 304 GB/s holds "
        "for 2 nodes (not 8); no measured reference for this cluster, so a shortfall warns"
    )
    assert "the published 304 GB/s holds for 400G rails (not 200G)" in basis[("8x200G CX-7", 2)]
    assert "NIC mlx5/bnxt_re/ionic (not irdma)" in basis[("8x100G E810 (no reference)", 2)]
    assert basis[("one node (xGMI)", 1)].startswith("published figure for 1 node of 8 x AMD Instinct MI300X, xGMI only")
    lines = bench_fabric_gate.lines(bench_fabric_gate.table())
    assert len(lines) == 8 and lines[2].split()[:6] == ["8x400G", "CX-7", "2", "304.0", "8589934592", "fail"]


def test_the_floor_where_nothing_or_another_figure_applies():
    # MI355X on two nodes of Pollara 400 (ionic): AMD's 350 GB/s, the rates as the kernel writes them.
    rails = ["400 Gb/sec (4X NDR)"] * 8
    mi355 = floor("AMD Instinct MI355X", 2, 8, rails, "ionic")
    assert (mi355["busbw_gbps"], mi355["enforce"]) == (350.0, True)
    # A GPU without a published figure: one node has no floor, two nodes the rate-based one, warned.
    one = floor("AMD Instinct MI325X", 1, 8, [], "")
    assert one["busbw_gbps"] is None and "no published figure for AMD Instinct MI325X; nothing judged" in one["basis"]
    two = floor("AMD Instinct MI325X", 2, 8, [400] * 8, "mlx5")
    assert (two["busbw_gbps"], two["enforce"]) == (304.0, False)
    # Seven rails of eight, no rail (sockets), a rail of unknown rate, CPU ranks: nothing enforced.
    seven = floor(MI300X, 2, 8, [400] * 7, "mlx5")
    assert (seven["busbw_gbps"], seven["enforce"]) == (266.0, False) and "8 rails (not 7)" in seven["basis"]
    assert floor(MI300X, 2, 8, [], "")["busbw_gbps"] is None
    assert "unknown" in floor(MI300X, 2, 8, [400] * 7 + [None], "mlx5")["basis"]
    assert floor("", 2, 0, [], "")["basis"].startswith("ranks without a GPU (Gloo")
    # Four GPUs a node: no published figure.
    assert floor(MI300X, 1, 4, [], "")["busbw_gbps"] is None


def test_the_rails_and_nic_family_come_from_the_rdma_choice():
    rdma = {
        "hcas": ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1"],
        "ports": [
            {"device": "mlx5_0", "port": 1, "rate_gbps": 400},
            {"device": "mlx5_1", "port": 1, "rate": "400 Gb/sec (4X NDR)"},
            {"device": "mlx5_2", "port": 1},
            {"device": "mlx5_9", "port": 1, "rate_gbps": 100},
        ],
    }
    assert rail_rates(rdma) == [400.0, 400.0, None]
    assert rail_rates({"hcas": [], "ports": []}) == [] and rail_rates(None) == []
    assert [link_rate_gbps(v) for v in ("2.5 Gb/sec (1X SDR)", "200", 0, None, "", True)] == [
        2.5, 200.0, None, None, None, None,
    ]  # fmt: skip
    assert nic_model(CX7) == "mlx5" and nic_model(["bnxt_re0:1", "bnxt_re7"]) == "bnxt_re"
    assert nic_model(["ionic_0:1"]) == "ionic" and nic_model(["mlx5_0:1", "bnxt_re0:1"]) == "bnxt_re+mlx5"
    assert nic_model(["rocep1s0f0:1"]) == "unknown" and nic_model([]) == ""


def test_the_recorded_runs_pass_the_default_floors():
    one = floor(MI300X, 1, 8, [], "")
    two = floor(MI300X, 2, 8, [400] * 8, "mlx5")
    assert gate_verdict(measured_busbw(parse_rccl_tests(ONE_NODE)), one, ["node1"]) == {"failures": [], "warnings": []}
    judged = judge_rccl_tests(TWO_NODES, two, ["gpu-53", "gpu-56"])
    assert judged["failures"] == judged["warnings"] == judged["wrong"] == [] and judged["ranks"] == 16
    assert judged["busbw"][8 * GIB] == pytest.approx(356.00)


def test_the_verdict_fails_below_an_enforced_floor_and_warns_below_another():
    enforced = {"busbw_gbps": 304.0, "size_bytes": 8 * GIB, "enforce": True, "basis": "b", "source": "s"}
    assert gate_verdict({8 * GIB: 304.0}, enforced, ["a", "b"]) == {"failures": [], "warnings": []}
    verdict = gate_verdict({8 * GIB: 303.5}, enforced, ["a", "b"])
    assert verdict["warnings"] == [] and verdict["failures"] == [
        f"a, b: all-reduce bus bandwidth 303.5 GB/s at 8589934592 bytes, below the 304.0 GB/s floor (b; s). "
        f"See {RUNBOOK}"
    ]
    warned = gate_verdict({8 * GIB: 100.0}, dict(enforced, enforce=False), ["a"])
    assert warned["failures"] == [] and "100.0 GB/s at 8589934592 bytes, below the 304.0" in warned["warnings"][0]
    # A run that did not reach the floor's size proves nothing.
    (problem,) = gate_verdict({GIB: 340.0}, enforced, ["a"])["failures"]
    assert "measured up to 1073741824 bytes" in problem and "fabric_allreduce_max_bytes" in problem
    assert gate_verdict({}, None, ["a"]) == gate_verdict({}, floor("", 1, 0, [], ""), ["a"]) == {
        "failures": [], "warnings": [],
    }  # fmt: skip
    # Output without a table is judged as such, not raised.
    judged = judge_rccl_tests("Test failure common.cu:1\n", enforced, ["a"])
    assert judged["parsed"] is False and "no rccl-tests result row" in judged["error"]


def test_every_gpu_of_every_node_gets_a_rank_and_the_gate_sizes_are_measured():
    layout = allreduce_layout(["n1", "n2"], {"n1": 8, "n2": 8}, [1, 8, 32], 8 * GIB)
    assert layout["world"] == 16 and layout["gpu"] is True
    assert layout["ranks"] == {"n1": {"first": 0, "local": 8}, "n2": {"first": 8, "local": 8}}
    assert layout["sizes_mb"] == [1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    # The size the default floor is judged at is among them.
    measured = {int(size * 1024 * 1024) for size in layout["sizes_mb"]}
    assert GATE["size_bytes"] in measured


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


MPI = {"ifnames": ["eth1", "eth1"], "env_file": "/etc/instinct-finetune/rccl.env", "timeout": 300}
RANK_SHELL = """'set -a && . "$0" && set +a && exec "$@"'"""
# The rendered commands (issue 29's acceptance shows them).
ONE_NODE_COMMAND = (
    "timeout --kill-after=30 330 mpirun --np 8 --host 10.1.0.1:8 --bind-to numa --timeout 300 --mca pml ob1 "
    "--mca btl '^vader,openib' --mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1 "
    f"-x NCCL_IGNORE_CPU_AFFINITY=1 /bin/bash -c {RANK_SHELL} /etc/instinct-finetune/rccl.env "
    "/opt/rccl-tests/build/all_reduce_perf -b 1048576 -e 8589934592 -f 2 -g 1"
)
TWO_NODE_COMMAND = ONE_NODE_COMMAND.replace("--np 8 --host 10.1.0.1:8", "--np 16 --host 10.1.0.1:8,10.1.0.2:8")


def test_the_command_for_one_node_runs_one_mpi_rank_per_gpu_with_g_1():
    mpi = dict(MPI, ifnames=["eth1"])
    argv = rccl_tests_argv("/opt/rccl-tests/build/all_reduce_perf", ["10.1.0.1"], 8, 8 * GIB, mpi)
    assert shlex.join(argv) == ONE_NODE_COMMAND
    # AMD's acceptance guide runs one node the same way: "mpirun -np 8 ./all_reduce_perf -b 8 -e 8G -f 2 -g 1";
    # so was the recorded one-node run (nGpus 1 per process, eight ranks).
    header = next(line for line in ONE_NODE.splitlines() if line.startswith("# nThread"))
    assert "nGpus 1 " in header and len(parse_rccl_tests(ONE_NODE)["ranks"]) == int(argv[argv.index("--np") + 1])
    with pytest.raises(ValueError, match="needs GPUs on every node"):
        rccl_tests_argv("all_reduce_perf", ["10.1.0.1"], 0, 8 * GIB)


def test_the_command_for_two_nodes_holds_mpi_to_the_fabric_interface_and_bounds_every_rank():
    argv = rccl_tests_argv("/opt/rccl-tests/build/all_reduce_perf", ["10.1.0.1", "10.1.0.2"], 8, 8 * GIB, MPI)
    assert shlex.join(argv) == TWO_NODE_COMMAND
    # The recorded two-node run was launched the same way: one GPU per process, sizes doubling, 16 ranks.
    header = TWO_NODES.splitlines()[0]
    assert "nGpus 1 " in header and "step: 2(factor)" in header
    assert len(parse_rccl_tests(TWO_NODES)["ranks"]) == int(argv[argv.index("--np") + 1])


def test_the_command_takes_each_nodes_interface_more_options_and_no_time_limit_when_asked():
    mpi = {"ifnames": ["eth1", "ens5", "eth1"], "args": ["--mca", "btl_tcp_links", "2"], "env": {}}
    mpi["mpirun"] = "/x/mpirun"
    argv = rccl_tests_argv("a", ["h1", "h2", "h3"], 4, GIB, mpi)
    assert argv[0] == "/x/mpirun" and "--timeout" not in argv and "-x" not in argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "eth1,ens5"
    assert argv[argv.index("oob_tcp_if_include") + 1] == "eth1,ens5"
    assert argv[-12:] == ["--mca", "btl_tcp_links", "2", "a", "-b", "1048576", "-e", str(GIB), "-f", "2", "-g", "1"]
    # A short limit gets a short grace: TERM two seconds after mpirun's own, KILL two more later.
    short = rccl_tests_argv("a", ["h1"], 1, GIB, {"timeout": 4})
    assert short[:3] == ["timeout", "--kill-after=2", "6"] and short[short.index("--timeout") + 1] == "4"
