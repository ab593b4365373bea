# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Where a fine-tune job stands, on one node and across the cluster (pure functions).

A node's part of a job is a systemd unit (so that it outlives the SSH session that started it),
the file its ExecStopPost writes when it ends, LLaMA-Factory's ``trainer_log.jsonl`` and the
``checkpoint-N`` folders. The module ``finetune_job_status`` reads them; these functions turn what
it read into a state, and the states of all nodes into one decision.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# The unit's ExecStartPre writes this line into the log at every launch.
LAUNCH_MARK = "==== instinct.finetune launch"


def parse_systemctl_show(text):
    """``systemctl show -p A -p B unit`` output as a dict of property: value."""
    properties = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            properties[key.strip()] = value.strip()
    return properties


def parse_exit_record(text):
    """The line ExecStopPost writes: ``result=<SERVICE_RESULT> code=<EXIT_CODE> status=<EXIT_STATUS> at=<epoch>``."""
    record = {}
    for word in (text or "").split():
        key, sep, value = word.partition("=")
        if sep:
            record[key] = value
    return record or None


def parse_trainer_log(text):
    """LLaMA-Factory's trainer_log.jsonl: every entry, in order; torn or foreign lines are skipped."""
    entries = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "current_steps" in entry:
            entries.append(entry)
    return entries


def progress(entries):
    """The latest step, the loss curve and the latest evaluation loss from trainer log entries."""
    last = entries[-1] if entries else {}
    losses = [[e["current_steps"], e["loss"]] for e in entries if e.get("loss") is not None]
    evals = [[e["current_steps"], e["eval_loss"]] for e in entries if e.get("eval_loss") is not None]
    return {
        "current_steps": last.get("current_steps", 0),
        "total_steps": last.get("total_steps"),
        "percentage": last.get("percentage"),
        "loss": losses[-1][1] if losses else None,
        "eval_loss": evals[-1][1] if evals else None,
        "elapsed_time": last.get("elapsed_time"),
        "remaining_time": last.get("remaining_time"),
        "losses": losses,
    }


def checkpoints(entries):
    """``checkpoint-N`` folders as [{name, step, complete}], by step.

    ``entries`` maps a folder name to the names of the files in it. A checkpoint is complete once the
    Trainer wrote ``trainer_state.json``, its last file; a folder without it was cut off mid-save.
    """
    found = []
    for name, files in entries.items():
        match = CHECKPOINT.match(name)
        if match:
            found.append({"name": name, "step": int(match.group(1)), "complete": "trainer_state.json" in files})
    return sorted(found, key=lambda c: c["step"])


def node_state(unit, exit_record, fingerprint_on_node, fingerprint_wanted):
    """One node's state: running, succeeded, failed, stale (finished with other settings) or absent."""
    active = (unit or {}).get("ActiveState", "inactive")
    if active in ("active", "activating", "reloading", "deactivating"):
        return "running"
    if exit_record is None:
        return "absent"
    if exit_record.get("result") == "success" and exit_record.get("status", "0") == "0":
        if fingerprint_wanted and fingerprint_on_node and fingerprint_on_node != fingerprint_wanted:
            return "stale"
        return "succeeded"
    return "failed"


def plan_launch(statuses, ranks):
    """What to do with a job, given every node's status, rank order first.

    Returns {action, resume_step, reason, stop}: ``skip`` when every node finished this exact job,
    ``attach`` when every node runs it, ``refuse`` when it finished with other settings, and
    ``launch`` otherwise, resuming from the newest checkpoint that is complete on every node.
    ``stop`` lists the nodes whose rank must be stopped first (a half-running job cannot continue).
    """
    states = {host: statuses[host]["state"] for host in ranks}
    if all(state == "succeeded" for state in states.values()):
        return {"action": "skip", "resume_step": None, "stop": [], "reason": "finished on every node"}
    if any(state == "stale" for state in states.values()):
        stale = sorted(host for host, state in states.items() if state == "stale")
        return {
            "action": "refuse",
            "resume_step": None,
            "stop": [],
            "reason": f"finished with other settings on {', '.join(stale)}",
        }
    if all(state == "running" for state in states.values()):
        return {"action": "attach", "resume_step": None, "stop": [], "reason": "running on every node"}
    stop = [host for host in ranks if states[host] == "running"]
    common = None
    for host in ranks:
        steps = {c["step"] for c in statuses[host].get("checkpoints", []) if c["complete"]}
        common = steps if common is None else common & steps
    resume = max(common) if common else None
    reason = f"resume from checkpoint-{resume}" if resume is not None else "start"
    return {"action": "launch", "resume_step": resume, "stop": stop, "reason": reason}


def round_summary(statuses, ranks):
    """After a watch round: which ranks failed, which still run, and one progress line per node."""
    failed = [host for host in ranks if statuses[host]["state"] in ("failed", "absent")]
    # The rank that ended first is the cause; the others mostly died of losing it.
    failed.sort(key=lambda host: _ended_at(statuses[host]))
    running = [host for host in ranks if statuses[host]["state"] == "running"]
    lines = []
    for rank, host in enumerate(ranks):
        status = statuses[host]
        lines.append(f"rank {rank} {host}: {status['state']}, {progress_line(status.get('progress') or {})}")
    return {"failed": failed, "running": running, "done": not running, "lines": lines}


# The launchers' wrappers around the real error: torchrun's and LLaMA-Factory's.
_WRAPPERS = ("ChildFailedError", "CalledProcessError")
_ERROR = re.compile(r"^(\[rank\d+\]:\s*)?([\w.]+(Error|Exception)|RuntimeError|torch\.\S+Error)\b.*")


def root_errors(lines, limit=3):
    """The last error lines of a training log's last launch, without the launchers' wrappers around them."""
    starts = [i for i, line in enumerate(lines) if line.startswith(LAUNCH_MARK)]
    if starts:
        lines = lines[starts[-1] :]
    found = [line.strip() for line in lines if _ERROR.match(line.strip()) and not any(w in line for w in _WRAPPERS)]
    return found[-limit:]


def _ended_at(status):
    try:
        return float((status.get("exit") or {}).get("at", "inf"))
    except ValueError:
        return float("inf")


def progress_line(prog):
    """'step 12/40 (30.0%), loss 2.310, eval loss 2.402, elapsed 0:01:02, left 0:02:10'."""
    if not prog or not prog.get("total_steps"):
        return "no step logged yet"
    parts = [f"step {prog['current_steps']}/{prog['total_steps']}"]
    if prog.get("percentage") is not None:
        parts[0] += f" ({prog['percentage']}%)"
    if prog.get("loss") is not None:
        parts.append(f"loss {prog['loss']:.3f}")
    if prog.get("eval_loss") is not None:
        parts.append(f"eval loss {prog['eval_loss']:.3f}")
    if prog.get("elapsed_time"):
        parts.append(f"elapsed {prog['elapsed_time']}")
    if prog.get("remaining_time"):
        parts.append(f"left {prog['remaining_time']}")
    return ", ".join(parts)
