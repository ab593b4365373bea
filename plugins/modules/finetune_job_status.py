#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: finetune_job_status
short_description: Read where one node's part of a fine-tune job stands
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Reads the job's systemd unit (C(systemctl show)), the exit record its C(ExecStopPost) writes,
    the fingerprint of the settings it was launched with, LLaMA-Factory's C(trainer_log.jsonl), the
    C(checkpoint-N) folders of the output directory and the last lines of the node's training log.
  - Turns them into one RV(state) per node, which the finetune role combines across the nodes to
    launch, resume, watch or stop a job.
  - With O(launcher=slurm) the job is one Slurm batch job for every node instead of a unit per node;
    the module reads the job id that C(sbatch --parsable) printed from O(slurm_job_id_file), asks
    C(squeue) where the job stands and, once C(squeue) no longer shows it pending or running, C(sacct)
    how it ended (with its steps' exit codes), and never calls C(systemctl). Slurm's view is mapped
    onto the same states, so that the finetune role's plan and watch read either launcher the same
    way. A job waiting for an allocation (C(PENDING), C(REQUEUED), ...) is C(running) with
    RV(slurm.phase) C(pending) and Slurm's reason (it is submitted and must not be submitted again);
    an active job (C(RUNNING), C(COMPLETING), C(SUSPENDED), ...) is C(running); a job that ended
    other than C(COMPLETED) with exit code 0 and every step completed (C(FAILED), C(CANCELLED),
    C(TIMEOUT), C(NODE_FAIL), C(OUT_OF_MEMORY), ...) is C(failed), with Slurm's account in
    RV(errors); a job that completed is what this node's exit record says, as for a unit that ended,
    and C(failed) without one. No job id (never submitted), or a job C(squeue) and C(sacct) no longer
    know, reads as a unit that is not active, from the exit record (C(absent) without one).
  - Never changes anything on the host.
options:
  launcher:
    description:
      - How the job was launched on this node. C(systemd) a unit per node (O(unit)); C(slurm) one
        Slurm batch job for all nodes (O(slurm_job_id_file)).
    type: str
    choices: [systemd, slurm]
    default: systemd
  unit:
    description: The systemd unit of the job on this node. Required with O(launcher=systemd), unused with C(slurm).
    type: str
  exit_file:
    description:
      - The file the unit's C(ExecStopPost) writes (C(result= code= status=)); under Slurm, the file the
        node's wrapper writes in the same format when its rank ends.
    type: path
    required: true
  slurm_job_id_file:
    description:
      - With O(launcher=slurm), the file that holds what C(sbatch --parsable) printed when the job was
        submitted (C(4242), or C(4242;cluster); the cluster is not used, the commands ask the node's
        default cluster). A missing or empty file means the job was never submitted; anything else
        that is not a regular file, or other text, fails the module.
      - Required with O(launcher=slurm).
    type: path
  slurm_job_name:
    description:
      - With O(launcher=slurm), the name the job was submitted under (C(sbatch --job-name)). The id on
        record counts only while Slurm's job of that id has this name; one with another name (Slurm
        numbers its jobs again after it lost its saved state) is read as a job Slurm no longer knows.
      - Without it, the id alone is trusted.
    type: str
  squeue:
    description: The C(squeue) command (a name looked up in C(PATH), or a path), with O(launcher=slurm).
    type: str
    default: squeue
  sacct:
    description: The C(sacct) command (a name looked up in C(PATH), or a path), with O(launcher=slurm).
    type: str
    default: sacct
  fingerprint_file:
    description: The file holding the fingerprint of the settings the job was launched with.
    type: path
    required: true
  fingerprint:
    description: The fingerprint of the settings wanted now; a finished job with another one is C(stale).
    type: str
    default: ""
  output_dir:
    description: LLaMA-Factory's C(output_dir) on this node.
    type: path
    required: true
  log_path:
    description: The training log of this node.
    type: path
    required: true
  tail_lines:
    description: How many of the log's last lines to return.
    type: int
    default: 25
  metrics_dir:
    description:
      - The job's metrics folder, where each rank of this node writes C(rank<N>.prom) with the time
        of its last optimizer step; read for RV(idle_seconds). Empty to leave it out.
    type: path
    default: ""
  history_file:
    description:
      - The job's launch history (one JSON object a line, appended at every launch with the settings it
        trained with), read for RV(launched_settings). Empty to leave it out.
    type: path
    default: ""
  wait_seconds:
    description:
      - While the job runs on this node, keep reading for up to this many seconds and return as soon
        as it is no longer running; the finetune role's watch rounds use it to report progress at an
        interval without a retry line per poll.
      - The unit is read every 2 seconds; Slurm's C(squeue) every 10 seconds, not to load its controller.
    type: int
    default: 0
