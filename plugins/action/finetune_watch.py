# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.finetune_watch: one task that follows a job to its end.

Every node's task runs this loop in its own worker: read the node's part of the job
(instinct.finetune.finetune_job_status, waiting up to the interval), post that report on a board
shared by the run's workers (one small file per node, replaced each round, in Ansible's local
temporary folder of this run), read every node's latest report and decide with the pure
``watch_round`` (module_utils/jobstate.py). A loop in one task keeps the play at a constant depth
and the controller at a constant memory however many rounds a job takes; a task that included
itself once per round grew Ansible's task iterator by one level per round and died of recursion
after about 246 rounds.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile
import time

from ansible import constants as C
from ansible import context
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import stall_message, watch_round

display = Display()

STATUS_MODULE = "instinct.finetune.finetune_job_status"
# What a node posts on the board each round: all any other node needs to decide.
REPORT_KEYS = ("state", "progress", "exit", "idle_seconds", "frozen")


def _post(board, host, report):
    """Replace the host's report atomically: a reader sees the old or the new one."""
    fd, path = tempfile.mkstemp(dir=board, prefix=".post-")
    with os.fdopen(fd, "w") as handle:
        json.dump(report, handle)
    os.replace(path, os.path.join(board, host + ".json"))


def _reports(board, ranks, stale_after):
    """Every node's latest report; a report of a running rank not renewed for ``stale_after``
    seconds is dropped (its worker is gone: the node became unreachable)."""
    now = time.time()
    reports = {}
    for host in ranks:
        try:
            with open(os.path.join(board, host + ".json")) as handle:
                report = json.load(handle)
        except (OSError, ValueError):
            continue
        if report.get("state") == "running" and now - report.get("posted", now) > stale_after:
            continue
        reports[host] = report
    return reports


def _at(stall):
    """The wall time of the last step, on the controller's clock."""
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(time.time() - stall["idle_seconds"]))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("job", "ranks", "unit", "status", "interval", "timeout", "stall_minutes"))

    def _stop(self, unit, task_vars):
        return self._execute_module(
            "ansible.legacy.systemd_service", module_args={"name": unit, "state": "stopped"}, task_vars=task_vars
        )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "job": {"type": "str", "required": True},
                "ranks": {"type": "list", "elements": "str", "required": True},
                "unit": {"type": "str", "required": True},
                "status": {"type": "dict", "required": True},
                "interval": {"type": "int", "default": 60},
                "timeout": {"type": "float", "required": True},
                "stall_minutes": {"type": "float", "default": 0},
            }
        )
        host = task_vars["inventory_hostname"]
        ranks = args["ranks"]
        master = ranks[0]
        # Every node's loop must run at the same time: with fewer workers than nodes, the nodes
        # past the workers would not be watched until the others' loops ended.
        forks = int(context.CLIARGS.get("forks") or C.DEFAULT_FORKS)
        if len(ranks) > forks:
            result.update(
                failed=True,
                msg=(
                    f"{host}: watching job {args['job']} needs one Ansible worker per node: {len(ranks)} nodes, "
                    f"forks {forks}. Run with --forks {len(ranks)} (or forks = {len(ranks)} in ansible.cfg). "
                    "See docs/runbooks/finetune-job.md"
                ),
            )
            return result
        board = os.path.join(C.DEFAULT_LOCAL_TMP, "instinct-watch-" + self._task._uuid)
        os.makedirs(board, mode=0o700, exist_ok=True)
        interval = max(args["interval"], 0)
        stall_seconds = args["stall_minutes"] * 60
        stale_after = 3 * interval + 120
        deadline = time.monotonic() + args["timeout"]
        status_args = dict(args["status"], wait_seconds=interval)
        rounds = 0
        stopped = False
        stall = None
        first_failed = []
        while True:
            status = self._execute_module(STATUS_MODULE, module_args=status_args, task_vars=task_vars)
            if status.get("failed") or status.get("unreachable"):
                return status
            rounds += 1
            report = {key: status.get(key) for key in REPORT_KEYS}
            report.update(posted=time.time(), stall=stall)
            _post(board, host, report)
            reports = _reports(board, ranks, stale_after)
            summary = watch_round(reports, ranks, stall_seconds)
            # A stall one node saw holds for all: the others then see only its stopped rank.
            stall = stall or summary["stall"] or next((r["stall"] for r in reports.values() if r.get("stall")), None)
            first_failed = first_failed or summary["failed"]
            if host == master:
                display.display(f"job {args['job']}, round {rounds}:\n  " + "\n  ".join(summary["lines"]))
            running = status["state"] == "running"
            if running and (stall or summary["failed"]):
                if stall:
                    # On the board before any rank dies of this stop, so that every node reads a
                    # stall, not a rank that died.
                    _post(board, host, dict(report, stall=stall))
                # A rank that died or hung leaves the others waiting in their next collective.
                stop = self._stop(args["unit"], task_vars)
                if stop.get("failed"):
                    return stop
                stopped = True
                continue
            over = not summary["running"] or stall or summary["failed"]
            if (not running and (host != master or over)) or time.monotonic() >= deadline:
                break
            if not running:
                # The master's own rank has ended but others still run: its status read returns at
                # once, so the round waits here instead.
                time.sleep(interval)
        result.update({key: status.get(key) for key in status if not key.startswith("_")})
        result.update(
            changed=stopped,
            rounds=rounds,
            lines=summary["lines"],
            first_failed=first_failed,
            stall=stall,
            stall_message=stall_message(stall, args["job"], stall_seconds, _at(stall)) if stall else "",
            timed_out=running and time.monotonic() >= deadline,
        )
        result.pop("invocation", None)
        return result
