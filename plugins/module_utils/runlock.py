# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""A node's run lock (issue 32): one ansible-playbook run at a time changes a node.

Two operators running site.yml at once collide: two pips in one venv, two wheel servers on one port,
set-aside folders moved under each other. Every stage playbook takes the lock of each node at its
start and releases it at its end (the finetune stage before it starts watching the job, so that a
re-run during a job still re-attaches). The lock is a small JSON file naming its run:

    {"id": "<controller>:<pid>:<start>", "controller": ..., "user": ..., "pid": ...,
     "playbook": ..., "taken": <epoch>, "renewed": <epoch>}

The run is the controller's ansible-playbook process (its host, pid and the start time the kernel
gives it), so every stage of one site.yml is the same run, and a stage taking the lock again only
renews it. A lock another run holds is refused, unless:

- it was not renewed for ``stale_minutes`` (a run whose controller crashed, or that lost every node);
- its run is known to be dead: the controller that ran it is this one, in the same boot, and that
  process is gone (the action plugin checks; the node cannot);
- the operator breaks it (``instinct_run_lock_break``), having checked that no run is active.

Pure decisions here; the module does the file work under flock, the action plugin knows the run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

FIELDS = ("id", "controller", "user", "pid", "playbook")


def run_id(controller, pid, start):
    """The id of a run: its controller's host name, its ansible-playbook pid and that process's start
    time (a reused pid is another run)."""
    return f"{controller}:{pid}:{start}"


def parse(text):
    """The holder recorded in a lock file, or None when the file is empty or not a lock (a file cut
    short by a crash is a lock nobody holds)."""
    try:
        holder = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(holder, dict) or not all(isinstance(holder.get(name), (str, int)) for name in FIELDS):
        return None
    if not isinstance(holder.get("renewed"), (int, float)) or not isinstance(holder.get("taken"), (int, float)):
        return None
    return holder


def decide(holder, owner, now, stale_minutes, *, take_over="", force=False):  # noqa: PLR0913 - the three ways past a holder
    """What a run asking for the lock does: ``("take", why)`` or ``("refuse", why)``.

    holder: the lock's current holder (parse()), or None; owner: the asking run (its ``id`` at least);
    take_over: the id of a holder the caller found dead; force: the operator breaks the lock."""
    if holder is None:
        return "take", "free"
    if holder["id"] == owner["id"]:
        return "take", "renewed"
    if force:
        return "take", "broken by instinct_run_lock_break"
    if take_over and holder["id"] == take_over:
        return "take", "its run is no longer running on its controller"
    idle = now - holder["renewed"]
    if stale_minutes > 0 and idle > stale_minutes * 60:
        return "take", (
            f"stale: not renewed for {describe_seconds(idle)} (instinct_run_lock_stale_minutes {stale_minutes})"
        )
    return "refuse", "held"


def record(owner, holder, now):
    """The lock file's content for ``owner``, keeping the time its run first took it."""
    kept = holder["taken"] if holder is not None and holder["id"] == owner["id"] else now
    return dict({name: owner[name] for name in FIELDS}, boot=owner.get("boot", ""), taken=kept, renewed=now)


def describe_seconds(seconds):
    seconds = int(max(0, seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def describe_holder(holder, now):
    """One line on who holds a lock, for the refusal and the check-mode warning."""
    taken = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["taken"]))
    return (
        f"{holder['user']}@{holder['controller']} (ansible-playbook pid {holder['pid']}, {holder['playbook']}), "
        f"since {taken} ({describe_seconds(now - holder['taken'])} ago; last renewed "
        f"{describe_seconds(now - holder['renewed'])} ago)"
    )
