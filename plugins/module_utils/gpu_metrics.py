# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""GPU metrics for Prometheus's node exporter textfile collector (pure, standard library only).

The monitoring role runs ``instinct-gpu-collector`` (the node tools package) on every node on a
timer; it reads the GPUs with the first tool that answers and writes ``instinct_gpu.prom`` from
:func:`gpu_textfile_samples` with prometheus_client:

1. ``amd-smi metric --json`` (ROCm 7), with ``amd-smi static --json`` for model, bus address and
   power cap;
2. ``rocm-smi --showtemp --showpower --showmaxpower --showmeminfo vram --showuse --showbus
   --showproductname --showreplaycount --json``;
3. rocm-smi's plain views: the concise table of a bare ``rocm-smi`` (junction temperature, socket
   power, power cap) and ``rocm-smi -u --showmeminfo vram`` (busy %, VRAM).

When every reader fails, the last good sample is written again with
``instinct_gpu_collector_stale 1`` and the reasons are logged: a dashboard keeps its last values
and an alert can tell "no data" from "old data".

The node tools package holds this file (linked, one source) beside :mod:`rocm_smi` and
:mod:`_probe`, so it imports nothing but its siblings.
"""

import json
import re

# Relative, so that the node tools package, which holds this file beside rocm_smi.py, imports it too.
from .rocm_smi import (
    SmiError,
    _amdsmi_entries,
    _section,
    _text_cards,
    _text_log,
    _text_number,
    _unit_value,
    _unparsable,
    parse_amdsmi_static,
    parse_rocm_smi_concise,
    parse_rocm_smi_json,
    parse_rocm_smi_text,
)

AMDSMI_METRIC = ("metric", "--json")
AMDSMI_STATIC = ("static", "--json")
ROCM_SMI_JSON = (
    "--showtemp",
    "--showpower",
    "--showmaxpower",
    "--showmeminfo",
    "vram",
    "--showuse",
    "--showbus",
    "--showproductname",
    "--showreplaycount",
    "--json",
)
ROCM_SMI_CONCISE = ()
ROCM_SMI_USE_VRAM = ("-u", "--showmeminfo", "vram")

# name: (type, help). The dashboard and the alert rules may only use names listed here (a test
# checks it), so a renamed metric cannot silently empty a panel or disarm an alert.
METRICS = {
    "instinct_gpu_info": ("gauge", "One series per GPU the collector sees, with its model and PCI address."),
    "instinct_gpu_temperature_celsius": ("gauge", "GPU temperature by sensor (edge, junction, memory, hbmN)."),
    "instinct_gpu_power_watts": ("gauge", "GPU socket (package) power."),
    "instinct_gpu_power_limit_watts": ("gauge", "GPU power cap."),
    "instinct_gpu_vram_used_bytes": ("gauge", "VRAM in use."),
    "instinct_gpu_vram_total_bytes": ("gauge", "VRAM size."),
    "instinct_gpu_utilization_ratio": ("gauge", "Share of time the GPU was busy (0 to 1)."),
    "instinct_gpu_ecc_errors_total": ("counter", "ECC errors since the driver loaded, by severity."),
    "instinct_gpu_pcie_replays_total": ("counter", "PCIe replays (link-level retransmissions)."),
    "instinct_gpu_xgmi_error": ("gauge", "1 when amd-smi reports an XGMI link error, else 0."),
    "instinct_gpu_count": ("gauge", "GPUs in the last good sample."),
    "instinct_gpu_expected_count": ("gauge", "GPUs this node should have (from rocminfo when the role ran)."),
    "instinct_gpu_collector_up": ("gauge", "1 when the last run read the GPUs, 0 when every reader failed."),
    "instinct_gpu_collector_stale": ("gauge", "1 when the GPU values are the last good sample, not this run's."),
    "instinct_gpu_collector_last_success_timestamp_seconds": ("gauge", "Unix time of the last good sample."),
    "instinct_gpu_collector_source_info": ("gauge", "The tool that gave the last good sample."),
}

RECORD_KEYS = (
    "index",
    "model",
    "bdf",
    "temperatures",
    "power_w",
    "power_limit_w",
    "vram_used_bytes",
    "vram_total_bytes",
    "utilization_percent",
    "ecc_correctable",
    "ecc_uncorrectable",
    "pcie_replays",
    "xgmi_error",
)

_AMDSMI_SENSORS = {"edge": "edge", "hotspot": "junction", "mem": "memory"}
_ROCM_SENSOR = re.compile(r"^Temperature \(Sensor ([^)]+)\) \(C\)$")
_NA = ("N/A", "NA", "")


def empty_record(index):
    record = dict.fromkeys(RECORD_KEYS)
    record["index"] = index
    record["temperatures"] = {}
    return record


def _sensor_label(name):
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _count(value, where):
    """amd-smi's plain integer counters; 'N/A' -> None."""
    if value is None or (isinstance(value, str) and value.strip() in _NA):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _unparsable(f"{where} is {value!r}, not a whole number.")
    return value


