"""Filters that build the per-node summary table printed at the end of site.yml."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.module_utils.summary import node_rows, render_table

__metaclass__ = type


def node_summary(hostvars, hosts):
    return render_table(node_rows(hostvars, hosts))


class FilterModule:
    """Summary filters."""

    def filters(self):
        return {"node_summary": node_summary}
