# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Judge a GPU burn-in across the nodes of a play (pure).

Every node runs ``roles/health/files/burnin.py`` (a square matmul loop on each of its GPUs, or on
its CPU as one device) and reads its GPU temperatures with ``rocm_smi_facts`` before and after. The
health role hands one result per node to :func:`judge_burnin`::

    {"host": "node1",
     "burnin": {"device_kind": "rocm", "devices": [{"index": 0, "name": "AMD Instinct MI300X",
                "bdf": "0000:1b:00", "tflops": 612.4, "iterations": 2041}, ...], "torch": "2.10.0"},
     "smi_before": [rocm_smi_gpus entries] or None, "smi_after": [...] or None}

A device is compared with every device of the same name (the same GPU model) across the play: its
ratio to their median, flagged as slow when below ``1 - tolerance``. A device without peers of its
model is never flagged: there is nothing to compare it with.
"""

from __future__ import absolute_import, division, print_function

import math
from statistics import median

__metaclass__ = type

RUNBOOKS = {
    "slow": "docs/runbooks/thermal-throttling.md",
    "gpu_missing": "docs/runbooks/gpu-missing.md",
}
DEVICE_KINDS = ("rocm", "cuda", "cpu")
GPU_KINDS = ("rocm", "cuda")


def _number(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} is {value!r}, not a finite number")
    return value


def _temperature(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _pci_key(bdf):
    """``domain:bus:device`` in lower case, from ``0000:1B:00.0`` or ``0000:1b:00``; None when unknown."""
    if not isinstance(bdf, str) or bdf.count(":") != 2:
        return None
    return bdf.lower().split(".")[0]


def _check_result(result, number):
    where = f"burn-in result {number}"
    if not isinstance(result, dict) or not isinstance(result.get("host"), str) or not result["host"]:
        raise ValueError(f"{where} is not a mapping with a 'host' name: {result!r}")
    burnin = result.get("burnin")
    if not isinstance(burnin, dict) or not isinstance(burnin.get("devices"), list):
        raise ValueError(f"{where} ({result['host']}) has no 'burnin' document with a 'devices' list")
    if burnin.get("device_kind") not in DEVICE_KINDS:
        raise ValueError(
            f"{where} ({result['host']}): device_kind {burnin.get('device_kind')!r} is not one of {DEVICE_KINDS}"
        )
    seen = set()
    for device in burnin["devices"]:
        if not isinstance(device, dict) or not isinstance(device.get("index"), int) or device["index"] in seen:
            raise ValueError(f"{where} ({result['host']}): a device without an index of its own: {device!r}")
        seen.add(device["index"])
        _number(device.get("tflops"), f"{result['host']} device {device['index']} tflops")
    for key in ("smi_before", "smi_after"):
        if result.get(key) is not None and not isinstance(result[key], list):
            raise ValueError(f"{where} ({result['host']}): {key} is {type(result[key]).__name__}, not a list or null")
    return result


def temperatures(burnin, smi_gpus):
    """Per torch device index, the temperature (C) that ``rocm_smi_gpus`` reports for it, or None.

    Devices are matched by PCI location when both sides know it; otherwise by index, but only when
    torch and the SMI tool count the same number of GPUs (a visibility mask would shift the
    indices). The CPU, and a node whose SMI tool did not answer, get None.
    """
    devices = burnin.get("devices") or []
    if burnin.get("device_kind") not in GPU_KINDS or not smi_gpus:
        return {device["index"]: None for device in devices}
    by_pci = {_pci_key(gpu.get("bdf")): gpu for gpu in smi_gpus if _pci_key(gpu.get("bdf"))}
    by_index = {gpu.get("index"): gpu for gpu in smi_gpus} if len(smi_gpus) == len(devices) else {}
    found = {}
    for device in devices:
        gpu = by_pci.get(_pci_key(device.get("bdf"))) or by_index.get(device["index"])
        found[device["index"]] = _temperature(gpu.get("temperature_c")) if gpu else None
    return found


def figure(value):
    """TFLOP/s as text: one decimal from 100, two from 1, three significant digits below (a CPU)."""
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _slow_message(row, tolerance):
    heat = ""
    if row["temperature_after"] is not None:
        heat = f"; its temperature went from {_celsius(row['temperature_before'])} to {row['temperature_after']} C"
    if row["device_kind"] == "cpu":
        what = f"the CPU ({row['name']})"
        fix = (
            "A CPU far below its peers shares its cores with other work or throttles: look for busy processes "
            "(top) and clock limits (cpupower frequency-info) on that node"
        )
    else:
        what = f"GPU {row['index']} ({row['name']})"
        fix = (
            "A GPU far below its peers throttles (heat, power cap, clocks) or sits on a degraded link: check "
            "`amd-smi metric --temperature --power --throttle` on that node while it is busy, fix the cooling or "
            "the power cap"
        )
    return (
        f"{row['host']}: {what} reached {figure(row['tflops'])} TFLOP/s in the burn-in, "
        f"{row['ratio_to_median']:.0%} of the median {figure(row['median_tflops'])} TFLOP/s of the {row['peers']} "
        f"{row['name']} devices in this play (flagged below {1 - tolerance:.0%}){heat}. "
        f"{fix}, then run playbooks/health.yml again. See {RUNBOOKS['slow']}"
    )


def _celsius(value):
    return "unknown" if value is None else value


def judge_burnin(results, tolerance=0.2):
    """Compare every device of a burn-in with the devices of the same model across the play.

    ``results``: one entry per node (see the module docstring). ``tolerance``: the fraction below
    the median of its model at which a device is flagged (0.2 flags a GPU under 80 % of it).

    Returns ``{"tolerance", "rows", "groups", "problems"}``. ``rows``: one per device, sorted by host
    and index, ``{host, index, name, device_kind, bdf, tflops, iterations, median_tflops, peers,
    ratio_to_median, temperature_before, temperature_after, slow}``. ``groups``: per model
    ``{name, device_kind, devices, median_tflops, min_tflops, max_tflops}``. ``problems``: one per
    flagged device, ``{host, index, name, message, runbook}``; the message names the host, the figures,
    the fix and the runbook page.
    """
    tolerance = _number(tolerance, "tolerance")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance is {tolerance}, not a fraction between 0 and 1 (0.2 flags under 80 %)")
    if not isinstance(results, list):
        raise ValueError(f"the burn-in results are {type(results).__name__}, not a list with one entry per node")
    rows = []
    for number, result in enumerate(results):
        _check_result(result, number)
        burnin = result["burnin"]
        before = temperatures(burnin, result.get("smi_before"))
        after = temperatures(burnin, result.get("smi_after"))
        for device in burnin["devices"]:
            rows.append(
                {
                    "host": result["host"],
                    "index": device["index"],
                    "name": str(device.get("name") or "unknown"),
                    "device_kind": burnin["device_kind"],
                    "bdf": device.get("bdf"),
                    "tflops": device["tflops"],
                    "iterations": device.get("iterations"),
                    "temperature_before": before[device["index"]],
                    "temperature_after": after[device["index"]],
                }
            )
    if len({(row["host"], row["index"]) for row in rows}) != len(rows):
        hosts = sorted(result["host"] for result in results)
        raise ValueError(f"a host appears twice in the burn-in results: {hosts}")
    rows.sort(key=lambda row: (row["host"], row["index"]))

    models = {}
    for row in rows:
        models.setdefault((row["device_kind"], row["name"]), []).append(row)
    groups = []
    problems = []
    for (kind, name), members in sorted(models.items()):
        figures = [row["tflops"] for row in members]
        middle = median(figures)
        groups.append(
            {
                "name": name,
                "device_kind": kind,
                "devices": len(members),
                "median_tflops": middle,
                "min_tflops": min(figures),
                "max_tflops": max(figures),
            }
        )
        for row in members:
            row["median_tflops"] = middle
            row["peers"] = len(members)
            row["ratio_to_median"] = row["tflops"] / middle if middle > 0 else None
            row["slow"] = len(members) > 1 and (middle > 0 and row["ratio_to_median"] < 1 - tolerance)
    for row in rows:
        if row["slow"]:
            problems.append(
                {
                    "host": row["host"],
                    "index": row["index"],
                    "name": row["name"],
                    "message": _slow_message(row, tolerance),
                    "runbook": RUNBOOKS["slow"],
                }
            )
    return {"tolerance": tolerance, "rows": rows, "groups": groups, "problems": problems}


def device_problems(result, expected=0, allow_cpu=False):
    """What is wrong with the devices one node's burn-in ran on: a list of messages, empty when fine.

    - A burn-in on the CPU where GPUs are expected (``allow_cpu`` false): torch sees no GPU.
    - Fewer GPUs than ``expected`` (0: no expectation).
    - Fewer GPUs in torch than the SMI tool lists (``smi_before``): a device torch cannot open, or a
      ``HIP_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES`` mask in the service user's environment.
    """
    _check_result(result, 0)
    expected = int(_number(expected, "expected"))
    host = result["host"]
    burnin = result["burnin"]
    count = len(burnin["devices"])
    smi = result.get("smi_before") or []
    runbook = RUNBOOKS["gpu_missing"]
    if burnin["device_kind"] == "cpu":
        if allow_cpu:
            return []
        listed = f"; the SMI tool lists {len(smi)}" if smi else ""
        return [
            f"{host}: torch {burnin.get('torch', '')} sees no GPU, so the burn-in ran on the CPU{listed}. "
            "Check that the driver is loaded and the service user may open /dev/kfd and /dev/dri (rocminfo as "
            "that user) and that the venv holds a ROCm build of torch (playbooks/stack.yml); on a node meant "
            f"to train on the CPU set pytorch_device: cpu (or health_allow_cpu: true). See {runbook}"
        ]
    problems = []
    if expected and count < expected:
        problems.append(
            f"{host}: torch sees {count} GPUs, {expected} expected (health_expected_gpus). A GPU that "
            f"dropped off the bus or failed to initialise: check rocminfo, amd-smi list and dmesg. See {runbook}"
        )
    if smi and count < len(smi):
        problems.append(
            f"{host}: the SMI tool lists {len(smi)} GPUs but torch sees {count}. Check HIP_VISIBLE_DEVICES and "
            f"ROCR_VISIBLE_DEVICES in the service user's environment and the device permissions. See {runbook}"
        )
    return problems


def _temperature_cell(value):
    if value is None:
        return "-"
    return f"{value:.1f} C" if isinstance(value, float) and not value.is_integer() else f"{int(value)} C"


TABLE_HEADER = ("host", "gpu", "name", "TFLOP/s", "% of median", "temp before", "temp after", "")


def table_cells(judgement):
    """The burn-in table as rows of text cells (the header first), for the debug table and Markdown."""
    cells = [list(TABLE_HEADER)]
    for row in judgement["rows"]:
        ratio = row.get("ratio_to_median")
        cells.append(
            [
                row["host"],
                str(row["index"]) if row["device_kind"] != "cpu" else "cpu",
                row["name"],
                figure(row["tflops"]),
                "-" if ratio is None else f"{ratio:.0%}",
                _temperature_cell(row["temperature_before"]),
                _temperature_cell(row["temperature_after"]),
                "SLOW" if row["slow"] else "",
            ]
        )
    return cells


def format_table(judgement):
    """The burn-in table as aligned text lines, one per device, with a header."""
    cells = table_cells(judgement)
    widths = [max(len(row[column]) for row in cells) for column in range(len(TABLE_HEADER))]
    right = {3, 4, 5, 6}
    lines = []
    for row in cells:
        text = [
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(text).rstrip())
    return lines


def markdown_table(judgement):
    """The burn-in table in Markdown, one row per device."""
    cells = table_cells(judgement)
    cells[0][-1] = "flag"
    lines = [
        "| " + " | ".join(cells[0]) + " |",
        "|" + "|".join("---:" if c in (3, 4, 5, 6) else "---" for c in range(len(cells[0]))) + "|",
    ]
    for row in cells[1:]:
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return lines
