# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.async_wait: wait for a background (``async``) job on a
node and say how it goes.

Every ``poll`` seconds the job's status is read with the same module ``ansible.builtin.async_status``
runs on the node (``ansible.legacy.async_status``, with the job folder the shell plugin names); every
``progress_interval`` seconds the controller prints one line, ``node1: building torch 2.7.1 — 6 min
20 s elapsed, log: [1234/5678] Building CXX object ...``, instead of a ``FAILED - RETRYING`` line per
poll. The decisions (when a line is due, its wording, the log line's clean-up) are the pure functions
below, tested in tests/unit/plugins/action/test_async_wait.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import shlex
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

display = Display()

STATUS_MODULE = "ansible.legacy.async_status"
# A log line longer than this is cut (a compiler's command line can run to kilobytes).
LOG_WIDTH = 160
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")


def elapsed_words(seconds):
    """``seconds`` as a person says it: ``45 s``, ``6 min 20 s``, ``2 h 5 min``, ``1 d 3 h``."""
    seconds = max(int(seconds), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        parts = [(days, "d"), (hours, "h")]
    elif hours:
        parts = [(hours, "h"), (minutes, "min")]
    elif minutes:
        parts = [(minutes, "min"), (secs, "s")]
    else:
        return f"{secs} s"
    return " ".join(f"{value} {unit}" for value, unit in parts if value)


def last_log_line(text, width=LOG_WIDTH):
    """The last line of a log that says something, as one clean line of at most ``width``
    characters: a progress bar's carriage returns keep their last state, colour codes and other
    control characters go, a long line keeps its start and ends with an ellipsis."""
    # splitlines() also splits at a lone "\r": each state of a redrawn bar is a line of its own.
    for raw in reversed((text or "").splitlines()):
        line = _CONTROL.sub("", raw.replace("\t", " ")).strip()
        if line:
            return line if len(line) <= width else line[: width - 1].rstrip() + "…"
    return ""


def progress_line(host, label, elapsed, log_line=""):
    """What the controller prints while the job runs."""
    line = f"{host}: {label} — {elapsed_words(elapsed)} elapsed"
    return f"{line}, log: {log_line}" if log_line else line


def next_progress(elapsed, due, interval):
    """Whether a progress line is due at ``elapsed`` seconds, and when the next one is: lines come
    every ``interval`` seconds from the start (never for 0), the first after one interval (a job
    that ends sooner prints none), and polls that came late skip the lines they missed."""
    if interval <= 0 or elapsed < due:
        return False, due
    return True, due + interval * ((elapsed - due) // interval + 1)


def timeout_message(host, label, timeout, jid, log_path=""):
    """The failure when the job outlives the wait."""
    where = f" Its log: {log_path}." if log_path else ""
    return (
        f"{host}: {label} did not finish within {elapsed_words(timeout)} (async job {jid}, still running "
        f"on the node until its own async limit).{where} Raise the wait's timeout or look at what the "
        "job is doing."
    )


def check_mode_message(host, label):
    return f"{host}: check mode; a real run waits here for {label} (check mode starts no background job)."


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("jid", "label", "timeout", "poll", "progress_interval", "log", "cleanup"))

    def _status(self, jid, async_dir, task_vars):
        return self._execute_module(
            STATUS_MODULE, module_args={"jid": jid, "mode": "status", "_async_dir": async_dir}, task_vars=task_vars
        )

    def _log_line(self, path):
        """The last line of the log on the node ('' when it cannot be read), as the task's user."""
        res = self._low_level_execute_command(f"tail -n 5 -- {shlex.quote(path)}", sudoable=True)
        if res.get("rc") != 0:
            return ""
        return last_log_line(res.get("stdout", ""))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "jid": {"type": "str", "required": True},
                "label": {"type": "str", "default": "the background job"},
                "timeout": {"type": "float", "required": True},
                "poll": {"type": "float", "default": 10},
                "progress_interval": {"type": "float", "default": 60},
                "log": {"type": "str", "default": ""},
                "cleanup": {"type": "bool", "default": True},
            }
        )
        host = task_vars.get("inventory_hostname", "?")
        jid, label, log_path = args["jid"], args["label"], args["log"]
        if self._task.check_mode:
            result.update(skipped=True, changed=False, msg=check_mode_message(host, label))
            return result

        # What ansible.builtin.async_status returns before it reads the job.
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        result.update(
            ansible_job_id=jid,
            started=True,
            finished=False,
            stdout="",
            stderr="",
            stdout_lines=[],
            stderr_lines=[],
            results_file=self._connection._shell.join_path(async_dir, jid),
        )
        poll = max(args["poll"], 1)
        start = time.monotonic()
        due = args["progress_interval"]
        try:
            while True:
                status = self._status(jid, async_dir, task_vars)
                elapsed = time.monotonic() - start
                # A running job's status holds neither; a failed read (no such job, no Python) ends the wait.
                if status.get("finished") or status.get("failed") or status.get("unreachable"):
                    break
                print_now, due = next_progress(elapsed, due, args["progress_interval"])
                if print_now:
                    display.display(progress_line(host, label, elapsed, self._log_line(log_path) if log_path else ""))
                if elapsed >= args["timeout"]:
                    result.update(
                        failed=True,
                        timed_out=True,
                        waited=round(elapsed, 1),
                        msg=timeout_message(host, label, args["timeout"], jid, log_path),
                    )
                    return result
                time.sleep(min(poll, max(args["timeout"] - elapsed, 0.1)))
            result = merge_hash(result, status)
            result.update(
                started=bool(result.get("started")),
                finished=bool(result.get("finished")),
                timed_out=False,
                waited=round(elapsed, 1),
            )
            if result["finished"] and args["cleanup"] and not status.get("unreachable"):
                # What ansible does after its own poll: the job's results file goes.
                self._execute_module(
                    STATUS_MODULE,
                    module_args={"jid": jid, "mode": "cleanup", "_async_dir": async_dir},
                    task_vars=task_vars,
                )
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.pop("invocation", None)
        return result
