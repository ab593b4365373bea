"""The burn-in judgement (module_utils/health.py), through the health filters as the role calls them.

The SMI records are the collection's own parse of a recorded amd-smi (tests/fixtures/smi), so the
temperatures travel the same way as on a node: rocm_smi_facts -> health_host_result -> the table.
"""

import copy

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.health import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils import health
from ansible_collections.instinct.finetune.plugins.module_utils.rocm_smi import parse_amdsmi_static
from tests.unit.conftest import FIXTURES

FILTERS = FilterModule().filters()
judgement = FILTERS["health_burnin_judgement"]
device_problems = FILTERS["health_device_problems"]
table = FILTERS["health_burnin_table"]

MI300X = "AMD Instinct MI300X"
MI250X = "AMD Instinct MI250X"
SLOW_RUNBOOK = "docs/runbooks/thermal-throttling.md"
MISSING_RUNBOOK = "docs/runbooks/gpu-missing.md"


def smi_gpus(temperatures):
    """rocm_smi_gpus of the recorded 8x MI300X node, with the given temperatures."""
    gpus = parse_amdsmi_static((FIXTURES / "smi" / "amdsmi-static-mi300x-8gpu.json").read_text())
    assert len(gpus) == len(temperatures)
    for gpu, temperature in zip(gpus, temperatures, strict=True):
        gpu["temperature_c"] = temperature
    return gpus


def node(host, tflops, **options):
    """One node's health_host_result: options name, kind, smi_before, smi_after, bdfs."""
    name, kind, bdfs = options.get("name", MI300X), options.get("kind", "rocm"), options.get("bdfs")
    devices = [
        {
            "index": index,
            "name": name,
            "bdf": bdfs[index] if bdfs else None,
            "tflops": value,
            "iterations": 100,
            "seconds": 30.0,
        }
        for index, value in enumerate(tflops)
    ]
    return {
        "host": host,
        "allreduce": None,
        "burnin": {"device_kind": kind, "devices": devices, "torch": "2.10.0+rocm7.0"},
        "smi_before": options.get("smi_before"),
        "smi_after": options.get("smi_after"),
    }


def row(result, host, index):
    (found,) = [r for r in result["rows"] if r["host"] == host and r["index"] == index]
    return found


def test_a_gpu_at_half_of_its_peers_is_flagged_with_host_figures_fix_and_runbook():
    results = [node("node1", [600.0] * 8), node("node2", [600.0] * 3 + [300.0] + [600.0] * 4)]
    result = judgement(results)
    slow = row(result, "node2", 3)
    assert slow["slow"] is True
    assert slow["ratio_to_median"] == pytest.approx(0.5)
    assert slow["median_tflops"] == 600.0 and slow["peers"] == 16
    assert [r for r in result["rows"] if r["slow"]] == [slow]
    (problem,) = result["problems"]
    assert (problem["host"], problem["index"], problem["runbook"]) == ("node2", 3, SLOW_RUNBOOK)
    message = problem["message"]
    for part in ("node2", "GPU 3", MI300X, "300.0 TFLOP/s", "50%", "600.0", "16", "80%", "amd-smi", SLOW_RUNBOOK):
        assert part in message, (part, message)


def test_a_gpu_at_95_percent_is_not_flagged():
    result = judgement([node("node1", [600.0] * 8), node("node2", [600.0] * 7 + [570.0])])
    assert row(result, "node2", 7)["ratio_to_median"] == pytest.approx(0.95)
    assert result["problems"] == []
    assert not any(r["slow"] for r in result["rows"])


def test_the_tolerance_moves_the_line():
    results = [node("node1", [600.0] * 7 + [500.0])]  # 83 % of the median
    assert judgement(results)["problems"] == []
    assert [p["index"] for p in judgement(results, 0.1)["problems"]] == [7]
    assert judgement(results, tolerance=0.1)["tolerance"] == 0.1


def test_a_single_device_is_never_flagged_however_slow():
    result = judgement([node("node1", [0.5], name="Lonely GPU")])
    (only,) = result["rows"]
    assert only["slow"] is False and only["peers"] == 1 and only["ratio_to_median"] == 1.0
    assert result["problems"] == []


def test_mixed_models_are_compared_only_within_their_model():
    # Half as fast as the MI300Xs is normal for an MI250X GCD: not a problem. A slow MI250X is.
    results = [
        node("node1", [600.0] * 8),
        node("node2", [300.0, 300.0, 300.0, 120.0], name=MI250X),
    ]
    result = judgement(results)
    groups = {g["name"]: g for g in result["groups"]}
    assert groups[MI300X]["devices"] == 8 and groups[MI300X]["median_tflops"] == 600.0
    assert groups[MI250X]["devices"] == 4 and groups[MI250X]["median_tflops"] == 300.0
    assert groups[MI250X]["min_tflops"] == 120.0 and groups[MI250X]["max_tflops"] == 300.0
    assert [(p["host"], p["index"]) for p in result["problems"]] == [("node2", 3)]
    assert row(result, "node2", 0)["ratio_to_median"] == 1.0