notes:
  - With O(launcher=slurm) the module fails, naming the host, the command and its error, when
    C(squeue) or C(sacct) is not installed or exits non-zero (Slurm's controller or its accounting
    cannot be reached), except C(squeue)'s C(Invalid job id specified) for a job its controller has
    already forgotten (C(MinJobAge)), which C(sacct) then reads; the message names the runbook
    C(docs/runbooks/slurm.md). A cluster without accounting
    (C(AccountingStorageType=accounting_storage/none)) can be read only while C(squeue) still shows the job.
  - With O(launcher=slurm), RV(frozen) is always empty (the job's processes are in Slurm's control
    groups, which this module does not read) and RV(unit) is empty.
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.fabric_iface
  - module: instinct.finetune.finetune_watch
"""

EXAMPLES = r"""
- name: Read the state of the job on every node
  instinct.finetune.finetune_job_status:
    unit: instinct-finetune-tiny-sft.service
    exit_file: /var/lib/instinct-finetune/jobs/tiny-sft/exit-status
    fingerprint_file: /var/lib/instinct-finetune/jobs/tiny-sft/fingerprint
    fingerprint: "{{ finetune_fingerprint }}"
    output_dir: /var/lib/instinct-finetune/jobs/tiny-sft/output
    log_path: /var/log/instinct-finetune/tiny-sft/train.log
  register: job

- name: Read the state of the job submitted to Slurm, on every node
  instinct.finetune.finetune_job_status:
    launcher: slurm
    slurm_job_id_file: /etc/instinct-finetune/jobs/tiny-sft/slurm-job-id
    exit_file: /var/lib/instinct-finetune/jobs/tiny-sft/exit-status
    fingerprint_file: /var/lib/instinct-finetune/jobs/tiny-sft/fingerprint
    fingerprint: "{{ finetune_fingerprint }}"
    output_dir: /var/lib/instinct-finetune/jobs/tiny-sft/output
    log_path: /var/log/instinct-finetune/tiny-sft/train.log
  register: job

- name: Say why the job waits
  ansible.builtin.debug:
    msg: "{{ job.slurm.message }}"
  when: job.slurm.phase == 'pending'
"""

RETURN = r"""
state:
  description:
    - C(running) while the unit is active; C(succeeded) once it exited 0 with the wanted settings;
      C(stale) if it exited 0 with other settings; C(failed) if it ended otherwise; C(absent) if it
      never ran.
    - With O(launcher=slurm), C(running) while the job is pending or active (RV(slurm.phase) tells
      which), C(failed) once Slurm says it did not succeed, else from the exit record as above (see
      the description).
  returned: always
  type: str
  sample: running
unit:
  description: The unit's ActiveState, SubState, Result, ExecMainStatus and MainPID; empty with O(launcher=slurm).
  returned: always
  type: dict
