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


def launch_record(fingerprint, world_size=None, dataset_sha1=""):
    """What the fingerprint file of a launch says: the settings' fingerprint, then what else makes its
    checkpoints loadable, as ``key=value`` words (``ab12... world_size=16 dataset_sha1=9f...``)."""
    words = [fingerprint]
    if world_size:
        words.append(f"world_size={int(world_size)}")
    if dataset_sha1:
        words.append(f"dataset_sha1={dataset_sha1}")
    return " ".join(words)


def parse_launch_record(text):
    """A fingerprint file as (fingerprint, {key: value}); a file of an earlier release holds the
    fingerprint only."""
    words = (text or "").split()
    if not words:
        return "", {}
    return words[0], dict(word.split("=", 1) for word in words[1:] if "=" in word)


def record_differences(on_node, wanted):
    """The parts of two launch records that differ, as {part: (on node, wanted)}; a part one of them
    lacks (a launch of an earlier release) is not a difference."""
    node_fp, node_parts = parse_launch_record(on_node)
    want_fp, want_parts = parse_launch_record(wanted)
    found = {}
    if node_fp and want_fp and node_fp != want_fp:
        found["settings"] = (node_fp, want_fp)
    for key in sorted(set(node_parts) & set(want_parts)):
        if node_parts[key] != want_parts[key]:
            found[key] = (node_parts[key], want_parts[key])
    return found


def node_state(unit, exit_record, fingerprint_on_node, fingerprint_wanted):
    """One node's state: running, succeeded, failed, stale (finished with other settings) or absent."""
    active = (unit or {}).get("ActiveState", "inactive")
    if active in ("active", "activating", "reloading", "deactivating"):
        return "running"
    if exit_record is None:
        return "absent"
    if exit_record.get("result") == "success" and exit_record.get("status", "0") == "0":
        if fingerprint_wanted and fingerprint_on_node and record_differences(fingerprint_on_node, fingerprint_wanted):
            return "stale"
        return "succeeded"
    return "failed"


def settings_differences(launched, wanted):
    """The training settings of two launches that differ, as [(setting, then, now)] by name; a
    setting one of them lacks reads None. Both are ``jobspec.fingerprinted_settings`` mappings."""
    launched, wanted = launched or {}, wanted or {}
    return [
        (key, launched.get(key), wanted.get(key))
        for key in sorted(set(launched) | set(wanted))
        if launched.get(key) != wanted.get(key)
    ]


def _shown(value):
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# A refusal names this many changed settings, then how many more there are.
SHOWN_SETTINGS = 6


def settings_change(launched, wanted, fingerprints=("", "")):
    """In words, what changed between the settings a job's checkpoints were saved with and this
    run's: ``learning_rate 0.005 (now 0.001), lora_rank 8 (now 16)``. Without the settings of the
    launch (a launch of an earlier release kept only their fingerprint), the two fingerprints."""
    found = settings_differences(launched, wanted) if launched and wanted else []
    if not found:
        then, now = fingerprints
        return f"settings fingerprint {then} (now {now})"
    words = [f"{key} {_shown(old)} (now {_shown(new)})" for key, old, new in found[:SHOWN_SETTINGS]]
    if len(found) > SHOWN_SETTINGS:
        words.append(f"and {len(found) - SHOWN_SETTINGS} more")
    return ", ".join(words)


def launched_settings(history_text, record):
    """The training settings of the launch whose record is ``record`` (a node's fingerprint file),
    from the job's launch history (one JSON object a line, appended at every launch; see the finetune
    role's launch step): the last entry of the same settings' fingerprint. Empty when the history has
    none (a job launched by an earlier release); torn or foreign lines are skipped."""
    fingerprint, _parts = parse_launch_record(record)
    if not fingerprint:
        return {}
    for raw in reversed((history_text or "").splitlines()):
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("settings"), dict):
            continue
        if parse_launch_record(str(entry.get("record", "")))[0] == fingerprint:
            return entry["settings"]
    return {}


def _plan(action, reason, **details):
    """A plan: ``fix`` says what lifts a refusal (``rename``: a new job name, or the job folder moved
    aside; ``force``: that, or ``finetune_resume: force``; ``wait``: the running job ended or
    stopped); ``forced`` names the settings a forced resume changed."""
    return {"action": action, "resume_step": None, "stop": [], "reason": reason, "fix": "", "forced": "", **details}


