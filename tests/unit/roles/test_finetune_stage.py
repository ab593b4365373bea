"""The finetune role's stage step (roles/finetune/tasks/stage.yml) through ansible-playbook on one local node
with the role's defaults and variables, its folders under the test's temporary folder (issue 32, hardening):

- a job's data is no other local user's: its folders 0750, its files 0640, open to the training account
  through its group only (the account reads its settings and dataset);
- the hub token's file goes when the token is dropped from the job (the unit would hand it to every rank);
- launch.env's values are quoted, so that a value with spaces, quotes or $(...) is read back as written
  by a shell and runs nothing;
- the job's unit is sandboxed (NoNewPrivileges, the file system read-only but for what a job writes, its
  own /tmp, people's homes out of sight) without what would take the GPUs, RDMA or shared memory from it,
  and systemd-analyze accepts it.

The training account is root here (nobody else can own the files a local run writes), its group another
one: the group, not the account, is what the modes open the files to."""

import grp
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils import modelstore
from tests.unit.conftest import ROOT, role_step_playbook, run_local_play

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the stage writes files owned by root")

JOB = "stage-step"
# The training account's group: one that is not root's, so that a file left root's group is seen.
GROUP = next(name for name in ("nogroup", "users", "daemon") if name in {group.gr_name for group in grp.getgrall()})
# What a value of a file that a shell sources must not do, and the spaces it must keep.
# A made-up hub token.
TOKEN = "hf_" + "madeup0123"
HOSTILE = "http://proxy.example:3128/$(touch {canary}) `touch {canary}` 'x' \"y\""


def stage(tmp_path, **extra):
    """Run stage.yml for the job; returns (process, paths)."""
    paths = {
        "root": tmp_path / "var" / "jobs",
        "conf": tmp_path / "etc" / "jobs",
        "log": tmp_path / "log" / JOB,
        "unit": tmp_path / "units" / f"instinct-finetune-{JOB}.service",
        "home": tmp_path / "home-of-instinct",
        "venv": tmp_path / "venv",
    }
    paths["unit"].parent.mkdir(parents=True, exist_ok=True)
    paths["home"].mkdir(exist_ok=True)
    # What the unit starts, so that systemd-analyze verify finds its programs.
    (paths["venv"] / "bin").mkdir(parents=True, exist_ok=True)
    for name in ("torchrun", "instinct-progress"):
        program = paths["venv"] / "bin" / name
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    dataset = tmp_path / "train.jsonl"
    dataset.write_text('{"instruction": "a", "input": "", "output": "b"}\n')
    # The role's templates where a playbook beside them finds them (the step runs outside the role).
    if not (tmp_path / "templates").exists():
        (tmp_path / "templates").symlink_to(ROOT / "roles" / "finetune" / "templates")
    playbook = tmp_path / "stage.yml"
    playbook.write_text(role_step_playbook("finetune", "stage.yml", "Write the job's files on the node"))
    extravars = {
        "instinct_user": "root",
        "instinct_group": GROUP,
        "instinct_user_home": str(paths["home"]),
        "instinct_venv": str(paths["venv"]),
        "instinct_jobs_conf_dir": str(paths["conf"]),
        "instinct_rccl_env_file": str(tmp_path / "etc" / "rccl.env"),
        "finetune_job_name": JOB,
        "finetune_root": str(paths["root"]),
        "finetune_log_dir": str(paths["log"]),
        "finetune_unit_path": str(paths["unit"]),
        "finetune_dataset_name": "tiny",
        "finetune_dataset_src": str(dataset),
        "finetune_model": "/models/tiny",
        # What the steps before the stage leave: the rendered files, the node's device and ranks.
        "finetune_files": {"train": {"stage": "sft"}, "deepspeed": {"zero_optimization": {"stage": 3}},
                           "fingerprint": "0" * 40},
        "finetune_device": "cpu",
        "finetune_nproc": 1,
        "finetune_omp": {"threads": 2, "source": "set by the test"},
        **extra,
    }  # fmt: skip
    if extravars.get("finetune_model_src"):
        # What validate.yml names the model's folder before the stage (by its name and content).
        extravars["finetune_model_store_name"] = modelstore.store_name(extravars["finetune_model_src"],
                                                                       str(tmp_path / "digests"))  # fmt: skip
    return run_local_play(playbook, extravars), paths


