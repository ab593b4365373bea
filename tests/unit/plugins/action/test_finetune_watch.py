"""instinct.finetune.finetune_watch through ansible-playbook: the watch of a job that stays running
for 1000 rounds on two nodes, in one task (the task that included itself died of recursion after
about 246 rounds on this ansible-core)."""

from tests.unit.plugins.action.watch_soak import soak


def test_a_thousand_rounds_of_a_running_job_on_two_nodes(tmp_path):
    seconds, _peak, results, stdout = soak(tmp_path, rounds=1000)
    for host, result in results.items():
        # 1000 rounds running, then the round that found the unit ended.
        assert result["rounds"] == 1001, (host, result["rounds"])
        assert result["state"] == "succeeded"  # the stand-in ended the unit with an exit record of success
        assert result["failed"] is False and result["stall"] is None and result["first_failed"] == []
    # The master printed one progress line per rank and round.
    assert stdout.count("job soak, round ") == 1001
    assert "rank 1 node-b: running" in stdout
    print(f"1000 rounds on two nodes in {seconds:.0f} s")
