# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""A fine-tune job launched through Slurm, in the states the collection's job logic knows (pure
functions).

finetune_job_status reads a node's part of a job as one state (jobstate.node_state: running,
succeeded, stale, failed, absent), which the finetune role's plan (jobstate.plan_launch: never a
second launch of a job that runs) and the watch (jobstate.watch_decision) combine across the nodes.
Under Slurm the job is one batch job for every node, known by the id ``sbatch --parsable`` printed;
squeue and sacct say where it stands (slurm.job_status), and each node's wrapper writes the same exit
record as the systemd unit's ExecStopPost (``result= code= status= at=``). These functions map the
one onto the other:

- pending (PENDING, REQUEUED, ..., waiting for an allocation) is ``running``: the job is submitted
  and must not be submitted again; ``slurm.phase`` says ``pending`` with Slurm's reason, which the
  watch prints, and a pending job reports no idle time, so it never counts as stalled;
- active (RUNNING, COMPLETING, CONFIGURING, SUSPENDED, ...) is ``running``, as systemd's active,
  activating and deactivating are;
- finished: a job Slurm says did not succeed (FAILED, CANCELLED, TIMEOUT, NODE_FAIL,
  OUT_OF_MEMORY, PREEMPTED, BOOT_FAIL, DEADLINE, or COMPLETED with a failed step) is ``failed``,
  Slurm's account of it among the errors; a job that succeeded is what this node's exit record says,
  as for a systemd unit that ended (succeeded, stale or failed), and ``failed`` without a record
  (the wrapper was killed before it could write one, or never ran on this node);
- no job id (never submitted) or a job neither squeue nor sacct knows (purged) is what the exit
  record says, as for a unit that is not active: ``absent`` without one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import node_state
from ansible_collections.instinct.finetune.plugins.module_utils.slurm import SlurmError

# What a systemd unit that is not active reads as: node_state then decides from the exit record.
_ENDED = {"ActiveState": "inactive"}
# The keys of job_status that finetune_job_status returns under ``slurm``.
SUMMARY_KEYS = (
    "job_id",
    "state",
    "phase",
    "reason",
    "held",
    "cancelled_by",
    "exit_code",
    "signal",
    "failed_steps",
    "hosts",
    "elapsed_s",
    "source",
    "message",
)


def slurm_summary(status, cluster=None, id_file=""):
    """What finetune_job_status returns under ``slurm``: job_status's view of the job (None: no job
    id in ``id_file``, never submitted) with the cluster sbatch named."""
    if status is None:
        summary = {key: None for key in SUMMARY_KEYS}
        summary.update(held=False, phase="unknown", failed_steps=[], hosts=[], cluster=None,
                       message=f"no Slurm job id in {id_file}: the job was never submitted from this node")  # fmt: skip
        return summary
    summary = {key: status.get(key) for key in SUMMARY_KEYS}
    summary["cluster"] = cluster
    return summary


def slurm_node_state(status, exit_record, fingerprint_on_node, fingerprint_wanted):
    """One node's state from Slurm's view of the job (slurm.job_status, or None when no job id was
    recorded) and this node's exit record, as ``(state, problem)``: ``problem`` is Slurm's account of
    a job that did not end well, for the result's errors ("" otherwise). Raises SlurmError for a
    state Slurm names that this collection does not know (neither pending, active nor finished)."""
    if status is None or status.get("state") is None:
        state = node_state(_ENDED, exit_record, fingerprint_on_node, fingerprint_wanted)
        problem = status["message"] if status is not None and state in ("failed", "absent") else ""
        return state, problem
    phase = status.get("phase")
    if phase in ("pending", "active"):
        return "running", ""
    if phase != "finished":
        raise SlurmError(f"Slurm job {status['job_id']} is {status['state']}, a state this collection does not know")
    if not status.get("success"):
        return "failed", status["message"]
    if exit_record is None:
        return "failed", f"{status['message']}, but this node's rank left no exit record"
    state = node_state(_ENDED, exit_record, fingerprint_on_node, fingerprint_wanted)
    return state, ""


def pending_label(slurm):
    """How the watch's progress line says a rank's job waits for an allocation: ``pending
    (Resources)``, ``pending (REQUEUE_HOLD, JobHeldUser)``, ``pending (BeginTime), held`` (a held job
    whose reason does not say so); "" when the job is not pending (or ``slurm`` is not Slurm's view)."""
    if not isinstance(slurm, dict) or slurm.get("phase") != "pending":
        return ""
    words = [slurm["state"]] if slurm.get("state") not in (None, "PENDING") else []
    if slurm.get("reason"):
        words.append(slurm["reason"])
    label = f"pending ({', '.join(words)})" if words else "pending"
    if slurm.get("held") and "held" not in label.lower():
        label += ", held"
    return label


def pending_lines(lines, ranks, reports, slurm_by_host):
    """jobstate.watch_decision's progress lines (``rank N HOST: running, ...``) with a pending
    rank's ``running`` replaced by pending_label: ``rank 0 node1: pending (Resources), no step
    logged yet``. ``reports`` holds each rank's board report (only a rank the board has as running is
    relabelled), ``slurm_by_host`` each rank's last ``slurm`` result."""
    shown = []
    for rank, (host, line) in enumerate(zip(ranks, lines, strict=True)):
        label = pending_label(slurm_by_host.get(host))
        prefix = f"rank {rank} {host}: running, "
        if label and (reports.get(host) or {}).get("state") == "running" and line.startswith(prefix):
            shown.append(f"rank {rank} {host}: {label}, {line[len(prefix) :]}")
        else:
            shown.append(line)
    return shown
