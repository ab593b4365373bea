#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: running_jobs
short_description: List the fine-tune jobs whose unit runs on a node
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - The one check every stage that could disturb a training job makes before it acts (the fabric
    stage's port check and all-reduce, package changes, a reboot).
  - Reads the finetune role's units (C(instinct-finetune-JOB.service) in O(unit_dir)) and asks
    systemd which of them are active.
  - A job launched through Slurm (C(finetune_launcher=slurm)) has no unit. Its id is in
    C(JOB/slurm-job-id) under O(jobs_dir), and the job counts as running while C(squeue) shows it
    pending or active. A job C(squeue) no longer knows, or shows finished, does not. When C(squeue)
    cannot answer for a job on record, the job counts as running (a stage holds back rather than
    disturb it) and RV(slurm) says why.
  - The id counts only while Slurm's job of that id has the job's name, C(instinct-finetune-JOB) (the
    finetune role's C(sbatch --job-name)). Slurm numbers its jobs again after it lost its saved state,
    and an old id may then name another account's job.
  - Never changes anything on the host.
options:
  unit_dir:
    description: Where the finetune role installs the job units.
    type: path
    default: /etc/systemd/system
  jobs_dir:
    description: The finetune role's folder of job settings, one folder per job (C(instinct_jobs_conf_dir)).
    type: path
    default: /etc/instinct-finetune/jobs
  squeue:
    description: Slurm's squeue, asked only when a job's folder holds a Slurm job id.
    type: str
    default: squeue
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.finetune_job_status
"""

EXAMPLES = r"""
- name: Find the fine-tune jobs running on this node
  instinct.finetune.running_jobs:
  register: running

- name: Hold back while a job trains
  ansible.builtin.debug:
    msg: "held back: job {{ running.jobs | join(', ') }} is training"
  when: running.jobs | length > 0
"""

RETURN = r"""
jobs:
  description: The names of the jobs whose unit is active (or starting or stopping) on the node.
  returned: always
  type: list
  elements: str
  sample: ["sft-7b"]
units:
  description: Every job unit found, with the state systemd gives it.
  returned: always
  type: dict
  sample: {"instinct-finetune-sft-7b.service": "active", "instinct-finetune-old.service": "inactive"}
slurm:
  description:
    - Every job launched through Slurm found in O(jobs_dir), with its Slurm job id and what C(squeue) says
      of it (C(state), empty when squeue no longer knows it), or why squeue could not answer (C(error)).
    - C(other_name) is the name of the job the id names now when it is not this job's (C(state) empty).
  returned: always
  type: dict
  sample: {"sft-70b": {"job_id": "4242", "state": "RUNNING", "error": "", "other_name": null}}
by_launcher:
  description: The running jobs of RV(jobs) by what runs them, C(systemd) (an active unit) and C(slurm).
  returned: always
  type: dict
  sample: {"systemd": [], "slurm": ["sft-70b"]}
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import running_job_names
from ansible_collections.instinct.finetune.plugins.module_utils.slurm import (
    SlurmError,
    job_phase,
    job_status,
    parse_sbatch_parsable,
    squeue_argv,
)

UNIT_GLOB = "instinct-finetune-*.service"
# The finetune role's sbatch --job-name of job JOB (its finetune_slurm_job_name).
SLURM_NAME_PREFIX = "instinct-finetune-"
ID_FILE = "slurm-job-id"
# squeue's answer for a job the controller has forgotten (MinJobAge after it ended).
FORGOTTEN = "Invalid job id specified"


def _seen(job_id="", error=""):
    return {"job_id": job_id, "state": "", "error": error, "other_name": None}


def slurm_jobs(module):
    """{job: {"job_id", "state", "error", "other_name"}} for every job folder that holds a Slurm job id."""
    found = {}
    for path in sorted(glob.glob(os.path.join(module.params["jobs_dir"], "*", ID_FILE))):
        job = os.path.basename(os.path.dirname(path))
        if os.path.islink(path) or not os.path.isfile(path):
            found[job] = _seen(error=f"{path} is not a regular file")
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        try:
            parsed = parse_sbatch_parsable(text)
        except SlurmError as err:
            found[job] = _seen(error=f"{path}: {err}")
            continue
        if parsed is None:
            continue
        found[job] = _seen(parsed["job_id"])
        squeue = module.get_bin_path(module.params["squeue"]) if not os.path.isabs(module.params["squeue"]) \
            else module.params["squeue"]  # fmt: skip
        if not squeue:
            found[job]["error"] = f"{module.params['squeue']} is not on this node's PATH"
            continue
        rc, out, err = module.run_command(squeue_argv(parsed["job_id"], squeue))
        if rc != 0:
            if FORGOTTEN not in err:
                found[job]["error"] = f"squeue exited {rc}: {(err or out).strip() or 'no output'}"
            continue
        # job_status's own check: the id counts only while its job has this job's name.
        try:
            status = job_status(parsed["job_id"], squeue_text=out, name=SLURM_NAME_PREFIX + job)
        except SlurmError as err:
            found[job]["error"] = f"squeue's answer cannot be read: {err}"
            continue
        found[job].update(state=status["state"] or "", other_name=status["other_name"])
    return found


def slurm_running(found):
    """The jobs on record whose Slurm job is pending or active, or which squeue could not answer for."""
    return sorted(job for job, seen in found.items()
                  if seen["error"] or job_phase(seen["state"]) in ("pending", "active"))  # fmt: skip


def main():
    module = AnsibleModule(
        argument_spec={
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "jobs_dir": {"type": "path", "default": "/etc/instinct-finetune/jobs"},
            "squeue": {"type": "str", "default": "squeue"},
        },
        supports_check_mode=True,
    )
    units = sorted(os.path.basename(path) for path in glob.glob(os.path.join(module.params["unit_dir"], UNIT_GLOB)))
    states = []
    if units:
        systemctl = module.get_bin_path("systemctl", required=True)
        # is-active prints one state per unit, in order, and exits non-zero when any is inactive.
        _rc, out, err = module.run_command([systemctl, "is-active", *units])
        states = out.split()
        if len(states) != len(units):
            module.fail_json(msg=f"systemctl is-active answered {out!r} {err!r} for {len(units)} units")
    found = {unit: states[index] for index, unit in enumerate(units)}
    if not os.path.isabs(module.params["jobs_dir"]):
        module.fail_json(msg=(
            f"jobs_dir {module.params['jobs_dir']!r} is not an absolute path: give the finetune role's folder of "
            "job settings (instinct_jobs_conf_dir, /etc/instinct-finetune/jobs by default). "
            "See docs/runbooks/slurm.md"))  # fmt: skip
    slurm = slurm_jobs(module)
    by_launcher = {"systemd": running_job_names(found), "slurm": slurm_running(slurm)}
    jobs = sorted(set(by_launcher["systemd"]) | set(by_launcher["slurm"]))
    module.exit_json(changed=False, jobs=jobs, units=found, slurm=slurm, by_launcher=by_launcher)


if __name__ == "__main__":
    main()