def test_the_median_is_taken_over_every_gpu_of_the_model_across_the_play():
    # node2's GPUs are all slow: compared only within node2 they would look fine.
    result = judgement([node("node1", [600.0] * 8), node("node2", [600.0] * 8), node("node3", [400.0] * 8)])
    assert sorted({p["host"] for p in result["problems"]}) == ["node3"]
    assert len(result["problems"]) == 8


def test_two_devices_the_slow_one_is_flagged_the_fast_one_not():
    result = judgement([node("node1", [100.0]), node("node2", [50.0])])
    assert row(result, "node1", 0)["slow"] is False
    assert row(result, "node2", 0)["slow"] is True
    assert row(result, "node2", 0)["ratio_to_median"] == pytest.approx(50 / 75)


def test_temperatures_are_carried_through_by_index_when_counts_match():
    before = smi_gpus([40, 41, 42, 43, 44, 45, 46, 47])
    after = smi_gpus([70, 71, 72, 97, 74, 75, 76, 77])
    results = [
        node("node1", [600.0] * 8),
        node("node2", [600.0] * 3 + [300.0] + [600.0] * 4, smi_before=before, smi_after=after),
    ]
    result = judgement(results)
    hot = row(result, "node2", 3)
    assert (hot["temperature_before"], hot["temperature_after"]) == (43, 97)
    assert (row(result, "node2", 7)["temperature_before"], row(result, "node2", 7)["temperature_after"]) == (47, 77)
    assert row(result, "node1", 0)["temperature_before"] is None
    assert "from 43 to 97 C" in result["problems"][0]["message"]


def test_temperatures_follow_the_pci_location_when_torch_sees_a_subset():
    # HIP_VISIBLE_DEVICES=2,5: torch's devices 0 and 1 are the SMI tool's GPUs 2 and 5.
    before = smi_gpus([40, 41, 42, 43, 44, 45, 46, 47])
    bdfs = [before[2]["bdf"].upper().split(".")[0], before[5]["bdf"]]
    result = judgement([node("node1", [600.0, 600.0], smi_before=before, smi_after=before, bdfs=bdfs)])
    assert [r["temperature_before"] for r in result["rows"]] == [42, 45]


def test_no_temperature_guessed_when_torch_and_smi_disagree_without_pci_locations():
    before = smi_gpus([40, 41, 42, 43, 44, 45, 46, 47])
    result = judgement([node("node1", [600.0, 600.0], smi_before=before)])
    assert [r["temperature_before"] for r in result["rows"]] == [None, None]


def test_a_cpu_burnin_has_no_temperature_even_beside_simulated_gpus():
    # The sandbox: amd-smi prints 8 recorded MI300X, torch sees only the CPU.
    before = smi_gpus([40] * 8)
    results = [
        node("node1", [0.02], name="AMD EPYC", kind="cpu", smi_before=before, smi_after=before),
        node("node2", [0.021], name="AMD EPYC", kind="cpu", smi_before=before, smi_after=before),
    ]
    result = judgement(results)
    assert [(r["host"], r["device_kind"], r["temperature_before"]) for r in result["rows"]] == [
        ("node1", "cpu", None),
        ("node2", "cpu", None),
    ]
    assert result["problems"] == []


def test_rows_are_sorted_and_keep_what_the_report_needs():
    result = judgement([node("node2", [600.0, 610.0]), node("node1", [605.0])])
    assert [(r["host"], r["index"]) for r in result["rows"]] == [("node1", 0), ("node2", 0), ("node2", 1)]
    assert set(result["rows"][0]) == {
        "host",
        "index",
        "name",
        "device_kind",
        "bdf",
        "tflops",
        "iterations",
        "median_tflops",
        "peers",
        "ratio_to_median",
        "temperature_before",
        "temperature_after",
        "slow",
    }


@pytest.mark.parametrize(
    ("results", "tolerance", "message"),
    [
        ("node1", 0.2, "not a list"),
        ([node("node1", [600.0])], 1.5, "not a fraction"),
        ([node("node1", [600.0])], 0, "not a fraction"),
        ([{"burnin": {}}], 0.2, "'host'"),
        ([node("node1", [float("nan")])], 0.2, "not a finite number"),
        ([node("node1", ["fast"])], 0.2, "not a finite number"),
        ([node("node1", [600.0], kind="tpu")], 0.2, "device_kind"),
        ([node("node1", [600.0]), node("node1", [600.0])], 0.2, "appears twice"),
    ],
)
def test_malformed_input_is_refused_not_judged(results, tolerance, message):
    with pytest.raises(AnsibleFilterError, match=message):
        judgement(results, tolerance)


