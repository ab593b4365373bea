"""instinct.finetune.finetune_watch through ansible-playbook.

The watch of a job that stays running for 1000 rounds, in one task (the task that included itself died
of recursion after about 246 rounds on this ansible-core). One node: every round is a real module run
on the node, and the depth and memory at stake are the controller's, the same for one node as for
many. About four minutes on a busy 2-core machine: scripts/test.sh runs it in the molecule lane of
the integration stage.

Then more nodes than Ansible workers (3 nodes, --forks 2; issue 31): one task run once watches every
node over that node's own connection and Python, to a normal end, and, when one rank fails, stops
every other rank. Half a minute each.
"""

from pathlib import Path

from tests.soak.watch_soak import soak

THREE = ("node-a", "node-b", "node-c")


def module_runs(workdir, host):
    """How many modules ran with the node's own Python (its ansible_python_interpreter)."""
    return len((Path(workdir) / host / "python.log").read_text().splitlines())


def test_a_thousand_rounds_of_a_running_job(tmp_path):
    seconds, _peak, results, stdout = soak(tmp_path, rounds=1000, hosts=("node-a",))
    result = results["node-a"]
    # 1000 rounds running, then the round that found the unit ended.
    assert result["rounds"] == 1001, result["rounds"]
    # The stand-in ended the unit with an exit record of success.
    assert result["by_host"]["node-a"]["state"] == "succeeded"
    assert result["failed"] is False and result["stall"] is None and result["first_failed"] == []
    # One progress line per round.
    assert stdout.count("job soak, round ") == 1001
    assert stdout.count("rank 0 node-a: running") == 1000
    print(f"1000 rounds in {seconds:.0f} s")


# Enough rounds for every node to be read by a worker that read another node before it (3 nodes, 2
# forks); each round is three module runs on this 2-core machine.
ROUNDS = 6


def test_more_nodes_than_forks_are_watched_to_the_end(tmp_path):
    _seconds, _peak, results, stdout = soak(tmp_path, rounds=ROUNDS, hosts=THREE, forks=2)
    # Run once, registered for every node alike.
    assert results["node-a"] == results["node-b"] == results["node-c"]
    result = results["node-a"]
    assert result["rounds"] == ROUNDS + 1, result["rounds"]
    assert {host: r["state"] for host, r in result["by_host"].items()} == dict.fromkeys(THREE, "succeeded")
    assert result["changed"] is False and result["first_failed"] == [] and result["timed_out"] is False
    for rank, host in enumerate(THREE):
        assert stdout.count(f"rank {rank} {host}: running") == ROUNDS
        assert f"rank {rank} {host}: succeeded" in stdout
        # One read a round, each with this node's own Python.
        assert module_runs(tmp_path, host) == ROUNDS + 1, host
    assert f"job soak, round {ROUNDS + 1}:" in stdout and f"job soak, round {ROUNDS + 2}:" not in stdout


def test_when_one_rank_fails_every_other_rank_is_stopped(tmp_path):
    _seconds, _peak, results, stdout = soak(tmp_path, rounds=5, hosts=THREE, forks=2, failing=("node-b",))
    result = results["node-c"]
    # Five rounds running, the round that found node-b failed (and stopped the others), the round that
    # read them stopped.
    assert result["rounds"] == 7, result["rounds"]
    assert result["changed"] is True and result["first_failed"] == ["node-b"]
    assert {host: r["state"] for host, r in result["by_host"].items()} == dict.fromkeys(THREE, "failed")
    assert result["by_host"]["node-b"]["exit"]["status"] == "1"
    for host in ("node-a", "node-c"):
        # Stopped by the watch as systemd stops a unit (SIGTERM), while they still ran.
        assert (tmp_path / host / "exit-status").read_text().startswith("result=success code=killed status=TERM")
        assert stdout.count(f"{host}: running") == 6
        assert module_runs(tmp_path, host) == 8  # seven reads and the stop
    assert module_runs(tmp_path, "node-b") == 7
    assert "rank 1 node-b: failed" in stdout
