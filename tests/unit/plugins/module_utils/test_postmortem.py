"""postmortem: the manifest a finished job leaves in its collect folder (versions of the stack, the
fabric's all-reduce figure, wall time and GPU-hours), built from what the master node holds. The
dist-info names and dpkg-query lines are read from this machine's own venv and packages."""

import importlib.metadata
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.filter.postmortem import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils import postmortem

ROOT = Path(__file__).resolve().parents[4]
SITE_PACKAGES = Path(pytest.__file__).resolve().parents[1]  # the venv's site-packages
# The keys transformers' Trainer.save_metrics("train", ...) writes into all_results.json; the values
# are made up for the arithmetic.
RESULTS = {"epoch": 1.0, "total_flos": 2.2e16, "train_loss": 0.37, "train_runtime": 5400.0,
           "train_samples_per_second": 17.0, "train_steps_per_second": 0.5}  # fmt: skip
# What node_tools' instinct-allreduce prints (allreduce.py: one JSON line, a row per message size).
ALLREDUCE = {
    "rank": 0, "world_size": 16, "backend": "nccl", "ifname": "ens50f0", "latency_us": 41.2,
    "results": [
        {"size_bytes": 67108864, "seconds": 0.002, "algbw_gbps": 33.5, "busbw_gbps": 62.9},
        {"size_bytes": 8589934592, "seconds": 0.05, "algbw_gbps": 171.8, "busbw_gbps": 322.1},
        {"size_bytes": 1048576, "seconds": 0.0001, "algbw_gbps": 10.4, "busbw_gbps": 19.5},
    ],
}  # fmt: skip


def test_dist_info_folders_give_the_venvs_versions():
    folders = sorted(str(path) for path in SITE_PACKAGES.glob("*.dist-info"))
    versions = postmortem.dist_versions(folders)
    for name in ("pytest", "jmespath", "ansible_core"):
        assert versions[name] == importlib.metadata.version(name.replace("_", "-")), name
    # A ROCm or CPU torch wheel keeps its local label; names are as wheels spell them.
    assert postmortem.dist_versions(["/v/lib/python3.12/site-packages/torch-2.7.1+rocm6.4.1.dist-info/"]) == {
        "torch": "2.7.1+rocm6.4.1"
    }
    assert postmortem.dist_versions(["LlamaFactory-0.9.5.dist-info", "torchaudio-2.7.1.dist-info", "x.egg-info"]) == {
        "llamafactory": "0.9.5",
        "torchaudio": "2.7.1",
    }


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="no dpkg on this machine")
def test_dpkg_query_lines_give_the_installed_packages_and_leave_out_the_unknown():
    run = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Version}\n", "dpkg", "no-such-package-instinct"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1  # one package unknown: what the role's task tolerates
    versions = postmortem.dpkg_versions(run.stdout)
    assert list(versions) == ["dpkg"] and versions["dpkg"][0].isdigit()
    assert postmortem.dpkg_versions("rccl\t\nrocm-core\t6.4.1.60401-83~22.04\n") == {
        "rocm-core": "6.4.1.60401-83~22.04"
    }


def test_the_fabric_figure_is_the_bus_bandwidth_at_the_largest_message():
    figure = postmortem.fabric_figure(ALLREDUCE)
    assert figure["busbw_gbps"] == 322.1 and figure["size_bytes"] == 8589934592
    assert figure["world_size"] == 16 and figure["ifname"] == "ens50f0"
    assert postmortem.fabric_figure(None) is None
    assert postmortem.fabric_figure({"results": []}) is None


def read(**changes):
    base = {
        "nodes": ["node1", "node2"],
        "device": "rocm",
        "world_size": 16,
        "dist_infos": [
            "/opt/instinct/venv/lib/python3.12/site-packages/torch-2.7.1+rocm6.4.1.dist-info",
            "/opt/instinct/venv/lib/python3.12/site-packages/deepspeed-0.16.9.dist-info",
            "/opt/instinct/venv/lib/python3.12/site-packages/llamafactory-0.9.5.dist-info",
        ],
        "rocm_version": "6.4.1-83\n",
        "amdgpu_module": "6.12.12\n",
        "dpkg": "\n".join(
            [
                "rocm-core\t6.4.1.60401-83~22.04",
                "rccl\t2.22.3.60401-83~22.04",
                "amdgpu-dkms\t1:6.12.12.60401-2164967.22.04",
            ]
        ),
        "results": json.dumps(RESULTS),
        "allreduce": ALLREDUCE,
        "files": ["train.yaml", "rccl.env", "ds_config.json"],
        "previous": "",
    }
    return dict(base, **changes)