def plan_launch(statuses, ranks, wanted="", settings=None, force=False):
    """What to do with a job, given every node's status, rank order first.

    Returns {action, resume_step, reason, stop, fix, forced}: ``skip`` when every node finished this
    exact job, ``attach`` when every node runs it, ``refuse`` when it finished with other settings,
    runs with other settings, or its checkpoints were saved with other ones, and ``launch``
    otherwise, resuming from the newest checkpoint that is complete on every node. ``stop`` lists the
    nodes whose rank must be stopped first (a half-running job cannot continue).

    ``wanted`` is this run's launch record and ``settings`` its training settings (they name what
    changed). Checkpoints saved with other training settings are resumed only with ``force``
    (``finetune_resume: force``), and the plan's ``forced`` then says what changed; checkpoints of
    another world size or dataset cannot load, whatever ``force`` says.
    """
    states = {host: statuses[host]["state"] for host in ranks}

    def change(host):
        on_node = statuses[host].get("fingerprint", "")
        return settings_change(statuses[host].get("launched_settings"), settings,
                               (parse_launch_record(on_node)[0], parse_launch_record(wanted)[0]))  # fmt: skip

    if all(state == "succeeded" for state in states.values()):
        return _plan("skip", "finished on every node")
    if any(state == "stale" for state in states.values()):
        stale = sorted(host for host, state in states.items() if state == "stale")
        what = f": {change(stale[0])}" if settings and statuses[stale[0]].get("launched_settings") else ""
        return _plan("refuse", f"finished with other settings on {', '.join(stale)}{what}", fix="rename")
    if all(state == "running" for state in states.values()):
        # Attaching would rewrite the running job's files and record with settings it does not train
        # with, and its end would then read as another job's.
        for host in ranks:
            differ = record_differences(statuses[host].get("fingerprint", ""), wanted) if wanted else {}
            if differ:
                return _plan("refuse", f"it runs on {host} with other settings: {_differences(differ, change(host))}",
                             fix="wait")  # fmt: skip
        return _plan("attach", "running on every node")
    forced = ""
    # Checkpoints saved at another world size (ZeRO-3's and FSDP's optimizer partitions, the data
    # order) or on another dataset cannot be resumed; with other training settings (a model, a LoRA
    # rank, a learning rate...) they are resumed only when the operator forces it. Refused before
    # anything changes.
    for host in ranks if wanted else ():
        if not statuses[host].get("checkpoints"):
            continue
        differ = record_differences(statuses[host].get("fingerprint", ""), wanted)
        moved = {key: value for key, value in differ.items() if key != "settings"}
        if moved or ("settings" in differ and not force):
            return _plan("refuse", f"its checkpoints on {host} were saved with {_differences(differ, change(host))}",
                         fix="rename" if moved else "force")  # fmt: skip
        if "settings" in differ and not forced:
            forced = f"its checkpoints on {host} were saved with other training settings: {change(host)}"
    stop = [host for host in ranks if states[host] == "running"]
    common = None
    for host in ranks:
        steps = {c["step"] for c in statuses[host].get("checkpoints", []) if c["complete"]}
        common = steps if common is None else common & steps
    resume = max(common) if common else None
    reason = f"resume from checkpoint-{resume}" if resume is not None else "start"
    if forced:
        reason += f", forced (finetune_resume: force): {forced}"
    return _plan("launch", reason, resume_step=resume, stop=stop, forced=forced)


def _differences(differ, settings_text):
    """What differs between two launch records in words, the training settings last."""
    words = [f"{key} {old} (now {new})" for key, (old, new) in differ.items() if key != "settings"]
    if "settings" in differ:
        words.append(f"other training settings: {settings_text}")
    return " and ".join(words)


# --- One job at a time on a node (issue 32) -----------------------------------------------------


def other_jobs(running, job):
    """The jobs other than ``job`` whose unit runs on the given nodes, as {job: [nodes]}, from each
    node's running job names (the running_jobs module's ``jobs``), in the nodes' order."""
    found = {}
    for host, names in running.items():
        for name in names or ():
            if name != job:
                found.setdefault(name, []).append(host)
    return found


def other_jobs_problem(running, job, host="", runbook="docs/runbooks/finetune-job.md"):
    """Why ``job`` may not start while other jobs train on its nodes ("" when none does): their ranks
    hold the nodes' GPUs and the rendezvous port. Running the same job again re-attaches to it, so
    only other names count."""
    others = other_jobs(running, job)
    if not others:
        return ""
    where = f"{host}: " if host else ""
    training = "; ".join(f"job {name} is training on {', '.join(hosts)} (unit instinct-finetune-{name}.service)"
                         for name, hosts in sorted(others.items()))  # fmt: skip
    return (
        f"{where}job {job} is refused before any change: {training}. A second job on the same nodes would "
        "compete with it for their GPUs and the master port. Let it end (running finetune.yml with its own "
        "job file re-attaches to it and watches it), stop it on every node (systemctl stop "
        "instinct-finetune-<job>.service: its checkpoints stay, and running its job again resumes from "
        f"them), or run job {job} on other nodes (--limit). See {runbook}"
    )


