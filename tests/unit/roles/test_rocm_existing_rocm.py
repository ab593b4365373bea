"""The rocm role's validate step (roles/rocm/tasks/validate.yml) through ansible-playbook on the local
node, against a stand-in dpkg-query that answers as a node set up the way AMD documents, with a newer
ROCm than rocm_version: ROCm 7.1.0 with amdgpu 30.20 (versions of AMD's packages as public ROCm issues
show them, molecule/resources/amd-repo/README.md). The whole role on such a node is molecule/rocm_negative's
instinct-neg-amdway."""

import os

from tests.unit.conftest import ROOT, role_step_playbook, run_local_play

INSTALLED = "rocm-core\t7.1.0.70100-20~22.04\tii \namdgpu-dkms\t1:6.16.6.30200000-2238411.22.04\tii \n"

PLAYBOOK = (
    role_step_playbook("rocm", "validate.yml", "Validate the ROCm settings")
    + """

    - name: Show the release the role goes on with
      ansible.builtin.debug:
        msg: "release={{ rocm_release_info.version }} amdgpu={{ rocm_release_info.amdgpu_folder }}"
"""
)


def run_validate(tmp_path, installed=INSTALLED, check=False, **extravars):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    calls = tmp_path / "calls"
    (bin_dir / "dpkg-query").write_text(f"#!/bin/sh\necho \"$*\" >> '{calls}'\nprintf '%s' '{installed}'\n")
    (bin_dir / "dpkg-query").chmod(0o755)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    # The local machine's release stands for a supported one (the suite check is not under test).
    facts = {"ansible_facts": {"distribution": "Ubuntu", "distribution_release": "jammy"}}
    proc = run_local_play(tmp_path / "play.yml", {**facts, **extravars}, check=check, bin_dir=bin_dir)
    asked = calls.read_text().splitlines() if calls.exists() else []
    return proc, " ".join(proc.stdout.split()), asked


def test_install_refuses_to_downgrade_a_newer_rocm_naming_both_releases_and_both_ways_forward(tmp_path):
    proc, out, asked = run_validate(tmp_path, check=True)
    assert proc.returncode != 0, out[-3000:]
    assert any(call.endswith(" rocm-core amdgpu-dkms") for call in asked), asked  # read in check mode too
    assert "node1: ROCm 7.1.0 (rocm-core 7.1.0.70100-20~22.04) is installed and amdgpu 30.20" in out, out[-3000:]
    assert "newer than the pinned ROCm 7.0.2 with amdgpu 30.10.2" in out
    assert "rocm_manage: verify" in out and "rocm_allow_downgrade: true" in out
    assert "See docs/runbooks/existing-rocm.md" in out


def test_install_goes_on_when_the_downgrade_is_allowed_or_the_release_is_the_installed_one(tmp_path):
    proc, out, _asked = run_validate(tmp_path, rocm_allow_downgrade=True)
    assert proc.returncode == 0, out[-3000:]
    assert "release=7.0.2 amdgpu=30.10.2" in out
    proc, out, _asked = run_validate(tmp_path, rocm_version="7.1.0")
    assert proc.returncode == 0, out[-3000:]
    assert "release=7.1.0 amdgpu=30.20" in out


def test_verify_takes_the_installed_release_whatever_rocm_version_says(tmp_path):
    proc, out, _asked = run_validate(tmp_path, check=True, rocm_manage="verify")
    assert proc.returncode == 0, out[-3000:]
    assert "release=7.1.0 amdgpu=30.20" in out
    assert "changed=0" in out


def test_verify_refuses_a_release_missing_from_the_map_until_the_inventory_adds_it(tmp_path):
    releases = {"7.0.2": {"amdgpu": "30.10.2"}}
    proc, out, _asked = run_validate(tmp_path, rocm_manage="verify", instinct_rocm_releases=releases)
    assert proc.returncode != 0, out[-3000:]
    assert "node1: ROCm 7.1.0 is installed (rocm-core 7.1.0.70100-20~22.04), which is not in the supported" in out
    assert "add it to instinct_rocm_releases in the inventory" in out
    assert "rocm_manage is verify, so nothing was changed" in out
    added = dict(releases, **{"7.1.0": {"amdgpu": "30.20"}})
    proc, out, _asked = run_validate(tmp_path, rocm_manage="verify", instinct_rocm_releases=added)
    assert proc.returncode == 0, out[-3000:]
    assert "release=7.1.0 amdgpu=30.20" in out


def test_verify_refuses_a_node_without_rocm(tmp_path):
    proc, out, _asked = run_validate(tmp_path, installed="", rocm_manage="verify")
    assert proc.returncode != 0, out[-3000:]
    assert "node1: rocm_manage is verify but no ROCm is installed (no rocm-core package)" in out


EXISTING = role_step_playbook("rocm", "existing.yml", "Check the driver of the ROCm the node has")


def test_verify_stops_on_a_driver_that_is_not_the_running_one_and_reboots_nothing(tmp_path):
    # A recorded `dkms status` (tests/fixtures/driver/SOURCES.md) of a DKMS amdgpu this machine does not run.
    recorded = ROOT / "tests/fixtures/driver/dkms-status_rocm633_mi100_one-kernel_installed.txt"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dkms").write_text(f'#!/bin/sh\n[ "$*" = "status amdgpu" ] || exit 9\ncat {recorded}\n')
    (bin_dir / "dkms").chmod(0o755)
    (tmp_path / "play.yml").write_text(EXISTING)
    proc = run_local_play(tmp_path / "play.yml", {}, check=True, bin_dir=bin_dir)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0, out[-3000:]
    # The kernel of that recording is not this machine's: DKMS built nothing for the running kernel,
    # or (same kernel) the installed driver is not the loaded one; either stops verify with the fix.
    assert "node1: " in out and "rocm_manage is verify, so this role reboots nothing and changes nothing" in out
    assert "See docs/runbooks/" in out
    assert "changed=0" in out
    if os.uname().release != "6.8.0-55-generic":  # the recording's kernel
        kernel = os.uname().release
        assert f"amdgpu-dkms is installed but DKMS built no amdgpu for the running kernel {kernel}" in out, out[-3000:]
        assert f"install linux-headers-{kernel}" in out and "See docs/runbooks/kernel-headers.md" in out
