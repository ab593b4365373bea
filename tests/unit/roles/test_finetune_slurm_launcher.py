"""The finetune role's Slurm launcher (finetune_launcher: slurm), the parts that run on a node:

- the per-node launcher srun starts (templates/rank.sh.j2), rendered as the role renders it and run
  here as srun would run it on a node: it reads the node's environment files, starts torchrun with
  LLaMA-Factory's command line (a stand-in torchrun at the venv's path records what it was given),
  appends to the node's training log, and writes how it ended in the exit record's form, which the
  status module reads as for a systemd unit: a clean end, a failed rank and a scancel (SIGTERM);
- the batch script the role hands sbatch (vars/main.yml's finetune_batch_script_text through the
  collection's slurm_batch_script filter): one task per node, the GPUs as GRES on GPU nodes only,
  rank.sh on each node.

sbatch, srun and squeue themselves are Slurm's: the molecule scenario `slurm` runs srun and reads sacct
on a real Slurm 21.08; a job of this role through sbatch on a real Slurm is not run yet (issue 35)."""

import os
import signal
import subprocess
import time

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters

from ansible_collections.instinct.finetune.plugins.filter.slurm import FilterModule as SlurmFilters
from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import node_state, parse_exit_record
from tests.unit.conftest import ROOT

TEMPLATE = ROOT / "roles" / "finetune" / "templates" / "rank.sh.j2"
ROLE_VARS = yaml.safe_load((ROOT / "roles" / "finetune" / "vars" / "main.yml").read_text())

# What torchrun is given and what it does: records its arguments and environment, then sleeps or exits.
TORCHRUN = """#!/bin/sh
printf '%s\\n' "$@" > "$RECORD/argv"
env > "$RECORD/env"
umask > "$RECORD/umask"
trap 'echo TERM > "$RECORD/signal"; exit 143' TERM
case "$TORCHRUN_DOES" in
  sleep) while :; do sleep 0.1; done ;;
  *) exit "$TORCHRUN_DOES" ;;
esac
"""


def jinja():
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)  # noqa: S701
    env.filters["quote"] = CoreFilters().filters()["quote"]
    env.filters.update({f"instinct.finetune.{name}": f for name, f in SlurmFilters().filters().items()})
    return env