def _xgmi_error(value):
    """amd-smi's ``xgmi_err``: the status enum's name (``AMDSMI_XGMI_STATUS_NO_ERRORS`` in current
    releases, ``NO_ERRORS``/``ERROR``/``MULTIPLE_ERRORS`` in older ones) or its number -> 0 or 1."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return 0 if value == 0 else 1
    if not isinstance(value, str) or value.strip() in _NA:
        return None
    name = value.strip().upper().replace(" ", "_")
    if name.startswith("AMDSMI_XGMI_STATUS_"):
        name = name[len("AMDSMI_XGMI_STATUS_") :]
    return 0 if name in ("NO_ERRORS", "NO_ERROR") else 1


def _from_gpu_record(record, gpu):
    """Copy the shared fields of a :mod:`rocm_smi` GPU record into a metrics record."""
    record["model"] = record["model"] or gpu.get("product_name")
    record["bdf"] = record["bdf"] or gpu.get("bdf")
    for key in ("power_w", "power_limit_w", "vram_used_bytes", "vram_total_bytes"):
        if record[key] is None and gpu.get(key) is not None:
            record[key] = gpu[key]
    return record


def read_amdsmi(metric_text, static_text=None):
    """``amd-smi metric --json`` (and optionally ``static --json``) -> metrics records by index.

    Key names follow AMD's CLI (ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py``, ``metric``):
    ``temperature.{edge,hotspot,mem}`` in C, ``power.socket_power`` in W, ``mem_usage.*_vram`` in MB
    (MiB), ``usage.gfx_activity`` in %, ``ecc.total_{correctable,uncorrectable}_count``,
    ``pcie.replay_count``, ``xgmi_err``.
    """
    what = "amd-smi metric --json"
    static = {}
    if static_text:
        static = {gpu["index"]: gpu for gpu in parse_amdsmi_static(static_text)}
    records = []
    for entry in _amdsmi_entries(metric_text, what):
        where = f"{what}: GPU {entry['gpu']}"
        record = empty_record(entry["gpu"])
        temperature = _section(entry, "temperature", what)
        for key, sensor in _AMDSMI_SENSORS.items():
            if key in temperature:
                value = _unit_value(temperature[key], {"C": 1}, f"{where} temperature.{key}")
                if value is not None:
                    record["temperatures"][sensor] = value
        power = _section(entry, "power", what)
        if "socket_power" in power:
            record["power_w"] = _unit_value(power["socket_power"], {"W": 1}, f"{where} power.socket_power")
        mem = _section(entry, "mem_usage", what)
        for key, field in (("total_vram", "vram_total_bytes"), ("used_vram", "vram_used_bytes")):
            if key in mem:
                record[field] = _unit_value(mem[key], {"MB": 1024 * 1024, "B": 1}, f"{where} mem_usage.{key}")
        usage = _section(entry, "usage", what)
        if "gfx_activity" in usage:
            record["utilization_percent"] = _unit_value(usage["gfx_activity"], {"%": 1}, f"{where} usage.gfx_activity")
        ecc = _section(entry, "ecc", what)
        record["ecc_correctable"] = _count(ecc.get("total_correctable_count"), f"{where} ecc.total_correctable_count")
        record["ecc_uncorrectable"] = _count(
            ecc.get("total_uncorrectable_count"), f"{where} ecc.total_uncorrectable_count"
        )
        pcie = _section(entry, "pcie", what)
        record["pcie_replays"] = _count(pcie.get("replay_count"), f"{where} pcie.replay_count")
        record["xgmi_error"] = _xgmi_error(entry.get("xgmi_err"))
        if entry["gpu"] in static:
            _from_gpu_record(record, static[entry["gpu"]])
        records.append(record)
    return _sorted_unique(records, what)


def _card_extras(record, card, where):
    """The fields of a rocm-smi card (JSON or text) that :mod:`rocm_smi` does not read."""
    for key, value in card.items():
        match = _ROCM_SENSOR.match(key)
        if match:
            number = _text_number(value, f"{where} '{key}'")
            if number is not None:
                record["temperatures"][_sensor_label(match.group(1))] = number
    record["utilization_percent"] = _text_number(card.get("GPU use (%)"), f"{where} 'GPU use (%)'")
    record["pcie_replays"] = _text_number(card.get("PCIe Replay Count"), f"{where} 'PCIe Replay Count'", True)
    return record


def read_rocm_smi_json(text):
    """``rocm-smi ... --json`` -> metrics records by index."""
    what = "rocm-smi --json"
    cards = json.loads(text) if isinstance(text, str) else None
    gpus = {gpu["index"]: gpu for gpu in parse_rocm_smi_json(text)["gpus"]}
    records = []
    for index, gpu in sorted(gpus.items()):
        record = _from_gpu_record(empty_record(index), gpu)
        _card_extras(record, cards[f"card{index}"], f"{what}: card{index}")
        records.append(record)
    return records


def _concise_sensor(text):
    """The sensor the concise table's Temp column shows, from the unit row under the header."""
    lines = text.splitlines()
    for number, line in enumerate(lines[:-1]):
        start = line.find("Temp")
        if re.match(r"^(Device|GPU)\s+", line) and start >= 0:
            below = lines[number + 1][start:]
            match = re.match(r"\s*\(([^)]+)\)", below)
            if match:
                label = _sensor_label(match.group(1))
                return "edge" if label in ("dieedge", "edge") else label
    return "junction"


