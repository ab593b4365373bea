"""The fabric role's RDMA step (roles/fabric/tasks/rdma.yml) through ansible-playbook on a local node:
the refusal of a down rail by name, a node without RDMA ports, and healthy rails. The stand-in for
ibv_devinfo (the boundary with the NIC) replays a real recording (tests/fixtures/rdma/SOURCES.md) or
says what rdma-core's says on a node without RDMA devices. Nothing is installed: the distribution's
verbs stack is reported, not installed, here."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.conftest import COLLECTIONS, FIXTURES, ROOT, fabric_step_playbook

RDMA = FIXTURES / "rdma"

PLAYBOOK = fabric_step_playbook(
    "rdma.yml", "Install the verbs stack where needed and check the chosen ports", hosts="all"
)


def run_step(tmp_path, hcas, recording=None, node="node2"):
    """The step on ``node`` with a stand-in ibv_devinfo printing ``recording``; without one, it says what
    rdma-core's says on a node without RDMA devices ("No IB devices found" on stderr, exit 255)."""
    tool = tmp_path / "ibv_devinfo"
    body = f"cat '{RDMA / recording}'\n" if recording else "echo 'No IB devices found' >&2\nexit 255\n"
    tool.write_text(f"#!/bin/sh\n{body}")
    tool.chmod(0o755)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    extravars = {
        "ansible_become": False,
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "fabric_ibv_devinfo_path": str(tool),
        "fabric_rdma_install_userspace": False,  # never apt on the machine running the tests
        "fabric_ifname": "eth1",
        "fabric_rdma": {
            "hcas": hcas,
            "gid_index": "",
            "rate_gbps": None,
            "link_layer": "Ethernet",
            "ports": [],
            "left_out": [],
            "problems": [],
        },
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(playbook) if playbook.exists() else "ansible-playbook", "-i", f"{node},", str(tmp_path / "play.yml"),
         "-e", json.dumps(extravars)],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return proc, " ".join(proc.stdout.split())


def test_a_down_rail_is_refused_naming_the_node_the_port_and_the_fix(tmp_path):
    # luigifcruz/stelline's ConnectX-7: both ports PORT_DOWN; RCCL is asked to use mlx5_0:1.
    proc, out = run_step(tmp_path, ["mlx5_0:1"], "ibv_devinfo-mlx5-cx7-roce-2port-down.txt")
    assert proc.returncode != 0, out[-3000:]
    assert "node2: RDMA port mlx5_0:1 is DOWN in ibv_devinfo; RCCL needs it ACTIVE." in out, out[-3000:]
    assert "Check its cable, optics and switch port (ibv_devinfo -v -d mlx5_0, rdma link show)" in out
    assert "or leave it out of fabric_rdma_hcas. See docs/runbooks/fabric-bandwidth.md" in out
    assert "node2: 2 RDMA port(s) seen, 1 checked, 1 problem(s): mlx5_0:1 DOWN refused" in out


def test_a_node_without_rdma_ports_says_rccl_uses_sockets_and_goes_on(tmp_path):
    proc, out = run_step(tmp_path, [], node="node1")
    assert proc.returncode == 0, out[-3000:]
    assert "node1: no RDMA ports; RCCL uses sockets over eth1" in out
    assert "failed=0" in out


def test_eight_active_pollara_rails_pass(tmp_path):
    proc, out = run_step(tmp_path, [f"ionic_{n}:1" for n in range(8)], "ibv_devinfo-ionic-pollara-8port-mi355x.txt")
    assert proc.returncode == 0, out[-3000:]
    assert "node2: 8 RDMA port(s) seen, 8 checked, 0 problem(s): ionic_0:1 ACTIVE ok, ionic_1:1 ACTIVE ok" in out