def round_summary(statuses, ranks):
    """After a watch round: which ranks failed, which still run, and one progress line per node.

    A ``lost`` rank (its node stopped answering the watch, see ``watch_entry``) counts as failed."""
    failed = [host for host in ranks if statuses[host]["state"] in ("failed", "absent", "lost")]
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


# --- Watching a running job (issue 17) ----------------------------------------------------------

# One sample line of a rank's progress file, rank<N>.prom (written by the launcher's progress export).
_SAMPLE = re.compile(r"^(instinct_finetune_\w+)(?:\{[^}]*\})?\s+(\S+)\s*$")


def parse_rank_progress(text):
    """A rank's ``rank<N>.prom`` as {metric name: value}; comments and malformed lines are skipped."""
    samples = {}
    for line in (text or "").splitlines():
        match = _SAMPLE.match(line.strip())
        if not match:
            continue
        try:
            samples[match.group(1)] = float(match.group(2))
        except ValueError:
            continue
    return samples


def idle_seconds(now, ranks_progress, active_since):
    """Seconds since any rank of this node last took an optimizer step, on the node's own clock.

    ``ranks_progress`` holds each local rank's parsed progress file; before a rank wrote one (model
    loading, dataset preprocessing) the unit's start counts. None when neither is known.
    """
    marks = [p["instinct_finetune_last_step_timestamp_seconds"] for p in ranks_progress
             if p.get("instinct_finetune_last_step_timestamp_seconds")]  # fmt: skip
    if active_since:
        marks.append(active_since)
    if not marks:
        return None
    return max(0.0, now - max(marks))


def process_state(stat_text):
    """The state letter of ``/proc/<pid>/stat`` (R, S, D, T, t, Z, ...), or None."""
    # The command name is in parentheses and may itself hold spaces or parentheses.
    _command, sep, tail = (stat_text or "").rpartition(")")
    fields = tail.split()
    return fields[0] if sep and fields else None


def watch_round(board, ranks, stall_seconds=0):
    """One watch round over what every node last reported (``board``: host -> its report).

    A report holds the node's ``state``, ``progress``, ``exit``, ``idle_seconds`` (since its ranks'
    last step) and ``frozen`` (its training processes stopped by a signal). A node without a report
    yet counts as ``starting``. The job is stalled when every rank runs and none took a step for
    ``stall_seconds`` (0: never); the suspects are the nodes with a frozen process, else those idle
    longest. Returns the ranks that failed (the first to end first), those running, the stall,
    whether the job is over, and one progress line per node.
    """
    reports = {host: board.get(host) or {"state": "starting"} for host in ranks}
    summary = round_summary(reports, ranks)
    stall = None
    idles = [reports[host].get("idle_seconds") for host in ranks]
    if (stall_seconds and ranks and len(summary["running"]) == len(ranks)
            and all(idle is not None for idle in idles) and min(idles) >= stall_seconds):  # fmt: skip
        frozen = [host for host in ranks if reports[host].get("frozen")]
        longest = max(idles)
        suspects = frozen or [host for host in ranks if reports[host]["idle_seconds"] == longest]
        steps = [(reports[host].get("progress") or {}).get("current_steps") or 0 for host in ranks]
        stall = {
            "idle_seconds": min(idles),
            "step": max(steps),
            "suspects": suspects,
            "frozen": {host: reports[host]["frozen"] for host in frozen},
        }
    summary["stall"] = stall
    return summary


# --- Watching every rank from one task (issue 31) -----------------------------------------------

# What the watch keeps of a rank's read each round: all that a round's decision needs.
REPORT_KEYS = ("state", "progress", "exit", "idle_seconds", "frozen")


def read_failure(read):
    """Why a read of a rank gave no report: ``unreachable`` (no connection to its node), ``failed``
    (the module failed on it), or "" when it gave one."""
    if read.get("unreachable"):
        return "unreachable"
    if read.get("failed"):
        return "failed"
    return ""


