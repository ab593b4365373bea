"""instinct.finetune.finetune_watch through ansible-playbook.

The watch of a job that stays running for LONG rounds, in one task (the task that included itself died
of recursion after about 246 rounds on this ansible-core, so LONG is past that). One node: every round
is a real module run on the node, and the depth and memory at stake are the controller's, the same for
one node as for many. The controller's peak memory is read after a tenth of the rounds and after all of
them: it must not grow with the rounds. About two minutes on a busy 2-core machine; bench/bench_watch.py
drives 1000 rounds and more and prints the figures.

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


LONG = 300


def test_a_long_running_job_is_watched_in_one_task_whose_memory_does_not_grow(tmp_path):
    _seconds, short_peak, _results, _stdout = soak(tmp_path / "short", rounds=LONG // 10, hosts=("node-a",))
    seconds, peak, results, stdout = soak(tmp_path / "long", rounds=LONG, hosts=("node-a",))
    result = results["node-a"]
    # LONG rounds running, then the round that found the unit ended.
    assert result["rounds"] == LONG + 1, result["rounds"]
    # The stand-in ended the unit with an exit record of success.
    assert result["by_host"]["node-a"]["state"] == "succeeded"
    assert result["failed"] is False and result["stall"] is None and result["first_failed"] == []
    # One progress line per round.
    assert stdout.count("job soak, round ") == LONG + 1
    assert stdout.count("rank 0 node-a: running") == LONG
    # Ten times the rounds, the same memory (within 10 % and 8 MiB of noise): nothing the watch keeps
    # grows with the job's length.
    assert peak <= short_peak * 1.1 + 8, (short_peak, peak)
    print(f"{LONG} rounds in {seconds:.0f} s; peak {short_peak:.0f} MiB after {LONG // 10}, {peak:.0f} MiB after all")


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