def mode_and_group(path):
    found = path.stat()
    return f"{stat.S_IMODE(found.st_mode):04o}", grp.getgrgid(found.st_gid).gr_name


def service_settings(unit_text):
    """The [Service] section's settings as (key, value) pairs, in order (keys repeat)."""
    settings, section = [], None
    for raw in unit_text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            key, _sep, value = line.partition("=")
            settings.append((key, value))
    return settings


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """The job staged with a hub token, then again without it (as each run leaves it)."""
    tmp_path = tmp_path_factory.mktemp("staged")
    # A model folder on the controller, copied to the node.
    (tmp_path / "tiny-model" / "tokenizer").mkdir(parents=True)
    (tmp_path / "tiny-model" / "config.json").write_text("{}\n")
    (tmp_path / "tiny-model" / "tokenizer" / "vocab.json").write_text("{}\n")
    first, paths = stage(tmp_path, finetune_hf_token=TOKEN, finetune_model_src=str(tmp_path / "tiny-model"))
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    secrets = (paths["conf"] / JOB / "secrets.env").read_text(), mode_and_group(paths["conf"] / JOB / "secrets.env")[0]
    second, _paths = stage(tmp_path, finetune_model_src=str(tmp_path / "tiny-model"))
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    return {"first": first, "second": second, "paths": paths, "tmp": tmp_path, "secrets": secrets}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """The job staged with a proxy whose address holds $(...), backquotes, quotes and spaces, and a model
    under /home."""
    tmp_path = tmp_path_factory.mktemp("hostile")
    canary = tmp_path / "ran"
    proxy = HOSTILE.format(canary=canary)
    proc, paths = stage(tmp_path, instinct_proxy_env={"HTTPS_PROXY": proxy}, finetune_model="/home/shared/models/tiny",
                        finetune_hf_endpoint="https://hub.example/a b")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {"paths": paths, "canary": canary, "proxy": proxy}


def test_the_jobs_data_is_open_to_the_training_accounts_group_only(staged):
    paths, tmp_path = staged["paths"], staged["tmp"]
    job, conf = paths["root"] / JOB, paths["conf"] / JOB
    (model,) = (tmp_path / "var" / "models").glob("tiny-model-*")  # stored by name and content
    folders = [paths["root"], job, job / "data", job / "metrics", conf, paths["log"], tmp_path / "var" / "hf-home",
               model, model / "tokenizer"]  # fmt: skip
    for folder in folders:
        assert mode_and_group(folder) == ("0750", GROUP), folder
    for data in [job / "data" / "train.jsonl", job / "data" / "dataset_info.json", conf / "train.yaml",
                 conf / "ds_config.json", paths["log"] / "train.log", model / "config.json",
                 model / "tokenizer" / "vocab.json"]:  # fmt: skip
        assert mode_and_group(data) == ("0640", GROUP), data
    # Read by systemd alone, and it may hold the proxy's password.
    assert mode_and_group(conf / "launch.env")[0] == "0600"
    # The unit's own umask keeps what the job creates from other users.
    assert ("UMask", "0027") in service_settings(paths["unit"].read_text())


def test_the_hub_token_goes_when_the_job_drops_it_and_nothing_else_changes(staged):
    assert staged["secrets"] == (f"HF_TOKEN={TOKEN}\n", "0600")
    assert TOKEN not in staged["first"].stdout
    assert not (staged["paths"]["conf"] / JOB / "secrets.env").exists()
    # The second run changed only that: the log is made once (its times kept), every other file is the same.
    second = staged["second"].stdout
    assert "changed=1 " in second, second[-3000:]
    assert "changed: [node1]" in second.split("TASK [Remove the hub token the job no longer has]")[1].split("TASK [")[0]


