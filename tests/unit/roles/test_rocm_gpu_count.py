"""The rocm role's GPU count check (roles/rocm/tasks/gpu-count.yml) through ansible-playbook on the
local node, as provision.yml runs it: alone (no preflight fact in the run, so the role reads the PCI
bus itself) and after preflight. The stand-in lspci (the boundary with the PCI bus) replays the real
recording of an 8x MI300X node for 1002:74a1 (tests/fixtures/lspci/SOURCES.md) and prints nothing for
the other Instinct ids, as lspci does; ROCm's own count is given as the rocminfo probe's fact."""

from tests.unit.conftest import FIXTURES, role_step_playbook, run_local_play

RECORDED = FIXTURES / "lspci" / "mi300x-8gpu-d-1002-74a1-PP.txt"

PLAYBOOK = role_step_playbook("rocm", "gpu-count.yml", "Compare the GPU count with the PCI bus and the expected count")


def run_step(tmp_path, broken_lspci=False, check=False, **facts):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls"
    if broken_lspci:
        body = "echo 'pcilib: Cannot open /proc/bus/pci' >&2; exit 1"
    else:
        body = f"[ \"$*\" = '-d 1002:74a1 -PP' ] && cat '{RECORDED}'; exit 0"
    (bin_dir / "lspci").write_text(f"#!/bin/sh\necho \"$*\" >> '{calls}'\n{body}\n")
    (bin_dir / "lspci").chmod(0o755)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    proc = run_local_play(tmp_path / "play.yml", {"rocm_gfx_archs": ["gfx942"], **facts}, check=check, bin_dir=bin_dir)
    asked = calls.read_text().splitlines() if calls.exists() else []
    return proc, " ".join(proc.stdout.split()), asked


def test_provision_alone_counts_the_pci_bus_and_names_it_in_the_message(tmp_path):
    # The reported case: provision.yml alone, rocm_expected_gpus 9 on an 8-GPU node. The message said
    # "the PCI bus has an unchecked number of and rocm_expected_gpus is 9".
    proc, out, asked = run_step(tmp_path, rocm_gpu_count=8, rocm_expected_gpus=9, rocm_smi_gpus=[{}] * 8)
    assert proc.returncode != 0, out[-3000:]
    assert "-d 1002:74a1 -PP" in asked  # the bus was read by this step
    assert (
        "node1: ROCm sees 8 GPU(s) (gfx942), the PCI bus has 8 Instinct GPU(s), rocm-smi lists 8 and"
        " rocm_expected_gpus is 9. A GPU failed to initialise or is hidden from ROCm" in out
    ), out[-3000:]
    assert "unchecked" not in out
    assert "See docs/runbooks/gpu-missing.md" in out


def test_provision_alone_refuses_a_gpu_rocm_does_not_see(tmp_path):
    # Before, the PCI comparison was skipped whenever preflight had not run in the same play.
    proc, out, _asked = run_step(tmp_path, rocm_gpu_count=7, rocm_expected_gpus=0)
    assert proc.returncode != 0, out[-3000:]
    assert (
        "node1: ROCm sees 7 GPU(s) (gfx942), the PCI bus has 8 Instinct GPU(s) and rocm_expected_gpus is not set."
        in out
    ), out[-3000:]


def test_provision_alone_passes_when_rocm_sees_every_gpu_on_the_bus_in_check_mode_too(tmp_path):
    proc, out, asked = run_step(tmp_path, check=True, rocm_gpu_count=8, rocm_expected_gpus=8)
    assert proc.returncode == 0, out[-3000:]
    assert len(asked) > 1  # every Instinct id asked, in one task
    assert "changed=0" in out and "failed=0" in out


def test_after_preflight_its_count_is_used_and_the_bus_is_not_read_again(tmp_path):
    proc, out, asked = run_step(tmp_path, rocm_gpu_count=8, rocm_expected_gpus=9, preflight_pci_gpu_count="8")
    assert proc.returncode != 0, out[-3000:]
    assert asked == []
    assert "node1: ROCm sees 8 GPU(s) (gfx942), the PCI bus has 8 Instinct GPU(s) and rocm_expected_gpus is 9." in out


def test_a_failing_lspci_is_named_instead_of_a_count_and_does_not_fail_the_node(tmp_path):
    proc, out, _asked = run_step(tmp_path, broken_lspci=True, rocm_gpu_count=8, rocm_expected_gpus=0)
    assert proc.returncode == 0, out[-3000:]
    proc, out, _asked = run_step(tmp_path / "again", broken_lspci=True, rocm_gpu_count=8, rocm_expected_gpus=9)
    assert proc.returncode != 0, out[-3000:]
    assert "the PCI bus could not be read (" in out and "pcilib: Cannot open /proc/bus/pci" in out, out[-3000:]
    assert "and rocm_expected_gpus is 9." in out
