"""Tests of the amd-smi / rocm-smi parsers on every recorded output in tests/fixtures/smi/.

The expected figures are the ones tests/fixtures/smi/SOURCES.md lists for each recording. No
recording of ``amd-smi metric --json`` or ``amd-smi topology --json`` exists here: the tests of
those parsers build their input in code, from the shape of AMD's CLI source, and say so.
"""

import json
from pathlib import Path

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.rocm_smi import (
    GPU_KEYS,
    MIB,
    SmiError,
    build_facts,
    merge_gpus,
    parse_amdsmi_metric,
    parse_amdsmi_static,
    parse_amdsmi_topology,
    parse_rocm_smi_concise,
    parse_rocm_smi_json,
    parse_rocm_smi_showtopo,
    parse_rocm_smi_text,
)
from tests.unit.conftest import FIXTURES
from tests.unit.conftest import run_module as conftest_run_module

SMI = FIXTURES / "smi"
UNPARSED = "docs/runbooks/probe-output-unparsed.md"
MI100 = "Arcturus GL-XL [Instinct MI100]"

# Every fixture and the parser that reads it; test_every_fixture_is_covered keeps this complete.
PARSERS = {
    "amdsmi-static-mi300x-8gpu.json": parse_amdsmi_static,
    "amdsmi-static-mi210.json": parse_amdsmi_static,
    "rocmsmi-mi100-4gpu-rocm602.json": parse_rocm_smi_json,
    "rocmsmi-mi100-6gpu-rocm571.json": parse_rocm_smi_json,
    "rocmsmi-mi50-vega20.json": parse_rocm_smi_json,
    "rocmsmi-rx6700xt-rocm612.json": parse_rocm_smi_json,
    "rocmsmi-rx7900xt-productname-use-meminfo.json": parse_rocm_smi_json,
    "rocmsmi-showtopo-8gpu-xgmi.txt": parse_rocm_smi_showtopo,
    "rocmsmi-use-meminfo-vram-8gpu.txt": parse_rocm_smi_text,
    "rocmsmi-concise-8gpu.txt": parse_rocm_smi_concise,
    "rocmsmi-concise-8gpu-pwrcap-unsupported.txt": parse_rocm_smi_concise,
    "rocmsmi-concise-1gpu-mi300xvf.txt": parse_rocm_smi_concise,
    "rocmsmi-mi250-gfx9010-rocm6.json": parse_rocm_smi_json,
}


def read(name):
    return (SMI / name).read_text()


def gpus_of(name):
    parsed = PARSERS[name](read(name))
    return parsed if isinstance(parsed, list) else parsed["gpus"]


def links_of(name):
    return PARSERS[name](read(name))["links"]


def column(gpus, key):
    return [gpu[key] for gpu in gpus]


def test_every_fixture_is_covered():
    on_disk = {path.name for path in SMI.iterdir() if path.name != "SOURCES.md"}
    assert on_disk == set(PARSERS)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_record_has_every_key_and_consecutive_indices(name):
    gpus = gpus_of(name)
    assert all(tuple(gpu) == GPU_KEYS for gpu in gpus)
    assert column(gpus, "index") == list(range(len(gpus)))


# --- amd-smi static ------------------------------------------------------------------------------


def test_amdsmi_static_mi300x_8gpu():
    gpus = gpus_of("amdsmi-static-mi300x-8gpu.json")
    assert len(gpus) == 8
    assert column(gpus, "product_name") == ["AMD Instinct MI300X"] * 8
    assert column(gpus, "vram_total_bytes") == [196592 * 1024 * 1024] * 8
    assert column(gpus, "vram_total_bytes") == [206141652992] * 8
    assert column(gpus, "gfx") == ["gfx942"] * 8
    assert column(gpus, "power_limit_w") == [750] * 8
    assert column(gpus, "numa_node") == [0, 0, 0, 0, 1, 1, 1, 1]
    assert column(gpus, "bdf") == [
        "0000:1b:00.0",
        "0000:3d:00.0",
        "0000:4e:00.0",
        "0000:5f:00.0",
        "0000:9d:00.0",
        "0000:bd:00.0",
        "0000:cd:00.0",
        "0000:dd:00.0",
    ]
    for key in ("vram_used_bytes", "temperature_c", "power_w"):
        assert column(gpus, key) == [None] * 8, key


