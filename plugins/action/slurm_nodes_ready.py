# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.slurm_nodes_ready: wait until Slurm shows every node
ready, saying how the wait goes.

Every ``poll`` seconds ``sinfo`` runs on the task's host (the Slurm controller) through
``ansible.legacy.command``; the pure ``node_problems`` (module_utils/slurm.py) says which nodes are
not ready yet. Every ``progress_interval`` seconds the controller prints one line,
``slurm1: Slurm's nodes not ready — 40 s elapsed: node2: not in sinfo (...)``, instead
of a ``FAILED - RETRYING`` line per read. The task returns the last ``sinfo`` output and what is
still wrong; the role's next task fails with its own message (which names its runbook) when the
wait ran out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.instinct.finetune.plugins.action.async_wait import elapsed_words, next_progress
from ansible_collections.instinct.finetune.plugins.module_utils.slurm import SlurmError, node_problems

display = Display()

COMMAND_MODULE = "ansible.legacy.command"


def read_problems(rc, stdout, stderr, expected, busy_ok):
    """What keeps the nodes from being ready, from one run of sinfo: its own error when it failed,
    else each node's problem (an empty list: every node is ready)."""
    if rc != 0:
        return [f"sinfo failed (rc {rc}): {(stderr or stdout or '').strip() or 'no output'}"]
    try:
        return node_problems(stdout, expected, busy_ok=busy_ok)
    except SlurmError as err:
        return [f"sinfo's output cannot be read: {err}"]


def progress_line(host, elapsed, problems):
    """What the controller prints while the nodes are not ready."""
    return f"{host}: Slurm's nodes not ready — {elapsed_words(elapsed)} elapsed: {'; '.join(problems)}"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("sinfo_argv", "expected", "busy_ok", "timeout", "poll", "progress_interval"))

    def _sinfo(self, argv, task_vars):
        res = self._execute_module(COMMAND_MODULE, module_args={"argv": argv}, task_vars=task_vars)
        if res.get("unreachable"):
            return res, None
        rc = res.get("rc", 1)
        # The command module always returns stderr; a command that could not start says why in msg.
        return res, (rc, res.get("stdout", ""), res.get("stderr") or res.get("msg") or res.get("module_stderr", ""))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "sinfo_argv": {"type": "list", "elements": "str", "required": True},
                "expected": {"type": "dict", "required": True},
                "busy_ok": {"type": "bool", "default": False},
                "timeout": {"type": "float", "required": True},
                "poll": {"type": "float", "default": 5},
                "progress_interval": {"type": "float", "default": 30},
            }
        )
        # The host sinfo runs on: the Slurm controller the task is delegated to, else the task's own.
        host = self._task.delegate_to or task_vars.get("inventory_hostname", "?")
        if self._task.check_mode:
            # sinfo through the command module does nothing in check mode: a wait would only time out.
            msg = f"{host}: check mode; a real run waits here for Slurm's nodes."
            result.update(skipped=True, changed=False, msg=msg)
            return result
        expected = {str(name): int(gpus) for name, gpus in args["expected"].items()}
        poll = max(args["poll"], 1)
        start = time.monotonic()
        due = args["progress_interval"]
        try:
            while True:
                res, read = self._sinfo(args["sinfo_argv"], task_vars)
                elapsed = time.monotonic() - start
                if read is None:
                    result.update(res)
                    return result
                problems = read_problems(*read, expected, args["busy_ok"])
                if not problems or elapsed >= args["timeout"]:
                    break
                print_now, due = next_progress(elapsed, due, args["progress_interval"])
                if print_now:
                    display.display(progress_line(host, elapsed, problems))
                time.sleep(min(poll, max(args["timeout"] - elapsed, 0.1)))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        rc, stdout, stderr = read
        result.update(
            changed=False,
            ready=not problems,
            problems=problems,
            waited=round(elapsed, 1),
            rc=rc,
            stdout=stdout,
            stdout_lines=stdout.splitlines(),
            stderr=stderr,
        )
        return result
