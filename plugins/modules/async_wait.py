#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation only, as for ansible.builtin.debug: the action plugin of the same name
# (plugins/action/async_wait.py) does the work on the controller and checks the options.

DOCUMENTATION = r"""
---
module: async_wait
short_description: Wait for a background (async) job on a node, printing a progress line per interval
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Waits for a job started with C(async) and a C(poll) of 0, reading its status every O(poll) seconds
    with the module behind M(ansible.builtin.async_status), in one task (no C(until)/C(retries), so no
    C(FAILED - RETRYING) line per poll).
  - >-
    Every O(progress_interval) seconds the controller prints one line per node still waiting,
    C(node1: building torch 2.7.1 — 6 min 20 s elapsed, log: [1234/5678] Building CXX object ...),
    the log part being the last line of O(log) on the node. A job that ends within the first
    interval prints nothing.
  - Returns the job's own result, as M(ansible.builtin.async_status) returns it once the job has
    finished (C(rc), C(stdout), C(stderr), ...; C(failed) when the job failed), then removes the
    job's results file on the node as Ansible's own polling does (O(cleanup)).
  - Fails when the job has not finished after O(timeout) seconds, with a message that names the
    node and O(label); the job itself goes on until its own C(async) limit.
  - Run it with the same C(become) and C(become_user) as the task that started the job; the job's
    status lies in that user's C(~/.ansible_async).
options:
  jid:
    description: The job id the C(async) task registered (C(ansible_job_id)).
    type: str
    required: true
  label:
    description: What the job does, for the progress lines and the failure (C(building torch 2.7.1 for gfx942)).
    type: str
    default: the background job
  timeout:
    description: Seconds after which the wait fails with the job still running.
    type: float
    required: true
  poll:
    description: Seconds between two reads of the job's status (at least 1).
    type: float
    default: 10
  progress_interval:
    description: Seconds between two progress lines; 0 prints none.
    type: float
    default: 60
  log:
    description:
      - A file on the node whose last line each progress line shows (the job's log), read as the
        task's user; empty for none. A file that cannot be read shows nothing.
    type: str
    default: ""
  cleanup:
    description: Remove the job's results file on the node once the job has finished.
    type: bool
    default: true
attributes:
  check_mode:
    support: partial
    description: Can run in check mode, where it waits for nothing.
    details:
      - Skipped in check mode, with a message saying what a real run waits for, since check mode
        starts no background job. To wait in check mode for a job started with C(check_mode) false,
        give this task C(check_mode) false too.
  diff_mode:
    support: none
    description: Returns no diff.
notes:
  - Runs on the controller; each read of the status is one module run on the node, each log line
    one C(tail) through the connection.
seealso:
  - module: ansible.builtin.async_status
"""

EXAMPLES = r"""
- name: Start the build in the background
  ansible.builtin.command:
    argv: [/opt/build/build-torch.sh]
  async: 21600
  poll: 0
  register: build_job
  changed_when: true

- name: Wait for the build, with a progress line every minute
  instinct.finetune.async_wait:
    jid: "{{ build_job.ansible_job_id }}"
    label: building torch 2.7.1 for gfx942
    timeout: 21600
    poll: 30
    progress_interval: 60
    log: /var/log/instinct-finetune/build/build-torch-2.7.1-gfx942.log
  register: build_result
  # Judge the job's exit in a later task; a wait that timed out still fails here.
  failed_when: build_result.timed_out | default(false)
"""

RETURN = r"""
finished:
  description: Whether the job has finished.
  returned: always
  type: bool
  sample: true
started:
  description: Whether the job had started.
  returned: always
  type: bool
  sample: true
ansible_job_id:
  description: The job id waited for.
  returned: always
  type: str
  sample: j466181046419.1234
results_file:
  description: Where the job's result was written on the node.
  returned: always
  type: str
  sample: /home/instinct/.ansible_async/j466181046419.1234
rc:
  description: The job's exit code, for a command job.
  returned: when the job has finished
  type: int
  sample: 0
stdout:
  description: The job's standard output.
  returned: always
  type: str
stderr:
  description: The job's standard error.
  returned: always
  type: str
stdout_lines:
  description: RV(stdout) split into lines.
  returned: always
  type: list
  elements: str
stderr_lines:
  description: RV(stderr) split into lines.
  returned: always
  type: list
  elements: str
timed_out:
  description: Whether the wait gave up with the job still running.
  returned: unless skipped in check mode
  type: bool
  sample: false
waited:
  description: Seconds this task waited.
  returned: unless skipped in check mode
  type: float
  sample: 380.2
"""