def test_amdsmi_static_mi210_older_limit_shape():
    (gpu,) = gpus_of("amdsmi-static-mi210.json")
    assert gpu == {
        "index": 0,
        "product_name": "AMD Instinct MI210",
        "vram_total_bytes": 65520 * MIB,
        "vram_used_bytes": None,
        "temperature_c": None,
        "power_w": None,
        "power_limit_w": 300,
        "bdf": None,
        "gfx": "gfx90a",
        "numa_node": 1,
    }


def test_amdsmi_static_accepts_the_older_top_level_list():
    wrapped = json.loads(read("amdsmi-static-mi210.json"))
    assert parse_amdsmi_static(json.dumps(wrapped["gpu_data"])) == gpus_of("amdsmi-static-mi210.json")


def test_amdsmi_static_skips_warning_lines_before_the_json():
    text = "WARNING: User is missing the following required groups: render\n" + read("amdsmi-static-mi210.json")
    assert parse_amdsmi_static(text) == gpus_of("amdsmi-static-mi210.json")


def test_amdsmi_static_falls_back_to_board_product_name():
    data = json.loads(read("amdsmi-static-mi300x-8gpu.json"))
    data["gpu_data"][0]["asic"]["market_name"] = "N/A"
    assert parse_amdsmi_static(json.dumps(data))[0]["product_name"] == "AMD Instinct MI300X OAM"


# --- amd-smi metric and topology (inputs built in code) -------------------------------------------


def metric_json(count=2, hotspot=43, wrapped=True):
    """An ``amd-smi metric --json`` document built here, not a recording.

    Its shape follows ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py`` (``metric``): ``mem_usage``
    values are ``{"value": bytes // (1024*1024), "unit": "MB"}``, ``temperature`` has ``edge``,
    ``hotspot`` and ``mem`` in C, ``power.socket_power`` is in W, "N/A" where unsupported.
    """
    entries = [
        {
            "gpu": index,
            "usage": {"gfx_activity": {"value": 0, "unit": "%"}},
            "power": {
                "socket_power": {"value": 155, "unit": "W"},
                "gfx_voltage": "N/A",
                "power_management": "ENABLED",
            },
            "temperature": {
                "edge": {"value": 38, "unit": "C"},
                "hotspot": {"value": hotspot, "unit": "C"} if hotspot is not None else "N/A",
                "mem": {"value": 35, "unit": "C"},
            },
            "mem_usage": {
                "total_vram": {"value": 196592, "unit": "MB"},
                "used_vram": {"value": 283, "unit": "MB"},
                "free_vram": {"value": 196592 - 283, "unit": "MB"},
                "total_gtt": "N/A",
            },
        }
        for index in range(count)
    ]
    return json.dumps({"gpu_data": entries} if wrapped else entries)


def topology_json(types):
    """An ``amd-smi topology --json`` document built here, not a recording.

    Shape from ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py`` (``topology``): per GPU a ``links``
    list with ``link_type`` "SELF" for itself, else "XGMI", "PCIE", "N/A" or "UNKNOWN".
    """
    count = len(types)
    return json.dumps(
        [
            {
                "gpu": a,
                "bdf": f"0000:{a:02x}:00.0",
                "links": [{"gpu": b, "bdf": f"0000:{b:02x}:00.0", "link_type": types[a][b]} for b in range(count)],
            }
            for a in range(count)
        ]
    )


def test_amdsmi_metric_built_from_the_documented_schema():
    """Input built in code from the amdsmi CLI source (no recording exists)."""
    gpus = parse_amdsmi_metric(metric_json(count=2))
    assert column(gpus, "index") == [0, 1]
    assert column(gpus, "vram_total_bytes") == [196592 * MIB] * 2
    assert column(gpus, "vram_used_bytes") == [283 * MIB] * 2
    assert column(gpus, "temperature_c") == [43, 43]
    assert column(gpus, "power_w") == [155, 155]
    assert column(gpus, "product_name") == [None, None]


def test_amdsmi_metric_older_list_shape_and_edge_fallback():
    """Input built in code: unwrapped list, hotspot "N/A" so the edge sensor is used."""
    gpus = parse_amdsmi_metric(metric_json(count=1, hotspot=None, wrapped=False))
    assert column(gpus, "temperature_c") == [38]


