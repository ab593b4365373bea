"""instinct.finetune.finetune_watch through ansible-playbook: the watch of a job that stays running
for 1000 rounds on two nodes, in one task (the task that included itself died of recursion after
about 246 rounds on this ansible-core). About four minutes: scripts/test.sh runs it in the molecule
lane of the integration stage, beside the sandbox, not with the unit tests."""

from tests.soak.watch_soak import soak


def test_a_thousand_rounds_of_a_running_job_on_two_nodes(tmp_path):
    seconds, _peak, results, stdout = soak(tmp_path, rounds=1000)
    for host, result in results.items():
        # 1000 rounds running, then the round that found its unit ended; the master watches on until
        # the other rank's report says it ended too.
        assert result["rounds"] == 1001 if host == "node-b" else result["rounds"] >= 1001, (host, result["rounds"])
        assert result["state"] == "succeeded"  # the stand-in ended the unit with an exit record of success
        assert result["failed"] is False and result["stall"] is None and result["first_failed"] == []
    # The master printed one progress line per rank and round.
    assert stdout.count("job soak, round ") == results["node-a"]["rounds"]
    assert "rank 1 node-b: running" in stdout
    print(f"1000 rounds on two nodes in {seconds:.0f} s")
