#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation only, as for ansible.builtin.debug: the action plugin of the same name
# (plugins/action/finetune_watch.py) does the work on the controller and checks the options.

DOCUMENTATION = r"""
---
module: finetune_watch
short_description: Follow a running fine-tune job on every node until it ends, stalls or a rank dies
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs on the controller (an action plugin) in one task per node, for the job's whole life. Each
    round it reads the node's part of the job with M(instinct.finetune.finetune_job_status), waiting
    up to O(interval), posts that report where the other nodes' tasks of the same run read it (a
    folder in Ansible's local temporary folder of the run), and decides from every node's latest
    report.
  - The master node prints one progress line per rank each round.
  - When a rank has died, every node still training stops its own unit, because the others would
    wait in their next collective until C(ddp_timeout).
  - When every rank runs but none took an optimizer step for O(stall_minutes), the job is stalled
    (a hung rank, a wedged collective); every node stops its unit and the result names the stall,
    the last step, its time and the suspect nodes (those with a process stopped by a signal, else
    those idle longest).
  - A loop inside one task, so the play keeps a constant depth and the controller a constant memory
    however many rounds the job takes.
  - Needs one Ansible worker per node (C(forks) at least the number of nodes), since every node's
    task runs for as long as the job.
options:
  job:
    description: The job's name, for the messages.
    type: str
    required: true
  ranks:
    description: The job's nodes in rank order; the first is the master, which prints the progress.
    type: list
    elements: str
    required: true
  unit:
    description: The job's systemd unit on this node, stopped when another rank died or the job stalled.
    type: str
    required: true
  status:
    description: The options of M(instinct.finetune.finetune_job_status) for this node's part of the job.
    type: dict
    required: true
  interval:
    description: Seconds between progress lines; a round ends early when the node's rank ends.
    type: int
    default: 60
  timeout:
    description: Seconds after which the watch gives up and returns the job still running.
    type: float
    required: true
  stall_minutes:
    description: Minutes without any rank's optimizer step, every rank running, after which the job is stalled; 0 never.
    type: float
    default: 0
attributes:
  check_mode:
    support: none
    description: Not run in check mode; the finetune role skips the watch there.
  diff_mode:
    support: none
    description: Returns no diff; it reports C(changed) when it stopped the node's unit.
seealso:
  - module: instinct.finetune.finetune_job_status
"""

EXAMPLES = r"""
- name: Watch the job until it ends
  instinct.finetune.finetune_watch:
    job: tiny-sft
    ranks: "{{ ansible_play_hosts_all }}"
    unit: instinct-finetune-tiny-sft.service
    status:
      unit: instinct-finetune-tiny-sft.service
      exit_file: /var/lib/instinct-finetune/jobs/tiny-sft/exit-status
      fingerprint_file: /var/lib/instinct-finetune/jobs/tiny-sft/fingerprint
      output_dir: /var/lib/instinct-finetune/jobs/tiny-sft/output
      log_path: /var/log/instinct-finetune/tiny-sft/train.log
      metrics_dir: /var/lib/instinct-finetune/jobs/tiny-sft/metrics
    interval: 60
    timeout: 259200
    stall_minutes: 30
  register: watched
"""

RETURN = r"""
state:
  description: This node's state when the watch ended, as M(instinct.finetune.finetune_job_status) returns it.
  returned: always
  type: str
  sample: succeeded
rounds:
  description: How many rounds this node's task took.
  returned: always
  type: int
  sample: 240
lines:
  description: The last round's progress line of every rank.
  returned: always
  type: list
  elements: str
first_failed:
  description: The nodes whose rank had failed when it was first seen, the first to end first.
  returned: always
  type: list
  elements: str
stall:
  description: The stall, when one stopped the job (C(idle_seconds), C(step), C(suspects), C(frozen)); else null.
  returned: always
  type: dict
stall_message:
  description: What to tell the operator about the stall; empty without one.
  returned: always
  type: str
timed_out:
  description: Whether the watch gave up with the rank still running.
  returned: always
  type: bool
"""