def test_merge_static_and_metric():
    """Metric input built in code; static is the MI300X recording."""
    static = gpus_of("amdsmi-static-mi300x-8gpu.json")
    merged = merge_gpus(static, parse_amdsmi_metric(metric_json(count=8)))
    assert column(merged, "product_name") == ["AMD Instinct MI300X"] * 8
    assert column(merged, "vram_used_bytes") == [283 * MIB] * 8
    assert column(merged, "temperature_c") == [43] * 8
    assert column(merged, "power_w") == [155] * 8
    assert merge_gpus(static, None) == static


def test_merge_refuses_outputs_of_different_gpus():
    """Metric input built in code, for two GPUs where static lists eight."""
    with pytest.raises(SmiError, match="disagree"):
        merge_gpus(gpus_of("amdsmi-static-mi300x-8gpu.json"), parse_amdsmi_metric(metric_json(count=2)))


def test_amdsmi_topology_built_from_the_cli_source():
    """Input built in code from the amdsmi CLI source (no recording exists)."""
    types = [["SELF", "XGMI", "PCIE"], ["XGMI", "SELF", "N/A"], ["PCIE", "N/A", "SELF"]]
    assert parse_amdsmi_topology(topology_json(types)) == [
        {"a": 0, "b": 1, "link_type": "XGMI"},
        {"a": 0, "b": 2, "link_type": "PCIE"},
        {"a": 1, "b": 2, "link_type": "UNKNOWN"},
    ]


# --- rocm-smi JSON -------------------------------------------------------------------------------


def test_rocm_smi_mi100_4gpu_rocm602():
    gpus = gpus_of("rocmsmi-mi100-4gpu-rocm602.json")
    assert len(gpus) == 4
    assert column(gpus, "product_name") == [MI100] * 4
    assert column(gpus, "vram_total_bytes") == [34342961152] * 4
    assert column(gpus, "vram_used_bytes") == [6750208] * 4
    assert column(gpus, "temperature_c") == [55.0, 58.0, 57.0, 53.0]
    assert column(gpus, "power_w") == [36.0, 44.0, 43.0, 39.0]
    assert column(gpus, "power_limit_w") == [290.0] * 4
    assert column(gpus, "bdf") == ["0000:83:00.0", "0000:a3:00.0", "0000:c3:00.0", "0000:e3:00.0"]
    links = links_of("rocmsmi-mi100-4gpu-rocm602.json")
    assert [(link["a"], link["b"]) for link in links] == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert column(links, "link_type") == ["PCIE"] * 6


def test_rocm_smi_mi100_6gpu_rocm571():
    gpus = gpus_of("rocmsmi-mi100-6gpu-rocm571.json")
    assert len(gpus) == 6
    assert column(gpus, "product_name") == [MI100] * 6
    assert column(gpus, "vram_total_bytes") == [34342961152] * 6
    assert column(gpus, "vram_used_bytes") == [6782976] * 6
    assert column(gpus, "temperature_c") == [34.0, 33.0, 34.0, 35.0, 34.0, 35.0]
    assert column(gpus, "power_w") == [39.0, 37.0, 35.0, 39.0, 39.0, 40.0]
    assert column(gpus, "power_limit_w") == [290.0] * 6
    assert column(gpus, "bdf")[0] == "0000:1e:00.0"
    links = links_of("rocmsmi-mi100-6gpu-rocm571.json")
    assert len(links) == 15
    assert {link["link_type"] for link in links} == {"PCIE"}


def test_rocm_smi_mi50_vega20_one_card_eight_device_topology():
    (gpu,) = gpus_of("rocmsmi-mi50-vega20.json")
    assert gpu["product_name"] == "Radeon Instinct MI50 32GB"
    assert gpu["vram_total_bytes"] == 34342961152
    assert gpu["vram_used_bytes"] == 10850304
    assert gpu["temperature_c"] == 38.0
    assert gpu["power_w"] == 26.0
    assert gpu["power_limit_w"] == 225.0
    assert gpu["bdf"] == "0000:63:00.0"
    links = links_of("rocmsmi-mi50-vega20.json")
    assert len(links) == 28
    assert {link["link_type"] for link in links} == {"PCIE"}
    assert {link["b"] for link in links} | {link["a"] for link in links} == set(range(8))


