# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.node_tools_run: one node tool run from the wheel, nothing installed.

For read-only work on a node that must stay as it is (diagnose): the wheel the node_tools action
builds is copied into the task's temporary folder, imported from there (a pure-Python wheel is a zip
Python imports from) by the node's interpreter, and removed with the folder when the tool ends.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.instinct.finetune.plugins.module_utils import node_tools

_COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(("module", "argv", "python", "source", "cache_dir"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = self._task.args
        module = args.get("module") or ""
        if not module.startswith(node_tools.PACKAGE + "."):
            raise AnsibleActionFail(
                "node_tools_run: module must be one of %s's modules, got %r" % (node_tools.PACKAGE, module)
            )
        try:
            wheel, version = node_tools.wheel_for(args, _COLLECTION_ROOT)
        except (OSError, RuntimeError, ValueError) as error:
            raise AnsibleActionFail("node_tools_run: %s" % error) from error
        remote_tmp = self._make_tmp_path()
        try:
            remote_wheel = self._connection._shell.join_path(remote_tmp, os.path.basename(wheel))
            self._transfer_file(wheel, remote_wheel)
            self._fixup_perms2((remote_tmp, remote_wheel))
            argv = ["env", "PYTHONPATH=" + remote_wheel, args.get("python") or "/usr/bin/python3", "-m", module]
            argv += [str(arg) for arg in args.get("argv") or []]
            # The tools it runs only read: they run in check mode too (the command module would skip).
            check_mode, self._task.check_mode = self._task.check_mode, False
            try:
                done = self._execute_module(
                    module_name="ansible.builtin.command", module_args={"argv": argv}, task_vars=task_vars
                )
            finally:
                self._task.check_mode = check_mode
        finally:
            self._remove_tmp_path(remote_tmp)
        for key in ("rc", "stdout", "stderr", "stdout_lines", "stderr_lines", "msg", "failed", "cmd"):
            if key in done:
                result[key] = done[key]
        result.update(changed=False, version=version)
        return result
