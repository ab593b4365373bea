import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.instinct.finetune.plugins.filter.build import FilterModule

FILTERS = FilterModule().filters()
pytorch_rocm_arch = FILTERS["pytorch_rocm_arch"]
build_jobs = FILTERS["build_jobs"]
ds_wheel_key = FILTERS["ds_wheel_key"]


@pytest.mark.parametrize(
    ("archs", "value"),
    [
        (["gfx942"], "gfx942"),
        (["gfx942", "gfx90a"], "gfx90a;gfx942"),
        (["gfx942:sramecc+:xnack-", "gfx942", "gfx90a:xnack-"], "gfx90a;gfx942"),
        (["gfx1100", "gfx1030", "gfx908"], "gfx1030;gfx1100;gfx908"),
        ("gfx90a;gfx942", "gfx90a;gfx942"),
    ],
)
def test_pytorch_rocm_arch(archs, value):
    assert pytorch_rocm_arch(archs) == value


@pytest.mark.parametrize("archs", [[], "", ["sm_90"], ["gfx94z"], ["amdgcn"], [None]])
def test_pytorch_rocm_arch_refuses_what_would_build_a_useless_torch(archs):
    with pytest.raises(AnsibleFilterError, match="pytorch_rocm_arch"):
        pytorch_rocm_arch(archs)


@pytest.mark.parametrize(
    ("cores", "memory_mb", "jobs"),
    [
        (16, 32768, 8),  # memory bound
        (8, 65536, 8),  # core bound
        (192, 2 * 1024 * 1024, 192),  # an MI300X host
        (2, 2048, 1),  # never 0
        (1, 100, 1),
        ("4", "16384", 4),  # facts may arrive as strings
    ],
)
def test_build_jobs(cores, memory_mb, jobs):
    assert build_jobs(cores, memory_mb) == jobs


def test_build_jobs_with_a_custom_budget_per_job():
    assert build_jobs(64, 65536, 8) == 8


@pytest.mark.parametrize(("cores", "memory_mb"), [(0, 1024), (4, 0), ("many", 1024), (None, 1024)])
def test_build_jobs_refuses_nonsense(cores, memory_mb):
    with pytest.raises(AnsibleFilterError, match="build_jobs"):
        build_jobs(cores, memory_mb)


@given(st.integers(1, 4096), st.integers(1, 64 * 1024 * 1024))
def test_build_jobs_is_between_one_and_the_core_count(cores, memory_mb):
    jobs = build_jobs(cores, memory_mb)
    assert 1 <= jobs <= cores
    assert jobs == 1 or jobs * 4 * 1024 <= memory_mb


def test_deepspeeds_wheel_key_changes_with_torch_rocm_arch_and_ops_and_only_with_them():
    ops = {"DS_BUILD_OPS": "0", "DS_BUILD_CPU_ADAM": "1"}
    key = ds_wheel_key("gfx942", "2.13.0+rocm7.0", "7.0.2", ops)
    assert key.startswith("gfx942-torch2.13.0_rocm7.0-rocm7.0.2-ops")
    assert ds_wheel_key("gfx942", "2.13.0+rocm7.0", "7.0.2", dict(reversed(list(ops.items())))) == key
    others = {
        ds_wheel_key("gfx942", "2.13.1+rocm7.0", "7.0.2", ops),  # a torch upgrade
        ds_wheel_key("gfx942", "2.13.0+rocm7.1", "7.0.2", ops),  # the same torch for another ROCm
        ds_wheel_key("gfx942", "2.13.0+rocm7.0", "7.1.0", ops),  # another ROCm on the node
        ds_wheel_key("gfx90a;gfx942", "2.13.0+rocm7.0", "7.0.2", ops),
        ds_wheel_key("gfx942", "2.13.0+rocm7.0", "7.0.2", dict(ops, DS_BUILD_FUSED_ADAM="1")),
    }
    assert key not in others and len(others) == 5
    assert ds_wheel_key("gfx90a;gfx942", "2.13.0+rocm7.0", "", ops).startswith(
        "gfx90a-gfx942-torch2.13.0_rocm7.0-rocmnone-"
    )
    with pytest.raises(AnsibleFilterError, match="needs torch's version"):
        ds_wheel_key("cpu", "", "", ops)
