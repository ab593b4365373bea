"""What a node that fails preflight does to a run (issues 17 and 31). node2 asks for more memory and
free disk than any sandbox node has (tests/e2e/playbooks/preflight-fails-on-node2.yml). Preflight
reports all of its problems in one table, then by default stops every node before anything else
happens, naming the node and each problem; with instinct_exclude_failed_nodes: true node2 is left
out and site.yml goes on with node1 alone, the job (the suite's plain DDP job) at world size 1, and the
summary names node2.

These runs leave node2's preflight record holding its problems: keep this module last, or run
site.yml after it."""

import json
import os
import shutil
from pathlib import Path

import pytest
from cluster import JOB, JOB_ROOT, NODES, ROOT, debug_messages, node, sandbox, summary_lines

PLAYBOOK = ROOT / "tests" / "e2e" / "playbooks" / "preflight-fails-on-node2.yml"
TABLE = "Print every problem of every node in one table"
LEFT_OUT_JOB = f"{JOB}-left-out"
# node2's three problems, as the table's check column names them (preflight_disk_paths: /opt, /var).
NODE2_CHECKS = ["disk /opt", "disk /var", "memory"]
MODELS = "/var/lib/instinct-finetune/models"  # finetune_models_dir


def run(*extra):
    return sandbox.run_playbook(
        PLAYBOOK,
        cmdline=sandbox.site_cmdline(list(extra)),
        extravars={"finetune_collect_dir": str(sandbox.collect_dir())},
        quiet=True,
    )


def table(result):
    """preflight's table: its headline, then {node: [check, ...]} from its rows."""
    shown = debug_messages(result, TABLE)
    assert len(shown) == 1, shown  # printed once, for every node
    lines = next(iter(shown.values()))
    rows = {}
    for line in lines[3:]:
        cells = [cell.strip() for cell in line.split("|")]
        rows.setdefault(cells[0], []).append(cells[1])
    return lines[0], rows


@pytest.fixture(scope="module")
def preflight_fails(converged):
    return run()


def test_a_node_that_fails_preflight_stops_the_run_on_every_node(preflight_fails):
    assert preflight_fails.rc != 0
    assert preflight_fails.failed_hosts() == [NODES[1]]
    # One table with every problem of the node: each check ran, none stopped the others.
    headline, rows = table(preflight_fails)
    assert headline.startswith(f"preflight: 3 problem(s) on 1 of {len(NODES)} node(s): {NODES[1]}; every node stops")
    assert rows == {NODES[1]: NODE2_CHECKS}
    (failure,) = preflight_fails.failures
    assert failure["host"] == NODES[1] and failure["task"] == "Stop every node, since a node failed preflight"
    message = str(failure["msg"])
    assert "below preflight_min_memory_gb=100000" in message and "below preflight_min_free_disk_gb=100000" in message
    assert "docs/runbooks/oom-fragmentation.md" in message and "docs/runbooks/disk-full.md" in message
    assert "Every node stops" in message and "docs/runbooks/preflight.md" in message
    # The stage is named: the run ended in the preflight play, and no later stage started.
    plays = [play["play"] for play in preflight_fails.plays]
    assert plays[-1] == "Check every node before anything is installed", plays
    # node1 stopped with it, unchanged: nothing was installed or launched on part of the cluster. Only
    # node2's preflight record (what diagnose reads) took its problems.
    assert preflight_fails.changed_tasks() == [
        (NODES[1], "Keep the problems preflight found on the node for diagnose")
    ], preflight_fails.changed_tasks()
    assert preflight_fails.ran("Launch one LLaMA-Factory process per node") == []
    assert preflight_fails.ran("Read the host tuning") == []


def model_folders(host):
    """{folder name: sha256 of its files} of the models stored on a node."""
    out = node(host, "sh", "-c", f"cd {MODELS} && find . -type f -exec sha256sum {{}} + | sort -k2").stdout
    return {line.split()[1]: line.split()[0] for line in out.splitlines()}


@pytest.fixture(scope="module")
def left_out(preflight_fails, tmp_path_factory):
    """A job of its own on the nodes that remain (a job launched on more nodes is not resumed on fewer:
    the --limit resume of test_sandbox.py shows that refusal). The stages between preflight and the
    job found nothing to change on this converged cluster in the no-change runs of test_sandbox.py,
    and so does the evaluation after it: they are skipped here (their tags), which also leaves
    Prometheus's targets as they are.

    Its model is another folder of the same name as the sandbox job's (``model``), from another
    source: the sandbox model with a file more (issue 32: it was copied over the first)."""
    other = tmp_path_factory.mktemp("other-source") / "model"
    shutil.copytree(Path(os.environ["INSTINCT_SANDBOX_ASSETS"]) / "model", other)
    (other / "NOTICE.md").write_text("the same model, from another source\n")
    before = model_folders(NODES[0])
    result = run(
        "-e", "instinct_exclude_failed_nodes=true", "-e", f"finetune_job_name={LEFT_OUT_JOB}",
        "-e", f"finetune_model_src={other}",
        "-e", "finetune_max_steps=10", "--skip-tags", "provision,stack,fabric,monitoring,evaluate,stability",
        # The suite's plain DDP job (full fine-tuning, at the fault job's learning rate).
        "-e", "finetune_strategy=ddp", "-e", "finetune_finetuning_type=full", "-e", "finetune_learning_rate=2.0e-3",
    )  # fmt: skip
    result.models_before = before
    return result