slurm:
  description: Slurm's view of the job, with O(launcher=slurm).
  returned: when O(launcher=slurm)
  type: dict
  contains:
    job_id:
      description: The job id from O(slurm_job_id_file); null when the job was never submitted.
      type: str
    cluster:
      description: The cluster C(sbatch --parsable) named after the id, or null.
      type: str
    state:
      description:
        - Slurm's state of the job (C(PENDING), C(RUNNING), C(COMPLETED), C(FAILED), C(CANCELLED),
          C(TIMEOUT), ...); null when never submitted or known to neither C(squeue) nor C(sacct).
      type: str
    phase:
      description: C(pending) (waiting for an allocation), C(active), C(finished) or C(unknown).
      type: str
    reason:
      description: Slurm's reason (why a job waits, C(Resources), C(Priority), ...), or null.
      type: str
    held:
      description: Whether the job is held (it runs only once released).
      type: bool
    cancelled_by:
      description: The uid that cancelled the job, from C(sacct); else null.
      type: int
    exit_code:
      description: The job's exit code from C(sacct) once it ended; else null.
      type: int
    signal:
      description: The signal that ended the job, from C(sacct); else null.
      type: int
    failed_steps:
      description: The job's steps that did not complete with 0:0 (C(batch), C(0), ...).
      type: list
      elements: str
    hosts:
      description: The nodes of the job's allocation.
      type: list
      elements: str
    elapsed_s:
      description: Seconds the job ran (C(squeue)'s or C(sacct)'s elapsed time), or null.
      type: float
    source:
      description: Which command the view comes from, C(squeue) or C(sacct); null when neither knows the job.
      type: str
    message:
      description: The job's state in words.
      type: str
  sample:
    job_id: "4242"
    cluster: null
    state: PENDING
    phase: pending
    reason: Resources
    held: false
    cancelled_by: null
    exit_code: null
    signal: null
    failed_steps: []
    hosts: []
    elapsed_s: 0
    source: squeue
    message: Slurm job 4242 is PENDING (Resources)
exit:
  description: The exit record (C(result), C(code), C(status)), or null while none was written.
  returned: always
  type: dict
fingerprint:
  description: The fingerprint the job was launched with, empty if never launched.
  returned: always
  type: str
