# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.summary_report: the table that ends a run, one row per
node, printed line for line and written as Markdown.

A ``debug`` task's message is rendered by the stdout callback, which folds a long string at 80
columns in a YAML rendering (each node's row came out over three or four lines); lines printed
through ``Display`` reach the terminal as they are, whatever the callback. The table itself is
built by the pure functions of module_utils/summary.py. What an operator should act on (a node left
out of the run after failing preflight, a GPU node without AMD's MI300X host tuning) follows the table
as Ansible warnings, and in summary.md under "Warnings".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile

from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.instinct.finetune.plugins.module_utils.summary import (
    headers,
    left_out_nodes,
    left_out_warnings,
    node_rows,
    node_warnings,
    render_markdown,
    render_table,
)

display = Display()


def write_if_changed(path, text):
    """Write ``text`` to ``path`` (its folder made) unless it already holds it; atomically, so that a
    reader sees the old or the new file. Returns whether the file was written."""
    data = to_bytes(text)
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except OSError:
        pass
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".summary-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return True


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "dest"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "hosts": {"type": "list", "elements": "str"},
                "dest": {"type": "path", "default": ""},
            }
        )
        hosts = args["hosts"] if args["hosts"] is not None else task_vars.get("ansible_play_hosts_all", [])
        # The nodes an earlier play of the run failed are not among the play's hosts any more: with
        # instinct_exclude_failed_nodes, those that failed preflight and were left out.
        left_out = left_out_nodes(task_vars["hostvars"], hosts, task_vars.get("ansible_play_hosts", hosts))
        rows = node_rows(task_vars["hostvars"], hosts, left_out)
        titles = headers(left_out)
        lines = render_table(rows, titles)
        display.display("\n".join(lines))
        warnings = left_out_warnings(left_out) + node_warnings(task_vars["hostvars"], hosts)
        for warning in warnings:
            display.warning(warning)
        written = False
        if args["dest"] and not self._task.check_mode:
            written = write_if_changed(args["dest"], render_markdown(rows, titles, warnings=warnings))
        # The warnings follow the table in msg too ("warning: " first, so that no line but a
        # node's row starts with a node's name), for whoever reads the task's result.
        lines = lines + [f"warning: {warning}" for warning in warnings]
        # A report of the run on the controller, not a change to any node: never changed.
        result.update(
            changed=False, msg=lines, dest=args["dest"], written=written, node_warnings=warnings, left_out=left_out
        )
        return result
