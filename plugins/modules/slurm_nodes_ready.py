#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation only, as for ansible.builtin.debug: the action plugin of the same name
# (plugins/action/slurm_nodes_ready.py) does the work on the controller and checks the options.

DOCUMENTATION = r"""
---
module: slurm_nodes_ready
short_description: Wait until Slurm shows every node ready with its GPUs, printing a progress line per interval
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs C(sinfo) on the task's host (the Slurm controller) every O(poll) seconds until every node of
    O(expected) is IDLE, responding and has its GPUs as GRES (with O(busy_ok), ALLOCATED, MIXED and
    COMPLETING count too), or O(timeout) seconds have passed; in one task (no C(until)/C(retries), so no
    C(FAILED - RETRYING) line per read).
  - >-
    Every O(progress_interval) seconds the controller prints one line naming what is still wrong,
    C(slurm1: Slurm's nodes not ready — 40 s elapsed: node2: not in sinfo (...)).
  - Does not fail when the wait runs out; it returns RV(ready) false and RV(problems), so that the
    next task fails with the role's own message.
options:
  sinfo_argv:
    description:
      - The C(sinfo) command, as an argv that prints C(sinfo --Node) rows in the collection's
        C(%N|%P|%T|%c|%m|%G|%E) format without a header.
    type: list
    elements: str
    required: true
  expected:
    description: Each node's Slurm name and the GPUs it must have as GRES (0 for none).
    type: dict
    required: true
  busy_ok:
    description: A node that runs jobs (ALLOCATED, MIXED, COMPLETING) is ready too, as on a re-run during a job.
    type: bool
    default: false
  timeout:
    description: Seconds after which the wait ends with the nodes not ready.
    type: float
    required: true
  poll:
    description: Seconds between two runs of C(sinfo) (at least 1).
    type: float
    default: 5
  progress_interval:
    description: Seconds between two progress lines; 0 prints none.
    type: float
    default: 30
attributes:
  check_mode:
    support: none
    description: >-
      Skipped in check mode, with a message saying what a real run waits for: C(sinfo) runs through
      M(ansible.builtin.command), which does nothing in check mode.
  diff_mode:
    support: none
    description: Returns no diff.
notes:
  - Runs on the controller; each read is one run of M(ansible.builtin.command) on the task's host.
seealso:
  - module: instinct.finetune.async_wait
"""

EXAMPLES = r"""
- name: Wait until every node is IDLE in sinfo with its GPUs
  instinct.finetune.slurm_nodes_ready:
    sinfo_argv: [sinfo, --Node, --noheader, "--format=%N|%P|%T|%c|%m|%G|%E"]
    expected: {node1: 8, node2: 8}
    timeout: 120
  register: slurm_ready
  delegate_to: "{{ slurm_controller }}"
  run_once: true
"""

RETURN = r"""
ready:
  description: Whether every node was ready at the last read.
  returned: always
  type: bool
problems:
  description: What kept each node from being ready at the last read (empty when ready).
  returned: always
  type: list
  elements: str
  sample: ["node2: not in sinfo (not in slurm.conf, or in no partition this user sees)"]
waited:
  description: Seconds the wait took.
  returned: always
  type: float
rc:
  description: The last C(sinfo)'s exit code.
  returned: always
  type: int
stdout:
  description: The last C(sinfo)'s output.
  returned: always
  type: str
stdout_lines:
  description: RV(stdout), split into lines.
  returned: always
  type: list
  elements: str
stderr:
  description: The last C(sinfo)'s error output.
  returned: always
  type: str
"""
