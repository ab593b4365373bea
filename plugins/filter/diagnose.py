"""Filters for the diagnose role: a node's facts from what it collected, rule checks, the report."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import diagnose

try:
    import jmespath
except ImportError:  # json_query needs it too; the rules cannot be checked without it
    jmespath = None

__metaclass__ = type


def diagnose_rule_problems(rules, tags):
    """diagnose.rule_problems with the expressions compiled by jmespath (as json_query does)."""
    if jmespath is None:
        raise AnsibleFilterError("diagnose_rule_problems needs the jmespath Python library on the controller")
    return diagnose.rule_problems(rules, tags, jmespath.compile)


class FilterModule:
    """Diagnose filters."""

    def filters(self):
        return {
            "diagnose_facts": _wrap(diagnose.node_facts),
            "diagnose_rule_problems": diagnose_rule_problems,
            "diagnose_host_report": _wrap(diagnose.host_report),
        }
