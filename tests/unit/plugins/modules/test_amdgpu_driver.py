"""The amdgpu_driver module through ansible, as a task runs it, with a stand-in `dkms` on PATH that
prints a recorded `dkms status` (tests/fixtures/driver/SOURCES.md) and this machine's own /sys/module."""

import json
import os

from tests.unit.conftest import FIXTURES, run_module

RECORDED = FIXTURES / "driver" / "dkms-status_rocm633_mi100_one-kernel_installed.txt"
KERNEL = "6.8.0-55-generic"  # the kernel of that recording


def fake_dkms(tmp_path, monkeypatch, script):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dkms = bin_dir / "dkms"
    dkms.write_text(script)
    dkms.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_recorded_dkms_install_not_running_here_stops_the_node_naming_both_and_the_page(tmp_path, monkeypatch):
    fake_dkms(tmp_path, monkeypatch, f'#!/bin/sh\n[ "$*" = "status amdgpu" ] || exit 9\ncat {RECORDED}\n')
    rc, result = run_module("amdgpu_driver", json.dumps({"kernel": KERNEL}), ["--check"])
    assert rc == 0, result
    assert result["dkms_status"] == RECORDED.read_text().splitlines()
    assert result["installed_version"] == "6.10.5-2119913.24.04"
    # This machine runs no AMD DKMS driver of that version, whatever it has loaded.
    assert result["state"] == "reboot-required"
    assert result["loaded"] == os.path.isdir("/sys/module/amdgpu")
    assert result["problem"].startswith("reboot required: ")
    assert "DKMS installed amdgpu 6.10.5-2119913.24.04 for kernel 6.8.0-55-generic" in result["problem"]
    assert result["runbook"] == "reboot-required.md"
    assert result["changed"] is False


def test_a_failing_dkms_fails_naming_its_answer_and_a_page(tmp_path, monkeypatch):
    fake_dkms(tmp_path, monkeypatch, "#!/bin/sh\necho 'Error! Could not locate dkms.conf' >&2\nexit 4\n")
    rc, result = run_module("amdgpu_driver", json.dumps({"kernel": KERNEL}))
    assert rc != 0
    assert "dkms status amdgpu failed (rc 4): Error! Could not locate dkms.conf" in result["msg"]
    assert "docs/runbooks/driver-not-loaded.md" in result["msg"]
