# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.node_tools: the node tools package in one venv, once.

Builds the collection's ``node_tools/`` wheel on the controller (once per content hash, cached),
reads the venv's marker on the node (one module call), and only when it names another version
creates the venv if asked, copies the wheel over and installs it with pip in hash-checking mode.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.instinct.finetune.plugins.module_utils import node_tools

_COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(("venv", "python", "system_site_packages", "pins", "source", "cache_dir"))

    def _command(self, argv, task_vars, what):
        done = self._execute_module(
            module_name="ansible.builtin.command", module_args={"argv": argv}, task_vars=task_vars
        )
        if done.get("rc", 1) != 0:
            said = (done.get("stderr") or done.get("stdout") or done.get("msg") or "").strip().splitlines()
            raise AnsibleActionFail(
                "%s: %s failed (rc %s): %s" % (self._task.get_name(), what, done.get("rc"), " | ".join(said[-3:]))
            )
        return done

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = self._task.args
        venv = args.get("venv")
        if not venv:
            raise AnsibleActionFail("node_tools: venv is required")
        host = (task_vars or {}).get("inventory_hostname", "?")
        try:
            wheel, version = node_tools.wheel_for(args, _COLLECTION_ROOT)
        except (OSError, RuntimeError, ValueError) as error:
            raise AnsibleActionFail("node_tools: %s" % error) from error
        result.update(version=version, venv=venv, changed=False)
        marker = os.path.join(venv, node_tools.MARKER)
        wanted = node_tools.stamp(version, args.get("pins") or [])

        read = self._execute_module(
            module_name="ansible.builtin.slurp", module_args={"src": marker}, task_vars=task_vars
        )
        installed = None if read.get("failed") else to_text(base64.b64decode(read.get("content", ""))).strip()
        result["installed_before"] = installed
        if installed == wanted:
            return result
        result["changed"] = True
        result["diff"] = {
            "before": "%s\n" % (installed or "(none)"),
            "after": "%s\n" % wanted,
            "before_header": marker,
            "after_header": marker,
        }
        if self._play_context.check_mode:
            result["msg"] = "would install instinct-node-tools %s into %s" % (version, venv)
            return result

        python = os.path.join(venv, "bin", "python")
        found = self._execute_module(
            module_name="ansible.builtin.stat", module_args={"path": python}, task_vars=task_vars
        )
        if not found.get("stat", {}).get("exists"):
            if not args.get("python"):
                raise AnsibleActionFail(
                    "%s: %s has no venv to install the node tools into; run the stage that creates it "
                    "(playbooks/stack.yml) first. See docs/runbooks/python-interpreter.md" % (host, venv)
                )
            create = [args["python"], "-m", "venv"]
            if args.get("system_site_packages"):
                create.append("--system-site-packages")
            self._command([*create, venv], task_vars, "creating the venv %s" % venv)

        remote_tmp = self._make_tmp_path()
        try:
            remote_wheel = self._connection._shell.join_path(remote_tmp, os.path.basename(wheel))
            self._transfer_file(wheel, remote_wheel)
            remote_req = self._connection._shell.join_path(remote_tmp, "requirements.txt")
            text = node_tools.requirements(remote_wheel, node_tools.sha256_file(wheel), args.get("pins") or [])
            self._transfer_data(remote_req, text)
            self._fixup_perms2((remote_tmp, remote_wheel, remote_req))
            self._command(
                [
                    python,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--require-hashes",
                    "--disable-pip-version-check",
                    "-r",
                    remote_req,
                ],
                task_vars,
                "installing instinct-node-tools %s into %s" % (version, venv),
            )
            # The entry points' imports, prometheus_client's included, before the marker says done.
            self._command(
                [python, "-c", "import instinct_node_tools.exposition"],
                task_vars,
                "importing the node tools in %s" % venv,
            )
            self._command(
                [python, "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2] + '\\n')", marker, wanted],
                task_vars,
                "writing %s" % marker,
            )
        finally:
            self._remove_tmp_path(remote_tmp)
        result["msg"] = "installed instinct-node-tools %s into %s" % (version, venv)
        return result