def read_rocm_smi_plain(concise_text, use_vram_text):
    """A bare ``rocm-smi`` (concise table) plus ``rocm-smi -u --showmeminfo vram`` -> records. Without
    the second view (None: it failed), the concise table alone: every GPU the driver lists, with its
    temperature and power, and no VRAM bytes or busy % (a GPU count is what an alert needs most)."""
    what = "rocm-smi -u --showmeminfo vram"
    concise = {gpu["index"]: gpu for gpu in parse_rocm_smi_concise(concise_text)["gpus"]}
    memory, cards = {}, {}
    if use_vram_text is not None:
        memory = {gpu["index"]: gpu for gpu in parse_rocm_smi_text(use_vram_text)["gpus"]}
        cards = _text_cards(_text_log(use_vram_text, what))
        if set(concise) != set(memory):
            raise _unparsable(
                f"rocm-smi's concise table lists GPUs {sorted(concise)} but '{what}' lists {sorted(memory)}."
            )
    sensor = _concise_sensor(concise_text)
    records = []
    for index in sorted(concise):
        record = _from_gpu_record(empty_record(index), concise[index])
        if index in memory:
            _from_gpu_record(record, memory[index])
        if concise[index]["temperature_c"] is not None:
            record["temperatures"][sensor] = concise[index]["temperature_c"]
        if index in memory:
            _card_extras(record, cards.get(index, {}), f"{what}: GPU[{index}]")
        records.append(record)
    return records


def _sorted_unique(records, what):
    records = sorted(records, key=lambda record: record["index"])
    indexes = [record["index"] for record in records]
    if len(set(indexes)) != len(indexes):
        raise _unparsable(f"{what} lists a GPU index twice: {indexes}.")
    return records


# ---------------------------------------------------------------------------------------------
# reading with the first tool that answers


class ToolFailed(Exception):
    """A tool could not be run, exited non-zero or timed out (the message says which)."""


def read_gpus(run, static_text=None):
    """Read the GPUs with the first reader that works.

    ``run(tool, args)`` returns the tool's stdout or raises :class:`ToolFailed`. Returns
    ``(source, records, problems)``; ``source`` is None when every reader failed, and
    ``problems`` says why each reader that was tried did not give the answer.
    """
    problems = []

    def plain():
        concise = run("rocm-smi", ROCM_SMI_CONCISE)
        try:
            use_vram = run("rocm-smi", ROCM_SMI_USE_VRAM)
        except ToolFailed as error:
            # The concise table still counts the GPUs and reads their sensors.
            problems.append(f"rocm-smi: {error}; the concise table alone is read (no VRAM bytes, no busy %)")
            use_vram = None
        return read_rocm_smi_plain(concise, use_vram)

    readers = (
        ("amd-smi", lambda: read_amdsmi(run("amd-smi", AMDSMI_METRIC), static_text)),
        ("rocm-smi --json", lambda: read_rocm_smi_json(run("rocm-smi", ROCM_SMI_JSON))),
        ("rocm-smi", plain),
    )
    for source, reader in readers:
        try:
            records = reader()
        except (ToolFailed, SmiError, ValueError) as error:
            problems.append(f"{source}: {error}")
            continue
        if not records:
            problems.append(f"{source}: no GPU in the output")
            continue
        return source, records, problems
    return None, [], problems


