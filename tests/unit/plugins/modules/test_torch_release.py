"""The torch_release module through ansible, as a task runs it: the rocm stage's record read from the
node (a file in tmp_path, in the shape roles/rocm/tasks/verify.yml writes), the release map of the
pytorch role, and check mode."""

import json

import yaml

from tests.unit.conftest import ROOT, run_module

BUILDS = yaml.safe_load((ROOT / "roles/pytorch/vars/main.yml").read_text())["pytorch_rocm_wheels"]


def args(record, **extra):
    return json.dumps({"torch_version": "2.10.0", "builds": BUILDS, "record": str(record), **extra})


def test_the_record_on_the_node_gives_the_wheel_in_check_mode_too(tmp_path):
    record = tmp_path / "instinct_rocm.fact"
    record.write_text(json.dumps({"version": "7.1.0", "gpu_count": 8, "gfx_archs": ["gfx942"]}, indent=2) + "\n")
    rc, result = run_module("torch_release", args(record), ["--check"])
    assert rc == 0, result
    assert (result["record_version"], result["rocm_version"], result["rocm_version_source"]) == (
        "7.1.0",
        "7.1.0",
        "record",
    )
    assert result["index_url"] == "https://download.pytorch.org/whl/rocm7.1"
    assert result["local_version"] == "rocm7.1"
    assert result["published"] == ["rocm7.0", "rocm7.1"]
    assert result["problem"] is None and result["hip_problem"] is None
    assert result["changed"] is False


def test_a_missing_or_unreadable_record_is_no_record(tmp_path):
    rc, result = run_module("torch_release", args(tmp_path / "absent.fact", rocm_version="7.0.2"))
    assert rc == 0, result
    assert (result["record_version"], result["rocm_version_source"]) == (None, "rocm_version")
    assert result["local_version"] == "rocm7.0"
    broken = tmp_path / "broken.fact"
    broken.write_text("{not json")
    rc, result = run_module("torch_release", args(broken))
    assert rc == 0, result
    assert result["record_version"] is None
    assert "no ROCm release is known for this node" in result["problem"]


def test_the_hip_of_the_installed_torch_is_compared_with_the_record(tmp_path):
    record = tmp_path / "instinct_rocm.fact"
    record.write_text(json.dumps({"version": "7.1.0"}))
    rc, result = run_module("torch_release", args(record, hip_version="7.0.51831-a3e329ad8"))
    assert rc == 0, result
    assert "was built for ROCm 7.0" in result["hip_problem"] and "/opt/rocm is ROCm 7.1.0" in result["hip_problem"]
    assert result["runbook"] == "torch-rocm-mismatch.md"
    rc, result = run_module("torch_release", args(record, hip_version="7.1.52802-26aae437f6"))
    assert result["hip_problem"] is None
