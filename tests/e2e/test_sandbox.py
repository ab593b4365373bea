"""End to end on the sandbox cluster: site.yml from bare containers to a 2-node fine-tune the way a
real cluster trains by default (DeepSpeed ZeRO-3, LoRA) with the optimizer offloaded to CPU, which
the sandbox job asks for (DeepSpeed's CPU Adam, off by default), and its
perplexity against the base model's, a second run that changes nothing, and a ZeRO-3
full fine-tune with a rank frozen mid-run (the job stops and resumes on the next run) whose weights
load with transformers and beat the base model; plain DDP is the job of test_sandbox_rules.py.
Playbooks run through ansible-runner's Python API (scripts/sandbox.py) and are judged from its
events and from the nodes themselves.

Needs Docker and the jammy-systemd image (scripts/test.sh e2e provides both); takes ~15 minutes.
"""

import base64
import configparser
import hashlib
import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from cluster import (
    JOB,
    JOB_ROOT,
    NODES,
    ROOT,
    SMOKE_TASK,
    VENV,
    WATCH_TASK,
    WORKER,
    Hub,
    as_trainer,
    complete_checkpoints,
    debug_messages,
    mgmt_address,
    node,
    node_python,
    run_in_thread,
    sandbox,
    since_last_launch,
    summary_lines,
    trained_steps,
    training_processes,
    wait_until,
)

FAULT_JOB = "sandbox-fault"


@pytest.fixture(scope="module")
def collected(converged):
    return sandbox.collect_dir() / JOB


def test_site_runs_every_stage_on_both_nodes(site):
    assert site.rc == 0, site.failures
    assert site.failed_hosts() == []
    assert sorted(site.ok) == NODES
    plays = [p["play"] for p in site.plays]
    stages = (
        "Check every node",
        "Install ROCm",
        "training stack",
        "fabric NIC",
        "Monitor the GPUs",
        "fine-tune job",
        "Evaluate",
    )
    for stage in (*stages, "Summarise"):
        assert any(stage.lower() in play.lower() for play in plays), (stage, plays)


def test_the_jobs_checkpoints_were_sized_on_each_node_before_launch(site):
    """Issue 32: each node estimated its checkpoints from the sandbox model's safetensors headers (LoRA
    on every linear layer: a small part of the parameters trained) and had the room."""
    said = debug_messages(site, "Say what the job's checkpoints take on this node")
    assert sorted(said) == NODES, said
    for host, message in said.items():
        found = re.search(r"GB for 4 checkpoints and the final weights \((\d+) of (\d+) parameters trained\)", message)
        assert found and 0 < int(found.group(1)) < int(found.group(2)), (host, message)
    assert site.ran("Refuse the job when its checkpoints would not fit on this node") == []


TOKENIZED = "Say how the job's dataset was tokenized on this node"


def test_the_job_checked_its_inputs_and_tokenized_its_dataset_once_before_launch(site, collected):
    """Issue 33: before any unit started, each node checked the model and dataset with LLaMA-Factory's
    own pipeline and tokenized the dataset into the job's tokenized_path; the ranks loaded that set and
    tokenized nothing themselves."""
    said = debug_messages(site, TOKENIZED)
    assert sorted(said) == NODES, said
    for host, message in said.items():
        assert f"dataset tiny_instruct written in {JOB_ROOT}/{JOB}/tokenized" in message, (host, message)
        assert re.search(r"\((\d+) train and (\d+) validation rows, key [0-9a-f]{16}\)", message), message
        assert node(host, "stat", "-c", "%U", f"{JOB_ROOT}/{JOB}/tokenized").stdout.strip() == "instinct"
    # The Trainer's rank 0 says where it loaded the set from; no rank ran the tokenizer over the rows.
    master = since_last_launch((collected / NODES[0] / "train.log").read_text())
    assert f"Loaded tokenized dataset from {JOB_ROOT}/{JOB}/tokenized." in master, master[-3000:]
    for host in NODES:
        assert "Running tokenizer on dataset" not in (collected / host / "train.log").read_text()
    train = node(NODES[0], "cat", f"/etc/instinct-finetune/jobs/{JOB}/train.yaml").stdout
    assert f"tokenized_path: {JOB_ROOT}/{JOB}/tokenized" in train


def test_a_changed_cutoff_tokenizes_again_and_the_same_inputs_do_not(converged):
    """Issue 33: the node's own check, run as the finetune role runs it, on a copy of the job's set:
    the same inputs reuse it; a changed cutoff makes it again and says why."""
    copy = f"{JOB_ROOT}/{JOB}/tokenized-e2e-copy"
    as_trainer(NODES[0], "rm", "-rf", copy)
    as_trainer(NODES[0], "cp", "-a", f"{JOB_ROOT}/{JOB}/tokenized", copy)
    spec = {"model": node(NODES[0], "sh", "-c", f"grep '^model_name_or_path:' /etc/instinct-finetune/jobs/{JOB}/"
                                                "train.yaml | cut -d' ' -f2").stdout.strip(),
            "dataset_dir": f"{JOB_ROOT}/{JOB}/data", "dataset": "tiny_instruct", "template": "default",
            "cutoff_len": 128, "val_size": 0.1, "seed": 42, "finetuning_type": "lora", "lora_rank": 16,
            "strategy": "deepspeed_zero3", "offload_optimizer": True, "nodes": 2, "ranks_per_node": 1,
            "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "do_eval": True,
            "data_args": {"preprocessing_num_workers": 1, "dataloader_num_workers": 0},
            "tokenized_path": copy}  # fmt: skip
    results = []
    for cutoff in (128, 64):
        encoded = base64.b64encode(json.dumps(dict(spec, cutoff_len=cutoff)).encode()).decode()
        out = as_trainer(NODES[0], f"{VENV}/bin/instinct-check-inputs", encoded)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        (line,) = [x for x in out.stdout.splitlines() if x.startswith("instinct-check-inputs: ")]
        results.append(json.loads(line.split(": ", 1)[1]))
    assert results[0]["tokenized"] == "reused", results[0]
    assert results[1]["tokenized"] == "written", results[1]
    assert "data.cutoff_len: 128 -> 64" in results[1]["tokenized_reason"], results[1]
    as_trainer(NODES[0], "rm", "-rf", copy)


def test_both_ranks_trained_with_zero3_offload_in_a_world_of_two_over_the_fabric_nic(collected):
    for rank, host in enumerate(NODES):
        log = since_last_launch((collected / host / "train.log").read_text())
        assert f"Process rank: {rank}, world size: {len(NODES)}" in log
    # DeepSpeed ZeRO-3 with its CPU Adam: the optimizer state lives in host memory (DeepSpeed logs
    # the optimizer it chose on rank 0 only).
    master_log = since_last_launch((collected / NODES[0] / "train.log").read_text())
    assert "DeepSpeedCPUAdam" in master_log, master_log[-3000:]
    # The shared-memory communication op came with the wheel: no rank compiled it at launch.
    for host in NODES:
        assert "Building extension module deepspeed_shm_comm" not in (collected / host / "train.log").read_text()
    ds_config = json.loads(node(NODES[0], "cat", f"/etc/instinct-finetune/jobs/{JOB}/ds_config.json").stdout)
    assert ds_config["zero_optimization"]["stage"] == 3
    assert ds_config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert ds_config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert ds_config["gradient_clipping"] == 1.0
    env = node(NODES[1], "cat", "/etc/instinct-finetune/rccl.env").stdout
    fabric_addr = node(NODES[0], "sh", "-c", "ip -4 -o addr show | grep 172.29.20.").stdout.split()[3].split("/")[0]
    assert f"MASTER_ADDR={fabric_addr}" in env
    assert re.search(r"^GLOO_SOCKET_IFNAME=eth\d+$", env, re.M)
    launch = node(NODES[1], "cat", f"/etc/instinct-finetune/jobs/{JOB}/launch.env").stdout
    assert f"NNODES={len(NODES)}" in launch and "NODE_RANK=1" in launch
    # Each rank's CPU threads (torch, CPU Adam) come from the node's cores, not torchrun's default of 1.
    assert re.search(r"^OMP_NUM_THREADS=[1-9]\d*$", launch, re.M), launch