def test_with_exclusion_the_job_runs_on_the_nodes_that_remain(left_out):
    # Ansible's verdict on a run with a failed host (node2); every stage ran to its end on node1.
    assert left_out.rc == 2 and left_out.failed_hosts() == [NODES[1]]
    (failure,) = left_out.failures
    assert failure["task"] == "Leave this node out of the run, since it failed preflight"
    assert f"which goes on with {', '.join(NODES[:1] + NODES[2:])}" in str(failure["msg"])
    headline, rows = table(left_out)
    assert headline.endswith(f"left out: {NODES[1]}; going on with {', '.join(NODES[:1] + NODES[2:])}")
    assert rows == {NODES[1]: NODE2_CHECKS}
    assert [play["play"] for play in left_out.plays][-1] == "Summarise every node"
    assert left_out.ran("Launch one LLaMA-Factory process per node") == sorted(NODES[:1] + NODES[2:])
    # The job's world and ranks are the remaining nodes': one rank per CPU node, node1 rank 0.
    conf = f"/etc/instinct-finetune/jobs/{LEFT_OUT_JOB}/launch.env"
    launch = dict(
        line.split("=", 1) for line in node(NODES[0], "cat", conf).stdout.splitlines() if "=" in line and line[0] != "#"
    )
    assert (launch["NNODES"], launch["NODE_RANK"]) == (str(len(NODES) - 1), "0")
    fingerprint = node(NODES[0], "cat", f"{JOB_ROOT}/{LEFT_OUT_JOB}/fingerprint").stdout
    assert f"world_size={len(NODES) - 1}" in fingerprint.split()
    assert node(NODES[1], "test", "-e", f"{JOB_ROOT}/{LEFT_OUT_JOB}", check=False).returncode != 0
    # Plain DDP trained it: torchrun's one rank, no DeepSpeed configuration, every step taken.
    log = node(NODES[0], "cat", f"/var/log/instinct-finetune/{LEFT_OUT_JOB}/train.log").stdout
    assert f"Process rank: 0, world size: {len(NODES) - 1}" in log.rsplit("==== instinct.finetune launch", 1)[-1]
    assert node(NODES[0], "test", "-e", f"/etc/instinct-finetune/jobs/{LEFT_OUT_JOB}/ds_config.json",
                check=False).returncode != 0  # fmt: skip
    state = json.loads(node(NODES[0], "cat", f"{JOB_ROOT}/{LEFT_OUT_JOB}/output/trainer_state.json").stdout)
    assert state["global_step"] == 10
    # The summary names the node left out and why; node1's row has the job.
    summary = summary_lines(left_out)
    assert summary[0].rstrip().endswith("| left out")
    row = next(line for line in summary if line.startswith(NODES[1]))
    assert row.rstrip().endswith("failed preflight: disk /opt, disk /var, memory")
    assert f"{LEFT_OUT_JOB} succeeded" in next(line for line in summary if line.startswith(NODES[0]))
    assert any(line.startswith(f"warning: {NODES[1]} was left out of this run") for line in summary)


def test_a_model_folder_of_the_same_name_from_another_source_gets_its_own_folder(left_out):
    """Issue 32: stored by name and content, the left-out job's ``model`` did not overwrite the sandbox
    job's ``model`` on node1; each job's settings name its own."""
    after = model_folders(NODES[0])
    assert {path: digest for path, digest in after.items() if path in left_out.models_before} == left_out.models_before
    new = {path.split("/")[1] for path in set(after) - set(left_out.models_before)}
    assert len(new) == 1 and any(path.endswith("/NOTICE.md") for path in after), new
    (folder,) = new
    assert folder.startswith("model-") and all(not path.startswith(f"./{folder}/") for path in left_out.models_before)
    train = node(NODES[0], "cat", f"/etc/instinct-finetune/jobs/{LEFT_OUT_JOB}/train.yaml").stdout
    assert f"model_name_or_path: {MODELS}/{folder}" in train, train
    main = node(NODES[0], "cat", f"/etc/instinct-finetune/jobs/{JOB}/train.yaml").stdout
    assert f"{MODELS}/{folder}" not in main and f"{MODELS}/model-" in main