def test_rocm_smi_rx6700xt_prefers_card_series_over_device_name():
    (gpu,) = gpus_of("rocmsmi-rx6700xt-rocm612.json")
    assert gpu == {
        "index": 0,
        "product_name": "Navi 22 [Radeon RX 6700/6700 XT / 6800M]",
        "vram_total_bytes": 12868124672,
        "vram_used_bytes": 1572745216,
        "temperature_c": 47.0,
        "power_w": 6.0,
        "power_limit_w": 211.0,
        "bdf": "0000:07:00.0",
        "gfx": "gfx1031",
        "numa_node": 0,
    }
    assert links_of("rocmsmi-rx6700xt-rocm612.json") == []


def test_rocm_smi_rx7900xt_without_temperature_or_power():
    (gpu,) = gpus_of("rocmsmi-rx7900xt-productname-use-meminfo.json")
    assert gpu["product_name"] == "Radeon RX 7900 XT"
    assert gpu["vram_total_bytes"] == 21458059264
    assert gpu["vram_used_bytes"] == 27856896
    assert gpu["gfx"] == "gfx1100"
    assert (gpu["temperature_c"], gpu["power_w"], gpu["bdf"]) == (None, None, None)


def test_rocm_smi_device_name_is_the_last_resort():
    card = json.loads(read("rocmsmi-rx6700xt-rocm612.json"))
    del card["card0"]["Card Series"]
    card["card0"]["Device Name"] = "Navi 22"
    assert parse_rocm_smi_json(json.dumps(card))["gpus"][0]["product_name"] == "Navi 22"


# --- rocm-smi text -------------------------------------------------------------------------------


def test_rocm_smi_showtopo_8gpu_xgmi():
    parsed = parse_rocm_smi_showtopo(read("rocmsmi-showtopo-8gpu-xgmi.txt"))
    assert len(parsed["gpus"]) == 8
    assert column(parsed["gpus"], "numa_node") == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len(parsed["links"]) == 28
    assert {link["link_type"] for link in parsed["links"]} == {"XGMI"}
    assert all(link["a"] < link["b"] for link in parsed["links"])
    topology = build_facts(parsed["gpus"], parsed["links"])["rocm_smi_topology"]
    assert topology == {"all_xgmi": True, "pcie_pairs": [], "numa_nodes": {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}}


def test_rocm_smi_use_meminfo_vram_8gpu():
    gpus = gpus_of("rocmsmi-use-meminfo-vram-8gpu.txt")
    assert len(gpus) == 8
    assert column(gpus, "vram_total_bytes") == [206141652992] * 8
    assert column(gpus, "vram_used_bytes") == [297611264] + [297623552] * 7
    assert column(gpus, "product_name") == [None] * 8


def test_rocm_smi_concise_8gpu():
    gpus = gpus_of("rocmsmi-concise-8gpu.txt")
    assert len(gpus) == 8
    assert column(gpus, "temperature_c") == [43.0, 41.0, 45.0, 41.0, 44.0, 42.0, 45.0, 43.0]
    assert column(gpus, "power_w") == [155.0, 155.0, 159.0, 155.0, 160.0, 157.0, 160.0, 158.0]
    assert column(gpus, "power_limit_w") == [650.0] * 8
    assert column(gpus, "product_name") == [None] * 8
    assert column(gpus, "vram_total_bytes") == [None] * 8


def test_rocm_smi_concise_of_one_mi300x_vf_with_a_wider_sclk_column():
    # ROCm/ROCm#5231: one VF of an 8x MI300X host; SCLK is "2105Mhz", one character wider.
    gpus = gpus_of("rocmsmi-concise-1gpu-mi300xvf.txt")
    assert column(gpus, "index") == [0]
    assert (column(gpus, "temperature_c"), column(gpus, "power_w")) == ([39.0], [191.0])
    assert column(gpus, "power_limit_w") == [750.0]


