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
  - Ends the Slurm jobs named O(name) of O(user) that wait for nodes or hold them (pending, running,
    suspended; not those already completing), job O(job_id) or the jobs that hold one of O(nodes).
  - Reads them first with C(squeue --all) under the same filters, comparing the name exactly (squeue's
    C(--name) ignores case, scancel's does not), then cancels exactly those ids with
    C(scancel --name=NAME --user=USER ID...). scancel's filters alone say nothing when they match no
    job (it exits 0), so the read is what makes the task changed only when a job was ended, and what
    check mode reports it would end.
  - A job that ends between the read and the cancel (a rank that died takes its job down at once,
    a time limit) is no failure, and not in RV(cancelled). Any other answer of scancel (slurmctld
    unreachable, permission) is.
  - Fails before any command for an O(user) with no account on the node (squeue would list nothing
    and the cancel read as done), and for a name or user holding a comma (squeue reads a list).
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
      - One of O(job_id) and O(nodes) is required; an empty one is refused rather than read as "every job".
    type: str
  nodes:
    description:
      - The jobs of that name and account that hold one of these Slurm nodes (C(squeue --nodelist)); a
        pending job holds none.
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
  - With both O(job_id) and O(nodes), only that job, and only while it holds one of the nodes.
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
  description: The ids of the jobs ended (in check mode, those that would be); empty on failure.
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

import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.slurm import (
    SlurmError,
    cancel_candidates,
    cancel_candidates_argv,
    scancel_argv,
    scancel_ended_ids,
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
        required_one_of=[("job_id", "nodes")],
        supports_check_mode=True,
    )
    params = module.params
    what = f"Slurm job {params['name']!r} of {params['user']!r}"
    result = {"changed": False, "cancelled": [], "ended_meanwhile": False, "squeue_argv": [], "scancel_argv": []}
    try:
        result["squeue_argv"] = cancel_candidates_argv(
            params["name"], params["user"], job_id=params["job_id"], nodes=params["nodes"], squeue=params["squeue"]
        )
    except SlurmError as err:
        module.fail_json(msg=f"Cannot cancel {what}: {err}. {_RUNBOOK}", **result)
    # squeue 21.08 warns of an unknown --user and lists nothing, exit 0: a mistyped account would read
    # as "nothing to cancel".
    try:
        pwd.getpwnam(params["user"])
    except KeyError:
        module.fail_json(msg=f"Cannot cancel {what}: no account {params['user']!r} on this node. {_RUNBOOK}", **result)
    rc, out, err = module.run_command(result["squeue_argv"])
    # An id slurmctld forgot (the job ended long ago) is "Invalid job id specified": nothing to end.
    if rc != 0 and not scancel_found_nothing(err):
        module.fail_json(msg=(f"squeue could not list {what}: {_said(err, out)}. Is slurmctld up (scontrol ping), "
                              f"and are the nodes in slurm.conf? {_RUNBOOK}"), **result)  # fmt: skip
    try:
        ids = cancel_candidates(out, params["name"]) if rc == 0 else []
    except SlurmError as error:
        module.fail_json(msg=f"squeue answered what is not a job list: {error}. {_RUNBOOK}", **result)
    if not ids:
        module.exit_json(**result)
    if module.check_mode:
        result.update(changed=True, cancelled=ids)
        module.exit_json(**result)
    result["scancel_argv"] = scancel_argv(ids, params["scancel"], name=params["name"], user=params["user"])
    rc, out, err = module.run_command(result["scancel_argv"])
    if rc != 0 and not scancel_found_nothing(err):
        module.fail_json(msg=(f"scancel could not end Slurm job(s) {', '.join(ids)} ({params['name']} of "
                              f"{params['user']}): {_said(err, out)}. {_RUNBOOK}"), **result)  # fmt: skip
    # A job that ended between the read and the cancel was not ended by this one (scancel names each
    # such id; a line naming none counts for all).
    gone = (scancel_ended_ids(err) or ids) if rc != 0 else []
    result["cancelled"] = [job_id for job_id in ids if job_id not in gone]
    result.update(changed=bool(result["cancelled"]), ended_meanwhile=bool(gone))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