launched_settings:
  description:
    - The training settings of the launch in O(fingerprint_file), from O(history_file) (its last entry
      of the same settings' fingerprint), so that a refusal can name what changed. Empty without a
      history file or an entry for that launch (a launch of an earlier release).
  returned: always
  type: dict
  sample: {"learning_rate": 0.0001, "lora_rank": 8, "ds_config.zero_optimization.stage": 3}
progress:
  description: Latest step, total steps, percentage, loss, eval loss, times, and the loss curve as [step, loss] pairs.
  returned: always
  type: dict
  sample: {"current_steps": 12, "total_steps": 40, "loss": 2.31, "losses": [[5, 3.1], [10, 2.4]]}
checkpoints:
  description: The C(checkpoint-N) folders, by step, with whether each is complete.
  returned: always
  type: list
  elements: dict
log_tail:
  description: The last O(tail_lines) lines of the training log.
  returned: always
  type: list
  elements: str
idle_seconds:
  description:
    - While the job runs, seconds since any rank of this node last took an optimizer step (its
      C(rank<N>.prom), else the master's C(trainer_log.jsonl)), or since the unit started when no
      step is known; measured on the node's clock. Null when the job does not run.
    - With O(launcher=slurm), since the job started running (C(squeue)'s elapsed time) when no step
      is known; null while the job is pending, so a job waiting for nodes never counts as stalled.
  returned: always
  type: float
  sample: 12.5
frozen:
  description: The processes of the unit stopped by a signal (state T), as PIDs; a hung rank's cause.
  returned: always
  type: list
  elements: str
  sample: ["4711"]
errors:
  description:
    - The last error lines of the training log (its last 2000 lines), without torchrun's and
      LLaMA-Factory's wrappers around them; the cause of a failed rank.
    - With O(launcher=slurm), then Slurm's account of a job that did not end well (its state, exit
      code and failed steps, RV(slurm.message)).
  returned: always
  type: list
  elements: str
  sample: ["[rank1]: PermissionError: [Errno 13] Permission denied: '/var/lib/instinct-finetune/hf-home'"]
"""

import os
import socket
import stat
import time
from collections import deque

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import (
    checkpoints,
    idle_seconds,
    launched_settings,
    node_state,
    parse_exit_record,
    parse_rank_progress,
    parse_systemctl_show,
    parse_trainer_log,
    process_state,
    progress,
    root_errors,
)
from ansible_collections.instinct.finetune.plugins.module_utils.slurm import (
    SlurmError,
    job_status,
    parse_sbatch_parsable,
    sacct_argv,
    squeue_argv,
)
from ansible_collections.instinct.finetune.plugins.module_utils.slurm_jobstate import slurm_node_state, slurm_summary

POLL_SECONDS = 2
# squeue asks Slurm's controller, which every node's read of every waiting watch round reaches.
SLURM_POLL_SECONDS = 10
SLURM_RUNBOOK = "docs/runbooks/slurm.md"
# What squeue says (rc 1) for a job its controller no longer holds (MinJobAge): sacct has it.
SQUEUE_FORGOT = "Invalid job id specified"
UNIT_PROPERTIES = (
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainStatus",
    "MainPID",
    "ActiveEnterTimestampMonotonic",
    "ControlGroup",
)
# Where systemd keeps a unit's processes: the unified hierarchy, else cgroup v1's systemd one.
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/systemd")


# The largest file read whole: a job's small files (fingerprint, exit record, a rank's progress) are
# bytes; the Trainer's log of a long job a few MiB.
READ_LIMIT = 64 * 1024 * 1024


def _open(path):
    """A regular file opened for reading, never through a link and never blocking; None otherwise.

    This module runs as root and reads files in the job's folder, which the training account owns (a
    job can run the account's code): a link there in place of the fingerprint or the exit record would
    have root read what it points at (the job's secrets.env) into the play's output, and a FIFO would
    hang the watch."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > READ_LIMIT:
            os.close(fd)
            return None
        return os.fdopen(fd, encoding="utf-8", errors="replace")
    except OSError:
        os.close(fd)
        return None


def _read(path):
    handle = _open(path)
    if handle is None:
        return None
    with handle:
        try:
            return handle.read(READ_LIMIT)
        except OSError:
            return None


def _tail(path, lines):
    handle = _open(path)
    if handle is None:
        return []
    with handle:
        try:
            return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]
        except OSError:
            return []


def _checkpoint_listing(output_dir):
    listing = {}
    try:
        names = os.listdir(output_dir)
    except OSError:
        return listing
    for name in names:
        path = os.path.join(output_dir, name)
        # Not through a link: the names of what it points at are no business of the play's.
        if name.startswith("checkpoint-") and os.path.isdir(path) and not os.path.islink(path):
            listing[name] = os.listdir(path)
    return listing


def _idle_seconds(params, unit):
    """Seconds since this node's ranks last stepped (node clock), from what the node holds."""
    ranks = _ranks_progress(params)
    started = None
    try:
        since_boot = int(unit.get("ActiveEnterTimestampMonotonic") or 0) / 1e6
    except ValueError:
        since_boot = 0
    if since_boot:
        started = time.time() - (time.monotonic() - since_boot)
    return idle_seconds(time.time(), ranks, started)


def _ranks_progress(params):
    """The last step of each rank of this node: its progress file, and the master's trainer log."""
    ranks = []
    if params["metrics_dir"]:
        try:
            names = sorted(os.listdir(params["metrics_dir"]))
        except OSError:
            names = []
        for name in names:
            if name.startswith("rank") and name.endswith(".prom"):
                ranks.append(parse_rank_progress(_read(os.path.join(params["metrics_dir"], name))))
    # The master also logs each step to trainer_log.jsonl (the only mark when progress metrics are off).
    trainer_log = os.path.join(params["output_dir"], "trainer_log.jsonl")
    if os.path.isfile(trainer_log) and not os.path.islink(trainer_log):
        ranks.append({"instinct_finetune_last_step_timestamp_seconds": os.lstat(trainer_log).st_mtime})
    return ranks


def _frozen(unit):
    """PIDs of the unit's processes that a signal stopped (SIGSTOP, a debugger)."""
    group = unit.get("ControlGroup") or ""
    if not group:
        return []
    for root in CGROUP_ROOTS:
        procs = _read(root + group + "/cgroup.procs")
        if procs is not None:
            break
    else:
        return []
    return [pid for pid in procs.split() if process_state(_read(f"/proc/{pid}/stat")) in ("T", "t")]


def _read_unit(module):
    params = module.params
    systemctl = module.get_bin_path("systemctl", required=True)
    argv = [systemctl, "show", "--no-pager"]
    for prop in UNIT_PROPERTIES:
        argv += ["-p", prop]
    rc, out, err = module.run_command([*argv, params["unit"]])
    if rc != 0:
        module.fail_json(msg=f"systemctl show {params['unit']} failed: {err.strip() or out.strip()}", rc=rc)
    exit_record = parse_exit_record(_read(params["exit_file"]))
    launched_with = (_read(params["fingerprint_file"]) or "").strip()
    return parse_systemctl_show(out), exit_record, launched_with


def _host():
    return socket.gethostname()


def _job_id(module):
    """What sbatch --parsable printed, from the job id file: None when there is no file or it is
    empty (never submitted). A file there that is no regular file, or holds other text, fails: taking
    it for "never submitted" would submit the job a second time."""
    path = module.params["slurm_job_id_file"]
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        module.fail_json(msg=f"{_host()}: the Slurm job id file {path} cannot be read: {err}. See {SLURM_RUNBOOK}")
    text = _read(path)
    if text is None:
        module.fail_json(msg=(
            f"{_host()}: the Slurm job id file {path} is not a regular file this module may read (a link, "
            f"a FIFO or a folder). Remove it if no job was submitted, or write the id sbatch --parsable "
            f"printed into it. See {SLURM_RUNBOOK}"))  # fmt: skip
    try:
        return parse_sbatch_parsable(text)
    except SlurmError as err:
        module.fail_json(msg=(
            f"{_host()}: the Slurm job id file {path} cannot be read: {err}. Write the id sbatch --parsable printed "
            f"into it, or remove it if no job was submitted. See {SLURM_RUNBOOK}"))  # fmt: skip


def _run_slurm(module, argv):
    """A Slurm command as run (its path looked up) with its (rc, stdout, stderr); a command that
    cannot start fails the module."""
    name = argv[0]
    path = name if os.path.isabs(name) else module.get_bin_path(name)
    if not path:
        module.fail_json(msg=(
            f"{_host()}: {' '.join(argv)} cannot run: {name} is not found on this node's PATH. Every node of a "
            f"job launched through Slurm needs Slurm's client commands (the slurm role installs them), or give "
            f"finetune_job_status their path. See {SLURM_RUNBOOK}"))  # fmt: skip
    argv = [path, *argv[1:]]
    try:
        return argv, module.run_command(argv, handle_exceptions=False)
    except OSError as err:
        module.fail_json(msg=f"{_host()}: {' '.join(argv)} cannot run: {err}. See {SLURM_RUNBOOK}")


def _slurm_failed(module, argv, answer, what):
    """Fail naming the host, the command, its error and what the node must reach."""
    rc, out, err = answer
    said = (err or "").strip() or (out or "").strip() or "no output"
    module.fail_json(msg=f"{_host()}: {' '.join(argv)} failed (rc {rc}): {said}. This node must reach {what}. "
                         f"See {SLURM_RUNBOOK}", rc=rc, stdout=out, stderr=err)  # fmt: skip


def _read_slurm(module, job):
    """Slurm's view of the job (slurm.job_status): squeue, then sacct once squeue shows the job
    neither pending nor active (it has the exit codes and steps; a running job does not need it)."""
    params = module.params
    squeue, (rc, out, err) = _run_slurm(module, squeue_argv(job["job_id"], params["squeue"]))
    if rc != 0:
        if SQUEUE_FORGOT not in (err or ""):
            _slurm_failed(module, squeue, (rc, out, err), "Slurm's controller (slurmctld, munge, slurm.conf)")
        out = ""
    try:
        name = params["slurm_job_name"] or None
        status = job_status(job["job_id"], squeue_text=out, name=name)
        if status["phase"] in ("pending", "active"):
            return status
        sacct, (rc, sacct_out, err) = _run_slurm(module, sacct_argv(job["job_id"], params["sacct"]))
        if rc != 0:
            _slurm_failed(module, sacct, (rc, sacct_out, err), "Slurm's accounting (slurmdbd)")
        return job_status(job["job_id"], squeue_text=out, sacct_text=sacct_out, name=name)
    except SlurmError as err:
        module.fail_json(msg=f"{_host()}: Slurm's answer on job {job['job_id']} cannot be read: {err}. See "
                             f"{SLURM_RUNBOOK}")  # fmt: skip


def _slurm_state(module, job):
    """(state, problem, Slurm's view, exit record, fingerprint on the node) of the job under Slurm."""
    params = module.params
    status = _read_slurm(module, job) if job else None
    exit_record = parse_exit_record(_read(params["exit_file"]))
    launched_with = (_read(params["fingerprint_file"]) or "").strip()
    try:
        state, problem = slurm_node_state(status, exit_record, launched_with, params["fingerprint"])
    except SlurmError as err:
        module.fail_json(msg=f"{_host()}: {err}. Read it with squeue --jobs={job['job_id']} and sacct "
                             f"--jobs={job['job_id']}. See {SLURM_RUNBOOK}")  # fmt: skip
    return state, problem, status, exit_record, launched_with


def _node_files(params, launched_with):
    """What the node's files say of the job, whatever launched it."""
    trainer_log = _read(os.path.join(params["output_dir"], "trainer_log.jsonl"))
    history = _read(params["history_file"]) if params["history_file"] else None
    return {
        "launched_settings": launched_settings(history, launched_with),
        "progress": progress(parse_trainer_log(trainer_log)),
        "checkpoints": checkpoints(_checkpoint_listing(params["output_dir"])),
        "log_tail": _tail(params["log_path"], params["tail_lines"]),
        "errors": root_errors(_tail(params["log_path"], 2000)),
    }


def _slurm_main(module):
    """The job launched through Slurm: read until it no longer runs or the wait is over."""
    params = module.params
    job = _job_id(module)
    deadline = time.monotonic() + max(params["wait_seconds"], 0)
    while True:
        state, problem, status, exit_record, launched_with = _slurm_state(module, job)
        if state != "running" or time.monotonic() >= deadline:
            break
        time.sleep(min(SLURM_POLL_SECONDS, max(deadline - time.monotonic(), 0)))
    found = _node_files(params, launched_with)
    if problem:
        found["errors"] = [*found["errors"], problem]
    active = state == "running" and status is not None and status["phase"] == "active"
    started = None
    if active and status["elapsed_s"] is not None:
        started = time.time() - status["elapsed_s"]
    module.exit_json(
        changed=False,
        state=state,
        unit={},
        slurm=slurm_summary(status, job["cluster"] if job else None, params["slurm_job_id_file"]),
        exit=exit_record,
        fingerprint=launched_with,
        idle_seconds=idle_seconds(time.time(), _ranks_progress(params), started) if active else None,
        frozen=[],
        **found,
    )


def main():
    module = AnsibleModule(
        argument_spec={
            "launcher": {"type": "str", "choices": ["systemd", "slurm"], "default": "systemd"},
            "unit": {"type": "str"},
            "slurm_job_id_file": {"type": "path"},
            "slurm_job_name": {"type": "str"},
            "squeue": {"type": "str", "default": "squeue"},
            "sacct": {"type": "str", "default": "sacct"},
            "exit_file": {"type": "path", "required": True},
            "fingerprint_file": {"type": "path", "required": True},
            "fingerprint": {"type": "str", "default": ""},
            "output_dir": {"type": "path", "required": True},
            "log_path": {"type": "path", "required": True},
            "tail_lines": {"type": "int", "default": 25},
            "metrics_dir": {"type": "path", "default": ""},
            "history_file": {"type": "path", "default": ""},
            "wait_seconds": {"type": "int", "default": 0},
        },
        required_if=[("launcher", "systemd", ("unit",)), ("launcher", "slurm", ("slurm_job_id_file",))],
        supports_check_mode=True,
    )
    params = module.params
    if params["launcher"] == "slurm":
        _slurm_main(module)
        return
    deadline = time.monotonic() + max(params["wait_seconds"], 0)
    while True:
        unit, exit_record, launched_with = _read_unit(module)
        state = node_state(unit, exit_record, launched_with, params["fingerprint"])
        if state != "running" or time.monotonic() >= deadline:
            break
        time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0)))
    running = state == "running"
    module.exit_json(
        changed=False,
        state=state,
        unit=unit,
        exit=exit_record,
        fingerprint=launched_with,
        **_node_files(params, launched_with),
        idle_seconds=_idle_seconds(params, unit) if running else None,
        frozen=_frozen(unit) if running else [],
    )


if __name__ == "__main__":
    main()
