# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Parse ``amd-smi`` and ``rocm-smi`` outputs into per-GPU facts and the GPU link topology (pure).

Every parser returns GPU records with the same keys (see :data:`GPU_KEYS`), ``None`` where the
output does not carry a value, so the facts are the same whichever tool produced them. The parsers
are strict on purpose: a value that is not a number, a GPU index seen twice, truncated JSON or a
shape they do not know raises :class:`SmiError` instead of returning a partial (and so wrong) answer.

Units: amd-smi prints memory as ``{"value": N, "unit": "MB"}`` where MB means MiB. Its CLI divides
the byte count by ``1024*1024`` (ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py``, ``metric``:
``memory_usage['total_vram'] = total_vram // (1024*1024)``) and its library fills the static
``vram_size`` with ``total / (1024 * 1024)`` (``src/amd_smi/amd_smi.cc``, ``amdsmi_get_gpu_vram_info``).
So bytes here are ``value * 1024 * 1024``: exact for sizes that are whole MiB, otherwise up to
1 MiB less than the device's byte count (the CLI floors). rocm-smi prints bytes directly.
"""

import json
import re
from itertools import combinations

# Relative, so that the node tools package, which holds this file beside _probe.py, imports it too.
from ._probe import ProbeError

RUNBOOKS = {
    "driver_not_loaded": "docs/runbooks/driver-not-loaded.md",
    "unparsable": "docs/runbooks/probe-output-unparsed.md",
    "no_gpu": "docs/runbooks/gpu-missing.md",
}

GPU_KEYS = (
    "index",
    "product_name",
    "vram_total_bytes",
    "vram_used_bytes",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "bdf",
    "gfx",
    "numa_node",
)
LINK_TYPES = ("XGMI", "PCIE", "UNKNOWN")
MIB = 1024 * 1024
# Memory units amd-smi prints, as bytes per unit ("MB" is MiB: it divides bytes by 1024 * 1024).
_MEMORY_UNITS = {"MB": MIB, "B": 1}

_NA = ("N/A", "NA", "")
# What rocm-smi's concise table prints where a GPU does not report a value (a power cap on a GPU
# whose SMU stopped answering, an APU's PwrCap): unknown for that field, not a damaged output.
_UNSUPPORTED = "Unsupported"
# An LLVM AMDGPU processor name as rocminfo and amd-smi print it: "gfx", the major version in
# decimal (6..19), then the minor version and the stepping as one hex digit each (gfx90a, gfx942,
# gfx1100). rocm-smi's "GFX Version" renders minor and stepping in decimal, so MI200's 9.0.10 comes
# out as "gfx9010" (ROCm/rocm_smi_lib issue 159): a name no compiler or wheel knows. Any minor or
# stepping of 10 or more gives one digit too many, so this form rejects exactly the mangled names.
_GFX_TARGET = re.compile(r"^gfx(?:[6-9]|1[0-9])[0-9a-f]{2}$")
_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^-?\d+(?:\.\d+)?$")
_CARD = re.compile(r"^card(\d+)$")
_TOPO_LINK = re.compile(r"^\(Topology\) Link type between DRM devices (\d+) and (\d+)$")
_TEXT_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*(.+?):\s+(.*?)\s*$")
_END_OF_LOG = re.compile(r"^=+ End of ROCm SMI Log =+\s*$", re.MULTILINE)


class SmiError(ProbeError):
    """amd-smi or rocm-smi printed something this parser cannot trust."""

    RUNBOOKS = RUNBOOKS


def _unparsable(message):
    return SmiError("unparsable", message)


def empty_gpu(index):
    """A GPU record with every fact key, all unknown but the index."""
    gpu = dict.fromkeys(GPU_KEYS)
    gpu["index"] = index
    return gpu


# ---------------------------------------------------------------------------------------------
# values


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs):
    # json.loads keeps the last of two equal keys: two "card1" objects would silently drop a GPU.
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _decode(text, what):
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as err:
        raise _unparsable(f"{what} has the key '{err}' twice: the output is damaged.") from None


def _load_json(text, what):
    """JSON from a tool's stdout; warning lines printed before the document are skipped."""
    if not isinstance(text, str) or not text.strip():
        raise _unparsable(f"{what} printed nothing.")
    try:
        return _decode(text, what)
    except SmiError:
        raise
    except ValueError as err:
        first_error = err
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.lstrip().startswith(("{", "[")):
            try:
                return _decode("\n".join(lines[number:]), what)
            except SmiError:
                raise
            except ValueError:
                break
    raise _unparsable(f"{what} is not complete JSON ({first_error}); it may have been cut short.")


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _unit_value(value, units, where):
    """``{"value": N, "unit": U}`` -> ``N * units[U]``; ``"N/A"`` (or an N/A value) -> None."""
    if isinstance(value, str) and value.strip() in _NA:
        return None
    if not isinstance(value, dict) or set(value) != {"value", "unit"}:
        raise _unparsable(f"{where} is {value!r}, not a {{value, unit}} object or 'N/A'.")
    number, unit = value["value"], value["unit"]
    if isinstance(number, str) and number.strip() in _NA:
        return None
    if not _is_number(number):
        raise _unparsable(f"{where} has the value {number!r}, which is not a number.")
    if unit not in units:
        raise _unparsable(f"{where} is in '{unit}', expected one of {sorted(units)}.")
    return number * units[unit]


def _text_number(value, where, integer=False):
    """rocm-smi's string numbers: ``"34342961152"``, ``"55.0"``; ``"N/A"`` -> None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _unparsable(f"{where} is {value!r}, expected a string.")
    value = value.strip()
    if value in _NA:
        return None
    if integer:
        if not _INT.match(value):
            raise _unparsable(f"{where} is '{value}', not a whole number.")
        return int(value)
    if not _FLOAT.match(value):
        raise _unparsable(f"{where} is '{value}', not a number.")
    number = float(value)
    return int(number) if number.is_integer() and "." not in value else number


def _text(value):
    if value is None:
        return None
    if not isinstance(value, str):
        raise _unparsable(f"{value!r} is not text.")
    value = value.strip()
    return None if value in _NA else value


def _gfx(value):
    """A GPU's gfx target, or None when the tool printed something that is not one.

    None rather than a repaired name: decoding "gfx9010" back to "gfx90a" would put a guess in a
    field that says what the tool reported, and the build path already reads the real target
    from rocminfo (``rocm_gfx_archs``), which gets it from the HSA runtime. A wrong gfx here would
    mislead whoever reads ``rocm_smi_gpus`` (a wheel picked for "gfx9010" matches nothing).
    """
    value = _text(value)
    return value if value and _GFX_TARGET.match(value) else None


def _link_type(value, where):
    if not isinstance(value, str):
        raise _unparsable(f"{where}: link type {value!r} is not text.")
    value = value.strip().upper()
    if value in ("N/A", "NA"):
        return "UNKNOWN"
    if value not in LINK_TYPES:
        raise _unparsable(f"{where}: unknown link type '{value}' (expected XGMI or PCIE).")
    return value


def _add_link(links, a, b, link_type, where):
    a, b = sorted((a, b))
    if a == b:
        raise _unparsable(f"{where}: a link from GPU {a} to itself.")
    if (a, b) in links and links[(a, b)] != link_type:
        raise _unparsable(f"{where}: GPUs {a} and {b} are linked both by {links[(a, b)]} and {link_type}.")
    links[(a, b)] = link_type


def _check_complete(links, what):
    """A pairwise topology must name every pair of the devices it mentions: a pair that is missing
    (a line lost or mangled in transit) would otherwise read as "no link" and hide a PCIe hop."""
    if not links:
        return
    count = max(b for _a, b in links) + 1
    missing = [pair for pair in combinations(range(count), 2) if pair not in links]
    if missing:
        shown = ", ".join(f"{a}-{b}" for a, b in missing[:4]) + (" ..." if len(missing) > 4 else "")
        raise _unparsable(f"{what}: the topology names devices 0..{count - 1} but no link type for {shown}.")


def _link_list(links):
    return [{"a": a, "b": b, "link_type": links[(a, b)]} for a, b in sorted(links)]


def _check_unique(gpus, what):
    seen = set()
    for gpu in gpus:
        if gpu["index"] in seen:
            raise _unparsable(f"{what} lists GPU {gpu['index']} twice.")
        seen.add(gpu["index"])
    # Asked for every GPU, amd-smi and rocm-smi number them 0..N-1; a gap means a damaged index.
    if seen and seen != set(range(len(seen))):
        raise _unparsable(f"{what} numbers its GPUs {sorted(seen)}, not 0..{len(seen) - 1}.")
    return sorted(gpus, key=lambda gpu: gpu["index"])


# ---------------------------------------------------------------------------------------------
# amd-smi


def _amdsmi_entries(text, what):
    """The per-GPU objects of an amd-smi ``--json`` output, ROCm 7 or older shape."""
    data = _load_json(text, what)
    if isinstance(data, dict):
        if "gpu_data" not in data:
            raise _unparsable(f"{what} is a JSON object without 'gpu_data' (keys: {sorted(data)[:8]}).")
        data = data["gpu_data"]
    if not isinstance(data, list):
        raise _unparsable(f"{what}: the GPU list is {type(data).__name__}, not a list.")
    entries = []
    for number, entry in enumerate(data):
        if not isinstance(entry, dict) or "gpu" not in entry:
            raise _unparsable(f"{what}: entry {number} is not a GPU object with a 'gpu' index.")
        if not isinstance(entry["gpu"], int) or isinstance(entry["gpu"], bool) or entry["gpu"] < 0:
            raise _unparsable(f"{what}: entry {number} has the GPU index {entry['gpu']!r}.")
        entries.append(entry)
    return entries


def _section(entry, name, what):
    """A sub-object of a GPU entry; ``{}`` when absent or 'N/A', an error when of another type."""
    value = entry.get(name)
    if value is None or (isinstance(value, str) and value.strip() in _NA):
        return {}
    if not isinstance(value, dict):
        raise _unparsable(f"{what}: GPU {entry['gpu']} '{name}' is {value!r}, not an object.")
    return value


def _static_power_limit(limit, where):
    watts = {"W": 1}
    ppt0 = limit.get("ppt0")
    if isinstance(ppt0, dict) and "socket_power_limit" in ppt0:
        return _unit_value(ppt0["socket_power_limit"], watts, f"{where} limit.ppt0.socket_power_limit")
    for key in ("socket_power_limit", "socket_power", "power_limit"):
        if key in limit:
            return _unit_value(limit[key], watts, f"{where} limit.{key}")
    return None


def parse_amdsmi_static(text):
    """Parse ``amd-smi static --json``: one GPU record per GPU, sorted by index.

    Reads product name (``asic.market_name``, else ``board.product_name``), VRAM size, power
    limit, BDF, gfx target and NUMA node. Used VRAM, temperature and power stay None (they are
    in ``amd-smi metric``).
    """
    what = "amd-smi static --json"
    gpus = []
    for entry in _amdsmi_entries(text, what):
        where = f"{what}: GPU {entry['gpu']}"
        asic = _section(entry, "asic", what)
        board = _section(entry, "board", what)
        bus = _section(entry, "bus", what)
        vram = _section(entry, "vram", what)
        numa = _section(entry, "numa", what)
        limit = _section(entry, "limit", what)
        if not asic and not vram:
            raise _unparsable(f"{where} has neither 'asic' nor 'vram': this is not static output.")
        gpu = empty_gpu(entry["gpu"])
        gpu["product_name"] = _text(asic.get("market_name")) or _text(board.get("product_name"))
        if "size" in vram:
            gpu["vram_total_bytes"] = _unit_value(vram["size"], _MEMORY_UNITS, f"{where} vram.size")
        gpu["power_limit_w"] = _static_power_limit(limit, where)
        bdf = _text(bus.get("bdf"))
        gpu["bdf"] = bdf.lower() if bdf else None
        gpu["gfx"] = _gfx(asic.get("target_graphics_version"))
        node = numa.get("node")
        if node is not None and not (isinstance(node, int) and not isinstance(node, bool)):
            if not (isinstance(node, str) and node.strip() in _NA):
                raise _unparsable(f"{where} numa.node is {node!r}, not a number.")
            node = None
        gpu["numa_node"] = node
        gpus.append(gpu)
    return _check_unique(gpus, what)


def parse_amdsmi_metric(text):
    """Parse ``amd-smi metric --json``: per GPU ``{index, vram_total_bytes, vram_used_bytes,
    temperature_c, power_w}`` (other keys None), sorted by index.

    Written from AMD's CLI source (ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py``, ``metric``):
    ``mem_usage.total_vram``/``used_vram`` in MB (MiB), ``temperature.hotspot``/``edge`` in C
    (hotspot preferred, it is the junction sensor), ``power.socket_power`` in W.
    """
    what = "amd-smi metric --json"
    gpus = []
    for entry in _amdsmi_entries(text, what):
        where = f"{what}: GPU {entry['gpu']}"
        mem = _section(entry, "mem_usage", what)
        temperature = _section(entry, "temperature", what)
        power = _section(entry, "power", what)
        gpu = empty_gpu(entry["gpu"])
        if "total_vram" in mem:
            gpu["vram_total_bytes"] = _unit_value(mem["total_vram"], _MEMORY_UNITS, f"{where} mem_usage.total_vram")
        if "used_vram" in mem:
            gpu["vram_used_bytes"] = _unit_value(mem["used_vram"], _MEMORY_UNITS, f"{where} mem_usage.used_vram")
        for sensor in ("hotspot", "edge"):
            if sensor in temperature:
                value = _unit_value(temperature[sensor], {"C": 1}, f"{where} temperature.{sensor}")
                if value is not None:
                    gpu["temperature_c"] = value
                    break
        if "socket_power" in power:
            gpu["power_w"] = _unit_value(power["socket_power"], {"W": 1}, f"{where} power.socket_power")
        gpus.append(gpu)
    return _check_unique(gpus, what)


def parse_amdsmi_topology(text):
    """Parse ``amd-smi topology --json``: the list of ``{a, b, link_type}`` links (upper triangle).

    Shape from ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py`` (``topology``): per GPU
    ``{"gpu": i, "bdf": ..., "links": [{"gpu": j, "link_type": "SELF"|"PCIE"|"XGMI"|...}]}``.
    """
    what = "amd-smi topology --json"
    links = {}
    for entry in _amdsmi_entries(text, what):
        source = entry["gpu"]
        if not isinstance(entry.get("links"), list):
            raise _unparsable(f"{what}: GPU {source} has no 'links' list.")
        for link in entry["links"]:
            if not isinstance(link, dict) or not isinstance(link.get("gpu"), int) or "link_type" not in link:
                raise _unparsable(f"{what}: GPU {source} has a link without 'gpu' and 'link_type': {link!r}.")
            if link["gpu"] == source or link["link_type"] == "SELF":
                continue
            where = f"{what}: GPU {source} -> {link['gpu']}"
            _add_link(links, source, link["gpu"], _link_type(link["link_type"], where), where)
    return _link_list(links)


# ---------------------------------------------------------------------------------------------
# rocm-smi


def _card_gpu(index, card, where):
    """One rocm-smi card (flat string keys, JSON or text output) -> a GPU record."""
    gpu = empty_gpu(index)
    name = card.get("Card Series", card.get("Card series", card.get("Device Name")))
    gpu["product_name"] = _text(name)
    gpu["vram_total_bytes"] = _text_number(card.get("VRAM Total Memory (B)"), f"{where} VRAM total", True)
    gpu["vram_used_bytes"] = _text_number(card.get("VRAM Total Used Memory (B)"), f"{where} VRAM used", True)
    for key in ("Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)"):
        value = _text_number(card.get(key), f"{where} '{key}'")
        if value is not None:
            gpu["temperature_c"] = value
            break
    for key in ("Average Graphics Package Power (W)", "Current Socket Graphics Package Power (W)"):
        value = _text_number(card.get(key), f"{where} '{key}'")
        if value is not None:
            gpu["power_w"] = value
            break
    gpu["power_limit_w"] = _text_number(card.get("Max Graphics Package Power (W)"), f"{where} power cap")
    bdf = _text(card.get("PCI Bus"))
    gpu["bdf"] = bdf.lower() if bdf else None
    gpu["gfx"] = _gfx(card.get("GFX Version"))
    gpu["numa_node"] = _text_number(card.get("(Topology) Numa Node"), f"{where} NUMA node", True)
    return gpu


def parse_rocm_smi_json(text):
    """Parse ``rocm-smi ... --json``: ``{"gpus": [...], "links": [...]}``.

    Cards are the ``cardN`` keys (N is the index); links come from the ``system`` keys
    ``(Topology) Link type between DRM devices i and j``. Keys rocm-smi adds for other flags
    (clock levels, the numeric "0".."15" keys, firmware versions) are ignored.
    """
    what = "rocm-smi --json"
    data = _load_json(text, what)
    if not isinstance(data, dict):
        raise _unparsable(f"{what} is a JSON {type(data).__name__}, expected an object of cardN keys.")
    gpus = []
    links = {}
    for key, value in data.items():
        if not isinstance(value, dict):
            raise _unparsable(f"{what}: '{key}' is {type(value).__name__}, not an object.")
        card = _CARD.match(key)
        if card:
            gpus.append(_card_gpu(int(card.group(1)), value, f"{what}: {key}"))
        elif key == "system":
            for name, link_type in value.items():
                match = _TOPO_LINK.match(name)
                if match:
                    where = f"{what}: '{name}'"
                    a, b = int(match.group(1)), int(match.group(2))
                    _add_link(links, a, b, _link_type(link_type, where), where)
        else:
            raise _unparsable(f"{what}: unexpected top-level key '{key}' (expected cardN and system).")
    _check_complete(links, what)
    gpus = _check_unique(gpus, what)
    if links and gpus and gpus[-1]["index"] > max(b for _a, b in links):
        raise _unparsable(f"{what}: card{gpus[-1]['index']} is outside the topology's devices.")
    return {"gpus": gpus, "links": _link_list(links)}


def _text_log(text, what):
    if not isinstance(text, str) or not text.strip():
        raise _unparsable(f"{what} printed nothing.")
    text = text.replace("\r\n", "\n")
    if "ROCm System Management Interface" not in text:
        raise _unparsable(f"{what}: no 'ROCm System Management Interface' banner: this is not rocm-smi's.")
    if not _END_OF_LOG.search(text):
        raise _unparsable(f"{what} does not end with 'End of ROCm SMI Log': it was cut short.")
    return text


def _text_cards(text):
    cards = {}
    for line in text.splitlines():
        match = _TEXT_LINE.match(line)
        if match:
            cards.setdefault(int(match.group(1)), {}).setdefault(match.group(2).strip(), match.group(3))
    return cards


def parse_rocm_smi_text(text):
    """Parse rocm-smi's plain ``GPU[n] : key: value`` output (e.g. ``rocm-smi -u --showmeminfo vram``).

    The keys are the same as in ``--json``, so the result matches :func:`parse_rocm_smi_json`.
    """
    what = "rocm-smi"
    cards = _text_cards(_text_log(text, what))
    gpus = [_card_gpu(index, card, f"{what}: GPU[{index}]") for index, card in sorted(cards.items())]
    return {"gpus": gpus, "links": []}


def _matrix_section(text, title):
    """The lines of one ``=== title ===`` block of rocm-smi --showtopo."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("=") and title in line:
            block = []
            for row in lines[number + 1 :]:
                if not row.strip() or row.startswith("="):
                    break
                block.append(row.split())
            return block
    return None


def parse_rocm_smi_showtopo(text):
    """Parse plain ``rocm-smi --showtopo``: ``{"gpus": [...], "links": [...]}``.

    Links come from the "Link Type between two GPUs" matrix (which must be square, symmetric and
    0 on the diagonal); GPU records carry the NUMA node of the "Numa Nodes" block.
    """
    what = "rocm-smi --showtopo"
    text = _text_log(text, what)
    block = _matrix_section(text, "Link Type between two GPUs")
    if not block:
        raise _unparsable(f"{what}: no 'Link Type between two GPUs' matrix.")
    header, rows = block[0], block[1:]
    count = len(header)
    if header != [f"GPU{i}" for i in range(count)] or len(rows) != count:
        raise _unparsable(f"{what}: the link type matrix is not a square GPU0..GPUn table.")
    matrix = []
    for i, row in enumerate(rows):
        if len(row) != count + 1 or row[0] != f"GPU{i}" or row[i + 1] != "0":
            raise _unparsable(f"{what}: link type row {i} is '{' '.join(row)}'.")
        matrix.append(row[1:])
    links = {}
    for a, b in combinations(range(count), 2):
        where = f"{what}: GPU{a} - GPU{b}"
        if matrix[a][b] != matrix[b][a]:
            raise _unparsable(f"{where} is {matrix[a][b]} one way and {matrix[b][a]} the other.")
        _add_link(links, a, b, _link_type(matrix[a][b], where), where)
    cards = _text_cards(text)
    if cards and sorted(cards) != list(range(count)):
        raise _unparsable(f"{what}: the NUMA block lists GPUs {sorted(cards)}, the matrix {count}.")
    gpus = [_card_gpu(i, cards.get(i, {}), f"{what}: GPU[{i}]") for i in range(count)]
    return {"gpus": gpus, "links": _link_list(links)}


def _concise_columns(header):
    return [(match.start(), match.group(0)) for match in re.finditer(r"\S+", header)]


def _strip_unit(value, unit, where):
    value = value.strip()
    if value in _NA or value == _UNSUPPORTED:
        return None
    if not value.endswith(unit):
        raise _unparsable(f"{where} is '{value}', expected a number in {unit}.")
    return _text_number(value[: -len(unit)], where)


def parse_rocm_smi_concise(text):
    """Parse the concise table of a bare ``rocm-smi``: index, temperature, power and power cap.

    It has no product name and no VRAM size (only VRAM%), so those stay None. A cell that reads
    ``N/A`` or ``Unsupported`` (one GPU whose SMU does not answer, ROCm/ROCm issue 4268) is None
    for that GPU and field; the other GPUs and fields are still read.
    """
    what = "rocm-smi (concise)"
    lines = _text_log(text, what).splitlines()
    header = next((n for n, line in enumerate(lines) if re.match(r"^(Device|GPU)\s+", line)), None)
    if header is None:
        raise _unparsable(f"{what}: no 'Device' header row.")
    columns = _concise_columns(lines[header])
    names = [name for _key, name in columns]
    for required in ("Temp", "PwrCap"):
        if required not in names:
            raise _unparsable(f"{what}: no '{required}' column in the header.")
    power_name = "Power" if "Power" in names else "AvgPwr"
    gpus = []
    for line in lines[header + 1 :]:
        if not re.match(r"^\d+\s", line):
            continue
        cells = {}
        for number, (start, name) in enumerate(columns):
            end = columns[number + 1][0] if number + 1 < len(columns) else len(line)
            cells[name] = line[start:end]
        gpu = empty_gpu(int(cells[names[0]].strip()))
        where = f"{what}: device {gpu['index']}"
        gpu["temperature_c"] = _strip_unit(cells["Temp"], "°C", f"{where} Temp")
        gpu["power_w"] = _strip_unit(cells.get(power_name, "N/A"), "W", f"{where} {power_name}")
        gpu["power_limit_w"] = _strip_unit(cells["PwrCap"], "W", f"{where} PwrCap")
        gpus.append(gpu)
    return {"gpus": _check_unique(gpus, what), "links": []}


# ---------------------------------------------------------------------------------------------
# facts


def merge_gpus(base, extra):
    """GPU records of ``base`` with their unknown (None) values filled from ``extra``.

    Both are lists of GPU records of the same GPUs (e.g. amd-smi static and metric); ``extra``
    may be None or empty (the second probe failed). GPUs that only one side lists are an error:
    the two outputs then do not describe the same node.
    """
    if not extra:
        return [dict(gpu) for gpu in base]
    by_index = {gpu["index"]: gpu for gpu in extra}
    if sorted(by_index) != sorted(gpu["index"] for gpu in base):
        raise _unparsable(
            f"The probes disagree on the GPUs: {sorted(gpu['index'] for gpu in base)} vs {sorted(by_index)}."
        )
    merged = []
    for gpu in base:
        record = dict(gpu)
        for key, value in by_index[gpu["index"]].items():
            if record.get(key) is None:
                record[key] = value
        merged.append(record)
    return merged


def summarize_topology(gpus, links):
    """``{"all_xgmi", "pcie_pairs", "numa_nodes"}`` for preflight's one-XGMI-hive check.

    ``all_xgmi`` is True when every pair of the GPUs is linked by XGMI, False when any link is
    not XGMI, None when that is unknown (no or incomplete link data, or fewer than two GPUs).
    ``pcie_pairs`` lists ``[a, b]`` linked over PCIe; ``numa_nodes`` maps each NUMA node (as a
    string) to the sorted GPU indices on it.
    """
    types = {(link["a"], link["b"]): link["link_type"] for link in links}
    pairs = list(combinations(sorted(gpu["index"] for gpu in gpus), 2))
    if any(link_type != "XGMI" for link_type in types.values()):
        all_xgmi = False
    elif pairs and all(types.get(pair) == "XGMI" for pair in pairs):
        all_xgmi = True
    else:
        all_xgmi = None
    numa_nodes = {}
    for gpu in gpus:
        if gpu.get("numa_node") is not None:
            numa_nodes.setdefault(str(gpu["numa_node"]), []).append(gpu["index"])
    return {
        "all_xgmi": all_xgmi,
        "pcie_pairs": [[a, b] for (a, b), link_type in sorted(types.items()) if link_type == "PCIE"],
        "numa_nodes": {node: sorted(indices) for node, indices in sorted(numa_nodes.items())},
    }


def build_facts(gpus, links):
    """The facts the module returns: ``rocm_smi_gpus``, ``rocm_smi_links``, ``rocm_smi_topology``."""
    gpus = _check_unique([{key: gpu.get(key) for key in GPU_KEYS} for gpu in gpus], "The probe")
    return {
        "rocm_smi_gpus": gpus,
        "rocm_smi_links": [dict(link) for link in links],
        "rocm_smi_topology": summarize_topology(gpus, links),
    }