@pytest.fixture
def node(tmp_path):
    """A node's job files in tmp_path: the venv's torchrun and instinct-progress stand-ins, the
    fabric's env file, launch.env, resume.env and rank.sh as the role renders them."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "torchrun").write_text(TORCHRUN)
    (venv / "bin" / "instinct-progress").write_text('#!/bin/sh\necho "$@" >> "$RECORD/progress"\n')
    for tool in ("torchrun", "instinct-progress"):
        (venv / "bin" / tool).chmod(0o755)
    conf = tmp_path / "conf"
    conf.mkdir()
    (tmp_path / "rccl.env").write_text("MASTER_ADDR=10.1.0.11\nMASTER_PORT=29500\nNCCL_SOCKET_IFNAME=ens41np0\n")
    (conf / "launch.env").write_text("NNODES=2\nNODE_RANK=1\nNPROC_PER_NODE=8\nOMP_NUM_THREADS=24\n")
    (conf / "resume.env").write_text("FINETUNE_RESUME_ARGS=resume_from_checkpoint=/jobs/j/output/checkpoint-20\n")
    (conf / "secrets.env").write_text("HF_TOKEN=hf_not_for_the_rank\n")
    (tmp_path / "record").mkdir()
    text = (
        jinja()
        .from_string(TEMPLATE.read_text())
        .render(
            ansible_managed="managed",
            finetune_job_name="tiny-sft",
            finetune_log_path=str(tmp_path / "train.log"),
            finetune_exit_file=str(tmp_path / "exit-status"),
            instinct_rccl_env_file=str(tmp_path / "rccl.env"),
            finetune_conf_dir=str(conf),
            finetune_progress_metrics=True,
            instinct_venv=str(venv),
            finetune_metrics_dir=str(tmp_path / "metrics"),
        )
    )
    script = conf / "rank.sh"
    script.write_text(text)
    script.chmod(0o750)
    return tmp_path, script


def start(node, does):
    tmp_path, script = node
    # What srun gives each task: the batch job's environment (its SLURM_* and the batch script's
    # rendezvous exports, which the node's own files override).
    env = dict(os.environ, RECORD=str(tmp_path / "record"), TORCHRUN_DOES=does, SLURM_JOB_ID="4242",
               SLURM_NODEID="0", NODE_RANK="0", MASTER_ADDR="slurm-first-host")  # fmt: skip
    return subprocess.Popen([str(script)], env=env, cwd=tmp_path)


def ended(tmp_path):
    return parse_exit_record((tmp_path / "exit-status").read_text())


def test_a_rank_that_trains_to_its_end_reads_as_succeeded_with_the_nodes_own_settings(node):
    tmp_path, _script = node
    assert start(node, "0").wait(timeout=30) == 0
    record = ended(tmp_path)
    assert (record["result"], record["code"], record["status"]) == ("success", "exited", "0")
    assert node_state({"ActiveState": "inactive"}, record, "", "") == "succeeded"
    argv = (tmp_path / "record" / "argv").read_text().split("\n")
    # The node's rank and the job's master from its own files, not Slurm's node index or first host:
    # each node resumes its own node-local checkpoints.
    assert argv[:10] == ["--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "8", "--master_addr", "10.1.0.11",
                         "--master_port", "29500"]  # fmt: skip
    assert argv[10:13] == ["-m", "instinct_node_tools.launch", str(tmp_path / "conf" / "train.yaml")]
    assert argv[13] == "resume_from_checkpoint=/jobs/j/output/checkpoint-20"
    env = (tmp_path / "record" / "env").read_text().splitlines()
    assert "NCCL_SOCKET_IFNAME=ens41np0" in env and "OMP_NUM_THREADS=24" in env
    # The hub token stays root's: the job runs offline on the model staged before launch.
    assert not any(line.startswith("HF_TOKEN=") for line in env)
    # What the systemd unit's UMask= gives a rank: its files are the account's and its group's only.
    assert (tmp_path / "record" / "umask").read_text().strip() == "0027"
    log = (tmp_path / "train.log").read_text()
    assert "==== instinct.finetune launch of rank 1 (Slurm job 4242) at " in log
    assert "resume_from_checkpoint=/jobs/j/output/checkpoint-20 ====" in log
    progress = (tmp_path / "record" / "progress").read_text().splitlines()
    assert progress == [f"clear {tmp_path / 'metrics'}", f"stopped {tmp_path / 'metrics'}"]


def test_a_failed_rank_reads_as_failed_with_torchruns_exit_code(node):
    tmp_path, _script = node
    assert start(node, "3").wait(timeout=30) == 3
    record = ended(tmp_path)
    assert (record["result"], record["code"], record["status"]) == ("exit-code", "exited", "3")
    assert node_state({"ActiveState": "inactive"}, record, "", "") == "failed"


def test_a_scancel_stops_torchrun_and_is_recorded_as_systemd_records_a_stopped_unit(node):
    tmp_path, _script = node
    rank = start(node, "sleep")
    deadline = time.monotonic() + 30
    while not (tmp_path / "record" / "argv").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    rank.send_signal(signal.SIGTERM)
    assert rank.wait(timeout=30) == 143
    assert (tmp_path / "record" / "signal").read_text().strip() == "TERM"
    record = ended(tmp_path)
    assert (record["result"], record["code"], record["status"]) == ("success", "killed", "TERM")
    assert node_state({"ActiveState": "inactive"}, record, "", "") == "failed"


def batch_script(device, nproc, **settings):
    variables = {
        "finetune_job_name": "tiny-sft", "finetune_slurm_job_name": "instinct-finetune-tiny-sft",
        "finetune_ranks": [f"mi300-{i:02d}" for i in range(1, 17)],
        "finetune_nproc": nproc, "finetune_device": device, "finetune_slurm_gpu_type": "",
        "finetune_slurm_partition": "", "finetune_slurm_account": "", "finetune_slurm_qos": "",
        "finetune_slurm_time_limit": "", "finetune_job_dir": "/var/lib/instinct-finetune/jobs/tiny-sft",
        "finetune_rank_script": "/etc/instinct-finetune/jobs/tiny-sft/rank.sh", **settings,
    }  # fmt: skip
    return jinja().from_string(ROLE_VARS["finetune_batch_script_text"]).render(**variables)


def test_the_batch_script_runs_rank_sh_once_on_each_of_16_nodes_with_their_8_gpus():
    script = batch_script("rocm", 8, finetune_slurm_partition="mi300x", finetune_slurm_time_limit="2-00:00:00",
                          finetune_slurm_gpu_type="mi300x")  # fmt: skip
    lines = script.splitlines()
    for directive in ("#SBATCH --job-name=instinct-finetune-tiny-sft", "#SBATCH --nodes=16",
                      "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:mi300x:8", "#SBATCH --exclusive",
                      "#SBATCH --partition=mi300x", "#SBATCH --time=2-00:00:00",
                      "#SBATCH --chdir=/var/lib/instinct-finetune/jobs/tiny-sft",
                      "#SBATCH --output=/var/lib/instinct-finetune/jobs/tiny-sft/slurm-%j.out"):  # fmt: skip
        assert directive in lines, directive
    assert not any(line.startswith(("#SBATCH --account", "#SBATCH --qos")) for line in lines)
    # The node's own limits, not the submitting shell's; each node's one task gets every CPU of it.
    assert "#SBATCH --propagate=NONE" in lines
    assert any('--cpus-per-task="$SLURM_CPUS_ON_NODE"' in line for line in lines)
    assert lines[-1].strip() == "/etc/instinct-finetune/jobs/tiny-sft/rank.sh"
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


def test_cpu_ranks_ask_slurm_for_no_gpu():
    lines = batch_script("cpu", 1, finetune_ranks=["node1", "node2"]).splitlines()
    assert "#SBATCH --nodes=2" in lines
    assert not any(line.startswith("#SBATCH --gres") for line in lines)