def test_a_device_listed_twice_is_refused():
    broken = node("node1", [600.0, 600.0])
    broken["burnin"]["devices"][1]["index"] = 0
    with pytest.raises(AnsibleFilterError, match="index of its own"):
        judgement([broken])


def test_the_input_is_not_modified():
    results = [node("node1", [600.0] * 2), node("node2", [300.0])]
    kept = copy.deepcopy(results)
    judgement(results)
    assert results == kept


# ---- the devices a node's burn-in ran on


def test_a_cpu_burnin_is_refused_where_gpus_are_expected():
    result = node("node1", [0.02], name="AMD EPYC", kind="cpu", smi_before=smi_gpus([40] * 8))
    (problem,) = device_problems(result, 8)
    for part in ("node1", "sees no GPU", "lists 8", "pytorch_device: cpu", MISSING_RUNBOOK):
        assert part in problem, (part, problem)


def test_a_cpu_burnin_is_accepted_on_a_cpu_node():
    result = node("node1", [0.02], name="AMD EPYC", kind="cpu", smi_before=smi_gpus([40] * 8))
    assert device_problems(result, 8, True) == []


def test_fewer_gpus_than_expected_names_the_counts_and_runbook():
    (problem,) = device_problems(node("node1", [600.0] * 7), 8)
    assert "node1" in problem and "sees 7 GPUs, 8 expected" in problem and MISSING_RUNBOOK in problem


def test_fewer_gpus_in_torch_than_the_smi_tool_lists():
    (problem,) = device_problems(node("node1", [600.0] * 7, smi_before=smi_gpus([40] * 8)))
    assert "lists 8 GPUs but torch sees 7" in problem and "HIP_VISIBLE_DEVICES" in problem


def test_every_gpu_present_is_no_problem():
    assert device_problems(node("node1", [600.0] * 8, smi_before=smi_gpus([40] * 8)), 8) == []
    assert device_problems(node("node1", [600.0] * 8)) == []


# ---- the table


def test_the_text_table_shows_host_gpu_name_figures_percent_and_temperatures():
    before = smi_gpus([40, 41, 42, 43, 44, 45, 46, 47])
    after = smi_gpus([70, 71, 72, 97, 74, 75, 76, 77])
    result = judgement([node("node1", [600.0] * 3 + [300.0] + [600.0] * 4, smi_before=before, smi_after=after)])
    lines = table(result)
    assert lines[0].split() == [
        "host",
        "gpu",
        "name",
        "TFLOP/s",
        "%",
        "of",
        "median",
        "temp",
        "before",
        "temp",
        "after",
    ]
    assert len(lines) == 9
    assert lines[4].split() == ["node1", "3", "AMD", "Instinct", "MI300X", "300.0", "50%", "43", "C", "97", "C", "SLOW"]
    assert lines[1].split()[5:] == ["600.0", "100%", "40", "C", "70", "C"]
    # Right-aligned figures: each ends where its header ends.
    end = lines[0].index("TFLOP/s") + len("TFLOP/s")
    assert lines[1][:end].endswith("600.0") and lines[4][:end].endswith("300.0")


def test_the_markdown_table_has_a_row_per_device_and_dashes_for_unknowns():
    result = judgement([node("node1", [0.0234], name="AMD EPYC", kind="cpu")])
    lines = table(result, "markdown")
    assert lines[0] == "| host | gpu | name | TFLOP/s | % of median | temp before | temp after | flag |"
    assert lines[1].startswith("|---|---|---|---:|")
    assert lines[2] == "| node1 | cpu | AMD EPYC | 0.0234 | 100% | - | - |  |"


def test_figures_keep_three_significant_digits_for_small_devices():
    assert [health.figure(v) for v in (612.44, 45.678, 0.02346, 0.0)] == ["612.4", "45.68", "0.0235", "0"]


def test_a_slow_cpu_is_called_a_cpu_not_a_gpu():
    result = judgement(
        [node("node1", [0.02], name="AMD EPYC", kind="cpu"), node("node2", [0.005], name="AMD EPYC", kind="cpu")]
    )
    (problem,) = result["problems"]
    assert problem["message"].startswith("node2: the CPU (AMD EPYC) reached 0.005 TFLOP/s")
    assert "GPU" not in problem["message"].split(". ")[0] and SLOW_RUNBOOK in problem["message"]


def test_an_unknown_table_style_is_refused():
    with pytest.raises(AnsibleFilterError, match="not 'text' or 'markdown'"):
        table(judgement([node("node1", [1.0])]), "html")


def test_the_pure_module_names_its_runbooks_as_files_that_exist():
    for page in health.RUNBOOKS.values():
        assert (FIXTURES.parent.parent / page).is_file(), page
