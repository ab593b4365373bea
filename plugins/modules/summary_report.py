#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation only, as for ansible.builtin.debug: the action plugin of the same name
# (plugins/action/summary_report.py) does the work on the controller and checks the options.

DOCUMENTATION = r"""
---
module: summary_report
short_description: Print the per-node summary of a run, one row per node, and write it as Markdown
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs on the controller (an action plugin), normally once (C(run_once)). Reads what each stage
    left in the nodes' variables (OS, ROCm release, gfx archs, GPU counts, host tuning, torch,
    DeepSpeed, LLaMA-Factory, fabric NIC, GPU metrics, job, strategy, perplexities), C(-) where a
    stage did not run, the same table as the filter P(instinct.finetune.node_summary#filter).
  - Prints the table line for line, one row per node, through Ansible's display, so that no stdout
    callback folds a row over several lines.
  - A node of O(hosts) that an earlier play of the run failed (no longer in C(ansible_play_hosts); with
    C(instinct_exclude_failed_nodes), a node that failed preflight and was left out of the run) gets a last column,
    C(left out), naming the checks it failed (from preflight's C(preflight_problems)), and a warning after the
    table naming it, why and C(docs/runbooks/preflight.md). The column is there only when a node was left out.
  - After the table, one Ansible warning per AMD MI300X host setting that GPU nodes lack (from
    preflight's record C(preflight_tuning)), naming the nodes, the setting, its section of AMD's MI300X
    system optimisation guide with its URL, the switch (C(preflight_apply_tuning)) and the runbook
    C(docs/runbooks/host-tuning.md); C(pending reboot) where the tuning was applied and the kernel
    command line waits for a reboot. The C(host tuning) column counts them per node.
  - Writes the table as a Markdown document to O(dest) on the controller (its folder made), the
    warnings under C(## Warnings), unless it already holds the same text.
options:
  hosts:
    description: The nodes to list, in order; by default every host of the play (C(ansible_play_hosts_all)).
    type: list
    elements: str
  dest:
    description:
      - The Markdown file to write on the controller (for example C(<collect folder>/summary.md)); empty for none.
    type: path
    default: ""
attributes:
  check_mode:
    support: partial
    description: Can run in check mode.
    details:
      - Prints the table in check mode but writes no file.
  diff_mode:
    support: none
    description: Returns no diff.
notes:
  - Never C(changed) (a report of the run on the controller, not a change to a node); RV(written)
    says whether the file was written.
seealso:
  - plugin: instinct.finetune.node_summary
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Print one row per node and write summary.md in the collect folder
  instinct.finetune.summary_report:
    hosts: "{{ ansible_play_hosts_all }}"
    dest: "{{ finetune_collect_dir }}/summary.md"
  run_once: true
"""

RETURN = r"""
msg:
  description: The printed table, header and rule first, one line per node, then each warning prefixed C(warning:).
  returned: always
  type: list
  elements: str
node_warnings:
  description:
    - The warnings printed after the table (nodes left out of the run, missing MI300X host tuning on GPU nodes).
  returned: always
  type: list
  elements: str
  sample:
    - >-
      kernel command line iommu=pt missing on node1, node2 - AMD MI300X system optimisation guide, 'GRUB settings'
      (https://instinct.docs.amd.com/projects/amdgpu-docs/en/latest/system-optimization/mi300x.html#mi300x-grub-settings);
      set preflight_apply_tuning: true (writes a GRUB drop-in; takes effect after a reboot,
      preflight_allow_reboot: true). See docs/runbooks/host-tuning.md
left_out:
  description: The nodes left out of the run (failed by an earlier play), each with why.
  returned: always
  type: dict
  sample: {node2: "failed preflight: memory, disk /opt"}
dest:
  description: The Markdown file, as given; empty for none.
  returned: always
  type: str
  sample: /home/ops/instinct/artifacts/summary.md
written:
  description: Whether the Markdown file was written (false in check mode and when it already held the table).
  returned: always
  type: bool
"""
