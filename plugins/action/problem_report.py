# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.problem_report: every problem a stage's checks recorded on
every node, printed as one table, and the decision of which nodes the role fails next (issue 31).

It never fails itself: a failing run_once task fails every host of the play, which would take the
decision (leave the failed nodes out, or stop them all) away from the tasks that follow it. Lines go
through Ansible's display, as the summary's do, so that no stdout callback folds a row. The table and
the decision are module_utils/problems.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.instinct.finetune.plugins.module_utils.problems import report

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("var", "stage", "exclude", "runbook", "runbook_base", "hosts", "remaining"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "var": {"type": "str", "required": True},
                "stage": {"type": "str", "required": True},
                "exclude": {"type": "bool", "default": False},
                "runbook": {"type": "str", "required": True},
                "runbook_base": {"type": "str", "default": "docs/runbooks"},
                "hosts": {"type": "list", "elements": "str"},
                "remaining": {"type": "list", "elements": "str"},
            }
        )
        hosts = args["hosts"] if args["hosts"] is not None else task_vars.get("ansible_play_hosts_all", [])
        remaining = args["remaining"] if args["remaining"] is not None else task_vars.get("ansible_play_hosts", hosts)
        try:
            found = report(
                task_vars["hostvars"],
                hosts,
                remaining,
                **{key: args[key] for key in ("var", "stage", "exclude", "runbook", "runbook_base")},
            )
        except ValueError as error:
            raise AnsibleActionFail(
                f"{args['var']} holds a malformed problem ({error}): each one needs check, value, fix and runbook. "
                f"This is a mistake in the {args['stage']} role's checks, not on the node."
            ) from error
        display.display("\n".join(found["lines"]))
        # A report of the run on the controller, not a change to any node: never changed.
        result.update(changed=False, msg=found.pop("lines"), **found)
        return result
