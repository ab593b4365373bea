"""instinct.finetune.finetune_watch through ansible-playbook: the watch of a job that stays running
for 1000 rounds, in one task (the task that included itself died of recursion after about 246 rounds
on this ansible-core). One node: every round is a real module run on the node and a real exchange on
the board, and the depth and memory at stake are the controller's, the same for one node as for many
(the e2e suite watches two nodes, unit tests every decision across ranks). About four minutes on a
busy 2-core machine: scripts/test.sh runs it in the molecule lane of the integration stage."""

from tests.soak.watch_soak import soak


def test_a_thousand_rounds_of_a_running_job(tmp_path):
    seconds, _peak, results, stdout = soak(tmp_path, rounds=1000, hosts=("node-a",))
    result = results["node-a"]
    # 1000 rounds running, then the round that found the unit ended.
    assert result["rounds"] == 1001, result["rounds"]
    assert result["state"] == "succeeded"  # the stand-in ended the unit with an exit record of success
    assert result["failed"] is False and result["stall"] is None and result["first_failed"] == []
    # The master printed one progress line per round.
    assert stdout.count("job soak, round ") == 1001
    assert stdout.count("rank 0 node-a: running") == 1000
    print(f"1000 rounds in {seconds:.0f} s")
