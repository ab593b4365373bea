"""parse_rocminfo on real recorded outputs (tests/fixtures/rocminfo/SOURCES.md says where from)."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.rocminfo import (
    RocminfoError,
    base_gfx,
    parse_rocminfo,
)
from tests.unit.conftest import FIXTURES

ROCMINFO = FIXTURES / "rocminfo"

# (fixture, GPU count, gfx archs, marketing names in order, CPU agent count)
GOOD = [
    ("mi300x-8gpu.txt", 8, ["gfx942"], ["AMD Instinct MI300X"] * 8, 2),
    ("mi300a.txt", 1, ["gfx940"], ["AMD Instinct MI300A"], 1),
    ("mi100-plus-igpu.txt", 2, ["gfx1036", "gfx908"], ["AMD Instinct MI100", "AMD Radeon Graphics"], 1),
    ("rx6700xt-gfx1030.txt", 1, ["gfx1030"], ["AMD Radeon RX 6700 XT"], 1),
    ("rx7900xtx-gfx1100-wsl.txt", 1, ["gfx1100"], ["AMD Radeon RX 7900 XTX"], 1),
]

# (fixture, reason, runbook, text that the message must contain)
FAILURES = [
    (
        "fail-rock-not-loaded.txt",
        "driver_not_loaded",
        "docs/runbooks/driver-not-loaded.md",
        "Unable to open /dev/kfd read-write: No such file or directory",
    ),
    (
        "fail-rock-not-loaded-rocm29.txt",
        "driver_not_loaded",
        "docs/runbooks/driver-not-loaded.md",
        "amdgpu kernel driver (ROCk/KFD) is not loaded",
    ),
    (
        "fail-kfd-permission.txt",
        "kfd_permission",
        "docs/runbooks/kfd-permission.md",
        "peastman is member of render group",
    ),
    (
        "fail-kfd-permission-not-render-group.txt",
        "kfd_permission",
        "docs/runbooks/kfd-permission.md",
        'navin is not member of "render" group',
    ),
]


def read(name):
    return (ROCMINFO / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(("fixture", "count", "archs", "names", "cpus"), GOOD)
def test_recorded_outputs_give_exact_facts(fixture, count, archs, names, cpus):
    facts = parse_rocminfo(read(fixture))
    assert facts["rocm_gpu_count"] == count
    assert len(facts["rocm_gpus"]) == count
    assert facts["rocm_gfx_archs"] == archs
    assert [gpu["marketing_name"] for gpu in facts["rocm_gpus"]] == names
    assert sum(agent["device_type"] == "CPU" for agent in facts["rocm_agents"]) == cpus
    assert len(facts["rocm_agents"]) == cpus + count


def test_mi300x_node_details():
    facts = parse_rocminfo(read("mi300x-8gpu.txt"))
    gpus = facts["rocm_gpus"]
    # CPU agents come first in rocminfo's list; GPUs are nodes 2..9.
    assert [a["device_type"] for a in facts["rocm_agents"][:2]] == ["CPU", "CPU"]
    assert [g["node"] for g in gpus] == list(range(2, 10))
    assert [g["uuid"] for g in gpus] == [
        "GPU-07386a321fa45d1e",
        "GPU-c14abb436c69353f",
        "GPU-4be0e20b12ab7fa1",
        "GPU-18c80aec63536c85",
        "GPU-98c78750297b3198",
        "GPU-c8d0ce1363e0130e",
        "GPU-fdee8fae2de9f2b6",
        "GPU-6f890acb8eb0492b",
    ]
    assert {g["isa"] for g in gpus} == {"amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"}
    assert {g["compute_units"] for g in gpus} == {304}
    assert {g["chip_id"] for g in gpus} == {"0x74a1"}
    assert not any(g["apu"] for g in gpus)
    assert facts["rocm_kfd_version"] == "6.8.5"


def test_mi300a_is_an_apu_and_keeps_a_cpu_name_with_a_colon():
    facts = parse_rocminfo(read("mi300a.txt"))
    assert facts["rocm_gpus"][0]["apu"] is True
    assert facts["rocm_gpus"][0]["compute_units"] == 228
    # Padded (older) format: values are stripped of their trailing spaces.
    assert facts["rocm_agents"][0]["name"] == "AMD Proto Sample : SH5-MI300A-A0"
    assert facts["rocm_kfd_version"] == "6.10.5"


def test_ansi_colours_and_wsl_banner_are_tolerated():
    assert "\x1b[37m" in read("rx6700xt-gfx1030.txt")
    assert parse_rocminfo(read("rx6700xt-gfx1030.txt"))["rocm_gpus"][0]["isa"] == "amdgcn-amd-amdhsa--gfx1030"
    wsl = read("rx7900xtx-gfx1100-wsl.txt")
    assert wsl.startswith("WSL environment detected.")
    assert parse_rocminfo(wsl)["rocm_gpus"][0]["uuid"] == ""


def test_crlf_line_endings_parse_the_same():
    text = read("mi300x-8gpu.txt")
    assert parse_rocminfo(text.replace("\n", "\r\n")) == parse_rocminfo(text)


@pytest.mark.parametrize(("fixture", "reason", "runbook", "detail"), FAILURES)
def test_failure_outputs_raise_with_cause_and_runbook(fixture, reason, runbook, detail):
    with pytest.raises(RocminfoError) as err:
        parse_rocminfo(read(fixture))
    assert err.value.reason == reason
    assert err.value.runbook == runbook
    assert detail in str(err.value)
    assert str(err.value).endswith(f"See {runbook}")


def test_kfd_permission_message_names_the_fix():
    with pytest.raises(RocminfoError, match="add it to the 'render' and 'video' groups"):
        parse_rocminfo(read("fail-kfd-permission.txt"))


@pytest.mark.parametrize(
    ("isa", "base"),
    [
        ("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "gfx942"),
        ("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", "gfx90a"),
        ("amdgcn-amd-amdhsa--gfx1100", "gfx1100"),
        ("gfx942:sramecc+:xnack-", "gfx942"),
        ("gfx908", "gfx908"),
    ],
)
def test_feature_suffixes_are_dropped(isa, base):
    assert base_gfx(isa) == base


@pytest.mark.parametrize(
    "text",
    [
        "",
        "command not found",
        "{}",
        # Cut off before the end: GPUs may be missing, so this must not parse.
        "truncated",
    ],
)
def test_unknown_or_cut_output_is_an_error(text):
    if text == "truncated":
        full = read("mi300x-8gpu.txt")
        text = full[: full.index("Agent 6")]
    with pytest.raises(RocminfoError) as err:
        parse_rocminfo(text)
    assert err.value.reason == "unparsable"


def test_a_missing_agent_banner_is_an_error_not_a_lower_count():
    full = read("mi300x-8gpu.txt")
    start = full.index("*******\nAgent 10\n*******\n")
    merged = full[:start] + full[start + len("*******\nAgent 10\n*******\n") :]
    with pytest.raises(RocminfoError, match="twice"):
        parse_rocminfo(merged)


def test_a_gpu_named_for_one_arch_with_the_isa_of_another_is_an_error():
    full = read("rx6700xt-gfx1030.txt")
    with pytest.raises(RocminfoError, match="ISA"):
        parse_rocminfo(full.replace("amdgcn-amd-amdhsa--gfx1030", "amdgcn-amd-amdhsa--gfx1031"))
