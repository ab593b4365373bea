"""Run the real rocminfo_facts module through ansible, with rocminfo_path pointing at a script
that prints a recorded output (the hardware boundary), and check what a playbook would get."""

import stat

import pytest

from tests.unit.conftest import FIXTURES, ROOT
from tests.unit.conftest import run_module as conftest_run_module


def fake_rocminfo(tmp_path, fixture, rc=0):
    script = tmp_path / "rocminfo"
    script.write_text(f"#!/bin/sh\ncat '{FIXTURES / 'rocminfo' / fixture}'\nexit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def run_module(args):
    return conftest_run_module("rocminfo_facts", args)


def test_module_returns_the_facts_of_an_8_gpu_mi300x_node(tmp_path):
    rc, result = run_module(f"rocminfo_path={fake_rocminfo(tmp_path, 'mi300x-8gpu.txt')}")
    assert rc == 0
    assert result["changed"] is False
    facts = result["ansible_facts"]
    assert facts["rocm_gpu_count"] == 8
    assert facts["rocm_gfx_archs"] == ["gfx942"]
    assert {gpu["marketing_name"] for gpu in facts["rocm_gpus"]} == {"AMD Instinct MI300X"}
    assert len(facts["rocm_agents"]) == 10


@pytest.mark.parametrize(
    ("fixture", "cause", "runbook"),
    [
        ("fail-rock-not-loaded.txt", "not loaded", "docs/runbooks/driver-not-loaded.md"),
        ("fail-kfd-permission-not-render-group.txt", "Permission denied", "docs/runbooks/kfd-permission.md"),
    ],
)
def test_module_fails_with_the_cause_and_the_runbook(tmp_path, fixture, cause, runbook):
    # rocminfo itself exits non-zero in these cases; the module still reads the output to say why.
    rc, result = run_module(f"rocminfo_path={fake_rocminfo(tmp_path, fixture, rc=1)}")
    assert rc != 0
    assert result["failed"] is True
    assert cause in result["msg"]
    assert runbook in result["msg"]
    assert result["runbook"] == runbook
    assert (ROOT / runbook).is_file()


def test_module_fails_clearly_when_rocminfo_is_missing(tmp_path):
    rc, result = run_module(f"rocminfo_path={tmp_path / 'absent' / 'rocminfo'}")
    assert rc != 0
    assert "rocminfo was not found" in result["msg"]
    assert result["reason"] == "missing_binary"


def test_module_refuses_a_node_without_gpus_unless_allowed(tmp_path):
    cpu_only = tmp_path / "cpu-only.txt"
    full = (FIXTURES / "rocminfo" / "mi300x-8gpu.txt").read_text()
    # Derived in the test, not a recording: the two CPU agents of a real output and no GPU agent,
    # which is what rocminfo lists when amdgpu is loaded but binds no GPU.
    cpu_only.write_text(full[: full.index("*******\nAgent 3")] + "*** Done ***\n")
    script = tmp_path / "rocminfo"
    script.write_text(f"#!/bin/sh\ncat '{cpu_only}'\n")
    script.chmod(0o755)
    rc, result = run_module(f"rocminfo_path={script}")
    assert rc != 0
    assert "no GPU agent" in result["msg"]
    assert "docs/runbooks/gpu-missing.md" in result["msg"]
    rc, result = run_module(f"rocminfo_path={script} allow_no_gpu=true")
    assert rc == 0
    assert result["ansible_facts"]["rocm_gpu_count"] == 0


def test_module_gives_up_on_a_hanging_rocminfo(tmp_path):
    script = tmp_path / "rocminfo"
    script.write_text("#!/bin/sh\nsleep 30\n")
    script.chmod(0o755)
    rc, result = run_module(f"rocminfo_path={script} timeout=1")
    assert rc != 0
    assert "did not finish within 1 s" in result["msg"]
