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
  - Runs on the controller (an action plugin) in one task, run once (C(run_once)), for the job's whole
    life; one Ansible worker watches a job of any node count.
  - It reaches each rank's node as a task delegated to that node would, over the node's own
    connection (its C(ansible_connection), address, user, port and other connection variables), with
    its own become settings and its own C(ansible_python_interpreter), from the node's variables in
    the play. Each connection is made once and reused every round.
  - Each round it reads one running rank with M(instinct.finetune.finetune_job_status), waiting up to
    O(interval) (the round ends early when that rank ends), then every other rank without waiting,
    at most C(forks) at a time. It prints one progress line per rank each round.
  - When a rank has died, every rank still training is stopped, because the others would wait in
    their next collective until C(ddp_timeout).
  - A node that does not answer a read keeps its last report (its line says why it was not read);
    one not read for three intervals plus two minutes is lost, and counts as a rank that died. A
    node whose module fails before the watch ever read it fails the watch at once (a setting or
    install fault), and nothing is stopped.
  - When every rank runs but none took an optimizer step for O(stall_minutes), the job is stalled
    (a hung rank, a wedged collective); every rank is stopped and the result names the stall, the
    last step, its time and the suspect nodes (those with a process stopped by a signal, else those
    idle longest).
  - A loop inside one task, so the play keeps a constant depth and the controller a constant memory
    however many rounds the job takes.
  - With O(launcher=slurm) the job is one Slurm batch job for every node. Each rank's read runs
    M(instinct.finetune.finetune_job_status) with C(launcher=slurm), and stopping every rank is one
    C(scancel) of O(slurm_job_id), run once through C(ansible.legacy.command) on O(slurm_controller),
    instead of a systemd stop per node. A rank whose job waits for an allocation prints C(pending) with
    Slurm's reason in its progress line (C(pending (Resources))) and never counts as stalled.
options:
  job:
    description: The job's name, for the messages.
    type: str
    required: true
  ranks:
    description: The job's nodes in rank order (inventory hosts); the first is the master.
    type: list
    elements: str
    required: true
  status:
    description:
      - The options of M(instinct.finetune.finetune_job_status) for each rank, by host; each rank's
        C(unit) is the one stopped when another rank died or the job stalled.
      - With O(launcher=slurm), each rank's options need C(slurm_job_id_file) instead of C(unit), and
        the watch adds C(launcher=slurm) to them.
      - Every rank of O(ranks) needs an entry. Each node's own settings reach a task run once
        through C(hostvars) as facts (see the example).
    type: dict
    required: true
  interval:
    description: Seconds between progress lines; a round ends early when the rank it waits on ends.
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
  launcher:
    description: How the job was launched, C(systemd) (a unit per node) or C(slurm) (one batch job).
    type: str
    choices: [systemd, slurm]
    default: systemd
  slurm_job_id:
    description:
      - With O(launcher=slurm), what C(sbatch --parsable) printed (C(4242) or C(4242;cluster)); the job
        C(scancel) ends. Required with O(launcher=slurm).
    type: str
  slurm_controller:
    description:
      - With O(launcher=slurm), the inventory host on which C(scancel) runs, reached over its own
        connection as the ranks are. The first of O(ranks) when empty.
    type: str
    default: ""
  scancel:
    description: The C(scancel) command (a name looked up in C(PATH), or a path), with O(launcher=slurm).
    type: str
    default: scancel
  slurm_job_name:
    description:
      - The Slurm job's name (the finetune role's C(instinct-finetune-JOB)), with O(launcher=slurm). Given,
        C(scancel) cancels the id only if the job has this name (C(--name)), so an id that names another
        job cancels nothing.
    type: str
    default: ""
  slurm_user:
    description:
      - The account the Slurm job belongs to (the training account), with O(launcher=slurm). Given,
        C(scancel) cancels the id only if the job is this account's (C(--user)).
    type: str
    default: ""
attributes:
  check_mode:
    support: none
    description: Not run in check mode; the finetune role skips the watch there.
  diff_mode:
    support: none
    description: Returns no diff; it reports C(changed) when it stopped a rank's unit or cancelled the Slurm job.
seealso:
  - module: instinct.finetune.finetune_job_status
"""

EXAMPLES = r"""
- name: Record where the watch reads each node's part of the job
  ansible.builtin.set_fact:
    watch_status:
      unit: instinct-finetune-tiny-sft.service
      exit_file: /var/lib/instinct-finetune/jobs/tiny-sft/exit-status
      fingerprint_file: /var/lib/instinct-finetune/jobs/tiny-sft/fingerprint
      output_dir: /var/lib/instinct-finetune/jobs/tiny-sft/output
      log_path: /var/log/instinct-finetune/tiny-sft/train.log
      metrics_dir: /var/lib/instinct-finetune/jobs/tiny-sft/metrics

- name: Watch the job until it ends
  instinct.finetune.finetune_watch:
    job: tiny-sft
    ranks: "{{ groups['nodes'] }}"
    status: "{{ dict(groups['nodes'] | zip(groups['nodes'] | map('extract', hostvars, 'watch_status'))) }}"
    interval: 60
    timeout: 259200
    stall_minutes: 30
  run_once: true
  register: watched

- name: Watch the job submitted to Slurm until it ends
  instinct.finetune.finetune_watch:
    job: tiny-sft
    ranks: "{{ groups['nodes'] }}"
    status: "{{ dict(groups['nodes'] | zip(groups['nodes'] | map('extract', hostvars, 'watch_status'))) }}"
    launcher: slurm
    slurm_job_id: "{{ submitted.stdout }}"
    slurm_controller: slurm1
    timeout: 259200
    stall_minutes: 30
  run_once: true
  register: watched
"""

RETURN = r"""
rounds:
  description: How many rounds the watch took.
  returned: always
  type: int
  sample: 240
lines:
  description: The last round's progress line of every rank.
  returned: always
  type: list
  elements: str
first_failed:
  description: The ranks that had failed or were lost when a failure was first seen, the first to end first.
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
  description: Whether the watch gave up with a rank still running.
  returned: always
  type: bool
by_host:
  description:
    - Each rank's last read, by host, as M(instinct.finetune.finetune_job_status) returned it, with
      C(state) as the watch last saw it (C(lost) for a node not read for the stale window, C(starting)
      for one never read) and C(read_error), why its last read failed (empty when it did not).
  returned: always
  type: dict
  sample: {"node1": {"state": "succeeded", "progress": {"current_steps": 40, "total_steps": 40}, "read_error": ""}}
"""
