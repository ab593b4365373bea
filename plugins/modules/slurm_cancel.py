#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: slurm_cancel
short_description: Cancel a Slurm job of one account by its name, reporting what it ended
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Ends the unfinished Slurm jobs named O(name) of O(user) (pending, running, completing, suspended),
    only job O(job_id) when given, only the jobs on O(nodes) when given.
  - Reads them first with C(squeue) under the same filters, then cancels exactly those ids with
    C(scancel --name=NAME --user=USER ID...). scancel's filters alone say nothing when they match no
    job (it exits 0), so the read is what makes the task changed only when a job was ended, and what
    check mode reports it would end.
  - A job that ends between the read and the cancel (a rank that died takes its job down at once,
    a time limit) is no failure. Any other answer of scancel (slurmctld unreachable, permission) is.
  - Run it as the job's owner (C(become_user)) or as root; the filters keep it to O(user)'s jobs of
    that name either way.
options:
  name:
    description: The job name (C(sbatch --job-name), C(salloc --job-name)).
    type: str
    required: true
  user:
    description: The account that owns the job.
    type: str
    required: true
  job_id:
    description:
      - The one job to end. An id Slurm no longer knows, or one that now names another job, ends nothing.
      - Without it, every unfinished job of that name and account is ended (with O(nodes), those on them).
    type: str
  nodes:
    description: Only jobs that hold or wait for one of these Slurm nodes (C(squeue --nodelist)).
    type: list
    elements: str
  squeue:
    description: Slurm's squeue.
    type: str
    default: squeue
  scancel:
    description: Slurm's scancel.
    type: str
    default: scancel
attributes:
  check_mode:
    support: full
    description: Reads the jobs and reports those it would cancel as RV(cancelled), cancelling none.
  diff_mode:
    support: none
    description: Returns no diff.
notes:
  - Needs O(job_id) or O(nodes) or accepts ending every job of that name and account; the collection's
    roles always give one.
seealso:
  - module: instinct.finetune.running_jobs
"""

EXAMPLES = r"""
- name: Release the health checks' allocation
  instinct.finetune.slurm_cancel:
    name: instinct-health
    user: instinct
    job_id: "{{ health_slurm_job_id }}"
  become: true
  become_user: instinct

- name: Release what an interrupted health check left on these nodes
  instinct.finetune.slurm_cancel:
    name: instinct-health
    user: instinct
    nodes: [node1, node2]
"""

RETURN = r"""
cancelled:
  description: The ids of the jobs ended (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: ["4242"]
ended_meanwhile:
  description: Whether scancel found a job already ended between the read and the cancel.
  returned: always
  type: bool
squeue_argv:
  description: The C(squeue) command that read the jobs.
  returned: always
  type: list
  elements: str
scancel_argv:
  description: The C(scancel) command run (empty when there was nothing to cancel, or in check mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.slurm import (
    SlurmError,
    cancel_candidates_argv,
    parse_job_ids,
    scancel_argv,
    scancel_found_nothing,
)

_RUNBOOK = "See docs/runbooks/slurm.md"


def _said(err, out):
    return " | ".join(line.strip() for line in f"{err}\n{out}".splitlines() if line.strip()) or "nothing"


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "user": {"type": "str", "required": True},
            "job_id": {"type": "str"},
            "nodes": {"type": "list", "elements": "str"},
            "squeue": {"type": "str", "default": "squeue"},
            "scancel": {"type": "str", "default": "scancel"},
        },
        supports_check_mode=True,
    )
    params = module.params
    result = {"changed": False, "cancelled": [], "ended_meanwhile": False, "squeue_argv": [], "scancel_argv": []}
    try:
        result["squeue_argv"] = cancel_candidates_argv(
            params["name"], params["user"], job_id=params["job_id"], nodes=params["nodes"], squeue=params["squeue"]
        )
    except SlurmError as err:
        module.fail_json(msg=f"Cannot cancel Slurm job {params['name']!r} of {params['user']!r}: {err}. {_RUNBOOK}",
                         **result)  # fmt: skip
    rc, out, err = module.run_command(result["squeue_argv"])
    # An id slurmctld forgot (the job ended long ago) is "Invalid job id specified": nothing to end.
    if rc != 0 and not scancel_found_nothing(err):
        module.fail_json(msg=(f"squeue could not list Slurm job {params['name']!r} of {params['user']!r}: "
                              f"{_said(err, out)}. Is slurmctld up (scontrol ping)? {_RUNBOOK}"), **result)  # fmt: skip
    try:
        ids = parse_job_ids(out) if rc == 0 else []
    except SlurmError as error:
        module.fail_json(msg=f"squeue answered what is not a job id list: {error}. {_RUNBOOK}", **result)
    result["cancelled"] = ids
    result["changed"] = bool(ids)
    if not ids or module.check_mode:
        module.exit_json(**result)
    result["scancel_argv"] = scancel_argv(ids, params["scancel"], name=params["name"], user=params["user"])
    rc, out, err = module.run_command(result["scancel_argv"])
    if rc != 0:
        if not scancel_found_nothing(err):
            module.fail_json(msg=(f"scancel could not end Slurm job(s) {', '.join(ids)} ({params['name']} of "
                                  f"{params['user']}): {_said(err, out)}. {_RUNBOOK}"), **result)  # fmt: skip
        result["ended_meanwhile"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
