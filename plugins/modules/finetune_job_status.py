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
  - Never changes anything on the host.
options:
  unit:
    description: The systemd unit of the job on this node.
    type: str
    required: true
  exit_file:
    description: The file the unit's C(ExecStopPost) writes (C(result= code= status=)).
    type: path
    required: true
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
    type: int
    default: 0
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.fabric_iface
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
"""

RETURN = r"""
state:
  description:
    - C(running) while the unit is active; C(succeeded) once it exited 0 with the wanted settings;
      C(stale) if it exited 0 with other settings; C(failed) if it ended otherwise; C(absent) if it
      never ran.
  returned: always
  type: str
  sample: running
unit:
  description: The unit's ActiveState, SubState, Result, ExecMainStatus and MainPID.
  returned: always
  type: dict
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
  returned: always
  type: list
  elements: str
  sample: ["[rank1]: PermissionError: [Errno 13] Permission denied: '/var/lib/instinct-finetune/hf-home'"]
"""

import os
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

POLL_SECONDS = 2
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
    started = None
    try:
        since_boot = int(unit.get("ActiveEnterTimestampMonotonic") or 0) / 1e6
    except ValueError:
        since_boot = 0
    if since_boot:
        started = time.time() - (time.monotonic() - since_boot)
    return idle_seconds(time.time(), ranks, started)


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


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
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
        supports_check_mode=True,
    )
    params = module.params
    deadline = time.monotonic() + max(params["wait_seconds"], 0)
    while True:
        unit, exit_record, launched_with = _read_unit(module)
        state = node_state(unit, exit_record, launched_with, params["fingerprint"])
        if state != "running" or time.monotonic() >= deadline:
            break
        time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0)))
    trainer_log = _read(os.path.join(params["output_dir"], "trainer_log.jsonl"))
    running = state == "running"
    history = _read(params["history_file"]) if params["history_file"] else None
    module.exit_json(
        changed=False,
        state=state,
        unit=unit,
        exit=exit_record,
        fingerprint=launched_with,
        launched_settings=launched_settings(history, launched_with),
        progress=progress(parse_trainer_log(trainer_log)),
        checkpoints=checkpoints(_checkpoint_listing(params["output_dir"])),
        log_tail=_tail(params["log_path"], params["tail_lines"]),
        errors=root_errors(_tail(params["log_path"], 2000)),
        idle_seconds=_idle_seconds(params, unit) if running else None,
        frozen=_frozen(unit) if running else [],
    )


if __name__ == "__main__":
    main()
