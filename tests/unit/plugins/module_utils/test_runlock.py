"""The run lock's decisions (plugins/module_utils/runlock.py): who may take a node's lock."""

import json

from ansible_collections.instinct.finetune.plugins.module_utils import runlock

NOW = 1_800_000_000.0
OURS = {"id": "ctl:100:555", "controller": "ctl", "user": "ops", "pid": 100, "playbook": "site.yml"}
THEIRS = {"id": "other:200:777", "controller": "other", "user": "ana", "pid": 200, "playbook": "stack.yml"}


def held_by(owner, taken, renewed):
    return runlock.parse(json.dumps(runlock.record(owner, None, taken) | {"renewed": renewed}))


def test_a_free_lock_is_taken_and_the_same_run_renews_it_keeping_when_it_took_it():
    assert runlock.decide(None, OURS, NOW, 240) == ("take", "free")
    mine = held_by(OURS, NOW - 600, NOW - 60)
    assert runlock.decide(mine, OURS, NOW, 240) == ("take", "renewed")
    renewed = runlock.record(OURS, mine, NOW)
    assert (renewed["taken"], renewed["renewed"]) == (NOW - 600, NOW)


def test_another_runs_lock_is_refused_until_it_is_stale():
    theirs = held_by(THEIRS, NOW - 7200, NOW - 60)
    assert runlock.decide(theirs, OURS, NOW, 240) == ("refuse", "held")
    old = held_by(THEIRS, NOW - 90000, NOW - 241 * 60)
    action, why = runlock.decide(old, OURS, NOW, 240)
    assert action == "take" and why.startswith("stale: not renewed for 4 h 1 min")
    # 0: never stale.
    assert runlock.decide(old, OURS, NOW, 0) == ("refuse", "held")


def test_a_dead_holder_is_taken_over_only_while_it_still_holds_the_lock_and_the_operator_may_break_it():
    theirs = held_by(THEIRS, NOW - 60, NOW - 60)
    assert runlock.decide(theirs, OURS, NOW, 240, take_over=THEIRS["id"])[0] == "take"
    # The dead run the controller found was another: the one holding the lock now is refused.
    assert runlock.decide(theirs, OURS, NOW, 240, take_over="other:999:1") == ("refuse", "held")
    assert runlock.decide(theirs, OURS, NOW, 240, force=True) == ("take", "broken by instinct_run_lock_break")


def test_what_is_not_a_lock_is_a_free_lock():
    for text in ("", "{", "[]", json.dumps({"id": "x"}), json.dumps(dict(THEIRS, taken="soon", renewed=1))):
        assert runlock.parse(text) is None, text


def test_the_holder_is_described_by_who_where_what_and_since_when():
    theirs = held_by(THEIRS, NOW - 3 * 3600 - 120, NOW - 30)
    assert runlock.describe_holder(theirs, NOW) == (
        "ana@other (ansible-playbook pid 200, stack.yml), since 2027-01-15 04:58:00 UTC (3 h 2 min ago; "
        "last renewed 30 s ago)"
    )
