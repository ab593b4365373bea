"""ds_report parsing on real reports (tests/fixtures/ds_report/SOURCES.md)."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.pystack import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils.ds_report import (
    DsReportError,
    ds_build_env,
    ds_op_problems,
    parse_ds_report,
)
from tests.unit.conftest import FIXTURES

DIR = FIXTURES / "ds_report"


def report(name):
    return parse_ds_report((DIR / name).read_text())


def test_rocm_mi300x_with_colour_codes():
    facts = report("rocm-mi300x-gfx942-ds0.15.3-ansi.txt")
    assert facts["accelerator"] == "cuda"  # DeepSpeed drives HIP through torch.cuda
    assert facts["torch_hip_version"] == "6.2.41133-dd7f95766"
    assert facts["torch_cuda_version"] is None
    assert facts["torch_version"] == "2.5.0+rocm6.2"
    assert facts["deepspeed_version"] == "0.15.3+unknown"
    assert facts["installed_ops"] == []
    assert facts["incompatible_ops"] == ["evoformer_attn", "fp_quantizer", "gds", "sparse_attn"]
    assert facts["ops"]["fused_adam"] == {"installed": False, "compatible": True}
    assert facts["ops_prebuilt"] is True  # "torch 2.5, hip 6.2"


def test_rocm_mi250x_jit_only():
    facts = report("rocm-lumi-mi250x-ds0.14.0.txt")
    assert facts["torch_hip_version"] == "6.0.32830-d62f6a171"
    assert facts["incompatible_ops"] == ["async_io", "evoformer_attn", "sparse_attn"]
    assert facts["ops_prebuilt"] is False  # "torch 0.0, hip 0.0"


def test_cuda_with_prebuilt_ops():
    facts = report("cuda-ds0.14.5-ops-prebuilt.txt")
    assert facts["torch_hip_version"] is None
    assert facts["torch_cuda_version"] == "12.1"
    assert facts["accelerator"] is None  # this copy has no log line
    assert {"cpu_adam", "fused_adam", "async_io", "transformer", "quantizer"} <= set(facts["installed_ops"])
    assert len(facts["installed_ops"]) == 15
    assert ds_op_problems(facts, ["CPU_ADAM", "FUSED_ADAM"]) == []


def test_cuda_with_linker_noise_between_op_lines():
    facts = report("cuda-rtx4070-ds0.17.5.txt")
    assert facts["deepspeed_version"] == "0.17.5"
    assert "gds" in facts["ops"]
    assert facts["incompatible_ops"] == ["evoformer_attn", "fp_quantizer", "gds", "sparse_attn"]


def test_cpu_accelerator():
    facts = report("cpu-axion-arm64-ds0.19.0.txt")
    assert facts["accelerator"] == "cpu"
    assert facts["torch_version"] == "2.12.0+cpu"
    assert "deepspeed_not_implemented" in facts["ops"]
    assert facts["incompatible_ops"] == ["async_io"]
    assert ds_op_problems(facts, ["CPU_ADAM", "SHM_COMM"]) == ["CPU_ADAM", "SHM_COMM"]
    # ds_report names the CPU communication op deepspeed_shm_comm (its builder's NAME).
    built = dict(facts, installed_ops=["cpu_adam", "deepspeed_shm_comm"])
    assert ds_op_problems(built, ["CPU_ADAM", "SHM_COMM"]) == []
    # Async I/O's switch is DS_BUILD_AIO, its builder's NAME async_io (not installed in this report).
    assert ds_op_problems(facts, ["AIO"]) == ["AIO"]
    assert ds_op_problems(dict(facts, installed_ops=["async_io"]), ["AIO"]) == []


@pytest.mark.parametrize("text", ["", "Traceback (most recent call last):\n  ...\nImportError: x\n"])
def test_refuses_what_is_not_a_report(text):
    with pytest.raises(DsReportError):
        parse_ds_report(text)


def test_refuses_a_cut_report():
    text = (DIR / "rocm-mi300x-gfx942-ds0.15.3-ansi.txt").read_text()
    with pytest.raises(DsReportError, match="environment info"):
        parse_ds_report(text.split("DeepSpeed general environment info")[0])


def test_filter_wraps_errors():
    with pytest.raises(AnsibleFilterError, match="parse_ds_report: ds_report printed nothing"):
        FilterModule().filters()["ds_report"]("")


def test_build_env_all_minus_skipped():
    assert ds_build_env("all", ["SPARSE_ATTN", "GDS"]) == {
        "DS_BUILD_OPS": "1",
        "DS_BUILD_SPARSE_ATTN": "0",
        "DS_BUILD_GDS": "0",
    }


def test_build_env_selected_ops():
    assert ds_build_env(["CPU_ADAM", "FUSED_ADAM"]) == {
        "DS_BUILD_OPS": "0",
        "DS_BUILD_CPU_ADAM": "1",
        "DS_BUILD_FUSED_ADAM": "1",
    }


@pytest.mark.parametrize(("ops", "skip"), [("some", []), (["cpu_adam"], []), ("all", ["sparse-attn"])])
def test_build_env_refuses_bad_names(ops, skip):
    with pytest.raises(ValueError):
        ds_build_env(ops, skip)