def watch_entry(previous, read, now, since, lost_after):
    """A rank's entry on the watch's board after this round's read of it, on the controller's clock.

    A good read replaces the rank's report. A read that failed keeps the last report and says why
    (``error``), so that a node that misses a round is not taken for a dead rank. A rank without a
    good read for more than ``lost_after`` seconds (since its last one, or since the watch began at
    ``since``) is ``lost``: the job cannot go on without it, as with a rank that died, and its last
    report's progress stays for the progress line. A good read later gives its real state again.
    """
    why = read_failure(read)
    if not why:
        return {"report": {key: read.get(key) for key in REPORT_KEYS}, "seen": now, "error": ""}
    previous = previous or {"report": None, "seen": since}
    report = previous["report"]
    if now - previous["seen"] > lost_after:
        report = dict(report or {}, state="lost")
    return {"report": report, "seen": previous["seen"], "error": f"{why}: {read.get('msg') or 'no answer'}"}


def first_read_failure(board, reads, ranks):
    """The first rank (rank order) whose module failed before any read of it succeeded, as
    (host, message); None when there is none. A module that fails on a node the watch never read is a
    setting or install fault, not a lost node, and waiting would only end in stopping the job."""
    for host in ranks:
        read = reads.get(host) or {}
        if read_failure(read) == "failed" and not (board.get(host) or {}).get("report"):
            return host, read.get("msg") or "no message"
    return None


def watch_waiter(ranks, board):
    """The rank whose read waits out the round (finetune_job_status's ``wait_seconds``, which returns
    as soon as that rank ends): the first in rank order that runs and answered its last read; the
    master before the first round. None when no running rank answers: the round sleeps instead, so
    that rounds keep their interval while the nodes that run do not answer."""
    if not board:
        return ranks[0] if ranks else None
    for host in ranks:
        entry = board.get(host) or {}
        if not entry.get("error") and (entry.get("report") or {}).get("state") == "running":
            return host
    return None


def watch_decision(board, ranks, stall_seconds, stall=None):
    """One watch round over every rank's board entry (``watch_entry``): ``watch_round`` of their
    reports, with ``stall`` the stall of an earlier round (once seen it holds: the ranks stopped for it
    then read as failed), ``stop`` the running ranks to stop now (on a stall or a failed or lost rank:
    the others would wait in their next collective until ``ddp_timeout``; a rank that did not answer
    is stopped once it answers, or counts as lost), ``over`` whether no rank runs any more, and one
    line per rank, naming why a rank was not read this round."""
    reports = {host: entry["report"] for host, entry in board.items() if entry.get("report")}
    summary = watch_round(reports, ranks, stall_seconds)
    stall = stall or summary["stall"]
    errors = {host: (board.get(host) or {}).get("error") for host in ranks}
    stop = []
    if stall or summary["failed"]:
        stop = [host for host in summary["running"] if not errors[host]]
    lines = [
        line + (f" (not read this round: {errors[ranks[rank]]})" if errors[ranks[rank]] else "")
        for rank, line in enumerate(summary["lines"])
    ]
    return dict(summary, stall=stall, stop=stop, over=not summary["running"], lines=lines)


def stall_message(stall, job, stall_seconds, now_text=""):
    """What the play says when it stopped a stalled job."""
    frozen = "; ".join(
        f"{host}: process {', '.join(pids)} stopped by a signal" for host, pids in stall["frozen"].items()
    )
    minutes = stall["idle_seconds"] / 60
    return (
        f"job {job} stalled: every rank runs but none took a step for {minutes:.1f} minutes "
        f"(finetune_stall_minutes {stall_seconds / 60:g}); the last step was {stall['step']}"
        f"{' at ' + now_text if now_text else ''}. Suspect: {', '.join(stall['suspects'])}"
        f"{' (' + frozen + ')' if frozen else ''}. Every rank was stopped; its checkpoints stay, and running "
        "the playbook again resumes from the last one."
    )


# States in which systemd still holds a job unit's processes.
_LIVE = ("active", "activating", "deactivating", "reloading")


def running_job_names(units):
    """The jobs whose unit (``instinct-finetune-JOB.service`` -> state) still runs, by name."""
    prefix, suffix = "instinct-finetune-", ".service"
    return sorted(
        unit[len(prefix) : -len(suffix)]
        for unit, state in units.items()
        if unit.startswith(prefix) and unit.endswith(suffix) and state in _LIVE
    )


def rank_order(hosts, master):
    """The nodes in rank order: the master first (its address is MASTER_ADDR), then the others in
    the play's order. The same on every run, so that each node keeps its node rank, and with it the
    checkpoint shards it saved, from one launch to the next."""
    hosts = [str(host) for host in hosts]
    if master not in hosts:
        raise ValueError(f"the master {master} is not among the play's hosts ({', '.join(hosts)})")
    return [master] + [host for host in hosts if host != master]
