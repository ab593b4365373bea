"""The fabric role's rccl-tests step (roles/fabric/tasks/rccl-tests.yml) through ansible-playbook on
localhost: the command it starts, and its verdict on a real recorded all_reduce_perf table. The
stand-in for all_reduce_perf (the GPU boundary) records its arguments and prints the recording."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.conftest import COLLECTIONS, FIXTURES, ROOT

ONE_NODE = FIXTURES / "rccl" / "rccl-tests-all_reduce-mi300x-1node-8proc-aac8.txt"
GIB = 1 << 30

# The step's own task file with the role's variables, not include_role: the role's dependencies
# (the node tools install) would otherwise run on the controller.
PLAYBOOK = f"""\
- name: Run the fabric role's rccl-tests step
  hosts: localhost
  gather_facts: false
  vars_files:
    - {ROOT}/roles/common/defaults/main.yml
    - {ROOT}/roles/fabric/defaults/main.yml
    - {ROOT}/roles/fabric/vars/main.yml
  tasks:
    - name: Measure and judge with all_reduce_perf
      ansible.builtin.include_tasks: {ROOT}/roles/fabric/tasks/rccl-tests.yml
"""


def run_step(tmp_path, threshold):
    tool = tmp_path / "all_reduce_perf"
    tool.write_text(f"#!/bin/sh\necho \"$@\" > '{tmp_path / 'argv'}'\ncat '{ONE_NODE}'\n")
    tool.chmod(0o755)
    env_file = tmp_path / "rccl.env"
    env_file.write_text("NCCL_SOCKET_IFNAME=eth1\n")
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    extravars = {
        "ansible_become": False,  # the step runs as instinct_user; here as the test's own user
        "ansible_python_interpreter": sys.executable,
        "fabric_rccl_tests_path": str(tool),
        "instinct_rccl_env_file": str(env_file),
        "instinct_master_host": "localhost",
        "fabric_address": "127.0.0.1",
        "fabric_torch_gpu_count": 8,
        "fabric_env_settings": [{"name": "NCCL_SOCKET_IFNAME", "value": "eth1", "why": ""}],
        "fabric_allreduce_entry": {
            "gpu": "MI300X",
            "busbw_gbps": {8 * GIB: threshold},
            "tolerance": 0.05,
            "source": "the test's threshold",
        },
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(playbook) if playbook.exists() else "ansible-playbook", "-i", "localhost,", "-c", "local",
         str(tmp_path / "play.yml"), "-e", json.dumps(extravars)],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return proc, (tmp_path / "argv").read_text().split()


def test_one_node_runs_every_gpu_from_one_process_and_the_recorded_run_passes_amds_figure(tmp_path):
    # AMD's blog's one-node figure (the fabric role's default): 310 GB/s; the recording has 315.91.
    proc, argv = run_step(tmp_path, 310.0)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert argv == ["-b", "1048576", "-e", str(8 * GIB), "-f", "2", "-g", "8"]
    assert "all_reduce_perf over 8 ranks" in proc.stdout and "315.91" in proc.stdout


def test_a_recorded_run_below_the_threshold_fails_naming_the_size_and_both_figures(tmp_path):
    proc, _argv = run_step(tmp_path, 400.0)
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "all-reduce bus bandwidth 315.9 GB/s at 8589934592 bytes, below the 380.0 GB/s" in out, out[-3000:]
    assert "docs/runbooks/fabric-bandwidth.md" in out