# ---------------------------------------------------------------------------------------------
# the textfile


def gpu_samples(records):
    """The per-GPU samples of a list of metrics records."""
    samples = []
    for record in records:
        gpu = {"gpu": str(record["index"])}
        info = dict(gpu, model=record["model"] or "", bdf=record["bdf"] or "")
        samples.append(("instinct_gpu_info", info, 1))
        for sensor, value in sorted(record["temperatures"].items()):
            samples.append(("instinct_gpu_temperature_celsius", dict(gpu, sensor=sensor), value))
        samples += [
            ("instinct_gpu_power_watts", gpu, record["power_w"]),
            ("instinct_gpu_power_limit_watts", gpu, record["power_limit_w"]),
            ("instinct_gpu_vram_used_bytes", gpu, record["vram_used_bytes"]),
            ("instinct_gpu_vram_total_bytes", gpu, record["vram_total_bytes"]),
        ]
        if record["utilization_percent"] is not None:
            samples.append(("instinct_gpu_utilization_ratio", gpu, record["utilization_percent"] / 100.0))
        samples += [
            ("instinct_gpu_ecc_errors_total", dict(gpu, severity="correctable"), record["ecc_correctable"]),
            ("instinct_gpu_ecc_errors_total", dict(gpu, severity="uncorrectable"), record["ecc_uncorrectable"]),
            ("instinct_gpu_pcie_replays_total", gpu, record["pcie_replays"]),
            ("instinct_gpu_xgmi_error", gpu, record["xgmi_error"]),
        ]
    return samples


def gpu_textfile_samples(sample, expected=None, up=True):
    """The samples of the whole ``instinct_gpu.prom``, as ``[(name, labels, value)]``.

    ``sample`` is the last good sample, ``{"source", "records", "at"}`` (or None before the first
    one); ``up`` says whether this run produced it (False: it is written again, marked stale). The
    node tools' collector hands them to prometheus_client, which writes the textfile.
    """
    samples = [("instinct_gpu_collector_up", {}, 1 if up else 0)]
    if expected is not None:
        samples.append(("instinct_gpu_expected_count", {}, int(expected)))
    if sample:
        samples += [
            ("instinct_gpu_collector_stale", {}, 0 if up else 1),
            ("instinct_gpu_collector_last_success_timestamp_seconds", {}, sample["at"]),
            ("instinct_gpu_collector_source_info", {"tool": sample["source"]}, 1),
            ("instinct_gpu_count", {}, len(sample["records"])),
        ]
        samples += gpu_samples(sample["records"])
    return samples


_SAMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+\S+(\s+-?\d+)?$")


def textfile_summary(text):
    """What a node's ``instinct_gpu.prom`` says about its collector, for the run's summary.

    Returns ``{up, stale, source, gpus, expected}`` (None where the file does not say).
    """
    state = dict.fromkeys(("up", "stale", "source", "gpus", "expected"))
    names = {
        "instinct_gpu_collector_up": "up",
        "instinct_gpu_collector_stale": "stale",
        "instinct_gpu_count": "gpus",
        "instinct_gpu_expected_count": "expected",
    }
    for line in (text or "").splitlines():
        match = _SAMPLE_LINE.match(line.strip())
        if not match:
            continue
        name, labels = match.group(1), match.group(2) or ""
        value = line.split()[-1] if not match.group(3) else line.split()[-2]
        if name in names:
            number = float(value)
            state[names[name]] = int(number) if names[name] in ("gpus", "expected") else number == 1
        elif name == "instinct_gpu_collector_source_info":
            tool = re.search(r'tool="([^"]*)"', labels)
            state["source"] = tool.group(1) if tool else None
    return state
