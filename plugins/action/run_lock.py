# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.run_lock: which run is asking, and what to do with a lock
whose run is dead.

The run is this ansible-playbook process: the action runs in one of its workers, forked from it, so
the parent's pid, with the start time the kernel gives that process, names the run (a reused pid is
another run). Every stage of one site.yml is therefore the same run and only renews its lock.

A lock held by a run of this same controller whose process is gone (an operator's Ctrl-C, a crash)
is taken over at once: the controller can tell, the node cannot. A lock of another controller's run
is refused until it goes stale (``instinct_run_lock_stale_minutes`` without renewal) or the operator
breaks it (``instinct_run_lock_break``).

The module's options the task leaves out come from the common role's ``instinct_run_lock_*``
variables, so that the stage playbooks' tasks name only their state.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import getpass
import os
import socket
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.instinct.finetune.plugins.module_utils import runlock

RUNBOOK = "docs/runbooks/run-lock.md"
DEFAULTS = {
    "path": ("instinct_run_lock_path", "/run/instinct-finetune/run.lock"),
    "stale_minutes": ("instinct_run_lock_stale_minutes", 720),
    "force": ("instinct_run_lock_break", False),
}


def process_start(pid):
    """The start time of a process (clock ticks after boot, /proc/PID/stat field 22), or "" when this
    controller has no /proc or the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: count from its closing one.
    return stat[stat.rindex(")") + 2 :].split()[19]


def playbook_of(pid, fallback):
    """The playbook file(s) named on the command line of the run, or ``fallback``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return fallback
    books = [os.path.basename(word) for word in words if word.endswith((".yml", ".yaml")) and "@" not in word]
    return " ".join(books) or fallback


def boot_id():
    """This controller's boot (the kernel's random boot id): two controllers of one host name, cloned
    machines or CI containers, are told apart by it, and so is this one after a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def this_run(task_vars):
    pid = os.getppid()
    controller = socket.gethostname()
    return {
        "id": runlock.run_id(controller, pid, process_start(pid)),
        "boot": boot_id(),
        "controller": controller,
        "user": getpass.getuser(),
        "pid": pid,
        "playbook": playbook_of(pid, str(task_vars.get("ansible_play_name") or "a playbook")),
    }


def dead_here(holder, owner):
    """Whether the holder is a run of this controller, in this boot, whose process is gone (or is
    another process under a reused pid). Anything this controller cannot tell (another host or boot,
    no /proc, another user's process hidden by hidepid) is not dead: it goes stale instead."""
    if holder.get("controller") != owner["controller"] or not owner["boot"] or holder.get("boot") != owner["boot"]:
        return False
    _controller, pid, start = str(holder["id"]).rsplit(":", 2)
    if not pid.isdigit() or not start:
        return False
    found = process_start(int(pid))
    if found:
        return found != start
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's, and /proc hides it
    return False  # alive, yet /proc does not show it: not this controller's to judge


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("state", "path", "stale_minutes", "force"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
                "path": {"type": "path"},
                "stale_minutes": {"type": "int"},
                "force": {"type": "bool"},
            }
        )
        for name, (variable, default) in DEFAULTS.items():
            if args.get(name) is None:
                args[name] = self._templar.template(task_vars.get(variable, default))
        args["stale_minutes"], args["force"] = int(args["stale_minutes"]), boolean(args["force"], strict=False)
        host = task_vars.get("inventory_hostname", "?")
        owner = this_run(task_vars)
        module_args = dict(args, owner=owner)
        done = self._execute_module("instinct.finetune.run_lock", module_args=module_args, task_vars=task_vars)
        if done.get("failed"):
            result.update(done)
            return result
        holder = done.get("holder")
        if args["state"] == "held" and (done.get("refused") or done.get("busy")) and dead_here(holder, owner):
            module_args["take_over"] = holder["id"]
            done = self._execute_module("instinct.finetune.run_lock", module_args=module_args, task_vars=task_vars)
            if done.get("failed"):
                result.update(done)
                return result
        now = time.time()
        if done.get("refused"):
            raise AnsibleActionFail(
                f"{host}: another run holds this node's run lock: {runlock.describe_holder(done['holder'], now)}. "
                f"That run may be changing the node, so this one changes nothing here. Wait for it to end, then run "
                f"again. If it is dead (its controller crashed or lost this node), its lock goes stale after "
                f"instinct_run_lock_stale_minutes ({args['stale_minutes']}) without renewal; or, once you have "
                f"checked that no playbook runs against {host}, run again with -e instinct_run_lock_break=true. "
                f"See {RUNBOOK}"
            )
        result.update({key: done[key] for key in ("held", "holder", "refused", "why") if key in done})
        result["changed"] = False
        result["run"] = owner
        if done.get("busy"):
            result["warnings"] = [
                f"{host}: another run holds this node's run lock ({runlock.describe_holder(done['holder'], now)}): "
                "this check changes nothing, and what it predicts may change as that run goes on"
            ]
        result["msg"] = f"{host}: run lock {args['state']} ({done.get('why')})"
        return result