def test_rocm_smi_concise_unsupported_power_cap_is_unknown_for_that_gpu_only():
    # ROCm/ROCm issue 4268: on an MI300X node GPU 7's SMU stopped answering; rocm-smi printed N/A
    # for its Temp and Power and "Unsupported" for its PwrCap. The other seven GPUs are read whole.
    gpus = gpus_of("rocmsmi-concise-8gpu-pwrcap-unsupported.txt")
    assert column(gpus, "index") == list(range(8))
    assert column(gpus, "power_limit_w") == [750.0] * 7 + [None]
    assert column(gpus, "temperature_c") == [56.0, 54.0, 53.0, 51.0, 38.0, 39.0, 37.0, None]
    assert column(gpus, "power_w") == [321.0, 322.0, 308.0, 311.0, 136.0, 136.0, 137.0, None]


def test_rocm_smi_concise_unsupported_is_only_unknown_not_any_word():
    # The "Unsupported" exception must not turn other text in a number column into "unknown".
    text = read("rocmsmi-concise-8gpu-pwrcap-unsupported.txt").replace("auto  Unsupported", "auto  Unlimited  ")
    with pytest.raises(SmiError, match="PwrCap is 'Unlimited', expected a number in W"):
        parse_rocm_smi_concise(text)


def test_rocm_smi_mi250_bogus_gfx9010_is_not_reported_as_the_gfx():
    # rocm-smi renders MI200's gfx target 9.0.10 in decimal, "gfx9010" (ROCm/rocm_smi_lib issue 159);
    # the real target is gfx90a (rocminfo). The rest of the card is read as usual.
    (gpu,) = gpus_of("rocmsmi-mi250-gfx9010-rocm6.json")
    assert json.loads(read("rocmsmi-mi250-gfx9010-rocm6.json"))["card0"]["GFX Version"] == "gfx9010"
    assert gpu == {
        "index": 0,
        "product_name": "AMD INSTINCT MI250 (MCM) OAM AC MBA",
        "vram_total_bytes": None,
        "vram_used_bytes": None,
        "temperature_c": 44.0,
        "power_w": 91.0,
        "power_limit_w": 560.0,
        "bdf": "0000:29:00.0",
        "gfx": None,
        "numa_node": None,
    }
    facts = build_facts([gpu], [])
    assert facts["rocm_smi_gpus"][0]["gfx"] is None


@pytest.mark.parametrize(
    ("printed", "reported"),
    [
        ("gfx9010", None),  # MI200 (9.0.10) as rocm-smi prints it
        ("gfx9012", None),  # 9.0.12 (gfx90c) rendered the same way
        ("gfx10310", None),
        ("gfx90a", "gfx90a"),
        ("gfx942", "gfx942"),
        ("gfx950", "gfx950"),
        ("gfx1010", "gfx1010"),  # a real RDNA1 target of the same length as the bogus one
        ("gfx1100", "gfx1100"),
        ("gfx1151", "gfx1151"),
        ("N/A", None),
        ("gfx942:sramecc+:xnack-", None),
    ],
)
def test_gfx_accepts_only_gfx_target_names(printed, reported):
    text = mutate_rocm(lambda data: _set(data["card0"], "GFX Version", printed))
    assert parse_rocm_smi_json(text)["gpus"][0]["gfx"] == reported


def test_amdsmi_static_gfx_goes_through_the_same_check():
    text = mutate_static(lambda gpus: _set(gpus[3]["asic"], "target_graphics_version", "gfx9010"))
    assert column(parse_amdsmi_static(text), "gfx") == ["gfx942"] * 3 + [None] + ["gfx942"] * 4


# --- facts ---------------------------------------------------------------------------------------


def test_facts_for_pcie_only_node():
    parsed = parse_rocm_smi_json(read("rocmsmi-mi100-4gpu-rocm602.json"))
    facts = build_facts(parsed["gpus"], parsed["links"])
    assert set(facts) == {"rocm_smi_gpus", "rocm_smi_links", "rocm_smi_topology"}
    assert facts["rocm_smi_topology"] == {
        "all_xgmi": False,
        "pcie_pairs": [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]],
        "numa_nodes": {"1": [0, 1, 2, 3]},
    }


def test_all_xgmi_is_unknown_without_links_or_with_one_gpu():
    gpus = gpus_of("amdsmi-static-mi300x-8gpu.json")
    assert build_facts(gpus, [])["rocm_smi_topology"]["all_xgmi"] is None
    partial = [{"a": 0, "b": 1, "link_type": "XGMI"}]
    assert build_facts(gpus, partial)["rocm_smi_topology"]["all_xgmi"] is None
    assert build_facts(gpus_of("amdsmi-static-mi210.json"), [])["rocm_smi_topology"]["all_xgmi"] is None


