# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Slurm, read and written: the queue (``squeue``), the accounting record (``sacct``) and the nodes
(``sinfo``) as the collection asks for them, the batch script that runs a fine-tune through
``sbatch``/``srun``, and ``slurm.conf``, ``gres.conf`` and ``cgroup.conf`` for a cluster that has no
scheduler yet. Pure functions: a module, an action plugin or a filter runs the commands.

The commands the collection runs (each built here, so that command and parser have one source):

- ``squeue --jobs=ID --noheader --states=all --format=%i|%T|%r|%D|%N|%M|%l|%j`` (the job while
  Slurm's controller still holds it: PENDING with its reason, RUNNING, COMPLETING...). The job name
  is last: it is the only free text, so a ``|`` in it cannot shift the other fields.
- ``sacct --jobs=ID --parsable2 --format=JobID,JobName,State,ExitCode,...`` with its header (the
  record after the job left the controller, with every step and exit code; the header names the
  columns, so a recording with any field list reads the same way).
- ``sinfo --Node --noheader --format=%N|%P|%T|%c|%m|%G|%E`` (one line per node and partition; the
  reason last, as it is free text).
- ``squeue --all --noheader --name=N --user=U --states=... --format=%i|%j`` then ``scancel --name=N
  --user=U ID...`` (a cancel: what it ends is read first, as scancel's filters match nothing
  without a word).

``--json`` exists for all three since Slurm 21.08, but its schema changes with every release (data
parser v0.0.37 in 21.08, v0.0.38 in 22.05, ...), while a site's own Slurm may be any version; the
``%`` formats and ``--parsable2`` have been stable for a decade. The tables people paste (plain
``squeue``, ``squeue -l``, ``sinfo``, ``sinfo -N -l``) are read too: they are what public recordings
show (tests/fixtures/slurm/SOURCES.md).

Sources, Slurm 21.08 (Ubuntu 22.04's slurm-wlm 21.08.5), read at the SchedMD/slurm tag
``slurm-21-08-5-1``: squeue(1), sacct(1), sinfo(1), sbatch(1), srun(1) (``doc/man/man1``),
slurm.conf(5), gres.conf(5), cgroup.conf(5) (``doc/man/man5``), ``RELEASE_NOTES`` of 22.05 ("Added
support for Cgroup Version 2"), ``src/sbatch/opt.c`` (how ``#SBATCH`` lines are split) and
``src/common/slurm_protocol_defs.c`` (node state names); online, slurm.schedmd.com/archive/slurm-21.08.8/.
"""

from __future__ import absolute_import, division, print_function

import re
import shlex

__metaclass__ = type


class SlurmError(ValueError):
    """A Slurm output this collection cannot read, or a description it cannot turn into Slurm's."""


# --- host lists ----------------------------------------------------------------------------------
# Slurm's hostlist syntax (scontrol(1) "show hostnames"): comma (or space) separated names, each
# with bracketed ranges "node[01-03,07]"; a range keeps the width of its lower bound ("x[001-3]" is
# x001 x002 x003), several brackets multiply ("a[1-2]b[3-4]"). Checked against scontrol 22.05.8.

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_outside_brackets(text):
    items, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SlurmError(f"unbalanced ']' in the host list {text!r}")
        if depth == 0 and (char == "," or char.isspace()):
            if current:
                items.append("".join(current))
            current = []
            continue
        current.append(char)
    if depth:
        raise SlurmError(f"unbalanced '[' in the host list {text!r}")
    if current:
        items.append("".join(current))
    return items


def _expand_ranges(body, text):
    numbers = []
    for part in body.split(","):
        found = _RANGE.match(part.strip())
        if not found:
            raise SlurmError(f"the range {part!r} in the host list {text!r} is not a number or N-M")
        low, high = found.group(1), found.group(2)
        width = len(low)
        if high is None:
            numbers.append(low)
            continue
        if int(high) < int(low):
            raise SlurmError(f"the range {part!r} in the host list {text!r} runs backwards")
        numbers.extend(str(value).zfill(width) for value in range(int(low), int(high) + 1))
    return numbers


def _expand_one(item, text):
    names = [""]
    rest = item
    while rest:
        start = rest.find("[")
        if start < 0:
            names = [name + rest for name in names]
            break
        end = rest.find("]", start)
        prefix, body, rest = rest[:start], rest[start + 1 : end], rest[end + 1 :]
        numbers = _expand_ranges(body, text)
        names = [name + prefix + number for name in names for number in numbers]
    return names


def expand_hostlist(text):
    """Slurm's host list as names, in its order (``scontrol show hostnames``): ``node[01-03,07]`` is
    node01 node02 node03 node07. An empty list, ``(null)``, ``None`` and ``None assigned`` are no
    host. Raises SlurmError for an unbalanced bracket or a range that is not N-M."""
    text = "" if text is None else str(text).strip()
    if text in ("", "(null)", "None", "None assigned", "N/A"):
        return []
    names = []
    for item in _split_outside_brackets(text):
        names.extend(_expand_one(item, text))
    return names


_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def _ranges(numbers, width):
    runs, start, previous = [], None, None
    for number in sorted(set(numbers)):
        if start is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            runs.append((start, previous))
        start = previous = number
    if start is not None:
        runs.append((start, previous))
    text = []
    for low, high in runs:
        low_text, high_text = str(low).zfill(width), str(high).zfill(width)
        text.append(low_text if low == high else f"{low_text}-{high_text}")
    return ",".join(text)


def compress_hostlist(names):
    """Names as one sorted Slurm host list without repeats (``scontrol show hostlistsorted``):
    node01 node02 node03 node07 is ``node[01-03,07]``. Only a trailing number is ranged; a
    zero-padded number keeps its width."""
    groups = {}
    plain = set()
    padded = set()
    parsed = []
    for raw in names:
        name = str(raw).strip()
        if not name or any(char in name for char in ",[] \t\n"):
            raise SlurmError(f"{name!r} cannot be a name in a Slurm host list")
        found = _TRAILING_NUMBER.match(name)
        if not found:
            plain.add(name)
            continue
        prefix, digits = found.group(1), found.group(2)
        parsed.append((prefix, digits))
        if len(digits) > 1 and digits.startswith("0"):
            padded.add((prefix, len(digits)))
    for prefix, digits in parsed:
        if len(digits) > 1 and digits.startswith("0"):
            width = len(digits)
        else:
            # A number without leading zeros fits a zero-padded range as wide as it or narrower.
            fits = [width for padded_prefix, width in padded if padded_prefix == prefix and width <= len(digits)]
            width = max(fits) if fits else 0
        groups.setdefault((prefix, width), set()).add(int(digits))
    by_prefix = {}
    for (prefix, width), numbers in groups.items():
        by_prefix.setdefault(prefix, []).append((width, numbers))
    items = [(name, name) for name in plain]
    for prefix, parts in by_prefix.items():
        parts.sort(key=lambda part: part[0])
        if sum(len(numbers) for _width, numbers in parts) == 1:
            width, numbers = parts[0]
            items.append((prefix, prefix + str(next(iter(numbers))).zfill(width)))
        else:
            ranges = ",".join(_ranges(numbers, width) for width, numbers in parts)
            items.append((prefix, f"{prefix}[{ranges}]"))
    return ",".join(text for _key, text in sorted(items))


# --- values ------------------------------------------------------------------------------------
_NO_TIME = ("", "UNLIMITED", "INFINITE", "INVALID", "N/A", "NONE", "PARTITION_LIMIT", "UNKNOWN")
_SECONDS = re.compile(r"^\d+(?:\.\d+)?$")


def parse_duration(text):
    """Seconds of a time as Slurm prints it: ``[[H:]M:]S`` or ``D-H[:M[:S]]`` (squeue's ``0:00``,
    ``1:46:03``, ``10-21:56:46``, sacct's ``00:20:53``, a limit's ``1-00:00:00``); None for
    UNLIMITED, N/A, Partition_Limit or an empty field."""
    text = "" if text is None else str(text).strip()
    if text.upper() in _NO_TIME:
        return None
    days, rest = 0, text
    if "-" in text:
        day_text, rest = text.split("-", 1)
        if not day_text.isdigit():
            raise SlurmError(f"{text!r} is not a Slurm time ([D-]HH:MM:SS)")
        days = int(day_text)
        parts = rest.split(":")
        parts += ["0"] * (3 - len(parts))
    else:
        parts = rest.split(":")
        parts = ["0"] * (3 - len(parts)) + parts
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or not _SECONDS.match(parts[2]):
        raise SlurmError(f"{text!r} is not a Slurm time ([D-]HH:MM:SS)")
    total = days * 86400 + int(parts[0]) * 3600 + int(parts[1]) * 60 + float(parts[2])
    return int(total) if total == int(total) else total


def parse_exit_code(text):
    """sacct's ``ExitCode`` ``code:signal`` (``137:0``, ``0:9``) as ``{"code", "signal"}``; None
    for an empty field."""
    text = "" if text is None else str(text).strip()
    if not text:
        return None
    found = re.match(r"^(\d+):(\d+)$", text)
    if not found:
        raise SlurmError(f"{text!r} is not a Slurm exit code (code:signal)")
    return {"code": int(found.group(1)), "signal": int(found.group(2))}


def _int(text, what):
    text = str(text).strip().rstrip("+")
    if not text.isdigit():
        raise SlurmError(f"{what} {text!r} is not a number")
    return int(text)


_GRES_MULTIPLIER = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def _split_outside_parens(text):
    items, depth, current = [], 0, []
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def parse_gres(text):
    """A node's or a job's generic resources as Slurm prints them (sinfo ``%G``, ``GresUsed``,
    scontrol ``Gres=``, TRES ``gres/gpu=4``): ``gpu:8``, ``gpu:mi300x:8(S:0-1)``,
    ``gpu:(null):4(IDX:0-3)``, ``gpu:1080ti:1(IDX:0),gpu:980gtx:1(IDX:1)``, ``(null)``. Returns
    ``[{"name", "type", "count", "detail"}]`` (type None when untyped, detail the text in
    parentheses: sockets ``S:0-1`` or indexes ``IDX:0-3``)."""
    text = "" if text is None else str(text).strip()
    if text in ("", "(null)", "N/A", "none"):
        return []
    entries = []
    for raw in _split_outside_parens(text):
        # The detail in parentheses follows the count: gpu:(null):4(IDX:0-3), gpu:2K(S:0-2023).
        found = re.match(r"^(.*[0-9KMGTP])\(([^()]*)\)$", raw)
        body, detail = (found.group(1), found.group(2)) if found else (raw, None)
        if body.startswith("gres/"):
            body = body[len("gres/") :]
        parts = body.replace("=", ":").split(":")
        name = parts[0]
        if not re.match(r"^[A-Za-z][\w.-]*$", name):
            raise SlurmError(f"{raw!r} in {text!r} is not a generic resource (name[:type]:count)")
        count = 1
        count_found = re.match(r"^(\d+)([KMGTP]?)$", parts[-1]) if len(parts) > 1 else None
        if count_found:
            count = int(count_found.group(1)) * _GRES_MULTIPLIER[count_found.group(2)]
            parts = parts[:-1]
        # What stays between the name and the count: the type, or flags such as no_consume.
        kinds = [part for part in parts[1:] if part not in ("no_consume", "(null)", "")]
        entries.append({"name": name, "type": kinds[0] if kinds else None, "count": count, "detail": detail})
    return entries


def gres_count(text, name="gpu"):
    """How many of one generic resource (GPUs by default) a GRES string holds, all types added."""
    return sum(entry["count"] for entry in parse_gres(text) if entry["name"] == name)


# --- job states ----------------------------------------------------------------------------------
# squeue(1) JOB STATE CODES, Slurm 21.08: compact code -> name.
JOB_STATE_CODES = {
    "BF": "BOOT_FAIL",
    "CA": "CANCELLED",
    "CD": "COMPLETED",
    "CF": "CONFIGURING",
    "CG": "COMPLETING",
    "DL": "DEADLINE",
    "F": "FAILED",
    "NF": "NODE_FAIL",
    "OOM": "OUT_OF_MEMORY",
    "PD": "PENDING",
    "PR": "PREEMPTED",
    "R": "RUNNING",
    "RD": "RESV_DEL_HOLD",
    "RF": "REQUEUE_FED",
    "RH": "REQUEUE_HOLD",
    "RQ": "REQUEUED",
    "RS": "RESIZING",
    "RV": "REVOKED",
    "SI": "SIGNALING",
    "SE": "SPECIAL_EXIT",
    "SO": "STAGE_OUT",
    "ST": "STOPPED",
    "S": "SUSPENDED",
    "TO": "TIMEOUT",
}
JOB_STATES = frozenset(JOB_STATE_CODES.values())
# Waiting for an allocation (again).
PENDING_STATES = frozenset(("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"))
# Holding an allocation: processes may run.
ACTIVE_STATES = frozenset(
    ("RUNNING", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "SUSPENDED")
)
# Over: nothing of the job runs any more.
FINISHED_STATES = frozenset(
    (
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    )
)


def job_state(text):
    """A job or step state as ``{"state", "cancelled_by"}``: the name (``PD`` is PENDING), and the
    uid sacct writes after a cancelled one (``CANCELLED by 1000``). A name a fixed-width table cut
    short (``OUT_OF_ME+``) is completed when only one state starts so; an unknown word is kept as
    it is, upper-cased."""
    words = str(text).strip().split()
    if not words:
        raise SlurmError("an empty job state")
    name = words[0].upper()
    cancelled_by = None
    if len(words) == 3 and words[1] == "by" and words[2].isdigit():
        cancelled_by = int(words[2])
    name = JOB_STATE_CODES.get(name, name)
    if name.endswith("+") and name not in JOB_STATES:
        candidates = sorted(state for state in JOB_STATES if state.startswith(name[:-1]))
        if len(candidates) == 1:
            name = candidates[0]
    return {"state": name, "cancelled_by": cancelled_by}


def job_phase(state):
    """``pending``, ``active`` (an allocation: running, completing, suspended...), ``finished`` or
    ``unknown``."""
    if state in PENDING_STATES:
        return "pending"
    if state in ACTIVE_STATES:
        return "active"
    if state in FINISHED_STATES:
        return "finished"
    return "unknown"


def _reason(text):
    text = "" if text is None else str(text).strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    return None if text in ("", "None", "none", "(null)") else text


def _held(state, reason):
    return state in ("REQUEUE_HOLD", "RESV_DEL_HOLD") or bool(
        reason and (reason.startswith("JobHeld") or reason.endswith("held"))
    )


_JOB_ID = re.compile(r"^\d+(?:_\d+)?(?:\+\d+)?$")


def _job_id(job_id):
    job_id = str(job_id).strip()
    if not _JOB_ID.match(job_id):
        raise SlurmError(f"{job_id!r} is not a Slurm job id (digits, optionally _array or +het)")
    return job_id


# --- squeue --------------------------------------------------------------------------------------
SQUEUE_FORMAT = "%i|%T|%r|%D|%N|%M|%l|%j"
# squeue(1) --format letters: key of the parsed job, header squeue prints for it.
_SQUEUE_LETTERS = {
    "i": ("job_id", "JOBID"),
    "A": ("job_id", "JOBID"),
    "T": ("state", "STATE"),
    "t": ("state", "ST"),
    "r": ("reason", "REASON"),
    "D": ("nodes", "NODES"),
    "N": ("nodelist", "NODELIST"),
    "R": ("nodelist_reason", "NODELIST(REASON)"),
    "M": ("time", "TIME"),
    "l": ("time_limit", "TIME_LIMIT"),
    "j": ("name", "NAME"),
    "P": ("partition", "PARTITION"),
    "u": ("user", "USER"),
}
# Headers of squeue's own tables (plain and -l) -> the same keys.
_SQUEUE_HEADERS = {header: key for key, header in _SQUEUE_LETTERS.values()}
_SQUEUE_HEADERS.update({"TIME_LIMI": "time_limit", "NAME": "name", "ST": "state", "STATE": "state"})


def _format_letters(fmt, table):
    letters = []
    for field in fmt.split("|"):
        found = re.match(r"^%\.?\d*([A-Za-z])$", field)
        if not found or found.group(1) not in table:
            raise SlurmError(f"{field!r} of the format {fmt!r} is not a field this parser reads")
        letters.append(found.group(1))
    return letters


def squeue_argv(job_id, squeue="squeue"):
    """The squeue command that reads one job in SQUEUE_FORMAT (every state, no header). It exits 1
    with "Invalid job id specified" once the controller forgot the job (MinJobAge): ask sacct."""
    return [squeue, f"--jobs={_job_id(job_id)}", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}"]


def _job_from_fields(fields):  # noqa: PLR0912 - one branch per squeue field, as a list of them
    job = {key: None for key in ("job_id", "name", "state", "cancelled_by", "phase", "reason", "held")}
    job.update({"nodes": None, "hosts": [], "elapsed_s": None, "time_limit_s": None, "partition": None, "user": None})
    for key, raw in fields.items():
        value = raw if key == "name" else raw.strip()
        if key == "job_id":
            job["job_id"] = value
        elif key == "state":
            job.update(job_state(value))
        elif key == "reason":
            job["reason"] = _reason(value)
        elif key == "nodes":
            job["nodes"] = _int(value, "the node count") if value else None
        elif key == "nodelist":
            job["hosts"] = expand_hostlist(value)
        elif key == "nodelist_reason":
            if value.startswith("("):
                job["reason"] = _reason(value)
            else:
                job["hosts"] = expand_hostlist(value)
        elif key == "time":
            job["elapsed_s"] = parse_duration(value)
        elif key == "time_limit":
            job["time_limit_s"] = parse_duration(value)
        elif key in ("name", "partition", "user"):
            job[key] = value
    if job["state"] is not None:
        job["phase"] = job_phase(job["state"])
        job["held"] = _held(job["state"], job["reason"])
    return job


def parse_squeue(text, fmt=SQUEUE_FORMAT):
    """squeue's output in a ``|``-separated ``--format`` (SQUEUE_FORMAT by default): one job a line,
    as ``{"job_id", "name", "state", "cancelled_by", "phase", "reason", "held", "nodes", "hosts",
    "elapsed_s", "time_limit_s", "partition", "user"}`` (hosts expanded; reason None when Slurm
    says None). A header line, if the command printed one, is skipped."""
    letters = _format_letters(fmt, _SQUEUE_LETTERS)
    header = "|".join(_SQUEUE_LETTERS[letter][1] for letter in letters)
    jobs = []
    for line in str(text).splitlines():
        if not line.strip() or line.strip() == header:
            continue
        values = line.split("|", len(letters) - 1)
        if len(values) != len(letters):
            raise SlurmError(f"a squeue line with {len(values)} of {len(letters)} fields ({fmt}): {line!r}")
        jobs.append(
            _job_from_fields({_SQUEUE_LETTERS[letter][0]: value for letter, value in zip(letters, values, strict=True)})
        )
    return jobs


def _table(text, first_header, what):
    """A whitespace-aligned table: the header line (the first that starts with first_header; a
    date line before it, as ``-l`` prints, is skipped), then rows split into as many fields as the
    header has, the last keeping its spaces."""
    lines = str(text).splitlines()
    for index, line in enumerate(lines):
        if line.split()[:1] == [first_header]:
            headers = line.split()
            rows = []
            for row in lines[index + 1 :]:
                if not row.strip():
                    continue
                values = row.split(None, len(headers) - 1)
                if len(values) != len(headers):
                    raise SlurmError(f"a {what} row with {len(values)} of {len(headers)} columns: {row!r}")
                rows.append(dict(zip(headers, [value.rstrip() for value in values], strict=True)))
            return rows
    raise SlurmError(f"no {what} header (a line starting with {first_header}) in the output")


def parse_squeue_table(text):
    """squeue's own tables, plain (``JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)``)
    or ``-l``: the same job dicts as parse_squeue. Names are cut to 8 characters there, and the
    reason is the last column in parentheses."""
    jobs = []
    for row in _table(text, "JOBID", "squeue"):
        fields = {}
        for header, value in row.items():
            if header in _SQUEUE_HEADERS:
                fields[_SQUEUE_HEADERS[header]] = value
        jobs.append(_job_from_fields(fields))
    return jobs


# --- sacct ---------------------------------------------------------------------------------------
SACCT_FIELDS = (
    "JobID",
    "JobName",
    "State",
    "ExitCode",
    "DerivedExitCode",
    "Elapsed",
    "Start",
    "End",
    "NNodes",
    "NodeList",
    "Reason",
)


def sacct_argv(job_id, sacct="sacct"):
    """The sacct command that reads one job and its steps, ``|``-separated, with its header."""
    return [sacct, f"--jobs={_job_id(job_id)}", "--parsable2", "--format=" + ",".join(SACCT_FIELDS)]


_SACCT_KEYS = {
    "jobid": "job_id",
    "jobidraw": "job_id",
    "jobname": "name",
    "state": "state",
    "exitcode": "exit",
    "derivedexitcode": "derived_exit",
    "elapsed": "elapsed",
    "nnodes": "nodes",
    "allocnodes": "nodes",
    "nodelist": "nodelist",
    "reason": "reason",
    "start": "start",
    "end": "end",
    "partition": "partition",
    "timelimit": "time_limit",
}


def _sacct_row(raw):  # noqa: PLR0912 - one branch per sacct field, as a list of them
    row = {
        "job_id": None,
        "job": None,
        "step": None,
        "name": None,
        "state": None,
        "cancelled_by": None,
        "phase": None,
        "exit_code": None,
        "signal": None,
        "derived_exit_code": None,
        "elapsed_s": None,
        "time_limit_s": None,
        "nodes": None,
        "hosts": [],
        "reason": None,
        "start": None,
        "end": None,
        "partition": None,
        "raw": raw,
    }
    for header, value in raw.items():
        key = _SACCT_KEYS.get(header.lower())
        if key == "job_id":
            row["job_id"] = value
            row["job"], _dot, step = value.partition(".")
            row["step"] = step or None
        elif key == "state":
            row.update(job_state(value))
            row["phase"] = job_phase(row["state"])
        elif key == "exit":
            code = parse_exit_code(value)
            if code:
                row["exit_code"], row["signal"] = code["code"], code["signal"]
        elif key == "derived_exit":
            code = parse_exit_code(value)
            row["derived_exit_code"] = code["code"] if code else None
        elif key == "elapsed":
            row["elapsed_s"] = parse_duration(value)
        elif key == "time_limit":
            row["time_limit_s"] = parse_duration(value)
        elif key == "nodes":
            row["nodes"] = int(value) if value.isdigit() else None
        elif key == "nodelist":
            row["hosts"] = expand_hostlist(value)
        elif key == "reason":
            row["reason"] = _reason(value)
        elif key in ("start", "end"):
            row[key] = None if value in ("", "None", "Unknown") else value
        elif key in ("name", "partition"):
            row[key] = value
    return row


def parse_sacct(text, fields=None):
    """sacct ``--parsable2`` (or ``--parsable``, with a ``|`` at the end of each line) output: one
    dict per job, array task, step (``123.batch``, ``123.extern``, ``123.0``), with ``job_id``,
    ``job``, ``step``, ``name``, ``state``, ``cancelled_by``, ``phase``, ``exit_code``, ``signal``,
    ``elapsed_s``, ``nodes``, ``hosts``, ``reason``, ``start``, ``end``, and ``raw`` (header ->
    text). The first line is the header unless ``fields`` names the columns (``--noheader``)."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return []
    if fields is None:
        header = lines.pop(0)
        if not re.match(r"^JobID(Raw)?(\||$)", header, re.IGNORECASE):
            raise SlurmError(f"sacct output without its header (pass the field names): {header!r}")
        fields = header.split("|")
    fields = list(fields)
    trailing = fields[-1] == ""
    if trailing:
        fields = fields[:-1]
    rows = []
    for raw_line in lines:
        line = raw_line[:-1] if trailing and raw_line.endswith("|") else raw_line
        values = line.split("|")
        if len(values) != len(fields):
            raise SlurmError(f"a sacct line with {len(values)} of {len(fields)} fields ({'|'.join(fields)}): {line!r}")
        rows.append(_sacct_row(dict(zip(fields, values, strict=True))))
    return rows


def _step_failed(step):
    if step["phase"] != "finished":
        return False
    return step["state"] != "COMPLETED" or bool(step["exit_code"]) or bool(step["signal"])


def sacct_job(rows, job_id):
    """One job out of parse_sacct's rows: its allocation line with its steps, as ``{"job_id",
    "name", "state", "cancelled_by", "phase", "reason", "exit_code", "signal", "elapsed_s", "nodes",
    "hosts", "start", "end", "steps", "failed_steps", "success"}``. ``failed_steps`` are the steps
    (the extern step aside: it only holds the allocation) that ended other than COMPLETED 0:0;
    ``success`` is None until the job is over, then True only for COMPLETED, exit 0:0 and no failed
    step (a batch script that ignores a failed srun still ends COMPLETED). None when sacct has no
    line for the job."""
    job_id = _job_id(job_id)
    alloc = next((row for row in rows if row["job_id"] == job_id), None)
    if alloc is None:
        return None
    steps = [row for row in rows if row["job"] == job_id and row["step"] is not None]
    failed = [step for step in steps if step["step"] != "extern" and _step_failed(step)]
    success = None
    if alloc["phase"] == "finished":
        success = alloc["state"] == "COMPLETED" and not alloc["exit_code"] and not alloc["signal"] and not failed
    summary = {key: alloc[key] for key in ("job_id", "name", "state", "cancelled_by", "phase", "reason")}
    summary.update({key: alloc[key] for key in ("exit_code", "signal", "elapsed_s", "nodes", "hosts", "start", "end")})
    summary["steps"] = [
        {key: step[key] for key in ("step", "name", "state", "exit_code", "signal", "elapsed_s", "hosts")}
        for step in steps
    ]
    summary["failed_steps"] = [step["step"] for step in failed]
    summary["success"] = success
    return summary


def _describe(status):
    job = f"Slurm job {status['job_id']}"
    if status["state"] is None and status.get("other_name") is not None:
        return (f"{job} names another job now ({status['other_name']}): the id on record is stale (Slurm numbers "
                "its jobs again after it lost its saved state)")  # fmt: skip
    if status["state"] is None:
        return f"{job} is known to neither squeue nor sacct"
    if status["phase"] == "pending":
        why = f" ({status['reason']})" if status["reason"] else ""
        held = ", held" if status["held"] else ""
        return f"{job} is {status['state']}{why}{held}"
    hosts = f" on {compress_hostlist(status['hosts'])}" if status["hosts"] else ""
    if status["phase"] != "finished":
        return f"{job} is {status['state']}{hosts}"
    text = f"{job} ended {status['state']}"
    if status["cancelled_by"] is not None:
        text += f" by uid {status['cancelled_by']}"
    if status["exit_code"] is not None:
        text += f" with exit code {status['exit_code']}" + (f" (signal {status['signal']})" if status["signal"] else "")
    text += hosts
    failed = [step for step in status["steps"] if step["step"] in status["failed_steps"]]
    if failed:
        text += "; failed steps: " + ", ".join(
            f"{step['step']} {step['state']} {step['exit_code']}:{step['signal']}" for step in failed
        )
    return text


def job_status(job_id, squeue_text=None, sacct_text=None, squeue_format=SQUEUE_FORMAT, name=None):
    """What Slurm knows of one job, from squeue (the controller, while it holds the job) and sacct
    (the accounting record, with steps and exit codes): ``{"job_id", "state", "phase" (pending,
    active, finished, unknown), "reason", "held", "cancelled_by", "exit_code", "signal", "success",
    "hosts", "elapsed_s", "time_limit_s", "steps", "failed_steps", "source", "other_name",
    "message"}``. A job squeue shows pending or active is read from squeue (its reason is the
    controller's, current); a finished one from sacct, which has the exit codes. Either text may be
    None (the command was not run, or failed). ``state`` is None when neither knows the job.

    With ``name``, the id must still name that job: Slurm numbers jobs from FirstJobId again when
    its saved state is lost, and an id kept on a node for days can then name another job, whose
    state is not this one's. Such a job is known to neither (``state`` None), and ``other_name``
    holds the name it has."""
    job_id = _job_id(job_id)
    live = None
    if squeue_text:
        live = next((job for job in parse_squeue(squeue_text, squeue_format) if job["job_id"] == job_id), None)
    record = sacct_job(parse_sacct(sacct_text), job_id) if sacct_text else None
    other = None
    if name is not None:
        if live and live["name"] is not None and live["name"] != name:
            other, live = live["name"], None
        if record and record["name"] is not None and record["name"] != name:
            other, record = record["name"], None
    status = {
        "job_id": job_id,
        "state": None,
        "phase": "unknown",
        "reason": None,
        "held": False,
        "cancelled_by": None,
        "exit_code": None,
        "signal": None,
        "success": None,
        "hosts": [],
        "elapsed_s": None,
        "time_limit_s": None,
        "steps": record["steps"] if record else [],
        "failed_steps": record["failed_steps"] if record else [],
        "source": None,
        "other_name": other,
    }
    if live and (live["phase"] in ("pending", "active") or record is None):
        for key in ("state", "phase", "reason", "held", "cancelled_by", "hosts", "elapsed_s", "time_limit_s"):
            status[key] = live[key]
        status["source"] = "squeue"
        # squeue(1): COMPLETED is "terminated all processes on all nodes with an exit code of zero".
        if live["phase"] == "finished":
            status["success"] = live["state"] == "COMPLETED"
    elif record:
        for key in ("state", "phase", "reason", "cancelled_by", "exit_code", "signal", "success", "hosts", "elapsed_s"):
            status[key] = record[key]
        status["held"] = _held(record["state"], record["reason"])
        status["source"] = "sacct"
    status["message"] = _describe(status)
    return status


# --- sbatch's answer, scancel --------------------------------------------------------------------
def parse_sbatch_parsable(text):
    """What ``sbatch --parsable`` prints (sbatch(1): "Outputs only the job id number and the
    cluster name if present. The values are separated by a semicolon."): ``4242`` or
    ``4242;cluster`` as ``{"job_id", "cluster"}`` (cluster None without one); None for no text (a
    job never submitted). Raises SlurmError for anything else (``Submitted batch job 4242`` is
    sbatch without --parsable)."""
    text = "" if text is None else str(text).strip()
    if not text:
        return None
    job_id, _sep, cluster = text.partition(";")
    cluster = cluster.strip()
    if cluster and not re.match(r"^[A-Za-z0-9_-]+$", cluster):
        raise SlurmError(f"{text!r} is not what sbatch --parsable prints (jobid or jobid;cluster)")
    try:
        job_id = _job_id(job_id)
    except SlurmError:
        raise SlurmError(f"{text!r} is not what sbatch --parsable prints (jobid or jobid;cluster)") from None
    return {"job_id": job_id, "cluster": cluster or None}


def scancel_argv(job_id, scancel="scancel", name=None, user=None):
    """The scancel command that ends one job (or each of a list of ids), every step on every node
    (scancel(1)). With ``name`` and ``user``, scancel's filters: the job is cancelled only if it has
    that name and belongs to that user, so an id that now names someone else's job (ids reused
    after Slurm's state was lost, another cluster's id) cancels nothing."""
    ids = list(job_id) if isinstance(job_id, (list, tuple)) else [job_id]
    if not ids:
        raise SlurmError("scancel needs a job id: without one its filters would cancel every match")
    argv = [scancel]
    if name:
        argv.append(f"--name={_text(name, 'the job name', allow_pipe=False)}")
    if user:
        argv.append(f"--user={_text(user, 'the user', allow_pipe=False)}")
    return [*argv, *(_job_id(one) for one in ids)]


# What scancel says when there is nothing of the job left to cancel (Slurm's slurm_errno.c):
# ESLURM_INVALID_JOB_ID, an id slurmctld no longer holds (the job ended and was purged), and
# ESLURM_ALREADY_DONE, a job that has ended or is ending. (A job the name and user filters do not match
# is left alone without a word: scancel exits 0.)
_SCANCEL_NOTHING_LEFT = ("Invalid job id specified", "Job/step already completing or completed")


def scancel_found_nothing(stderr):
    """Whether a failed scancel only says that the job had already ended: a rank that died ends a
    Slurm job (srun --kill-on-bad-exit) before the watch's scancel comes, and that is no failure
    of the stop. Any other error (slurmctld unreachable, permission) is one."""
    lines = [line for line in str(stderr or "").splitlines() if line.strip()]
    return bool(lines) and all(any(said in line for said in _SCANCEL_NOTHING_LEFT) for line in lines)


# What a cancel has to end: every job that waits for nodes or holds them, less those already ending
# (COMPLETING, STAGE_OUT), which scancel 21.08 counts as finished and answers "Invalid job id specified".
CANCELLABLE_STATES = tuple(sorted((PENDING_STATES | ACTIVE_STATES) - {"COMPLETING", "STAGE_OUT"}))


def _filter_word(value, what):
    value = _text(value, what, allow_pipe=False)
    if "," in value:
        raise SlurmError(f"{what} {value!r} holds ',', which squeue reads as a list of several")
    return value


def cancel_candidates_argv(name, user, job_id=None, nodes=None, squeue="squeue"):
    """The squeue command that lists the jobs a cancel would end: those of ``user`` named ``name``
    that wait for nodes or hold them, only job ``job_id`` or only jobs on ``nodes``. scancel with the
    same filters says nothing when they match no job (it exits 0), so the cancel reads first what
    there is: an honest "changed", and check mode that knows what it would end.

    One of ``job_id`` and ``nodes`` is needed: an empty value (a template slip) must not widen the
    cancel to every job of that name. ``--all`` lists hidden partitions' jobs too, as scancel sees
    them. Each line is ``ID|NAME``: squeue's ``--name`` ignores case where scancel's does not, so
    cancel_candidates compares the name exactly."""
    if job_id in (None, "") and not nodes:
        raise SlurmError("a cancel needs a job id or nodes: without either it would end every job of that name")
    argv = [squeue, "--all", "--noheader", f"--name={_filter_word(name, 'the job name')}",
            f"--user={_filter_word(user, 'the user')}", f"--states={','.join(CANCELLABLE_STATES)}"]  # fmt: skip
    if job_id not in (None, ""):
        argv.append(f"--jobs={_job_id(job_id)}")
    if nodes:
        argv.append(f"--nodelist={','.join(_node_names(nodes))}")
    return [*argv, "--format=%i|%j"]


def cancel_candidates(text, name):
    """The job ids of cancel_candidates_argv's answer whose name is exactly ``name``, in order and
    once each."""
    ids = []
    for line in str(text or "").splitlines():
        if not line.strip():
            continue
        job_id, sep, found = line.partition("|")
        if not sep:
            raise SlurmError(f"{line!r} is not what squeue --format=%i|%j prints (ID|NAME)")
        job_id = _job_id(job_id)
        if found == name and job_id not in ids:
            ids.append(job_id)
    return ids


_KILL_JOB_ID = re.compile(r"\bjob id (\d+(?:_\d+)?)\b")


def scancel_ended_ids(stderr):
    """The ids scancel found nothing left of (its "Kill job error on job id N: Invalid job id
    specified" lines): a job that ended between the read and the cancel, which it did not end."""
    return [found.group(1) for line in str(stderr or "").splitlines() if scancel_found_nothing(line)
            for found in [_KILL_JOB_ID.search(line)] if found]  # fmt: skip


# --- nodes (sinfo) -------------------------------------------------------------------------------
SINFO_FORMAT = "%N|%P|%T|%c|%m|%G|%E"
_SINFO_LETTERS = {
    "N": ("nodelist", "NODELIST"),
    "n": ("nodelist", "HOSTNAMES"),
    "P": ("partition", "PARTITION"),
    "R": ("partition", "PARTITION"),
    "T": ("state", "STATE"),
    "t": ("state", "STATE"),
    "c": ("cpus", "CPUS"),
    "m": ("memory", "MEMORY"),
    "G": ("gres", "GRES"),
    "E": ("reason", "REASON"),
    "D": ("nodes", "NODES"),
    "a": ("avail", "AVAIL"),
    "l": ("timelimit", "TIMELIMIT"),
}
_SINFO_HEADERS = {header: key for key, header in _SINFO_LETTERS.values()}
_SINFO_HEADERS.update({"GRES_USED": "gres_used", "S:C:T": "sct", "AVAIL_FE": "features", "FEATURES": "features"})

# sinfo(1) NODE STATE CODES: the characters after a state, and the compact names (%t, sinfo's
# default table) -> the long ones (%T), as src/common/slurm_protocol_defs.c prints them.
NODE_STATE_FLAGS = {
    "*": "not_responding",
    "~": "powered_off",
    "#": "powering_up",
    "!": "pending_power_down",
    "%": "powering_down",
    "$": "maintenance",
    "@": "pending_reboot",
    "^": "reboot_issued",
    "-": "planned",
    "+": "completing",
}
_COMPACT_NODE_STATES = {
    "alloc": "allocated",
    "boot": "reboot",
    "canc_r": "cancel_reboot",
    "comp": "completing",
    "drain": "drained",
    "drng": "draining",
    "failg": "failing",
    "futr": "future",
    "mix": "mixed",
    "npc": "perfctrs",
    "plnd": "planned",
    "powered_dn": "powered_down",
    "powring_dn": "powering_down",
    "pow_dn": "power_down",
    "pow_up": "power_up",
    "resm": "resume",
    "resv": "reserved",
    "unk": "unknown",
}


# A node that runs jobs is as healthy as an idle one; a re-run of the slurm role during a job, or the
# diagnosis of a busy cluster, must not call it broken.
BUSY_STATES = frozenset(("idle", "allocated", "mixed", "completing"))


def parse_node_state(text):
    """A node state as sinfo (``idle``, ``drained*``, ``mix-``, ``drng@``, ``allocated+``) or
    scontrol (``IDLE+DRAIN``) print it: ``{"state", "flags", "responding", "usable"}``: state is the
    long lower-case name, flags the meaning of the characters after it (``*`` not_responding, ``~``
    powered_off, ``@`` pending_reboot, ...) or scontrol's ``+FLAG`` words; usable means idle,
    responding and nothing pending: a node a new job can have whole."""
    text = str(text).strip()
    if not text:
        raise SlurmError("an empty node state")
    words = text.split("+")
    base, extra = words[0], [word.lower() for word in words[1:] if word]
    flags = []
    while base and base[-1] in NODE_STATE_FLAGS:
        flags.insert(0, NODE_STATE_FLAGS[base[-1]])
        base = base[:-1]
    if text.endswith("+"):
        flags.append("completing")
    base = base.lower()
    if not base:
        raise SlurmError(f"{text!r} is not a node state")
    state = _COMPACT_NODE_STATES.get(base, base)
    flags.extend(extra)
    return {
        "state": state,
        "flags": flags,
        "responding": "not_responding" not in flags,
        "usable": state == "idle" and not flags,
        # Working for the scheduler: idle, or running jobs (allocated, mixed, completing), responding
        # and neither drained nor down nor anything else pending.
        "healthy": state in BUSY_STATES and not set(flags) - {"completing"},
    }


def sinfo_argv(nodes=None, sinfo="sinfo"):
    """The sinfo command that lists nodes in SINFO_FORMAT, one line per node and partition; only
    the named nodes when given."""
    argv = [sinfo, "--Node", "--noheader", f"--format={SINFO_FORMAT}"]
    if nodes:
        argv.append(f"--nodes={compress_hostlist(nodes)}")
    return argv


def _sinfo_row(fields):
    row = {"hosts": [], "partition": None, "default_partition": False}
    for key, raw in fields.items():
        value = raw.strip()
        if key == "nodelist":
            row["hosts"] = expand_hostlist(value)
        elif key == "partition":
            row["default_partition"] = value.endswith("*")
            row["partition"] = value.rstrip("*")
        elif key == "state":
            row.update(parse_node_state(value))
        elif key in ("cpus", "nodes"):
            row[key] = _int(value, f"the {key} count")
        elif key == "memory":
            row["memory_mb"] = _int(value, "the memory (MB)")
        elif key == "gres":
            row["gres"] = None if value in ("(null)", "") else value
            row["gpus"] = gres_count(value)
        elif key == "gres_used":
            row["gres_used"] = value
            row["gpus_used"] = gres_count(value)
        elif key == "reason":
            row["reason"] = _reason(value)
        elif key == "sct":
            sockets, cores, threads = (_int(part, "S:C:T") for part in value.split(":"))
            row.update({"sockets": sockets, "cores_per_socket": cores, "threads_per_core": threads})
        else:
            row[key] = value
    return row


def parse_sinfo(text, fmt=SINFO_FORMAT):
    """sinfo's output in a ``|``-separated ``--format`` (SINFO_FORMAT by default): one dict a line
    with ``hosts`` (the node list expanded), ``partition`` and ``default_partition`` (the ``*``),
    ``state``/``flags``/``responding``/``usable`` (parse_node_state), ``cpus``, ``memory_mb``,
    ``gres``/``gpus``, ``reason``, as the format has them. A header line is skipped."""
    letters = _format_letters(fmt, _SINFO_LETTERS)
    header = "|".join(_SINFO_LETTERS[letter][1] for letter in letters)
    rows = []
    for line in str(text).splitlines():
        if not line.strip() or line.strip() == header:
            continue
        values = line.split("|", len(letters) - 1)
        if len(values) != len(letters):
            raise SlurmError(f"a sinfo line with {len(values)} of {len(letters)} fields ({fmt}): {line!r}")
        rows.append(
            _sinfo_row({_SINFO_LETTERS[letter][0]: value for letter, value in zip(letters, values, strict=True)})
        )
    return rows


def parse_sinfo_table(text):
    """sinfo's own tables: the partition view (``PARTITION AVAIL TIMELIMIT NODES STATE NODELIST``,
    one line per partition and state) or the node view ``-N -l`` (a date line, then ``NODELIST
    NODES PARTITION STATE CPUS S:C:T MEMORY ...``). The same row dicts as parse_sinfo."""
    lines = [line for line in str(text).splitlines() if line.strip()]
    first = next((line.split()[0] for line in lines if line.split()[0] in ("PARTITION", "NODELIST", "GRES_USED")), None)
    if first is None:
        raise SlurmError("no sinfo header (PARTITION, NODELIST...) in the output")
    rows = []
    for row in _table(text, first, "sinfo"):
        rows.append(
            _sinfo_row({_SINFO_HEADERS[header]: value for header, value in row.items() if header in _SINFO_HEADERS})
        )
    return rows


def sinfo_nodes(rows):
    """parse_sinfo's rows (one per node and partition) as one dict per node, in order:
    ``{"node", "partitions", "state", "flags", "responding", "usable", "healthy", "cpus", "memory_mb",
    "gres", "gpus", "reason"}``."""
    nodes = {}
    for row in rows:
        for host in row["hosts"]:
            node = nodes.setdefault(host, {"node": host, "partitions": []})
            if row.get("partition") and row["partition"] not in node["partitions"]:
                node["partitions"].append(row["partition"])
            for key in ("state", "flags", "responding", "usable", "healthy", "cpus", "memory_mb", "gres", "gpus",
                        "reason"):  # fmt: skip
                if key in row:
                    node[key] = row[key]
    return list(nodes.values())


def node_problems(sinfo_text, expected_gpus, fmt=SINFO_FORMAT, busy_ok=False):
    """What stops a job from having every expected node whole: each node of ``expected_gpus``
    (name -> GPUs it must show as GRES) that sinfo does not list, that is not IDLE and responding
    (with its state, flags and Slurm's reason), or whose GRES holds another number of GPUs. With
    ``busy_ok``, a node running jobs (allocated, mixed, completing) is as good as an idle one. One
    sentence per problem; an empty list when all is well."""
    nodes = {node["node"]: node for node in sinfo_nodes(parse_sinfo(sinfo_text, fmt))}
    problems = []
    for name, gpus in expected_gpus.items():
        node = nodes.get(name)
        if node is None:
            problems.append(f"{name}: not in sinfo (not in slurm.conf, or in no partition this user sees)")
            continue
        if not node.get("healthy" if busy_ok else "usable", False):
            flags = f" ({', '.join(node['flags'])})" if node.get("flags") else ""
            reason = f", reason: {node['reason']}" if node.get("reason") else ""
            problems.append(f"{name}: {node.get('state')}{flags}, not {'working' if busy_ok else 'idle'}{reason}")
        if "gpus" in node and node["gpus"] != int(gpus):
            problems.append(f"{name}: GRES {node.get('gres') or '(null)'} shows {node['gpus']} GPUs, {gpus} expected")
    return problems


# --- the batch script ----------------------------------------------------------------------------
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SAFE_DIRECTIVE = re.compile(r"^[A-Za-z0-9_./%:@+,=-]+$")
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.+-]+(?:,[A-Za-z0-9_.+-]+)*$")
_TIME_LIMIT = re.compile(r"^(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$")
_GPU_TYPE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _text(value, what, allow_pipe=True):
    if value is None or isinstance(value, (dict, list, tuple, bool)):
        raise SlurmError(f"{what} must be text, not {value!r}")
    value = str(value)
    if not value or _CONTROL.search(value):
        raise SlurmError(f"{what} {value!r} is empty or holds a control character (a newline would end the line)")
    if not allow_pipe and "|" in value:
        raise SlurmError(f"{what} {value!r} holds '|', which separates squeue's and sacct's fields")
    return value


def _directive(option, value):
    # sbatch reads "#SBATCH" lines with its own splitting (src/sbatch/opt.c get_argument): blanks
    # separate arguments, ' or " group, a backslash escapes the next character, an unquoted #
    # starts a comment. Anything else than plain characters goes in double quotes, \ and " escaped.
    value = str(value)
    if not _SAFE_DIRECTIVE.match(value):
        value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"#SBATCH --{option}={value}"


def _positive_int(value, what, minimum=1):
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise SlurmError(f"{what} must be a whole number, not {value!r}")
    value = int(value)
    if value < minimum:
        raise SlurmError(f"{what} must be at least {minimum}, not {value}")
    return value


def _command(command):
    if not isinstance(command, (list, tuple)) or not command:
        raise SlurmError(f"command must be a non-empty argv list, not {command!r}")
    argv = []
    for item in command:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise SlurmError(f"command item {item!r} is not text")
        if "\x00" in str(item):
            raise SlurmError(f"command item {item!r} holds a NUL byte")
        argv.append(str(item))
    return argv


def _optional_directives(job):
    directives = []
    for key in ("partition", "account", "qos"):
        value = job.get(key)
        if value in (None, ""):
            continue
        value = _text(value, key)
        if not _SLURM_NAME.match(value):
            raise SlurmError(f"{key} {value!r} is not a Slurm name (letters, digits, _ . + -, comma-separated)")
        directives.append(_directive(key, value))
    time_limit = job.get("time_limit")
    if time_limit not in (None, ""):
        time_limit = _text(time_limit, "time_limit")
        if not _TIME_LIMIT.match(time_limit) and time_limit.upper() not in ("UNLIMITED", "INFINITE"):
            raise SlurmError(f"time_limit {time_limit!r} is not a Slurm time (minutes, [D-]HH:MM:SS, UNLIMITED)")
        directives.append(_directive("time", time_limit))
    if job.get("workdir"):
        directives.append(_directive("chdir", _text(job["workdir"], "workdir")))
    return directives


def _env_lines(files):
    lines = []
    for entry in files or []:
        path = _text(entry, "an env file")
        if path.startswith("-"):
            path = shlex.quote(path[1:])
            lines.append(f"if [[ -r {path} ]]; then . {path}; fi")
        else:
            lines.append(f". {shlex.quote(path)}")
    if not lines:
        return []
    return [
        "# The job's environment files, their variables exported (as systemd's EnvironmentFile= does).",
        "set -a",
        *lines,
        "set +a",
    ]


def sbatch_script(job):
    """The batch script that runs a fine-tune through Slurm: one task per node
    (``--nodes=N --ntasks-per-node=1``), the node's GPUs as GRES, whole nodes (``--exclusive``,
    ``--mem=0``), and an ``srun`` that starts the per-node launcher (``command``, an argv, each item
    quoted for the shell) once on every node, with torchrun's rendezvous from Slurm's environment:
    MASTER_ADDR the first host of ``scontrol show hostnames "$SLURM_JOB_NODELIST"``, NODE_RANK
    ``$SLURM_NODEID``, NNODES ``$SLURM_JOB_NUM_NODES`` (and torchrun's own PET_* names, which it
    reads when an option is not on its command line).

    ``job``: ``name``, ``nodes``, ``gpus_per_node`` (0: no GRES, CPU ranks), ``command`` (list),
    ``output`` (the log file, appended to), and optionally ``gpu_type`` (``--gres=gpu:TYPE:N``),
    ``partition``, ``account``, ``qos``, ``time_limit`` (Slurm's [D-]HH:MM:SS or minutes),
    ``workdir``, ``master_port`` (29500), ``env_files`` (sourced in order, their variables exported
    as systemd's EnvironmentFile= does; a leading ``-`` makes one optional, as there).
    ``srun --kill-on-bad-exit=1`` ends every node's task when one exits non-zero, so a failed rank
    stops the job; ``--no-requeue`` leaves a resume to the collection, as a new job."""
    if not isinstance(job, dict):
        raise SlurmError(f"the job must be a mapping, not {job!r}")
    name = _text(job.get("name"), "the job name", allow_pipe=False)
    nodes = _positive_int(job.get("nodes"), "nodes")
    gpus = _positive_int(job.get("gpus_per_node", 0), "gpus_per_node", minimum=0)
    output = _text(job.get("output"), "the output file")
    port = _positive_int(job.get("master_port", 29500), "master_port")
    if port > 65535:
        raise SlurmError(f"master_port {port} is not a TCP port")
    argv = _command(job.get("command"))
    gres = []
    if gpus:
        gpu_type = job.get("gpu_type")
        if gpu_type and not _GPU_TYPE.match(str(gpu_type)):
            raise SlurmError(f"gpu_type {gpu_type!r} is not a GRES type (letters, digits, _ . -)")
        gres.append(_directive("gres", f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"))
    lines = [
        "#!/bin/bash",
        f"# instinct.finetune: the fine-tune {name} as a Slurm job, {nodes} nodes with "
        + (f"{gpus} GPUs each." if gpus else "no GPU (CPU ranks)."),
        "# One task per node: srun starts the per-node launcher once on every node, which starts one",
        "# rank per GPU. Whole nodes (--exclusive, all their memory); no requeue: a resume is a new job.",
        _directive("job-name", name),
        _directive("nodes", nodes),
        _directive("ntasks-per-node", 1),
        *gres,
        "#SBATCH --exclusive",
        _directive("mem", 0),
        "#SBATCH --no-requeue",
        # The submitting shell's soft limits (a sudo session's memlock of a few MiB) stay behind: the
        # node's own limits apply, and the per-node launcher raises them as the unit would.
        "#SBATCH --propagate=NONE",
        _directive("output", output),
        _directive("open-mode", "append"),
        *_optional_directives(job),
        "set -euo pipefail",
        *_env_lines(job.get("env_files")),
        "# torchrun's rendezvous from Slurm's environment: the allocation's first host is the master.",
        'nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        "export MASTER_ADDR=${nodes%%$'\\n'*}",
        f"export MASTER_PORT={port}",
        "export NNODES=$SLURM_JOB_NUM_NODES",
        "# torchrun reads PET_<OPTION> for an option not on its command line.",
        "export PET_MASTER_ADDR=$MASTER_ADDR PET_MASTER_PORT=$MASTER_PORT PET_NNODES=$NNODES",
        'echo "==== instinct.finetune launch of Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST'
        ' (master $MASTER_ADDR:$MASTER_PORT) at $(date -Is) ===="',
        "# NODE_RANK is the node's place in the allocation, set in each task ($SLURM_NODEID).",
        'exec srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\',
        '  --kill-on-bad-exit=1 --cpu-bind=none --cpus-per-task="$SLURM_CPUS_ON_NODE" \\',
        "  /bin/bash -c 'export NODE_RANK=$SLURM_NODEID PET_NODE_RANK=$SLURM_NODEID; exec \"$@\"' instinct-rank \\",
        "  " + " ".join(shlex.quote(item) for item in argv),
    ]
    return "\n".join(lines) + "\n"


# --- an allocation for checks (salloc --no-shell, srun --jobid) --------------------------------
_GRANTED = re.compile(r"^salloc: Granted job allocation (\d+)\s*$", re.M)


def _gres(gpus, gpu_type):
    if not gpus:
        return []
    if gpu_type and not _GPU_TYPE.match(str(gpu_type)):
        raise SlurmError(f"gpu_type {gpu_type!r} is not a GRES type (letters, digits, _ . -)")
    return [f"--gres=gpu:{gpu_type}:{gpus}" if gpu_type else f"--gres=gpu:{gpus}"]


def _node_names(nodes):
    if not isinstance(nodes, (list, tuple)) or not nodes:
        raise SlurmError(f"nodes must be a non-empty list of node names, not {nodes!r}")
    names = [_text(name, "a node name") for name in nodes]
    wrong = [name for name in names if not _NODE_NAME.match(name)]
    if wrong or len(set(names)) != len(names):
        raise SlurmError(f"nodes {names!r} are not distinct Slurm node names")
    return names


def node_names(hosts, hostvars):
    """The Slurm node names of inventory ``hosts``: each host's short host name
    (``ansible_facts.hostname``), which the slurm role writes as its NodeName and which a site's
    slurm.conf uses by Slurm's own default (NodeName is what ``hostname -s`` prints). A host whose
    facts hold no host name has not been read yet: SlurmError naming it."""
    names = []
    for host in hosts or ():
        facts = (hostvars.get(host) or {}).get("ansible_facts") or {}
        if not facts.get("hostname"):
            raise SlurmError(f"{host}: no host name in its facts to name it to Slurm by: read them first "
                             "(ansible.builtin.setup with gather_subset platform)")  # fmt: skip
        names.append(facts["hostname"])
    return _node_names(names)


def salloc_argv(allocation, salloc="salloc"):
    """The salloc command that holds whole nodes for checks that must not share their GPUs with
    another job (the health check's all-reduce and burn-in), and runs nothing itself
    (``--no-shell``: the allocation stays until scancel or its time limit; its steps come from
    ``srun --jobid``, step_prefix). One task per node, exactly the nodes named, whole nodes
    (``--exclusive``, ``--mem=0``), their GPUs as GRES.

    ``allocation``: ``name``, ``nodes`` (Slurm node names), ``gpus_per_node`` (0: no GRES),
    ``wait_seconds`` (``--immediate``: salloc gives up when Slurm cannot place it that soon, say
    because another job holds the nodes), ``time_limit``, and optionally ``gpu_type``,
    ``partition``, ``account``, ``qos``."""
    if not isinstance(allocation, dict):
        raise SlurmError(f"the allocation must be a mapping, not {allocation!r}")
    nodes = _node_names(allocation.get("nodes"))
    name = _text(allocation.get("name"), "the allocation name", allow_pipe=False)
    gpus = _positive_int(allocation.get("gpus_per_node", 0), "gpus_per_node", minimum=0)
    wait = _positive_int(allocation.get("wait_seconds"), "wait_seconds")
    if allocation.get("time_limit") in (None, ""):
        raise SlurmError("an allocation for checks needs a time_limit: it must end if nothing cancels it")
    options = [line[len("#SBATCH "):] for line in _optional_directives(
        {key: allocation.get(key) for key in ("partition", "account", "qos", "time_limit")})]  # fmt: skip
    return [salloc, "--no-shell", f"--job-name={name}", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
            "--ntasks-per-node=1", "--exclusive", "--mem=0", *_gres(gpus, allocation.get("gpu_type")),
            f"--immediate={wait}", *options]  # fmt: skip


def parse_salloc_granted(text):
    """The job id of ``salloc: Granted job allocation ID``, the line salloc prints on standard
    error once Slurm gave it the nodes. A salloc that was not granted (``--immediate`` ran out, the
    request cannot be met) prints no such line: SlurmError, with what it said."""
    found = _GRANTED.findall(str(text or ""))
    if len(found) != 1:
        said = " | ".join(line.strip() for line in str(text or "").splitlines() if line.strip()) or "nothing"
        raise SlurmError(f"salloc granted no allocation: {said}")
    return found[0]


def step_prefix(job_id, node, gpus=0, gpu_type=None, srun="srun"):
    """The srun that runs a command (the argv the caller appends) once on ``node`` as a step of
    allocation ``job_id``, with every CPU of the node (``--whole``) and its ``gpus`` as GRES, so that
    Slurm sets ROCR_VISIBLE_DEVICES to them; it ends with ``--``. The step's environment is the
    caller's (srun exports it), its failure the step's (``--kill-on-bad-exit``)."""
    (name,) = _node_names([node])
    return [srun, f"--jobid={_job_id(job_id)}", "--nodes=1", "--ntasks=1", f"--nodelist={name}", "--whole",
            *_gres(_positive_int(gpus, "gpus", minimum=0), gpu_type), "--kill-on-bad-exit=1", "--"]  # fmt: skip


# --- slurm.conf, gres.conf, cgroup.conf ---------------------------------------------------------
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CONF_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_CONF_VALUE = re.compile(r"^[^\s#]+$")


def _version(text):
    found = re.search(r"(\d+)\.(\d+)", str(text))
    if not found:
        raise SlurmError(f"{text!r} is not a Slurm version (21.08.5, say)")
    return int(found.group(1)), int(found.group(2))


def _cgroup_version(value):
    text = str(value).strip().lower().lstrip("v")
    if text in ("1", "hybrid", "legacy"):
        return 1
    if text in ("2", "unified"):
        return 2
    raise SlurmError(f"cgroup version {value!r} is not 1, 2 (unified) or hybrid")


def slurm_confinement(slurm_version, cgroup_version):
    """The process tracking and task plugins a node can have, by the installed Slurm and the
    node's cgroup version: ``{"proctrack", "task_plugin", "jobacct_gather", "cgroup_conf" (a
    mapping, or None when no cgroup plugin is used), "unconfined", "notes"}``.

    Slurm's cgroup plugins drive cgroup v1 only until 22.05 (its RELEASE_NOTES: "Added support for
    Cgroup Version 2"; 21.08's src/plugins/cgroup holds v1 alone). Ubuntu 22.04 runs cgroup v2
    (unified) and ships Slurm 21.08.5: there the nodes track processes by their parent
    (proctrack/linuxproc; slurm.conf(5): processes that outlive their parent "can fail to be
    identified") and bind tasks with sched_setaffinity (task/affinity), and nothing fences a job's
    devices, memory or cores. A hybrid hierarchy (v1 controllers mounted) counts as v1."""
    version = _version(slurm_version)
    cgroup = _cgroup_version(cgroup_version)
    release = f"{version[0]}.{version[1]:02d}"
    if cgroup == 1 or version >= (22, 5):
        conf = {"ConstrainCores": "yes", "ConstrainDevices": "yes", "ConstrainRAMSpace": "yes"}
        notes = [f"Slurm {release} on cgroup v{cgroup}: jobs are fenced by cgroups (cores, devices, memory)."]
        if cgroup == 2:
            notes.append("cgroup/v2 needs slurmd's unit to have Delegate=yes (Debian's and Ubuntu's have it).")
        return {
            "proctrack": "proctrack/cgroup",
            "task_plugin": "task/affinity,task/cgroup",
            "jobacct_gather": "jobacct_gather/cgroup",
            "cgroup_conf": conf,
            "unconfined": [],
            "notes": notes,
        }
    return {
        "proctrack": "proctrack/linuxproc",
        "task_plugin": "task/affinity",
        "jobacct_gather": "jobacct_gather/linux",
        "cgroup_conf": None,
        "unconfined": ["devices", "memory", "cores", "processes"],
        "notes": [
            f"Slurm {release} drives cgroup v1 only (cgroup/v2 arrived in 22.05) and the nodes run cgroup v2: "
            "no cgroup plugin, so nothing of the following is fenced.",
            "devices: a job can open every GPU of its node (/dev/dri/renderD*, /dev/kfd), not only its GRES "
            "(ConstrainDevices needs task/cgroup); Slurm still sets ROCR_VISIBLE_DEVICES to the GPUs it gave.",
            "memory: a job is not held to its memory (ConstrainRAMSpace); the kernel's OOM killer acts for the "
            "whole node.",
            "cores: tasks are bound with sched_setaffinity (task/affinity), which a process may undo (ConstrainCores).",
            "processes: proctrack/linuxproc follows parent PIDs; a process that detaches from its parent escapes "
            "scancel and the job's end.",
            "With whole-node jobs (--exclusive) no other job shares the node; the escaped processes remain the "
            "risk. Booting the nodes with systemd.unified_cgroup_hierarchy=0 (cgroup v1) or Slurm 22.05 or later "
            "brings the cgroup plugins back.",
        ],
    }


def _check_node(node, index):
    if not isinstance(node, dict):
        raise SlurmError(f"node {index} must be a mapping, not {node!r}")
    name = _text(node.get("name"), f"node {index}'s name")
    if not _NODE_NAME.match(name):
        raise SlurmError(f"node name {name!r} is not a host name Slurm takes (letters, digits, . _ -)")
    sockets = _positive_int(node.get("sockets"), f"{name}: sockets")
    cores = _positive_int(node.get("cores_per_socket"), f"{name}: cores_per_socket")
    threads = _positive_int(node.get("threads_per_core", 1), f"{name}: threads_per_core")
    cpus = _positive_int(node.get("cpus", sockets * cores * threads), f"{name}: cpus")
    # slurm.conf(5) CPUs: the logical processors, or the cores (threads not scheduled alone).
    if cpus not in (sockets * cores * threads, sockets * cores):
        raise SlurmError(
            f"{name}: cpus {cpus} is neither sockets x cores x threads ({sockets * cores * threads}) nor "
            f"sockets x cores ({sockets * cores})"
        )
    memory = _positive_int(node.get("real_memory_mb"), f"{name}: real_memory_mb")
    gpus = _positive_int(node.get("gpus", 0), f"{name}: gpus", minimum=0)
    gpu_type = node.get("gpu_type")
    if gpu_type and not _GPU_TYPE.match(str(gpu_type)):
        raise SlurmError(f"{name}: gpu_type {gpu_type!r} is not a GRES type (letters, digits, _ . -)")
    files = node.get("gpu_files")
    if files is None:
        # AMD GPUs: one DRM render node each, /dev/dri/renderD128 up (the amdgpu driver's minors).
        files = [f"/dev/dri/renderD{128 + index}" for index in range(gpus)]
    files = [_text(path, f"{name}: a GPU device file") for path in files]
    if len(files) != gpus:
        raise SlurmError(f"{name}: {len(files)} GPU device files for {gpus} GPUs")
    features = [_text(feature, f"{name}: a feature") for feature in node.get("features") or []]
    for feature in features:
        if not _SLURM_NAME.match(feature) or "," in feature:
            raise SlurmError(f"{name}: feature {feature!r} is not a Slurm name (letters, digits, _ . + -)")
    for path in files:
        if not _CONF_VALUE.match(path):
            raise SlurmError(f"{name}: device file {path!r} cannot stand in gres.conf (no blanks or #)")
    addr = node.get("addr")
    if addr:
        addr = _text(addr, f"{name}: addr")
        if not _CONF_VALUE.match(addr):
            raise SlurmError(f"{name}: addr {addr!r} cannot stand in slurm.conf")
    return {
        "name": name,
        "addr": addr or None,
        "cpus": cpus,
        "sockets": sockets,
        "cores_per_socket": cores,
        "threads_per_core": threads,
        "real_memory_mb": memory,
        "gpus": gpus,
        "gpu_type": str(gpu_type) if gpu_type else None,
        "gpu_files": files,
        "features": features,
    }


def _check_partition(partition, names):
    if not isinstance(partition, dict):
        raise SlurmError(f"a partition must be a mapping, not {partition!r}")
    name = _text(partition.get("name"), "a partition's name")
    if not re.match(r"^[A-Za-z0-9_.-]+$", name):
        raise SlurmError(f"partition name {name!r} is not a Slurm name")
    members = partition.get("nodes") or names
    unknown = [member for member in members if member not in names]
    if unknown:
        raise SlurmError(f"partition {name} names nodes that are not in the cluster: {', '.join(unknown)}")
    options = {}
    for key, value in (partition.get("options") or {}).items():
        if not _CONF_KEY.match(str(key)) or not _CONF_VALUE.match(str(value)):
            raise SlurmError(f"partition {name}: {key}={value} cannot stand in slurm.conf")
        options[str(key)] = str(value)
    return {
        "name": name,
        "nodes": list(members),
        "default": bool(partition.get("default")),
        "max_time": str(partition.get("max_time", "INFINITE")),
        "options": options,
    }


def _cluster(cluster):
    if not isinstance(cluster, dict):
        raise SlurmError(f"the cluster must be a mapping, not {cluster!r}")
    name = _text(cluster.get("cluster_name"), "cluster_name").lower()
    if not re.match(r"^[a-z0-9_-]+$", name):
        raise SlurmError(f"cluster_name {name!r} is not a Slurm cluster name (letters, digits, _ -)")
    controller = _text(cluster.get("controller"), "controller")
    if not _NODE_NAME.match(controller):
        raise SlurmError(f"controller {controller!r} is not a host name")
    raw_nodes = cluster.get("nodes")
    if not isinstance(raw_nodes, (list, tuple)) or not raw_nodes:
        raise SlurmError("the cluster has no nodes")
    nodes = [_check_node(node, index) for index, node in enumerate(raw_nodes)]
    names = [node["name"] for node in nodes]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SlurmError(f"nodes listed twice: {', '.join(repeated)}")
    partitions = cluster.get("partitions") or [{"name": "main", "default": True}]
    checked = [_check_partition(partition, names) for partition in partitions]
    if sum(partition["default"] for partition in checked) > 1:
        raise SlurmError("more than one default partition")
    accounting = cluster.get("accounting", {})
    if accounting is not False and accounting is not None:
        accounting = dict(accounting) if isinstance(accounting, dict) else {}
        accounting.setdefault("host", controller)
        accounting.setdefault("port", 6819)
    return {
        "cluster_name": name,
        "controller": controller,
        "controller_addr": cluster.get("controller_addr"),
        "slurm_version": str(_text(cluster.get("slurm_version"), "slurm_version")),
        "cgroup_version": _cgroup_version(cluster.get("cgroup_version")),
        "nodes": nodes,
        "partitions": checked,
        "accounting": accounting or None,
        "rsmi": bool(cluster.get("rsmi", False)),
        "settings": cluster.get("settings") or {},
    }


def _node_gres(node):
    if not node["gpus"]:
        return None
    return f"gpu:{node['gpu_type']}:{node['gpus']}" if node["gpu_type"] else f"gpu:{node['gpus']}"


def _merge_settings(settings, extra):
    merged = list(settings)
    index = {key.lower(): position for position, (key, _value) in enumerate(merged)}
    for raw_key, raw_value in sorted(extra.items()):
        key, value = str(raw_key), str(raw_value)
        if not _CONF_KEY.match(key) or _CONTROL.search(value) or not value.strip():
            raise SlurmError(f"setting {key}={value!r} cannot stand in slurm.conf")
        if key.lower() in ("nodename", "partitionname"):
            raise SlurmError(f"{key} lines come from nodes and partitions, not settings")
        if key.lower() in index:
            merged[index[key.lower()]] = (merged[index[key.lower()]][0], value)
        else:
            index[key.lower()] = len(merged)
            merged.append((key, value))
    return merged


def slurm_conf(cluster):
    """``slurm.conf`` for a cluster described like an inventory: ``cluster_name``, ``controller``
    (the slurmctld host, and slurmdbd's unless ``accounting`` names another ``host``/``port``;
    ``accounting: false`` for none), ``slurm_version``, ``cgroup_version`` (1, 2 or hybrid: see
    slurm_confinement), ``nodes`` (``name``, ``cpus``, ``sockets``, ``cores_per_socket``,
    ``threads_per_core``, ``real_memory_mb``, ``gpus``, optional ``gpu_type``, ``addr``,
    ``features``), ``partitions`` (``name``, ``nodes`` (all by default), ``default``, ``max_time``,
    ``options``; one ``main`` partition of every node by default), ``settings`` (more or other
    ``Key: value``). Paths are Debian's and Ubuntu's (their slurm.conf.simple)."""
    conf = _cluster(cluster)
    confinement = slurm_confinement(conf["slurm_version"], conf["cgroup_version"])
    controller = conf["controller"]
    if conf["controller_addr"]:
        controller = f"{controller}({_text(conf['controller_addr'], 'controller_addr')})"
    # slurm.conf(5), Slurm 21.08: every parameter below is documented there with these values.
    settings = [
        ("ClusterName", conf["cluster_name"]),
        ("SlurmctldHost", controller),
        ("AuthType", "auth/munge"),
        ("SlurmUser", "slurm"),
        ("SlurmctldPort", "6817"),
        ("SlurmdPort", "6818"),
        ("StateSaveLocation", "/var/lib/slurm/slurmctld"),
        ("SlurmdSpoolDir", "/var/lib/slurm/slurmd"),
        ("SlurmctldPidFile", "/run/slurmctld.pid"),
        ("SlurmdPidFile", "/run/slurmd.pid"),
        ("SlurmctldLogFile", "/var/log/slurm/slurmctld.log"),
        ("SlurmdLogFile", "/var/log/slurm/slurmd.log"),
        ("MpiDefault", "none"),
        ("ReturnToService", "2"),
        ("SchedulerType", "sched/backfill"),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_Core_Memory"),
        ("GresTypes", "gpu"),
        ("ProctrackType", confinement["proctrack"]),
        ("TaskPlugin", confinement["task_plugin"]),
        ("JobAcctGatherType", confinement["jobacct_gather"]),
        ("JobCompType", "jobcomp/none"),
    ]
    if conf["accounting"]:
        settings += [
            ("AccountingStorageType", "accounting_storage/slurmdbd"),
            ("AccountingStorageHost", _text(conf["accounting"]["host"], "accounting host")),
            ("AccountingStoragePort", str(_positive_int(conf["accounting"]["port"], "accounting port"))),
            ("AccountingStorageTRES", "gres/gpu"),
        ]
    else:
        settings.append(("AccountingStorageType", "accounting_storage/none"))
    settings = _merge_settings(settings, conf["settings"])
    cgroup = "hybrid/v1" if conf["cgroup_version"] == 1 else "v2"
    lines = [
        f"# slurm.conf of the cluster {conf['cluster_name']}, rendered by instinct.finetune for Slurm "
        f"{conf['slurm_version']} on cgroup {cgroup} nodes.",
        "# Parameters: slurm.conf(5) of Slurm 21.08 (https://slurm.schedmd.com/archive/slurm-21.08.8/slurm.conf.html).",
    ]
    lines += [f"# {note}" for note in confinement["notes"]]
    lines += [f"{key}={value}" for key, value in settings]
    lines.append("# Nodes: CPUs, sockets, cores, threads and RealMemory (MB) as the node reports them (slurmd -C).")
    for node in conf["nodes"]:
        words = [f"NodeName={node['name']}"]
        if node["addr"]:
            words.append(f"NodeAddr={node['addr']}")
        words += [
            f"CPUs={node['cpus']}",
            f"Sockets={node['sockets']}",
            f"CoresPerSocket={node['cores_per_socket']}",
            f"ThreadsPerCore={node['threads_per_core']}",
            f"RealMemory={node['real_memory_mb']}",
        ]
        if node["gpus"]:
            words.append(f"Gres={_node_gres(node)}")
        if node["features"]:
            words.append("Feature=" + ",".join(node["features"]))
        words.append("State=UNKNOWN")
        lines.append(" ".join(words))
    for partition in conf["partitions"]:
        words = [f"PartitionName={partition['name']}", f"Nodes={compress_hostlist(partition['nodes'])}"]
        if partition["default"]:
            words.append("Default=YES")
        words += [f"MaxTime={partition['max_time']}", "State=UP"]
        words += [f"{key}={value}" for key, value in sorted(partition["options"].items())]
        lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def gres_conf(cluster):
    """``gres.conf`` for the same cluster: one line per GPU node, its GPUs by their device files
    (``Name=gpu [Type=...] File=/dev/dri/renderD[128-135]``; gres.conf(5): File is what lets
    ConstrainDevices fence a job's GPUs) with ``Flags=amd_gpu_env`` (gres.conf(5), Slurm 21.08:
    Slurm then sets ROCR_VISIBLE_DEVICES only, as the ROCm runtime would otherwise read
    CUDA_VISIBLE_DEVICES after it). ``rsmi: true`` adds ``AutoDetect=rsmi`` for the GPU nodes,
    for a Slurm built with AMD's ROCm SMI (the gpu_rsmi plugin: Debian's and Ubuntu's packages have
    gpu_generic only). CPU-only nodes get no line."""
    conf = _cluster(cluster)
    lines = [
        f"# gres.conf of the cluster {conf['cluster_name']}, rendered by instinct.finetune.",
        "# gres.conf(5) of Slurm 21.08 (https://slurm.schedmd.com/archive/slurm-21.08.8/gres.conf.html):",
        "# AMD GPUs by their DRM render nodes; Flags=amd_gpu_env: Slurm sets ROCR_VISIBLE_DEVICES only.",
    ]
    for node in conf["nodes"]:
        if not node["gpus"]:
            continue
        if conf["rsmi"]:
            lines.append(f"NodeName={node['name']} AutoDetect=rsmi")
        words = [f"NodeName={node['name']}", "Name=gpu"]
        if node["gpu_type"]:
            words.append(f"Type={node['gpu_type']}")
        words += [f"File={compress_hostlist(node['gpu_files'])}", "Flags=amd_gpu_env"]
        lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def cgroup_conf(cluster):
    """``cgroup.conf`` for the same cluster: the Constrain* settings when the nodes use Slurm's
    cgroup plugins (slurm_confinement), else a file that says why there are none."""
    conf = _cluster(cluster)
    confinement = slurm_confinement(conf["slurm_version"], conf["cgroup_version"])
    lines = [
        f"# cgroup.conf of the cluster {conf['cluster_name']}, rendered by instinct.finetune.",
        "# cgroup.conf(5) of Slurm 21.08 (https://slurm.schedmd.com/archive/slurm-21.08.8/cgroup.conf.html).",
    ]
    if confinement["cgroup_conf"] is None:
        lines += [f"# {note}" for note in confinement["notes"]]
        lines.append("# No cgroup plugin is configured in slurm.conf: Slurm does not read this file.")
    else:
        lines += [f"{key}={value}" for key, value in confinement["cgroup_conf"].items()]
    return "\n".join(lines) + "\n"


def slurm_config_files(cluster):
    """The three files and the confinement chosen, for a role: ``{"slurm.conf", "gres.conf",
    "cgroup.conf", "confinement"}``."""
    conf = _cluster(cluster)
    return {
        "slurm.conf": slurm_conf(cluster),
        "gres.conf": gres_conf(cluster),
        "cgroup.conf": cgroup_conf(cluster),
        "confinement": slurm_confinement(conf["slurm_version"], conf["cgroup_version"]),
    }
