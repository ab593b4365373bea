"""The fabric role's proof that RCCL uses the NICs (roles/fabric/tasks/rccl-net.yml) through
ansible-playbook on local hosts: each node reads RCCL's INFO log of the first all-reduce from
fabric_log_dir (here a recorded log, tests/fixtures/rccl, put where RCCL would have written it with
NCCL_DEBUG_FILE) and fails, naming the cause and the runbook, unless every rank used the IB/RoCE
transport on the node's chosen RDMA ports."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.unit.conftest import COLLECTIONS, FIXTURES, ROOT, fabric_step_playbook

RCCL = FIXTURES / "rccl"
SOCKET = RCCL / "rccl-init-socket-fallback-lumi-mi250x.log"
BNXT_UCX = RCCL / "rccl-init-roce-bnxt-ucx-gdrdma-rccl1261-EXCERPT.log"
ROCE_NO_GDR = RCCL / "nccl-init-roce-gdr-disabled-nccl1537.log"
RUNBOOK = "docs/runbooks/fabric-bandwidth.md"

PLAYBOOK = fabric_step_playbook("rccl-net.yml", "Check RCCL's INFO log", hosts="all")


def run_check(tmp_path, log, hcas, nodes=1, dmabuf="", **options):
    """Run the task file on ``nodes`` local hosts, each reading ``log`` as its RCCL INFO log (and,
    with ``extra_log_link``, a second "log" that is a link to that file)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(log, logs / "rccl-init.node1.1234.log")
    if options.get("extra_log_link"):
        (logs / "rccl-init.node1.9999.log").symlink_to(options["extra_log_link"])
    hosts = [f"node{i}" for i in range(1, nodes + 1)]
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    extravars = {
        "ansible_connection": "local",
        "ansible_become": False,  # the read runs as instinct_user; here as the test's own user
        "ansible_python_interpreter": sys.executable,
        "fabric_log_dir": str(logs),
        "fabric_ifname": "eth1",
        "fabric_use_rdma": True,
        "fabric_rdma": {"hcas": hcas, "ports": []},
        "fabric_env_settings": [{"name": "NCCL_DMABUF_ENABLE", "value": dmabuf, "why": ""}] if dmabuf else [],
        "fabric_allreduce": {"ranks": {h: {"first": i, "local": 1} for i, h in enumerate(hosts)}},
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(playbook) if playbook.exists() else "ansible-playbook", "-i", ",".join(hosts) + ",",
         str(tmp_path / "play.yml"), "-e", json.dumps(extravars), *(["-v"] if options.get("verbose") else [])],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return proc, " ".join(proc.stdout.split())


def test_a_socket_fallback_fails_naming_libibverbs_and_the_runbook(tmp_path):
    proc, out = run_check(tmp_path, SOCKET, ["mlx5_0:1", "mlx5_1:1"])
    assert proc.returncode != 0
    assert (
        "node1: nid007971 pid 55487 (GPU 0, rank 0): RCCL says 'Using network Socket', not the RDMA ports mlx5_0:1, "
        "mlx5_1:1: RCCL could not open libibverbs.so ('Failed to open libibverbs.so')"
    ) in out, out[-3000:]
    assert f"See {RUNBOOK} (RCCL's INFO log: {tmp_path / 'logs'}/rccl-init.*.log)" in out
    # What RCCL used is shown before the verdict.
    assert "nid007971 pid 55487 (GPU 0, rank 0): RCCL 2.20.5 network Socket hsn0,hsn1,hsn2,hsn3" in out


def test_without_chosen_rdma_ports_sockets_are_expected_and_said_so(tmp_path):
    proc, out = run_check(tmp_path, SOCKET, [])
    assert proc.returncode == 0, out[-3000:]
    assert (
        "node1: no RDMA port was chosen (the node has no usable RDMA port), so RCCL is expected on its socket "
        "transport over eth1 (NCCL_IB_DISABLE=1); its INFO log must show sockets"
    ) in out


def test_ucx_over_broadcom_roce_with_gpu_direct_passes_on_two_nodes_and_dmabuf_is_asked_where_the_env_sets_it(
    tmp_path,
):
    (tmp_path / "gdr").mkdir()
    proc, out = run_check(tmp_path / "gdr", BNXT_UCX, ["bnxt_re0:1"], nodes=2)
    assert proc.returncode == 0, out[-3000:]
    assert "node01 pid 5646 (GPU 0, rank 0): RCCL 2.18.3 network UCX bnxt_re0:1/RoCE GDR on DMA-BUF disabled" in out
    (tmp_path / "dmabuf").mkdir()
    proc, out = run_check(tmp_path / "dmabuf", BNXT_UCX, ["bnxt_re0:1"], dmabuf="1")
    assert proc.returncode != 0
    assert "RCCL has no DMA-BUF although it was asked for" in out and "set NCCL_DMABUF_ENABLE=1" in out, out[-3000:]


def test_roce_without_gpu_direct_fails_across_nodes(tmp_path):
    proc, out = run_check(tmp_path, ROCE_NO_GDR, ["mlx5_0:1", "mlx5_1:1"], nodes=2)
    assert proc.returncode != 0
    assert "node1: hostname1 pid 25668 (GPU 0, rank 0): RCCL runs without GPU Direct RDMA for HCA mlx5_0, mlx5_1" in out
    assert "node2: hostname1 pid 25668" in out, out[-3000:]


def test_a_link_in_the_log_folder_is_not_followed(tmp_path):
    """The log folder belongs to the training account: a link there to a file it cannot read must not
    bring that file into the play's output (root would read it)."""
    secret = tmp_path / "secret"
    secret.write_text("NET/IB : Using [0]mlx5_9:1/RoCE; HF_TOKEN=hf_secret\n")
    # -v prints what the read task returned, as an operator's verbose run (or a log) would keep it.
    proc, out = run_check(tmp_path, SOCKET, hcas=[], extra_log_link=secret, verbose=True)
    assert proc.returncode == 0, out[-3000:]
    # The real log was read (its process is shown); the linked file was not.
    assert "nid007971 pid 55487" in out and "hf_secret" not in out, out[-3000:]


def test_without_chosen_rdma_ports_a_process_on_rdma_is_refused(tmp_path):
    """No rail chosen, yet RCCL opened RDMA ports by itself (the recorded UCX-over-RoCE run): refused."""
    proc, out = run_check(tmp_path, BNXT_UCX, [])
    assert proc.returncode != 0
    assert "although no RDMA port was chosen for it (NCCL_IB_DISABLE=1 in rccl.env" in out, out[-3000:]