def test_the_manifest_names_every_version_the_fabric_figure_wall_time_and_gpu_hours():
    manifest = postmortem.manifest("sft-7b", read())
    assert manifest["versions"] == {
        "rocm": "6.4.1-83",
        "amdgpu_driver": "6.12.12",
        "amdgpu_dkms": "1:6.12.12.60401-2164967.22.04",
        "rccl": "2.22.3.60401-83~22.04",
        "torch": "2.7.1+rocm6.4.1",
        "deepspeed": "0.16.9",
        "llamafactory": "0.9.5",
        "transformers": None,
        "accelerate": None,
        "peft": None,
    }
    assert manifest["fabric_allreduce"]["busbw_gbps"] == 322.1
    # 16 ranks for 1.5 hours.
    assert manifest["wall_time_seconds"] == 5400.0
    assert manifest["ranks"] == 16 and manifest["rank_hours"] == 24.0 and manifest["gpu_hours"] == 24.0
    assert manifest["files"] == ["ds_config.json", "rccl.env", "train.yaml"]
    assert manifest["job"] == "sft-7b" and manifest["nodes"] == ["node1", "node2"]
    json.dumps(manifest)  # what the role writes


def test_cpu_ranks_cost_no_gpu_hours_and_a_node_without_rocm_has_null_versions():
    manifest = postmortem.manifest(
        "sandbox", read(device="cpu", world_size=2, rocm_version="", amdgpu_module=None, dpkg="", results=RESULTS)
    )
    assert manifest["rank_hours"] == 3.0 and manifest["gpu_hours"] == 0.0
    assert manifest["versions"]["rocm"] is None and manifest["versions"]["rccl"] is None
    assert manifest["versions"]["amdgpu_driver"] is None and manifest["versions"]["torch"] == "2.7.1+rocm6.4.1"


def test_without_results_the_wall_time_is_unknown_not_zero():
    manifest = postmortem.manifest("j", read(results=""))
    assert manifest["wall_time_seconds"] is None and manifest["gpu_hours"] is None
    assert postmortem.manifest("j", read(results="{not json"))["rank_hours"] is None


def test_the_manifest_of_a_finished_run_is_kept_as_first_collected():
    first = postmortem.manifest("j", read())
    # finetune.yml alone (no fabric figure in its run) writes the same manifest: nothing changes.
    assert postmortem.manifest("j", read(allreduce=None, previous=json.dumps(first))) == first
    # A later site.yml measures the fabric again and finds a newer torch: the job ran on neither.
    later = dict(ALLREDUCE, busbw_gbps=1.0) if isinstance(ALLREDUCE, dict) else None
    newer = [p.replace("torch-2.", "torch-9.") for p in read()["dist_infos"]]
    assert postmortem.manifest("j", read(allreduce=later, dist_infos=newer))["versions"] != first["versions"]
    assert postmortem.manifest("j", read(allreduce=later, dist_infos=newer, previous=json.dumps(first))) == first
    # A resumed job's new results are a new run: its manifest is made again from what is there now.
    resumed = postmortem.manifest("j", read(results=json.dumps(dict(RESULTS, train_runtime=999.0)),
                                            allreduce=None, previous=json.dumps(first)))  # fmt: skip
    assert resumed["wall_time_seconds"] == 999.0 and resumed["fabric_allreduce"] is None
    # Another job's manifest, or none readable, is not reused.
    assert postmortem.manifest("k", read(allreduce=None, previous=json.dumps(first)))["fabric_allreduce"] is None
    assert postmortem.manifest("j", read(allreduce=None, previous="garbage"))["fabric_allreduce"] is None


def test_the_role_copies_no_file_that_may_hold_a_secret():
    """launch.env may hold the proxy's password and the hub token has a file of its own: neither is
    fetched; what is fetched is the master's train.yaml, ds_config.json and rccl.env."""
    tasks = yaml.safe_load((ROOT / "roles" / "finetune" / "tasks" / "collect.yml").read_text())
    fetched = " ".join(
        json.dumps(task.get("loop")) + str(task["ansible.builtin.fetch"]["src"])
        for task in tasks
        if "ansible.builtin.fetch" in task
    )
    assert "train.yaml" in fetched and "ds_config.json" in fetched and "instinct_rccl_env_file" in fetched
    assert "launch.env" not in fetched and "token" not in fetched.lower()
    # rccl.env is the fabric stage's RCCL settings: no proxy or token setting is written into it.
    rccl_env = (ROOT / "plugins" / "module_utils" / "rccl_env.py").read_text()
    assert "proxy" not in rccl_env.lower() and "token" not in rccl_env.lower()


def test_the_filter_is_the_builder():
    built = FilterModule().filters()["finetune_manifest"]("j", read())
    assert built == postmortem.manifest("j", read())


def test_every_file_a_node_gives_the_controller_is_read_as_the_training_account():
    """The job's output folder and the log folder's parent are the training account's: a link it puts
    there (all_results.json -> /etc/shadow) must not be followed by root on its way to the controller."""
    tasks = yaml.safe_load((ROOT / "roles" / "finetune" / "tasks" / "collect.yml").read_text())
    reads = [
        task
        for task in tasks
        if {"ansible.builtin.fetch", "ansible.builtin.slurp"} & set(task) and task.get("delegate_to") != "localhost"
    ]
    assert len(reads) >= 4, [task["name"] for task in reads]
    as_root = [task["name"] for task in reads if task.get("become_user") != "{{ instinct_user }}"]
    assert as_root == []