# --- garbled input -------------------------------------------------------------------------------


def mutate_static(change):
    data = json.loads(read("amdsmi-static-mi300x-8gpu.json"))
    change(data["gpu_data"])
    return json.dumps(data)


def mutate_rocm(change):
    data = json.loads(read("rocmsmi-mi100-4gpu-rocm602.json"))
    change(data)
    return json.dumps(data)


def _set(target, key, value):
    target[key] = value


GARBLED = {
    "empty": (parse_amdsmi_static, ""),
    "blank": (parse_rocm_smi_json, "  \n"),
    "not json": (parse_amdsmi_static, "AMD SMI is not initialized\n"),
    "truncated static": (parse_amdsmi_static, read("amdsmi-static-mi300x-8gpu.json")[:5000]),
    "truncated rocm-smi": (parse_rocm_smi_json, read("rocmsmi-mi100-4gpu-rocm602.json")[:-40]),
    "unknown object": (parse_amdsmi_static, '{"gpus": []}'),
    "gpu_data not a list": (parse_amdsmi_static, '{"gpu_data": {"gpu": 0}}'),
    "gpu index not a number": (parse_amdsmi_static, mutate_static(lambda gpus: _set(gpus[0], "gpu", "0"))),
    "gpu index duplicated": (parse_amdsmi_static, mutate_static(lambda gpus: _set(gpus[1], "gpu", 0))),
    "vram not a number": (
        parse_amdsmi_static,
        mutate_static(lambda gpus: _set(gpus[0]["vram"], "size", {"value": "lots", "unit": "MB"})),
    ),
    "vram bare number": (parse_amdsmi_static, mutate_static(lambda gpus: _set(gpus[0]["vram"], "size", 196592))),
    "vram unknown unit": (
        parse_amdsmi_static,
        mutate_static(lambda gpus: _set(gpus[0]["vram"], "size", {"value": 192, "unit": "GB"})),
    ),
    "vram section a list": (parse_amdsmi_static, mutate_static(lambda gpus: _set(gpus[0], "vram", [1]))),
    "not static output": (parse_amdsmi_static, '[{"gpu": 0, "mem_usage": {}}]'),
    "metric used is text": (
        parse_amdsmi_metric,
        json.dumps([{"gpu": 0, "mem_usage": {"used_vram": {"value": "12 MB", "unit": "MB"}}}]),
    ),
    "metric bool power": (
        parse_amdsmi_metric,
        json.dumps([{"gpu": 0, "power": {"socket_power": {"value": True, "unit": "W"}}}]),
    ),
    "metric duplicate": (parse_amdsmi_metric, json.dumps([{"gpu": 1}, {"gpu": 1}])),
    "topology unknown link": (
        parse_amdsmi_topology,
        json.dumps([{"gpu": 0, "links": [{"gpu": 1, "link_type": "NVLINK"}]}]),
    ),
    "topology without links": (parse_amdsmi_topology, json.dumps([{"gpu": 0, "bdf": "0000:01:00.0"}])),
    "rocm-smi list": (parse_rocm_smi_json, "[]"),
    "rocm-smi unknown key": (parse_rocm_smi_json, mutate_rocm(lambda data: _set(data, "gpu0", {}))),
    "rocm-smi card not an object": (parse_rocm_smi_json, mutate_rocm(lambda data: _set(data, "card0", "x"))),
    "rocm-smi vram not a number": (
        parse_rocm_smi_json,
        mutate_rocm(lambda data: _set(data["card0"], "VRAM Total Memory (B)", "32 GB")),
    ),
    "rocm-smi vram number type": (
        parse_rocm_smi_json,
        mutate_rocm(lambda data: _set(data["card0"], "VRAM Total Memory (B)", 34342961152)),
    ),
    "rocm-smi temperature garbage": (
        parse_rocm_smi_json,
        mutate_rocm(lambda data: _set(data["card1"], "Temperature (Sensor junction) (C)", "hot")),
    ),
    "rocm-smi link type garbage": (
        parse_rocm_smi_json,
        mutate_rocm(lambda data: _set(data["system"], "(Topology) Link type between DRM devices 0 and 1", "?")),
    ),
    "rocm-smi link to itself": (
        parse_rocm_smi_json,
        mutate_rocm(lambda data: _set(data["system"], "(Topology) Link type between DRM devices 2 and 2", "XGMI")),
    ),
    "rocm-smi link both ways differ": (
        parse_rocm_smi_json,
        mutate_rocm(lambda data: _set(data["system"], "(Topology) Link type between DRM devices 1 and 0", "XGMI")),
    ),
    "showtopo truncated": (
        parse_rocm_smi_showtopo,
        read("rocmsmi-showtopo-8gpu-xgmi.txt").split("Numa Nodes")[0],
    ),
    "showtopo asymmetric": (
        parse_rocm_smi_showtopo,
        read("rocmsmi-showtopo-8gpu-xgmi.txt").replace(
            "GPU1   XGMI         0            XGMI", "GPU1   PCIE         0            XGMI"
        ),
    ),
    "showtopo missing row": (
        parse_rocm_smi_showtopo,
        "\n".join(
            line
            for line in read("rocmsmi-showtopo-8gpu-xgmi.txt").splitlines()
            if not (line.startswith("GPU7 ") and "XGMI" in line)
        ),
    ),
    "showtopo of json": (parse_rocm_smi_showtopo, read("rocmsmi-mi100-4gpu-rocm602.json")),
    "text truncated": (parse_rocm_smi_text, read("rocmsmi-use-meminfo-vram-8gpu.txt")[:900]),
    "text vram garbage": (
        parse_rocm_smi_text,
        read("rocmsmi-use-meminfo-vram-8gpu.txt").replace("(B): 297611264", "(B): 297 MB"),
    ),
    "concise temperature garbage": (
        parse_rocm_smi_concise,
        read("rocmsmi-concise-8gpu.txt").replace("43.0°C      155.0W", "43.0°F      155.0W"),
    ),
}


