"""instinct-allreduce, the cross-node all-reduce the fabric and health stages run, installed over the
pinned training libraries (a CPU torch): one process, Gloo over the loopback interface."""

import json
import os


def test_a_one_process_gloo_all_reduce_reports_each_size_and_the_latency(train_tools, free_port):
    port = free_port()
    # MASTER PORT FIRST_RANK LOCAL_RANKS WORLD TIMEOUT ITERATIONS SIZE_MB...
    done = train_tools.run(
        "instinct-allreduce", "127.0.0.1", port, 0, 0, 1, 60, 2, 0.01, 0.1,
        timeout=300, env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    assert (summary["rank"], summary["world_size"], summary["local_ranks"]) == (0, 1, 1)
    assert (summary["backend"], summary["ifname"]) == ("gloo", "lo")
    assert [r["size_mb"] for r in summary["results"]] == [0.01, 0.1]
    assert [r["size_bytes"] for r in summary["results"]] == [2621 * 4, 26214 * 4]
    for result in summary["results"]:
        assert result["time_ms"] > 0 and result["algbw_gbps"] > 0
        assert result["busbw_gbps"] == 0  # 2(n-1)/n of the algorithm bandwidth: nothing crosses a wire at n = 1
    assert summary["latency_us"] > 0


def test_a_gpu_count_the_node_lacks_is_refused_before_any_rendezvous(train_tools, free_port):
    done = train_tools.run("instinct-allreduce", "127.0.0.1", free_port(), 0, 8, 8, 5, 1, 1, timeout=300)
    assert done.returncode == 1
    assert "torch sees 0 GPU(s), the play expects 8 on this node" in done.stderr