def test_the_job_folder_holds_what_a_post_mortem_needs(collected):
    """Beside the per-node logs: the master's train.yaml, ds_config.json and rccl.env as the nodes hold
    them, and manifest.json with the venv's versions, the fabric stage's all-reduce figure of the same
    site.yml run, the wall time and the ranks x hours (no GPU-hours on CPU ranks); never launch.env."""
    conf = f"/etc/instinct-finetune/jobs/{JOB}"
    assert (collected / "train.yaml").read_text() == node(NODES[0], "cat", f"{conf}/train.yaml").stdout
    assert (collected / "ds_config.json").read_text() == node(NODES[0], "cat", f"{conf}/ds_config.json").stdout
    assert (collected / "rccl.env").read_text() == node(NODES[0], "cat", "/etc/instinct-finetune/rccl.env").stdout
    assert not (collected / "launch.env").exists()
    manifest = json.loads((collected / "manifest.json").read_text())
    installed = json.loads(
        node_python(
            NODES[0],
            "import importlib.metadata as m, json; "
            "print(json.dumps({n: m.version(n) for n in ('torch', 'deepspeed', 'llamafactory', 'transformers')}))",
        ).stdout
    )
    versions = manifest["versions"]
    assert {name: versions[name] for name in installed} == installed, versions
    # The simulated nodes' ROCm (the simulated AMD repository's packages, the recorded amdgpu module) as
    # the node itself reports it, read as the tasks read it and not guessed.
    assert versions["rocm"] == node(NODES[0], "cat", "/opt/rocm/.info/version").stdout.strip()
    assert versions["rccl"] == node(NODES[0], "dpkg-query", "-W", "-f=${Version}", "rccl").stdout.strip()
    assert versions["amdgpu_driver"] == node(NODES[0], "cat", "/sys/module/amdgpu/version").stdout.strip()
    assert manifest["job"] == JOB and manifest["nodes"] == NODES and manifest["device"] == "cpu"
    assert manifest["fabric_allreduce"]["busbw_gbps"] > 0 and manifest["fabric_allreduce"]["world_size"] == len(NODES)
    results = json.loads((collected / NODES[0] / "all_results.json").read_text())
    assert manifest["wall_time_seconds"] == results["train_runtime"] > 0
    assert manifest["ranks"] == len(NODES) and manifest["rank_hours"] > 0 and manifest["gpu_hours"] == 0
    assert sorted(manifest["files"]) == ["ds_config.json", "rccl.env", "train.yaml"]


def test_every_rank_exported_its_progress_for_the_textfile_collector(collected):
    """Each rank's rank<N>.prom agrees with the master's trainer log: step 40 of 40, the last loss."""
    entries = [json.loads(line) for line in (collected / NODES[0] / "trainer_log.jsonl").read_text().splitlines()]
    last_loss = [e["loss"] for e in entries if e.get("loss") is not None][-1]
    for rank, host in enumerate(NODES):
        text = node(host, "cat", f"{JOB_ROOT}/{JOB}/metrics/rank{rank}.prom").stdout
        samples = dict(re.findall(r"^(instinct_finetune_\w+)\{[^}]*\} (\S+)$", text, re.M))
        labels = re.search(r"^instinct_finetune_step\{([^}]*)\}", text, re.M).group(1)
        assert f'finetune_job="{JOB}"' in labels and f'rank="{rank}"' in labels and f'node_rank="{rank}"' in labels
        assert float(samples["instinct_finetune_step"]) == float(samples["instinct_finetune_total_steps"]) == 40
        # prometheus_client writes every value as a float.
        assert float(samples["instinct_finetune_running"]) == 0
        assert float(samples["instinct_finetune_world_size"]) == 2
        assert abs(float(samples["instinct_finetune_loss"]) - last_loss) < 1e-3
        assert float(samples["instinct_finetune_tokens_per_second"]) > 0
        assert float(samples["instinct_finetune_input_tokens_total"]) > 0


def prometheus_url():
    """Where the sandbox's Prometheus (node1) listens: the one address of its arguments, node1's
    management address (issue 32: not every address, not 127.0.0.1)."""
    args = node(NODES[0], "cat", "/etc/default/prometheus").stdout
    return "http://" + re.search(r"--web\.listen-address=([^\s\"]+)", args).group(1)


def prometheus(expr, want, timeout=90):
    """An instant query to the sandbox's Prometheus (on node1), waiting for ``want`` series."""
    script = (
        "import sys, urllib.parse, urllib.request; "
        "print(urllib.request.urlopen(sys.argv[2] + '/api/v1/query?' "
        "+ urllib.parse.urlencode({'query': sys.argv[1]})).read().decode())"
    )
    url = prometheus_url()
    deadline = time.monotonic() + timeout
    while True:
        result = json.loads(node(NODES[0], "python3", "-c", script, expr, url).stdout)["data"]["result"]
        if len(result) >= want or time.monotonic() > deadline:
            return result
        time.sleep(3)


def test_prometheus_shows_both_ranks_training_beside_both_nodes_gpus(converged):
    """One Prometheus (node1) holds the training of both ranks and the GPUs of both nodes."""
    steps = prometheus(f'instinct_finetune_step{{job="instinct_nodes",finetune_job="{JOB}"}} == 40', want=len(NODES))
    ranks = sorted((s["metric"]["instance"], s["metric"]["rank"]) for s in steps)
    assert ranks == sorted((host, str(rank)) for rank, host in enumerate(NODES))
    losses = prometheus(f'instinct_finetune_loss{{job="instinct_nodes",finetune_job="{JOB}"}}', want=len(NODES))
    assert len({s["value"][1] for s in losses}) == 1  # the loss is the mean over ranks: one value
    # The role's scrape job only: Ubuntu's package starts Prometheus with its own default job
    # (localhost:9100, the same node exporter) before the role's configuration replaces it, and a
    # restart leaves those series visible for Prometheus's 5-minute lookback.
    gpus = prometheus(
        'instinct_gpu_count{job="instinct_nodes"} == 8 and on(instance) instinct_gpu_expected_count == 8', want=2
    )
    assert sorted(s["metric"]["instance"] for s in gpus) == NODES
    junction = prometheus('instinct_gpu_temperature_celsius{job="instinct_nodes",sensor="junction"}', want=16)
    assert len(junction) == 16
    summary = summary_lines(converged)
    assert all(any(line.startswith(host) and "rocm-smi 8/8" in line for line in summary) for host in NODES)