@pytest.mark.parametrize("case", sorted(GARBLED))
def test_garbled_output_raises(case):
    parser, text = GARBLED[case]
    with pytest.raises(SmiError) as err:
        parser(text)
    assert err.value.reason == "unparsable"
    assert err.value.runbook == UNPARSED
    assert UNPARSED in str(err.value)


def test_showtopo_sanity_of_the_missing_row_case():
    # Guard: the replacement above must really have removed a row.
    assert GARBLED["showtopo missing row"][1] != read("rocmsmi-showtopo-8gpu-xgmi.txt")
    assert GARBLED["showtopo asymmetric"][1] != read("rocmsmi-showtopo-8gpu-xgmi.txt")


def test_zero_gpus_parse_to_empty_lists():
    assert parse_amdsmi_static('{"gpu_data": []}') == []
    assert parse_rocm_smi_json('{"system": {"Driver version": "6.3.6"}}') == {"gpus": [], "links": []}


# --- the module, end to end through ansible ------------------------------------------------------


def fake_tool(tmp_path, name, cases):
    """An executable that answers like amd-smi/rocm-smi: ``cases`` maps the first argument to a
    fixture path (printed) or an exit code; ``*`` is the default."""
    lines = ["#!/bin/sh", 'case "$1" in']
    for arg, answer in cases.items():
        action = f"cat '{answer}'" if isinstance(answer, Path) else f"echo '{arg} failed' >&2; exit {answer}"
        lines.append(f"  {arg}) {action};;")
    lines += ["esac", ""]
    path = tmp_path / name
    path.write_text("\n".join(lines))
    path.chmod(0o755)
    return path


def run_module(args):
    return conftest_run_module("rocm_smi_facts", args)[1]