def test_launch_env_values_are_read_back_as_written_and_run_nothing(hostile):
    paths = hostile["paths"]
    env_file = paths["conf"] / JOB / "launch.env"
    # As the checks and an operator read it: a POSIX shell sourcing the file, then the environment it made.
    script = 'set -a; . "$1"; set +a; exec "$2" -c "import json, os; print(json.dumps(dict(os.environ)))"'
    shell = subprocess.run(["/bin/sh", "-c", script, "sh", str(env_file), sys.executable],
                           capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    read = json.loads(shell.stdout)
    assert read["HTTPS_PROXY"] == hostile["proxy"]
    assert read["HF_ENDPOINT"] == "https://hub.example/a b"
    assert read["INSTINCT_FINETUNE_JOB"] == JOB
    assert read["PATH"].startswith(f"{paths['venv']}/bin:")
    assert not hostile["canary"].exists()


def test_the_unit_is_sandboxed_and_keeps_the_devices_network_and_shared_memory(staged):
    paths, tmp_path = staged["paths"], staged["tmp"]
    settings = service_settings(paths["unit"].read_text())
    values = dict(settings)
    expected = {
        "NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes",
        "ProtectSystem": "strict", "PrivateTmp": "yes", "ProtectHome": "yes",
        "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes", "RestrictNamespaces": "yes", "LockPersonality": "yes",
    }  # fmt: skip
    assert {key: values.get(key) for key in expected} == expected
    # Writable: the job's folder (checkpoints, progress, exit status), HF_HOME and the account's home
    # (the kernel caches), each of which the stage made or the account has (a missing one fails the start).
    writable = [value for key, value in settings if key == "ReadWritePaths"]
    assert writable == [str(paths["root"] / JOB), str(tmp_path / "var" / "hf-home"), str(paths["home"])]
    assert all(os.path.isdir(path) for path in writable)
    # What would take /dev/kfd, /dev/dri, /dev/infiniband, RCCL's netlink or the JIT's pages from the job.
    forbidden = {"PrivateDevices", "DeviceAllow", "DevicePolicy", "ProtectClock", "PrivateNetwork",
                 "RestrictAddressFamilies", "PrivateUsers", "MemoryDenyWriteExecute", "RemoveIPC",
                 "PrivateIPC", "InaccessiblePaths", "ProcSubset"}  # fmt: skip
    assert forbidden.isdisjoint(values)


def test_a_model_under_home_is_read_only_not_hidden(hostile):
    assert ("ProtectHome", "read-only") in service_settings(hostile["paths"]["unit"].read_text())


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit_and_rates_it_far_safer_than_the_unsandboxed_one(staged, tmp_path):
    unit = staged["paths"]["unit"]
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", "--generators=no", str(unit)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    # Every complaint about the unit (an unknown key, a value systemd cannot parse) names its file.
    complaints = [line for line in verify.stderr.splitlines() if unit.name in line]
    assert complaints == [], verify.stderr

    def exposure(path):
        rated = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(path)],
                               capture_output=True, text=True, check=False)  # fmt: skip
        overall = [line for line in rated.stdout.splitlines() if "Overall exposure level" in line]
        assert overall, rated.stdout + rated.stderr
        return float(overall[0].rsplit(":", 1)[1].split()[0])

    # The same unit without its sandbox, as the role wrote it before issue 32.
    bare = tmp_path / unit.name
    keep = [line for line in unit.read_text().splitlines() if line.split("=", 1)[0] not in SANDBOX]
    bare.write_text("\n".join(keep) + "\n")
    sandboxed, unsandboxed = exposure(unit), exposure(bare)
    assert sandboxed < 5.0 and unsandboxed > 9.0, (sandboxed, unsandboxed)


# The unit's sandboxing settings.
SANDBOX = {
    "NoNewPrivileges", "CapabilityBoundingSet", "RestrictSUIDSGID", "ProtectSystem", "ReadWritePaths", "PrivateTmp",
    "ProtectHome", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
    "ProtectHostname", "RestrictRealtime", "RestrictNamespaces", "LockPersonality", "SystemCallArchitectures", "UMask",
}  # fmt: skip


@pytest.mark.parametrize("folder", ["metrics", "data"])
def test_a_link_the_training_account_put_in_place_of_a_job_folder_is_refused_not_followed(tmp_path, folder):
    """The training account owns the job's folder, so it can put a link where root then makes the job's
    metrics or data folder. Root must not follow it: before the fix the stage gave the link's target
    (here a folder standing for /usr/local/bin) to the account's group with the job folder's mode."""
    victim = tmp_path / "usr-local-bin"
    victim.mkdir()
    victim.chmod(0o755)
    before = victim.stat()
    job_dir = tmp_path / "var" / "jobs" / JOB
    job_dir.mkdir(parents=True)
    (job_dir / folder).symlink_to(victim)
    proc, _paths = stage(tmp_path)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "already exists as a link" in proc.stdout, proc.stdout[-3000:]
    after = victim.stat()
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == (
        stat.S_IMODE(before.st_mode),
        before.st_uid,
        before.st_gid,
    )
