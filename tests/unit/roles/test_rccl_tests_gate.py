"""The fabric role's rccl-tests step (roles/fabric/tasks/rccl-tests.yml) through ansible-playbook on
localhost: the command it starts, and its verdict on real recorded all_reduce_perf tables (a healthy
MI300X node, and nccl-tests' FAILED run with #wrong > 0). Stand-ins take the GPU boundary: "mpirun"
records its arguments and starts the program part of them (the per-rank shell that loads the env
file, then the tool), and "all_reduce_perf" prints a recording (or hangs, out of mpirun's reach)."""

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.conftest import COLLECTIONS, FIXTURES, ROOT, fabric_step_playbook

ONE_NODE = FIXTURES / "rccl" / "rccl-tests-all_reduce-mi300x-1node-8proc-aac8.txt"
FAILED = FIXTURES / "rccl" / "nccl-tests-all_reduce-gh200-2node-wrong-FAILED-nccltests369.txt"
GIB = 1 << 30
RANK_SHELL = 'set -a && . "$0" && set +a && exec "$@"'

PLAYBOOK = fabric_step_playbook("rccl-tests.yml", "Measure and judge with all_reduce_perf", hosts="localhost")

# mpirun's stand-in: its arguments one a line, then the program part (from the per-rank shell on) is
# run as one rank; with "hang", in a session of its own, out of the reach of the step's time limit,
# as a rank on a node that lost its launcher.
MPIRUN = """#!/bin/sh
printf '%s\\n' "$@" > '{argv}'
while [ "$#" -gt 0 ] && [ "$1" != /bin/bash ]; do shift; done
{start}
"""


def run_step(tmp_path, floor, body=f"cat '{ONE_NODE}'", *, hang=False, timeout=300):
    """Run the step with the stand-ins; ``body``: what all_reduce_perf does (a shell script's lines);
    ``hang``: it runs forever, started out of the reach of the step's time limit."""
    tool = tmp_path / ("all_reduce_hang" if hang else "all_reduce_perf")
    body = "while :; do sleep 1; done" if hang else body
    tool.write_text(f"#!/bin/sh\necho \"$NCCL_SOCKET_IFNAME\" > '{tmp_path / 'rank_env'}'\n{body}\n")
    tool.chmod(0o755)
    mpirun = tmp_path / "mpirun"
    start = 'setsid "$@" &\nwait' if hang else 'exec "$@"'
    mpirun.write_text(MPIRUN.format(argv=tmp_path / "argv", start=start))
    mpirun.chmod(0o755)
    env_file = tmp_path / "rccl.env"
    env_file.write_text("NCCL_SOCKET_IFNAME==eth1\n")
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    extravars = {
        "ansible_become": False,  # the step runs as instinct_user; here as the test's own user
        "ansible_python_interpreter": sys.executable,
        "fabric_rccl_tests_path": str(tool),
        "fabric_mpirun": str(mpirun),
        "fabric_smoke_timeout": timeout,
        "instinct_rccl_env_file": str(env_file),
        "instinct_master_host": "localhost",
        "fabric_address": "127.0.0.1",
        "fabric_ifname": "eth1",
        "fabric_torch_gpu_count": 8,
        "fabric_allreduce_floor": floor,
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(playbook) if playbook.exists() else "ansible-playbook", "-i", "localhost,", "-c", "local",
         str(tmp_path / "play.yml"), "-e", json.dumps(extravars)],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    argv = (tmp_path / "argv").read_text().splitlines() if (tmp_path / "argv").exists() else []
    return proc, argv, " ".join(proc.stdout.split())


def floor_of(busbw, enforce=True):
    return {"busbw_gbps": busbw, "size_bytes": 8 * GIB, "enforce": enforce, "basis": "the test's floor",
            "source": "the test's source"}  # fmt: skip


def test_one_node_runs_one_mpi_rank_per_gpu_and_the_recorded_run_passes_amds_figure(tmp_path):
    # AMD's acceptance guide's one-node figure (the fabric role's default): 304 GB/s; the recording has 315.91.
    proc, argv, out = run_step(tmp_path, floor_of(304.0))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # The command as rendered for one node (the outer "timeout" ran it; mpirun got the rest).
    assert shlex.join(argv) == (
        "--np 8 --host 127.0.0.1:8 --bind-to numa --timeout 300 --mca pml ob1 --mca btl '^vader,openib' "
        "--mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1 -x NCCL_IGNORE_CPU_AFFINITY=1 "
        f"/bin/bash -c {shlex.quote(RANK_SHELL)} {tmp_path / 'rccl.env'} {tmp_path / 'all_reduce_perf'} "
        f"-b 1048576 -e {8 * GIB} -f 2 -g 1"
    )
    # The rank loaded the node's env file.
    assert (tmp_path / "rank_env").read_text() == "=eth1\n"
    assert "all_reduce_perf over 8 ranks" in out and "315.91" in out


def test_a_recorded_run_below_an_enforced_floor_fails_and_below_another_warns(tmp_path):
    (tmp_path / "enforced").mkdir()
    proc, _argv, out = run_step(tmp_path / "enforced", floor_of(400.0))
    assert proc.returncode != 0
    assert "all-reduce bus bandwidth 315.9 GB/s at 8589934592 bytes, below the 400.0 GB/s floor" in out, out[-3000:]
    assert "(the test's floor; the test's source). See docs/runbooks/fabric-bandwidth.md" in out
    (tmp_path / "warned").mkdir()
    proc, _argv, out = run_step(tmp_path / "warned", floor_of(400.0, enforce=False))
    assert proc.returncode == 0, out[-3000:]
    assert "WARNING localhost: all-reduce bus bandwidth 315.9 GB/s at 8589934592 bytes, below the 400.0" in out


def test_a_failed_run_with_wrong_sums_fails_naming_wrong_whatever_the_floor(tmp_path):
    # nccl-tests' recorded FAILED run (#wrong 96 and 32 at 1 MiB); it exits non-zero, as rccl-tests does.
    proc, _argv, out = run_step(tmp_path, floor_of(None, enforce=False), f"cat '{FAILED}'\nexit 1")
    assert proc.returncode != 0
    assert (
        "localhost: all_reduce_perf returned wrong sums (1048576 bytes: #wrong 96 out-of-place and 32 in-place; "
        "'# Out of bounds values : 4 FAILED')" in out
    ), out[-3000:]
    assert "did not complete" not in out  # the wrong sums are the cause named, not the exit code


def test_a_hung_run_ends_at_the_time_limit_and_names_the_node_where_a_rank_was_left(tmp_path):
    proc, argv, out = run_step(tmp_path, floor_of(304.0), hang=True, timeout=4)
    assert proc.returncode != 0
    assert argv[argv.index("--timeout") + 1] == "4"
    timed_out = "rccl-tests' all_reduce_perf over 1 node(s) did not complete (rc 124, timed out after 4 s)"
    assert timed_out in out, out[-3000:]
    assert "; all_reduce_hang was still running on localhost and was killed there (pids" in out
    assert "docs/runbooks/rccl-timeout.md" in out
    # Nothing of it is left running (a killed orphan may stay a zombie until it is reaped).
    for _attempt in range(50):
        left = subprocess.run(["pgrep", "-r", "RSD", "-u", str(os.getuid()), "-x", "all_reduce_hang"],
                              capture_output=True, check=False)  # fmt: skip
        if left.returncode == 1:
            break
        time.sleep(0.1)
    assert left.returncode == 1, left.stdout