def test_loss_decreases_and_the_plot_is_collected(collected):
    entries = [json.loads(line) for line in (collected / NODES[0] / "trainer_log.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in entries if e.get("loss") is not None]
    assert len(losses) >= 10
    # LoRA on a randomly initialised model (its embeddings and output layer stay frozen and random)
    # falls fast to a plateau near the data's unigram entropy: about 6.33 -> 6.02 here. Whether it
    # learned what it can is judged against the base model's perplexity (eval.json).
    assert sum(losses[-3:]) / 3 < 0.97 * sum(losses[:3]) / 3, losses
    evals = [e["eval_loss"] for e in entries if e.get("eval_loss") is not None]
    assert len(evals) == 2 and evals[1] < evals[0], evals
    assert entries[-1]["current_steps"] == entries[-1]["total_steps"] == 40
    png = (collected / NODES[0] / "training_loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_the_adapter_and_a_perplexity_below_the_base_models_are_collected(converged, collected):
    result = json.loads((collected / NODES[0] / "eval.json").read_text())
    assert math.isfinite(result["perplexity"]) and result["perplexity"] > 1
    assert result["perplexity"] == pytest.approx(math.exp(result["eval_loss"]))
    assert result["base_perplexity"] == pytest.approx(math.exp(result["base_eval_loss"]))
    assert result["perplexity"] < result["base_perplexity"]
    assert result["ratio"] == pytest.approx(result["perplexity"] / result["base_perplexity"])
    assert (result["strategy"], result["finetuning_type"]) == ("deepspeed_zero3", "lora")
    assert "label tokens" in result["definition"]
    on_node = json.loads(node(NODES[0], "cat", f"{JOB_ROOT}/{JOB}/output/eval.json").stdout)
    assert on_node == result
    for host in NODES:
        assert complete_checkpoints(host, JOB)[-1] == 40
    # Gathered on save by rank 0: every LoRA tensor of the master's adapter holds its elements
    # (ZeRO-3 partitions would be empty). Other nodes keep their own ZeRO shards for a resume.
    adapter = f"{JOB_ROOT}/{JOB}/output/adapter_model.safetensors"
    shapes = node_python(
        NODES[0],
        "import json, math; from safetensors import safe_open; "
        f"f = safe_open('{adapter}', 'numpy'); "
        "print(json.dumps([math.prod(f.get_slice(k).get_shape()) for k in f.keys()]))",
    )
    sizes = json.loads(shapes.stdout.strip().splitlines()[-1])
    assert sizes and min(sizes) > 0, sizes
    shards = node(NODES[1], "sh", "-c", f"ls {JOB_ROOT}/{JOB}/output/checkpoint-40/global_step40/", check=False)
    assert "optim_states.pt" in shards.stdout, shards.stdout
    summary = summary_lines(converged)
    header = summary[0]
    for title in ("strategy", "perplexity", "base ppl", "vs base"):
        assert title in header
    master = next(line for line in summary if line.startswith(NODES[0]))
    assert f"{JOB} succeeded 40/40" in master and "deepspeed_zero3 lora" in master
    assert f"{result['perplexity']:.3f}" in master and f"{result['base_perplexity']:.3f}" in master
    assert len([line for line in summary if line.startswith("instinct-sandbox-node")]) == 2


def test_the_jobs_stability_report_judged_every_gpu_and_rank_with_plots_and_a_passing_verdict(collected, converged):
    """Issue 34: after the job, its master read the job's window from the sandbox's Prometheus and judged
    it: both nodes' 8 GPUs (the recorded rocm-smi values: steady, far from their limits), both ranks;
    report.md with the verdict table, report.json, one plot per node and metric in the collect folder,
    and the summary's stability column."""
    folder = collected / "stability"
    report = json.loads((folder / "report.json").read_text())
    assert report["verdict"] in ("pass", "warn"), [v for v in report["verdicts"] if v["verdict"] == "fail"]
    judged = {(v["check"], v["node"]) for v in report["verdicts"]}
    for host in NODES:
        for check in ("temperature_junction", "gpu_drop", "vram_leak"):
            assert (check, host) in judged, (check, host, sorted(judged))
    gpus = {(v["node"], v["gpu"]) for v in report["verdicts"] if v["check"] == "vram_leak"}
    assert len(gpus) == 16, sorted(gpus)
    table = (folder / "report.md").read_text()
    assert "| node | GPU | check | value | threshold | verdict | detail |" in table
    plots = sorted(p.name for p in (folder / "plots").glob("*.png"))
    assert any(NODES[0] in name for name in plots) and any(NODES[1] in name for name in plots), plots
    assert all((folder / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in plots)
    summary = summary_lines(converged)
    assert "stability" in summary[0]
    for host in NODES:
        row = next(line for line in summary if line.startswith(host))
        assert [cell.strip() for cell in row.split("|")][-1] == report["verdict"], row


def test_the_summary_warns_of_each_mi300x_host_setting_the_simulated_nodes_lack(converged):
    """preflight_apply_tuning is left false in the sandbox and its simulated MI300X nodes lack AMD's
    host tuning (their kernel command line is the Docker host's): each missing setting is a warning
    after the table and in summary.md, naming the nodes, the setting, the guide's section and URL, and
    the switch, and each row's host tuning cell counts them. Nothing was changed on the nodes."""
    guide = "https://instinct.docs.amd.com/projects/amdgpu-docs/en/latest/system-optimization/mi300x.html"
    summary = summary_lines(converged)
    header = [cell.strip() for cell in summary[0].split("|")]
    warned = [line.removeprefix("warning: ") for line in summary if line.startswith("warning: ")]
    markdown = (sandbox.collect_dir() / "summary.md").read_text()
    for line in warned:
        assert "AMD MI300X system optimisation guide, '" in line and f"({guide}#" in line, line
        assert "set preflight_apply_tuning: true" in line and "docs/runbooks/host-tuning.md" in line, line
        assert f"- {line}" in markdown
    # "SETTING missing on NODE, NODE - source; fix": the nodes each line names.
    named = {line.split(" - ")[0].split(" missing on ")[0]: line.split(" - ")[0].split(" missing on ")[1].split(", ")
             for line in warned}  # fmt: skip
    for host in NODES:
        cmdline = node(host, "cat", "/proc/cmdline").stdout.split()
        missing = [f"kernel command line {arg}" for arg in ("iommu=pt", "pci=realloc=off") if arg not in cmdline]
        assert missing, f"{host}'s kernel command line has AMD's settings; the sandbox no longer shows the warning"
        if node(host, "cat", "/proc/sys/kernel/numa_balancing").stdout.strip() != "0":
            missing.append("NUMA auto-balancing off (kernel.numa_balancing = 0)")
        assert all(host in named.get(setting, []) for setting in missing), (host, missing, warned)
        row = next(line for line in summary if line.startswith(host))
        cell = [cell.strip() for cell in row.split("|")][header.index("host tuning")]
        assert cell == f"{sum(host in hosts for hosts in named.values())} missing", row
        # Reported, never applied: no GRUB drop-in, no sysctl file.
        assert node(host, "test", "-e", "/etc/default/grub.d/90-instinct-finetune.cfg", check=False).returncode == 1
        assert node(host, "test", "-e", "/etc/sysctl.d/90-instinct-finetune.conf", check=False).returncode == 1
    assert "## Warnings" in markdown


def test_site_yml_in_check_mode_passes_on_nodes_before_their_first_run(site):
    """site.yml --check --diff with the job, run on the first node before the first site.yml: rc 0.
    On a new node the stages that need what an earlier stage creates say why they stop predicting
    there."""
    check = site.fresh_check
    assert check.rc == 0, check.failures
    assert sorted(check.ok) == NODES[:1]
    assert site.fresh_nodes or os.environ.get("INSTINCT_E2E_KEEP_CLUSTER") == "1", "the check ran on converged nodes"
    if site.fresh_nodes:
        shown = " ".join(str(d["msg"]) for d in check.debug)
        for host in NODES[:1]:
            assert f"check mode on {host}: {VENV} does not exist yet and neither does the account instinct" in shown
            assert f"check mode on {host}: the rocm stage has not recorded the GPUs yet" in shown
        assert f"so job {JOB} is not predicted on any node" in shown
        assert f"check mode: job {JOB} has no record on" in shown and "its evaluation is not predicted" in shown
        # Nothing ran in a venv that is not there, and nothing was launched.
        assert check.ran("Install the PyTorch family from the wheel index") == []
        assert check.ran("Start every rank at once (torchrun waits at the master for the others)") == []


# Files the roles write with plain template, copy and file tasks, one or two per role, changed by
# hand on the last node before the stages run alone (below), the way drift happens: a mode, an edit,
# a file removed. Every node has them on a converged cluster.
DRIFT = {
    "/etc/systemd/system/instinct-gpu-collector.timer": "chmod 0600",  # monitoring, the collector's unit
    f"/etc/instinct-finetune/jobs/{JOB}/launch.env": "edit",  # finetune, the rank's launch environment
    "/etc/ld.so.conf.d/rocm.conf": "remove",  # rocm, the loader path
    "/etc/udev/rules.d/70-instinct-gpu.rules": "chmod 0600",  # rocm, the device access
    "/etc/instinct-finetune/rccl.env": "remove",  # fabric, the env file every launch reads
    f"{VENV}/pip.conf": "edit",  # instinct_python, pip's settings
    "/var/log/instinct-finetune": "chmod 0700",  # wheel_build, the build logs' folder
}


def path_state(host, path):
    """(mode, sha1) of a path on a node; (None, None) when it is missing."""
    found = node(host, "sh", "-c", f"stat -c %a {path} && (sha1sum {path} 2>/dev/null || echo dir)", check=False)
    if found.returncode != 0:
        return None, None
    mode, digest = found.stdout.split("\n", 1)
    return mode, digest.split()[0]


def change_by_hand(host):
    for path, how in DRIFT.items():
        if how == "remove":
            node(host, "rm", path)
        elif how == "edit":
            node(host, "sh", "-c", f"echo '# changed by hand' >> {path}")
        else:
            node(host, *how.split(), path)


# A task added to a copy of the monitoring role (which shadows the collection's) for the no-change
# runs below: on a converged cluster, the stage's next run writes its file on every node, once, and
# the run after predicts no change. Nobody must keep a list of what a role writes (issue 28).
ADDED_FILE = "/etc/instinct-e2e-added-task"
ADDED_TASK = "Write the file the e2e suite's copy of the role adds"
ADDED = f"""
- name: {ADDED_TASK}
  ansible.builtin.copy:
    content: "added to a copy of the monitoring role by tests/e2e\\n"
    dest: {ADDED_FILE}
    owner: root
    group: root
    mode: "0644"
"""


def shadow_collection(base, role):
    """A collections folder whose instinct.finetune is the checkout with its own copy of ``role``
    (every other entry links to the checkout's). First in ANSIBLE_COLLECTIONS_PATH, it comes before
    .venv/collections' link to the checkout, so a playbook's instinct.finetune.<role> is the copy."""
    collection = base / "ansible_collections" / "instinct" / "finetune"
    (collection / "roles").mkdir(parents=True)
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and entry.name != "roles":
            (collection / entry.name).symlink_to(entry)
    for entry in (ROOT / "roles").iterdir():
        if entry.name == role:
            shutil.copytree(entry, collection / "roles" / role, symlinks=True)
        else:
            (collection / "roles" / entry.name).symlink_to(entry)
    return base


def collections_path(first):
    """ANSIBLE_COLLECTIONS_PATH: ``first``, then the folders ansible.cfg names (relative to it)."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "ansible.cfg")
    configured = config["defaults"]["collections_path"].split(os.pathsep)
    return os.pathsep.join([str(first), *(p if p.startswith(("/", "~")) else str(ROOT / p) for p in configured)])


@pytest.fixture(scope="module")
def added_task(converged, tmp_path_factory):
    """The environment that puts the copy of the monitoring role with ADDED_TASK first; its file is
    removed from every node when the module's tests are done."""
    collections = shadow_collection(tmp_path_factory.mktemp("shadow"), "monitoring")
    tasks = collections.joinpath("ansible_collections/instinct/finetune/roles/monitoring/tasks/main.yml")
    tasks.write_text(tasks.read_text().rstrip("\n") + "\n" + ADDED)
    for host in NODES:
        node(host, "rm", "-f", ADDED_FILE, check=False)
    yield {"ANSIBLE_COLLECTIONS_PATH": collections_path(collections)}
    for host in NODES:
        node(host, "rm", "-f", ADDED_FILE, check=False)


# Issue 32's escalation: a .pth file in the venv's site-packages runs in every Python started from the
# venv. The training account cannot write one there any more (test_sandbox_nodes.py); the build account,
# which owns the venv and runs pip, can. Root must never start the venv's Python, whoever wrote the .pth.
# The line notes the uid of every Python that read it, so the test also sees that the venv's code did
# run, as the training account.
PTH = f"{VENV}/lib/python3.11/site-packages/zz-instinct-e2e-attack.pth"
# In /tmp: every Python may write there (a training unit's PrivateTmp gets a /tmp of its own).
PTH_MARK = "/tmp/instinct-e2e-pth-ran-as-"  # noqa: S108
PTH_LINE = f"import os; open('{PTH_MARK}' + str(os.getuid()), 'a').close()"


@pytest.fixture(scope="module")
def planted_pth(converged):
    """The .pth planted by the venv's owner on every node for the module's later runs (the stages alone,
    then the fault job's check and site.yml while it trains); removed when they are done."""
    for host in NODES:
        node(host, "sh", "-c", f"rm -f {PTH_MARK}*")
        plant = f"printf '%s\\n' \"{PTH_LINE}\" > {PTH}"
        node(host, "sudo", "-u", "instinct-build", "sh", "-c", plant)
    yield {host: as_trainer(host, "id", "-u", check=True).stdout.strip() for host in NODES}
    for host in NODES:
        node(host, "sh", "-c", f"rm -f {PTH} {PTH_MARK}*", check=False)


def root_never_ran_the_venvs_code(planted_pth):
    """No Python of the venv ran as root on any node; the account's own did (the .pth was live)."""
    for host, uid in planted_pth.items():
        marks = node(host, "sh", "-c", f"ls {PTH_MARK}* 2>/dev/null || true").stdout.split()
        assert f"{PTH_MARK}0" not in marks, (host, marks)
        assert f"{PTH_MARK}{uid}" in marks, (host, marks)


# The stage playbooks site.yml chains, as an operator runs one of them alone on a provisioned cluster.
STAGES = ("preflight.yml", "provision.yml", "stack.yml", "fabric.yml", "monitoring.yml", "finetune.yml", "evaluate.yml")


def read_what_it_needs_again(playbook, alone):
    """What a stage run alone read on the nodes instead of inheriting it from an earlier play."""
    if playbook == "fabric.yml":
        # Read again, not inherited: the env file keeps the arch's settings (not rewritten without them).
        assert alone.ran("Read the stage records on the node") == NODES
    if playbook == "finetune.yml":
        assert any("skip (finished on every node)" in str(d["msg"]) for d in alone.debug)
    if playbook == "evaluate.yml":
        # The finished job's weights checked and its evaluation found, neither relaunched nor redone.
        assert alone.ran("Check that the finetune stage finished the job") == NODES


def test_each_stage_alone_changes_nothing_but_the_files_changed_by_hand(added_task, planted_pth):
    """Each stage run alone, with no earlier play of the same run to hand it facts: rc 0. The facts a
    stage needs are read again on the nodes (the GPUs' archs for AMD's RCCL settings, the GPU count
    for the collector) or were written by the stage that owns them.

    These runs are the suite's no-change runs of the stages, and its drift test: before the first,
    DRIFT's files are changed by hand on the last node. Read from each result's own changed and diff
    (--diff): on that node the stages change those files and nothing else, each in the task that
    writes it (and the handlers that task notifies), and write them back as they were; on every other
    node nothing changes, and every copy, template and file task compared its files there.

    The monitoring role is the copy with ADDED_TASK appended: its stage writes the new file on every
    converged node, in that task, and changes nothing else. A .pth file planted in the venv (PTH) runs
    in each of the venv's Pythons: none of the stages ran one as root."""
    drifted = NODES[-1]
    before = {path: path_state(drifted, path) for path in DRIFT}
    assert all(mode for mode, _digest in before.values()), before
    change_by_hand(drifted)
    failures, unexpected, counted, found, added = {}, {}, {}, set(), []
    unseen = {host: set(DRIFT) for host in NODES}
    for playbook in STAGES:
        # The provisioning stage as a rolling upgrade does it: one node at a time (stack.yml takes its
        # batches from the same variable, instinct_rolling_batch; here it runs in one batch).
        rolling = playbook == "provision.yml"
        alone = sandbox.run_playbook(
            playbook,
            cmdline=sandbox.site_cmdline(["--diff", *(["-e", "instinct_rolling_batch=1"] if rolling else [])]),
            extravars={"finetune_collect_dir": str(sandbox.collect_dir())},
            envvars=added_task,
        )
        sandbox.write_report(f"alone-{playbook.removesuffix('.yml')}", alone)
        sandbox.print_report(alone)
        if alone.rc != 0:
            failures[playbook] = alone.failures
        for host, task, handler, files in alone.changes():
            by_hand = set(files) & set(DRIFT)
            if host == drifted and (by_hand or handler):
                found |= by_hand
            elif (task, handler, tuple(files)) == (ADDED_TASK, False, (ADDED_FILE,)):
                added.append(host)
            else:
                unexpected.setdefault(playbook, []).append((host, task, files))
        # Ansible's own count agrees on the other nodes: nothing changed there but the added task.
        wrote = {host: alone.changed_tasks().count((host, ADDED_TASK)) for host in NODES}
        if any(count != wrote[host] for host, count in alone.changed.items() if host != drifted):
            counted[playbook] = alone.changed_tasks()
        for host in NODES:
            unseen[host] -= alone.files(host)
        if rolling:
            # One play start per batch: every node had its turn, one after the other.
            assert len(alone.plays) == len(NODES), alone.plays
        read_what_it_needs_again(playbook, alone)
    assert failures == {}
    # Every change was a file changed by hand, on its node (a handler there runs because one was).
    assert unexpected == {}, unexpected
    assert counted == {}, counted
    # Each file changed by hand was found by the task that writes it and written again as it was.
    assert found == set(DRIFT), set(DRIFT) - found
    assert {path: path_state(drifted, path) for path in DRIFT} == before
    # And on every node the tasks that write them compared them (a converged node's copy and template
    # tasks run: what they would change, they change).
    assert unseen == {host: set() for host in NODES}, unseen
    root_never_ran_the_venvs_code(planted_pth)
    # The added task wrote its file once on every node, as it says.
    assert sorted(added) == NODES, added
    for host in NODES:
        assert node(host, "stat", "-c", "%a %U", ADDED_FILE).stdout.split() == ["644", "root"]
        assert node(host, "cat", ADDED_FILE).stdout == "added to a copy of the monitoring role by tests/e2e\n"


def test_the_evaluation_is_compared_with_a_reference_runs(converged, tmp_path):
    """Issue 34's parity check, on the main job's cached evaluation: against its own eval.json (another
    cluster's run of the job, bit for bit) it agrees and parity.json is written beside the collected
    eval.json; against a run whose loss is 5 % higher, the play fails naming both losses and the
    tolerance."""
    collected = sandbox.collect_dir() / JOB / NODES[0]
    ours = json.loads((collected / "eval.json").read_text())

    def evaluate(reference):
        return sandbox.run_playbook(
            "evaluate.yml",
            cmdline=sandbox.site_cmdline(),
            extravars={"finetune_collect_dir": str(sandbox.collect_dir()), "evaluate_reference": str(reference)},
            quiet=True,
        )

    same = evaluate(collected / "eval.json")
    assert same.rc == 0, same.failures
    parity = json.loads((collected / "parity.json").read_text())
    assert parity["within"] is True and parity["relative_loss_delta"] == 0.0 and parity["tolerance"] == 0.01
    assert parity["reference_job"] == JOB and parity["eval_loss"] == ours["eval_loss"]
    # Not evaluated again: the comparison reads the cached result.
    assert same.ran("Evaluate the fine-tuned weights on the held-out split") == []

    elsewhere = tmp_path / "eval-elsewhere.json"
    elsewhere.write_text(json.dumps(dict(ours, eval_loss=ours["eval_loss"] * 1.05, job=f"{JOB}-elsewhere")))
    apart = evaluate(elsewhere)
    assert apart.rc != 0 and apart.failed_hosts() == [NODES[0]]
    message = " ".join(str(f["msg"]) for f in apart.failures)
    assert f"job {JOB}'s evaluation does not match the reference {elsewhere}" in message
    assert "4.76 % apart, beyond evaluate_reference_tolerance 0.01" in message
    assert "docs/runbooks/finetune-job.md" in message
    # A file that is not an evaluation is refused before anything runs: the filter's unit tests
    # (tests/unit/plugins/module_utils/test_jobspec.py) and the role's first task.


def test_a_frozen_rank_of_a_zero3_job_stops_it_and_reruns_resume(converged, added_task, planted_pth, hub):
    """One ZeRO-3 full fine-tune through what a long run meets: node2's worker frozen (SIGSTOP) after
    the first checkpoint under a play that watches it with one Ansible worker, stopped as stalled within
    the window plus one round (the play fails naming the stall and node2), a resume on node1 alone
    refused before anything changes (its checkpoints were saved at world size 2), and so is a resume
    with another learning rate (issue 32), then a resume that site.yml, run while it trains,
    re-attaches to, watches to its end and evaluates. A killed rank, and the same re-attach, through
    Slurm: test_sandbox_slurm.py."""
    for host in NODES:  # a cluster kept from an earlier run may hold this job already
        node(host, "systemctl", "stop", f"instinct-finetune-{FAULT_JOB}.service", check=False)
        node(host, "rm", "-rf", f"{JOB_ROOT}/{FAULT_JOB}", f"/var/log/instinct-finetune/{FAULT_JOB}")
    saved = stall_after_the_first_checkpoint()
    first_fetches = the_hub_model_was_staged_once_per_node_and_trained_offline(hub)
    refuse_a_resume_on_one_node()
    refuse_a_resume_with_another_learning_rate()
    resume_while_site_yml_runs_again(saved, added_task)
    # finetune.yml's runs, the check and site.yml while the job trained: none ran the venv as root.
    root_never_ran_the_venvs_code(planted_pth)
    # Every resume reused each node's snapshot: not one more file fetched from the hub (issue 33).
    assert the_hubs_file_fetches(hub) == first_fetches


# Frozen after its first checkpoint (step 20), with 40 steps (about 30 s here) still to go. The fault
# job is the suite's ZeRO-3 full fine-tune (LoRA is the main job's): its resumed weights are the ones
# that must load with transformers and beat the base model. Full fine-tuning takes a smaller learning
# rate than the LoRA default of jobs/sandbox-tiny.yml.
FAULT_SETTINGS = (
    f"-e finetune_job_name={FAULT_JOB} -e finetune_max_steps=60 -e finetune_save_steps=20"
    " -e finetune_finetuning_type=full -e finetune_learning_rate=2.0e-3"
    # Its model comes from the hub (the stand-in, conftest's hub fixture) at a pinned commit (issue 33).
    f" -e finetune_model_src= -e finetune_model={Hub.REPO} -e finetune_model_revision={Hub.COMMIT}"
    f" -e finetune_hf_endpoint={Hub.URL}"
)
# A two-minute stall window for the plays that watch it (a start-up on a busy machine stays well
# inside it). Not for site.yml: the monitoring stage's stall alert follows the same setting.
STALL_MINUTES = 2
FAULT = f"{FAULT_SETTINGS} -e finetune_stall_minutes={STALL_MINUTES}"
# The watching plays' round (run_in_thread's finetune_progress_interval).
ROUND_SECONDS = 5


def the_hubs_file_fetches(hub):
    """How many GETs of each repository file the hub answered, per client address."""
    fetches = {}
    for request in hub.requests():
        if request["method"] == "GET" and request["file"]:
            key = f"{request['client']} {request['file']}"
            fetches[key] = fetches.get(key, 0) + 1
    return fetches


def the_hub_model_was_staged_once_per_node_and_trained_offline(hub):
    """Issue 33: each node staged the pinned commit from the hub before its rank started, each file
    once (the weights' first GET, cut by the hub, resumed by a second), checked against the hub's
    sha256; the job loaded that folder with the hub switched off (HF_HUB_OFFLINE=1)."""
    assets = Path(os.environ["INSTINCT_SANDBOX_ASSETS"]) / "model"
    addresses = {host: mgmt_address(host) for host in NODES}
    for host in NODES:
        for name in ("config.json", "tokenizer.json", "model.safetensors"):
            staged = node(host, "sha256sum", f"{Hub.STAGED}/{name}").stdout.split()[0]
            assert staged == hashlib.sha256((assets / name).read_bytes()).hexdigest(), (host, name)
        record = json.loads(node(host, "cat", f"{Hub.STAGED}/.instinct-snapshot.json").stdout)
        assert record["revision"] == Hub.COMMIT and record["complete"], record
        assert node(host, "stat", "-c", "%U", Hub.STAGED).stdout.strip() == "instinct"
        env = node(host, "cat", f"/etc/instinct-finetune/jobs/{FAULT_JOB}/launch.env").stdout
        assert "HF_HUB_OFFLINE=1" in env.splitlines()
        train = node(host, "cat", f"/etc/instinct-finetune/jobs/{FAULT_JOB}/train.yaml").stdout
        assert f"model_name_or_path: {Hub.STAGED}" in train
        assert node(host, "test", "-e", f"{JOB_ROOT}/{FAULT_JOB}/.hub-token", check=False).returncode != 0
    fetches = the_hubs_file_fetches(hub)
    weights = {host: hub.gets(addresses[host], "model.safetensors") for host in NODES}
    # The hub cut the first GET of the weights; that node's second GET finished the file.
    cut = [host for host in NODES if len(weights[host]) == 2]
    assert len(cut) == 1 and all(len(weights[h]) == 1 for h in NODES if h not in cut), weights
    for host in NODES:
        assert weights[host][-1]["status"] in (200, 206), weights[host]
        for name in ("config.json", "tokenizer.json"):
            assert fetches.get(f"{addresses[host]} {name}") == 1, fetches
    return fetches


def refuse_a_resume_on_one_node():
    """Resuming on node1 alone would load shards saved by two ranks: refused before anything changes."""
    alone = sandbox.run_playbook(
        "finetune.yml", cmdline=sandbox.site_cmdline(f"{FAULT} --limit {NODES[0]}"), quiet=True
    )
    assert alone.rc != 0 and alone.failed_hosts() == [NODES[0]]
    refusal = " ".join(str(f["msg"]) for f in alone.failures)
    assert "were saved with world_size 2 (now 1)" in refusal and "new finetune_job_name" in refusal, refusal
    assert alone.changed == {}
    assert alone.ran("Create the job's folders") == []
    assert alone.ran("Write the LLaMA-Factory training settings") == []


def refuse_a_resume_with_another_learning_rate():
    """The job's checkpoints were saved at learning rate 0.002 (FAULT_SETTINGS): resuming them
    at another is refused on both nodes before anything changes, naming the setting and the fix
    (issue 32)."""
    changed = sandbox.run_playbook(
        "finetune.yml", cmdline=sandbox.site_cmdline(f"{FAULT} -e finetune_learning_rate=1.0e-3"), quiet=True
    )
    assert changed.rc != 0 and changed.failed_hosts() == NODES
    refusal = " ".join(" ".join(str(f["msg"]).split()) for f in changed.failures)
    assert (f"job {FAULT_JOB} cannot go on: its checkpoints on {NODES[0]} were saved with other training "
            "settings: learning_rate 0.002 (now 0.001)") in refusal, refusal  # fmt: skip
    assert "new finetune_job_name" in refusal and "set finetune_resume: force" in refusal, refusal
    assert changed.changed == {}
    assert changed.ran("Create the job's folders") == []
    assert changed.ran("Write the LLaMA-Factory training settings") == []
    assert changed.ran("Add the launch to the job's history of settings") == []


# Another job's name (issue 32): never launched, so nothing of it exists on the nodes.
OTHER_JOB = "sandbox-second"


def refuse_another_job_while_one_trains():
    """finetune.yml of another job while the fault job trains on both nodes: refused on both before
    anything changes, naming the running job, its nodes and its unit (issue 32)."""
    for host in NODES:  # a cluster kept from an earlier run
        node(host, "rm", "-rf", f"{JOB_ROOT}/{OTHER_JOB}", f"/etc/instinct-finetune/jobs/{OTHER_JOB}")
    second = sandbox.run_playbook(
        "finetune.yml", cmdline=sandbox.site_cmdline(f"-e finetune_job_name={OTHER_JOB} -e finetune_max_steps=20"),
        quiet=True,
    )  # fmt: skip
    assert second.rc != 0 and second.failed_hosts() == NODES
    refusal = " ".join(" ".join(str(f["msg"]).split()) for f in second.failures)
    assert (f"job {OTHER_JOB} is refused before any change: job {FAULT_JOB} is training on {NODES[0]}, {NODES[1]} "
            f"(unit instinct-finetune-{FAULT_JOB}.service)") in refusal, refusal  # fmt: skip
    assert "docs/runbooks/finetune-job.md" in refusal
    assert second.changed == {}
    assert second.ran("Refuse the job while another one trains on any of its nodes") == NODES
    assert second.ran("Create the job's folders") == []
    assert second.ran("Start every rank at once (torchrun waits at the master for the others)") == []
    for host in NODES:
        for path in (f"{JOB_ROOT}/{OTHER_JOB}", f"/etc/systemd/system/instinct-finetune-{OTHER_JOB}.service"):
            assert node(host, "test", "-e", path, check=False).returncode != 0, (host, path)


def launches(host, job):
    return node(host, "cat", f"/var/log/instinct-finetune/{job}/train.log").stdout.count(
        "==== instinct.finetune launch"
    )


def wait_for_a_new_step(thread, saved):
    """Until the resumed job took a step on node1 (past its checkpoint and past whatever step the
    progress file kept from the launch before)."""
    past = max(*saved[NODES[0]], trained_steps(NODES[0], FAULT_JOB))
    wait_until(lambda: trained_steps(NODES[0], FAULT_JOB) > past and training_processes(NODES[1]) != [],
               thread, "a step of the resumed job", timeout=300)  # fmt: skip


def stall_after_the_first_checkpoint():
    """The job's first launch, watched by a finetune.yml run with one Ansible worker (--forks 1) for the
    two nodes: the one watch task, run once on the master, follows both ranks (issue 31). Once every node
    has its first checkpoint, node2's worker is frozen (SIGSTOP), so the job runs on without a step.
    Within the stall window plus one round of the freeze, the play stops every rank and fails naming the
    stall, the frozen node and the runbook page; the checkpoints stay."""
    outcome = {}
    thread = run_in_thread("finetune.yml", f"{FAULT} --forks 1", outcome)
    wait_until(lambda: all(complete_checkpoints(h, FAULT_JOB) for h in NODES), thread, "a checkpoint on every node")
    saved = {h: complete_checkpoints(h, FAULT_JOB) for h in NODES}
    node(NODES[1], "pkill", "-STOP", "-f", WORKER)
    frozen_at = time.monotonic()
    thread.join(timeout=600)
    took = time.monotonic() - frozen_at
    watched = outcome["result"]
    assert watched.rc != 0
    stall = " ".join(str(f["msg"]) for f in watched.failures)
    assert f"job {FAULT_JOB} stalled: every rank runs but none took a step" in stall, stall
    assert f"Suspect: {NODES[1]} ({NODES[1]}: process" in stall and "stopped by a signal" in stall, stall
    assert "docs/runbooks/rank-hung.md" in stall
    # One watch for the job, run once (on the master) by the one worker.
    assert watched.ran(WATCH_TASK) == [NODES[0]]
    # The window runs from the last step, which came before the freeze. One round is the status
    # call plus the interval; 30 s more covers stopping both units and the play's own end on a
    # 2-core machine.
    figures = {"seconds_from_freeze_to_stop": round(took, 1), "window_s": STALL_MINUTES * 60, "round_s": ROUND_SECONDS}
    (sandbox.collect_dir() / "stall.json").write_text(json.dumps(figures) + "\n")
    assert took <= STALL_MINUTES * 60 + ROUND_SECONDS + 30, took
    assert training_processes(NODES[0]) == [] and training_processes(NODES[1]) == []
    for host in NODES:
        assert set(saved[host]) <= set(complete_checkpoints(host, FAULT_JOB))
    return saved


def the_resume_reused_the_tokenized_set(launched):
    """Issue 33: the resume checked the job's inputs again and reused the set its first launch tokenized."""
    tokenized = debug_messages(launched, TOKENIZED)
    assert sorted(tokenized) == NODES, tokenized
    assert all(f"tiny_instruct reused in {JOB_ROOT}/{FAULT_JOB}/tokenized" in m for m in tokenized.values()), tokenized


def only_the_jobs_end_changed_something(during):
    """Nothing changed before the job ended: the only changes are what its end brings, the finished job's
    files collected on the controller, its evaluation and its stability report (issue 34), made on the
    master over the job's whole window: the freeze shows as a warning at most."""
    changed = {(t["role"], t["task"]) for t in during.tasks if t["changed"]}
    assert changed, "the finished job was neither collected nor evaluated"
    after_the_end = ("evaluate", "stability")
    assert all((role or "").endswith(after_the_end) or task.startswith("Collect ") for role, task in changed), changed
    assert during.ran("Judge the window and draw the plots") == [NODES[0]]
    report = json.loads((sandbox.collect_dir() / FAULT_JOB / "stability" / "report.json").read_text())
    assert report["verdict"] in ("pass", "warn"), [v for v in report["verdicts"] if v["verdict"] == "fail"]


def resume_while_site_yml_runs_again(saved, added_task):
    """The last resume is launched without waiting; finetune.yml of another job while it runs is
    refused, naming it; site.yml --check --diff while it runs predicts no
    change; then site.yml is run again while it trains, and a second operator's preflight.yml started
    during its stack stage is refused by the run lock. Its
    node2 worker is held (SIGSTOP) from launch until site.yml's watch starts, because the resume's
    40 steps take less time than site.yml's stages before it; the job is live all along. site.yml
    holds back in every stage that could disturb the job, changes nothing there, re-attaches to the
    job, watches it to its end and evaluates it."""
    launched = sandbox.run_playbook("finetune.yml", cmdline=sandbox.site_cmdline(f"{FAULT} -e finetune_wait=false"))
    assert launched.rc == 0, launched.failures
    the_resume_reused_the_tokenized_set(launched)
    wait_for_a_new_step(None, saved)
    node(NODES[1], "pkill", "-STOP", "-f", WORKER)
    before = {host: launches(host, FAULT_JOB) for host in NODES}
    # A second job while this one trains: refused, and this one goes on (its launches are counted again
    # at the end).
    refuse_another_job_while_one_trains()
    check_mode_predicts_no_change_while_the_job_trains(added_task)
    released, second = [], {}

    def release_at_the_watch(event):
        data = event.get("event_data") or {}
        if event.get("event") == "playbook_on_task_start" and data.get("task") == WATCH_TASK and not released:
            node(NODES[1], "pkill", "-CONT", "-f", WORKER)
            released.append(time.monotonic())
        # A second operator's run while this one changes the nodes (issue 32).
        if event.get("event") == "playbook_on_play_start" and data.get("play") == STACK_PLAY and not second:
            second["thread"] = run_in_thread("preflight.yml", "", second)

    try:
        during = sandbox.run_playbook(
            "site.yml",
            cmdline=sandbox.site_cmdline(FAULT_SETTINGS),
            extravars={"finetune_collect_dir": str(sandbox.collect_dir()), "finetune_progress_interval": ROUND_SECONDS},
            on_event=release_at_the_watch,
        )
    finally:
        node(NODES[1], "pkill", "-CONT", "-f", WORKER, check=False)
    sandbox.write_report("site-during-job", during)
    sandbox.print_report(during)
    assert during.rc == 0, during.failures
    assert released, "site.yml never started watching the job"
    a_second_run_was_refused_by_the_lock(second)
    shown = " ".join(str(d["msg"]) for d in during.debug)
    assert f"job {FAULT_JOB}: attach (running on every node)" in shown
    # Each stage that could disturb the job said why it held back, and did not act.
    for what in ("is training on the cluster; its torchrun holds port 29500", "AMD's repositories, the driver",
                 "no package of the venv is installed or changed"):  # fmt: skip
        assert what in shown, what
    assert during.ran("Listen on the master's port for every other node") == []
    assert during.ran(SMOKE_TASK) == []
    assert during.ran("Start every rank at once (torchrun waits at the master for the others)") == []
    assert {host: launches(host, FAULT_JOB) for host in NODES} == before  # no unit was restarted
    only_the_jobs_end_changed_something(during)
    log = since_last_launch(node(NODES[0], "cat", f"/var/log/instinct-finetune/{FAULT_JOB}/train.log").stdout)
    # The launch marker names the common checkpoint; the Trainer says it restored that step.
    marker = re.search(r"resume_from_checkpoint=\S*/checkpoint-(\d+) ====", log)
    restored = re.search(r"Resuming training from checkpoint with epoch \d+ and global step (\d+)", log)
    assert marker and restored, log[:3000]
    assert int(marker.group(1)) == int(restored.group(1)) >= max(saved[NODES[0]])
    state = json.loads(node(NODES[0], "cat", f"{JOB_ROOT}/{FAULT_JOB}/output/trainer_state.json").stdout)
    assert state["global_step"] == 60
    # A ZeRO-3 job: each node resumed its own optimizer partition from its node-local checkpoint.
    assert node(NODES[1], "sh", "-c", f"ls {JOB_ROOT}/{FAULT_JOB}/output/checkpoint-*/global_step*/*optim_states.pt",
                check=False).returncode == 0  # fmt: skip
    the_full_fine_tunes_weights_load_and_beat_the_base_model()


def check_mode_predicts_no_change_while_the_job_trains(added_task):
    """site.yml --check --diff on the converged cluster while the job trains: the suite's converged
    check. Every stage predicts no change on real state: preflight and its trust store, the ROCm
    repositories' and device files, the venv's settings, what is installed in it (read, not installed:
    the stages that could disturb the job hold back, so the install path of DeepSpeed's wheel is
    predicted only by the fresh check and run by the stages alone), the fabric's env file, monitoring
    (with the added task, whose file the stages alone wrote: compared on every node, unchanged), and
    the running job, attached to and left alone."""
    checked = sandbox.run_playbook(
        "site.yml",
        cmdline=sandbox.site_cmdline(f"{FAULT_SETTINGS} --check --diff"),
        extravars={"finetune_collect_dir": str(sandbox.collect_dir())},
        envvars=added_task,
        quiet=True,
    )
    sandbox.write_report("site-check-during-job", checked)
    sandbox.print_report(checked)
    assert checked.rc == 0, checked.failures
    # Ansible's stats list only hosts with a change.
    assert sorted(checked.ok) == NODES
    assert {host: checked.changed.get(host, 0) for host in NODES} == dict.fromkeys(NODES, 0)
    assert checked.changed_tasks() == []
    assert f"job {FAULT_JOB}: attach (running on every node)" in " ".join(str(d["msg"]) for d in checked.debug)
    # Nothing would be rewritten: no result shows a change in its own changed or diff (a write that
    # changed_when hides included), and the copy, template and file tasks that write DRIFT's files
    # compared them on every node (each task is its own comparison; nothing skips them). Two are the
    # stages alone's to compare: the finished main job's launch environment is not this job's
    # (finetune.yml), and the build logs' folder belongs to DeepSpeed's install, held back while a job
    # trains (stack.yml).
    assert checked.changes() == [], checked.changes()
    compared = set(DRIFT) - {f"/etc/instinct-finetune/jobs/{JOB}/launch.env", "/var/log/instinct-finetune"}
    unseen = {host: sorted(compared - checked.files(host)) for host in NODES}
    assert unseen == {host: [] for host in NODES}, unseen
    # The task added to the role ran on every node and would change nothing.
    assert checked.ran(ADDED_TASK) == NODES
    assert all(ADDED_FILE in checked.files(host) for host in NODES)


def the_full_fine_tunes_weights_load_and_beat_the_base_model():
    """ZeRO-3 full fine-tuning: the weights gathered at the end load with transformers on the node and
    beat the base model."""
    weights = f"{JOB_ROOT}/{FAULT_JOB}/output"
    loaded = node_python(
        NODES[0],
        "from transformers import AutoModelForCausalLM; "
        f"m = AutoModelForCausalLM.from_pretrained('{weights}'); "
        "print(sum(p.numel() for p in m.parameters()))",
    )
    assert int(loaded.stdout.split()[-1]) > 0
    evaluated = json.loads(node(NODES[0], "cat", f"{weights}/eval.json").stdout)
    assert (evaluated["strategy"], evaluated["finetuning_type"]) == ("deepspeed_zero3", "full")
    assert evaluated["perplexity"] < evaluated["base_perplexity"]
    # The base model is the hub's snapshot of the sandbox model (issue 33), another folder than the LoRA
    # job's copy with the same files: scored on the same rows, it has the same perplexity.
    main = json.loads(node(NODES[0], "cat", f"{JOB_ROOT}/{JOB}/output/eval.json").stdout)
    assert math.isclose(evaluated["base_perplexity"], main["base_perplexity"], rel_tol=1e-3), (evaluated, main)
    assert evaluated["base_eval_loss"] == main["base_eval_loss"]


STACK_PLAY = "Install the training stack (Python, PyTorch, DeepSpeed, LLaMA-Factory)"
LOCK_TASK = "Take this node's run lock (a second run changing the node is refused)"


def a_second_run_was_refused_by_the_lock(second):
    """preflight.yml, started when site.yml began its stack stage: refused on both nodes at its first task,
    naming site.yml's run, with nothing changed; site.yml went on (issue 32)."""
    assert second, "site.yml never started its stack stage"
    second["thread"].join(timeout=600)
    refused = second["result"]
    assert refused.rc != 0 and refused.failed_hosts() == NODES, refused.failures
    for failure in refused.failures:
        assert failure["task"] == LOCK_TASK, failure
        message = " ".join(str(failure["msg"]).split())
        assert "another run holds this node's run lock" in message and "site.yml), since" in message, message
        assert message.endswith("See docs/runbooks/run-lock.md"), message
    assert refused.changed == {}
    assert refused.ran(LOCK_TASK) == NODES
    assert refused.ran("Print every problem of every node in one table") == []