def test_module_amdsmi_static_with_failing_metric(tmp_path):
    tool = fake_tool(tmp_path, "amd-smi", {"static": SMI / "amdsmi-static-mi300x-8gpu.json", "*": 1})
    result = run_module(f"amd_smi_path={tool} rocm_smi_path={tmp_path}/absent")
    assert not result.get("failed"), result
    assert result["changed"] is False
    assert result["rocm_smi_source"] == "amd-smi"
    gpus = result["ansible_facts"]["rocm_smi_gpus"]
    assert len(gpus) == 8
    assert {gpu["product_name"] for gpu in gpus} == {"AMD Instinct MI300X"}
    assert {gpu["vram_total_bytes"] for gpu in gpus} == {206141652992}
    assert {gpu["vram_used_bytes"] for gpu in gpus} == {None}
    assert result["ansible_facts"]["rocm_smi_links"] == []
    assert result["ansible_facts"]["rocm_smi_topology"]["numa_nodes"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    warnings = " ".join(result["warnings"])
    assert "metric --json" in warnings
    assert "no used VRAM" in warnings


def test_module_amdsmi_static_metric_and_topology(tmp_path):
    """metric and topology inputs built in code (no recordings exist), static is the recording."""
    metric = tmp_path / "metric.json"
    metric.write_text(metric_json(count=8))
    topology = tmp_path / "topology.json"
    topology.write_text(topology_json([["SELF" if a == b else "XGMI" for b in range(8)] for a in range(8)]))
    tool = fake_tool(
        tmp_path,
        "amd-smi",
        {"static": SMI / "amdsmi-static-mi300x-8gpu.json", "metric": metric, "topology": topology},
    )
    result = run_module(f"amd_smi_path={tool}")
    assert not result.get("failed"), result
    facts = result["ansible_facts"]
    assert {gpu["vram_used_bytes"] for gpu in facts["rocm_smi_gpus"]} == {283 * MIB}
    assert {gpu["temperature_c"] for gpu in facts["rocm_smi_gpus"]} == {43}
    assert len(facts["rocm_smi_links"]) == 28
    assert facts["rocm_smi_topology"]["all_xgmi"] is True
    assert not result.get("warnings")


def test_module_falls_back_to_rocm_smi(tmp_path):
    tool = fake_tool(tmp_path, "rocm-smi", {"*": SMI / "rocmsmi-mi100-4gpu-rocm602.json"})
    result = run_module(f"amd_smi_path={tmp_path}/absent/amd-smi rocm_smi_path={tool}")
    assert not result.get("failed"), result
    assert result["rocm_smi_source"] == "rocm-smi"
    facts = result["ansible_facts"]
    assert [gpu["product_name"] for gpu in facts["rocm_smi_gpus"]] == [MI100] * 4
    assert [gpu["vram_total_bytes"] for gpu in facts["rocm_smi_gpus"]] == [34342961152] * 4
    assert [gpu["temperature_c"] for gpu in facts["rocm_smi_gpus"]] == [55.0, 58.0, 57.0, 53.0]
    assert {link["link_type"] for link in facts["rocm_smi_links"]} == {"PCIE"}
    assert facts["rocm_smi_topology"]["all_xgmi"] is False


def test_module_fails_without_either_tool(tmp_path):
    result = run_module(f"amd_smi_path={tmp_path}/amd-smi rocm_smi_path={tmp_path}/rocm-smi")
    assert result["failed"] is True
    assert result["reason"] == "missing_binary"
    assert result["runbook"] == "docs/runbooks/driver-not-loaded.md"
    assert "docs/runbooks/driver-not-loaded.md" in result["msg"]


def test_module_fails_on_truncated_static(tmp_path):
    truncated = tmp_path / "static.json"
    truncated.write_text(read("amdsmi-static-mi300x-8gpu.json")[:3000])
    tool = fake_tool(tmp_path, "amd-smi", {"static": truncated, "*": 1})
    result = run_module(f"amd_smi_path={tool}")
    assert result["failed"] is True
    assert result["reason"] == "unparsable"
    assert UNPARSED in result["msg"]


def test_module_zero_gpus_fails_unless_allowed(tmp_path):
    empty = tmp_path / "static.json"
    empty.write_text('{"gpu_data": []}\n')
    tool = fake_tool(tmp_path, "amd-smi", {"static": empty, "*": 1})
    result = run_module(f"amd_smi_path={tool}")
    assert result["failed"] is True
    assert result["reason"] == "no_gpu"
    assert result["runbook"] == "docs/runbooks/gpu-missing.md"
    allowed = run_module(f"amd_smi_path={tool} allow_no_gpu=true")
    assert not allowed.get("failed"), allowed
    assert allowed["ansible_facts"]["rocm_smi_gpus"] == []
