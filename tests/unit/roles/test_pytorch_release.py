"""The pytorch role's choice of the ROCm wheel (roles/pytorch/tasks/validate.yml) and its check of
torch's HIP against the node's ROCm (roles/pytorch/tasks/verify.yml), through ansible-playbook on the
local node, as stack.yml runs them: the ROCm release comes from the rocm stage's record (a file in
tmp_path standing for /etc/ansible/facts.d/instinct_rocm.fact, in the shape roles/rocm/tasks/verify.yml
writes) or from rocm_version. The GPU facts are given; the venv's probe is a stand-in script that
prints what `instinct-probe --torch` prints for the torch of the test (versions as real ROCm wheels
report them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.conftest import COLLECTIONS, ROOT

PLAYBOOK = f"""\
- name: Run the pytorch role's STEP step
  hosts: all
  gather_facts: false
  vars_files:
    - {ROOT}/roles/common/defaults/main.yml
    - {ROOT}/roles/common/vars/main.yml
    - {ROOT}/roles/pytorch/defaults/main.yml
    - {ROOT}/roles/pytorch/vars/main.yml
  tasks:
    - name: Run the step
      ansible.builtin.include_tasks: {ROOT}/roles/pytorch/tasks/STEP.yml
    - name: Show what the step chose
      ansible.builtin.debug:
        msg: >-
          CHOSEN index=[{{{{ pytorch_wheel_index | default('-') }}}}]
          label=[{{{{ pytorch_wheel_label | default('-') }}}}]
"""


def run_step(tmp_path, step="validate", record=None, probe=None, options=(), **extra):
    record_path = tmp_path / "facts.d" / "instinct_rocm.fact"
    if record is not None:
        record_path.parent.mkdir()
        record_path.write_text(json.dumps({"version": record, "gpu_count": 8, "gfx_archs": ["gfx942"]}, indent=2))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    document = {"python": "3.11.9", "torch": probe or {}}
    (venv / "bin" / "instinct-probe").write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(document)}\nEOF\n")
    (venv / "bin" / "instinct-probe").chmod(0o755)
    (tmp_path / "play.yml").write_text(PLAYBOOK.replace("STEP", step))
    extravars = {
        "ansible_become": False,
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "instinct_rocm_record": str(record_path),
        "instinct_venv": str(venv),
        "rocm_gpu_count": 8,
        "rocm_gfx_archs": ["gfx942"],
        **extra,
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", HOME=str(tmp_path))  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(playbook) if playbook.exists() else "ansible-playbook", "-i", "node1,", str(tmp_path / "play.yml"),
         "-e", json.dumps(extravars), *options],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return proc, " ".join(proc.stdout.split())


def test_the_recorded_rocm_release_picks_the_index_and_label(tmp_path):
    proc, out = run_step(tmp_path, record="7.1.0")
    assert proc.returncode == 0, out[-3000:]
    assert "CHOSEN index=[https://download.pytorch.org/whl/rocm7.1] label=[rocm7.1]" in out


def test_the_record_wins_over_rocm_version_and_the_play_says_so(tmp_path):
    proc, out = run_step(tmp_path, record="7.1.0", rocm_version="7.0.2")
    assert proc.returncode == 0, out[-3000:]
    assert "CHOSEN index=[https://download.pytorch.org/whl/rocm7.1] label=[rocm7.1]" in out
    assert "node1: rocm_version is 7.0.2 but the rocm stage installed ROCm 7.1.0 on this node" in out


def test_without_a_record_rocm_version_decides(tmp_path):
    proc, out = run_step(tmp_path, rocm_version="7.0.2")
    assert proc.returncode == 0, out[-3000:]
    assert "CHOSEN index=[https://download.pytorch.org/whl/rocm7.0] label=[rocm7.0]" in out


def test_a_torch_not_published_for_the_nodes_rocm_is_refused_naming_host_value_fix_and_page(tmp_path):
    proc, out = run_step(tmp_path, record="7.2.0")
    assert proc.returncode != 0, out[-3000:]
    assert "node1: PyTorch publishes no torch 2.10.0 for ROCm 7.2" in out, out[-3000:]
    assert "set pytorch_version to a torch built for ROCm 7.2 (2.11, 2.12, 2.13)" in out
    assert f"from the rocm stage record {tmp_path}/facts.d/instinct_rocm.fact" in out
    assert "See docs/runbooks/torch-rocm-mismatch.md" in out
    assert "CHOSEN" not in out


def test_no_record_and_no_rocm_version_is_refused_on_the_wheel_path(tmp_path):
    proc, out = run_step(tmp_path)
    assert proc.returncode != 0, out[-3000:]
    assert "node1: no ROCm release is known for this node" in out


def test_a_check_run_before_the_first_record_says_so_and_chooses_no_wheel(tmp_path):
    proc, out = run_step(tmp_path, options=["--check"])
    assert proc.returncode == 0, out[-3000:]
    assert "check mode on node1: no ROCm release is recorded yet" in out
    assert "CHOSEN index=[] label=[]" in out


def test_the_source_path_needs_no_index(tmp_path):
    """molecule/pytorch_source: no rocm stage, pytorch_index_url empty, the source method."""
    proc, out = run_step(tmp_path, pytorch_install_method="source", pytorch_index_url="")
    assert proc.returncode == 0, out[-3000:]
    assert "CHOSEN index=[] label=[]" in out


def test_overrides_are_taken_as_set(tmp_path):
    proc, out = run_step(
        tmp_path, record="7.2.0", pytorch_index_url="https://mirror.example/rocm7.2", pytorch_local_version="rocm7.2"
    )
    assert proc.returncode == 0, out[-3000:]
    assert "CHOSEN index=[https://mirror.example/rocm7.2] label=[rocm7.2]" in out


def test_the_cpu_path_is_unchanged(tmp_path):
    """The sandbox: a CPU torch on purpose, from its find-links folder, whatever ROCm is recorded."""
    proc, out = run_step(tmp_path, record="7.2.0", pytorch_device="cpu", pytorch_cpu_index_url="")
    assert proc.returncode == 0, out[-3000:]
    assert "CHOSEN index=[] label=[cpu]" in out


ROCM70_TORCH = {
    "version": "2.10.0+rocm7.0",
    "hip": "7.0.51831-a3e329ad8",
    "cuda": None,
    "available": True,
    "device_count": 8,
    "arch_list": ["gfx942"],
    "file": "/opt/instinct/venv/lib/python3.11/site-packages/torch/__init__.py",
}


def test_verify_refuses_a_torch_built_for_another_rocm_than_the_nodes(tmp_path):
    proc, out = run_step(tmp_path, step="verify", record="7.1.0", probe=ROCM70_TORCH, pytorch_variant="rocm")
    assert proc.returncode != 0, out[-3000:]
    assert (
        "node1: torch 2.10.0+rocm7.0 was built for ROCm 7.0 (torch.version.hip 7.0.51831-a3e329ad8) but"
        " /opt/rocm is ROCm 7.1.0" in out
    ), out[-3000:]
    assert "https://download.pytorch.org/whl/rocm7.1" in out
    assert "See docs/runbooks/torch-rocm-mismatch.md" in out


def test_verify_passes_a_torch_of_the_nodes_rocm(tmp_path):
    proc, out = run_step(tmp_path, step="verify", record="7.0.2", probe=ROCM70_TORCH, pytorch_variant="rocm")
    assert proc.returncode == 0, out[-3000:]
