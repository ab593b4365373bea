"""The finetune role's pre-launch check (roles/finetune/files/check_job.py) on the files the role
renders, run with the real training libraries at the roles' pinned versions (LLaMA-Factory's
argument parser and TrainingArguments, transformers' DeepSpeed/Trainer consistency check,
DeepSpeed's config parser), from the venv scripts/ensure-train-libs.sh builds. No mocks: a broken
setting must be refused by the library that would refuse it at run time."""

import base64
import copy
import importlib.machinery
import json
import os
import subprocess
import types
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT
from tests.unit.plugins.module_utils.test_jobspec import job_files, node, role_job

CHECK = ROOT / "roles" / "finetune" / "files" / "check_job.py"
STRATEGIES = ("deepspeed_zero3", "fsdp", "ddp")
TYPES = ("lora", "full", "freeze")
DEVICES = ("rocm", "cpu")
PARSER = "LLaMA-Factory's argument parser and TrainingArguments"


@pytest.fixture(scope="module")
def train_python():
    python = os.environ.get("INSTINCT_TRAIN_PYTHON", "")
    assert python and Path(python).is_file(), (
        "INSTINCT_TRAIN_PYTHON is not set: run these tests through `make unit` (scripts/test.sh), "
        "or export INSTINCT_TRAIN_PYTHON=$(bash scripts/ensure-train-libs.sh)"
    )
    return python


def spec(files, device, world_size=16):
    return {"train": files["train"], "deepspeed": files["deepspeed"], "world_size": world_size, "device": device}


def check(python, specs, env=None):
    encoded = [base64.b64encode(json.dumps(s).encode()).decode() for s in specs]
    proc = subprocess.run(
        [python, str(CHECK), *encoded], capture_output=True, text=True, timeout=600, check=False, cwd=ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # No setting the role writes is one transformers has deprecated (it logs them as it parses).
    assert "is deprecated" not in proc.stderr, [line for line in proc.stderr.splitlines() if "deprecated" in line]
    mark = "instinct-check-job: "
    results = [json.loads(line[len(mark) :]) for line in proc.stdout.splitlines() if line.startswith(mark)]
    assert len(results) == len(specs), proc.stdout
    return results


def combinations():
    for strategy in STRATEGIES:
        for finetuning_type in TYPES:
            for device in DEVICES:
                if strategy == "fsdp" and device == "cpu":
                    continue  # refused before the check (test_jobspec: device_problems)
                yield strategy, finetuning_type, device


@pytest.fixture(scope="module")
def rendered_results(train_python):
    cases = list(combinations())
    specs = []
    for strategy, finetuning_type, device in cases:
        job = role_job(strategy=strategy, finetuning_type=finetuning_type, shared_output=strategy == "fsdp")
        specs.append(spec(job_files(job, node(device, shared_output=strategy == "fsdp")), device))
    return dict(zip(cases, check(train_python, specs), strict=True))


@pytest.mark.parametrize(("strategy", "finetuning_type", "device"), list(combinations()))
def test_every_rendered_job_passes_the_libraries_own_checks(rendered_results, strategy, finetuning_type, device):
    result = rendered_results[(strategy, finetuning_type, device)]
    assert result["problems"] == []
    expected = [PARSER]
    if strategy == "deepspeed_zero3":
        expected += ["transformers' DeepSpeed/Trainer consistency check at world size 16", "DeepSpeed's config parser"]
    assert result["checked"] == expected
    # Only a GPU job checked on this GPU-less machine is parsed with use_cpu.
    assert result["adjusted"] == (["use_cpu: this host has no GPU, the job's nodes have"] if device == "rocm" else [])


def zero3(device="rocm", **settings):
    return job_files(role_job(**settings), node(device))


def test_the_libraries_refuse_what_the_role_must_never_launch(train_python):
    # Each case bypasses the role's own checks (job_problems) to show that the library refuses it.
    files = zero3()
    accumulation = copy.deepcopy(files)
    accumulation["deepspeed"]["gradient_accumulation_steps"] = 8
    clipping = copy.deepcopy(files)
    clipping["train"]["max_grad_norm"] = 0.5
    typo = copy.deepcopy(files)
    typo["deepspeed"]["zero_optimization"]["stage3_gather_16bit_weights_on_model_sav"] = True
    unknown = copy.deepcopy(files)
    unknown["train"]["lora_rnak"] = 16
    fsdp = job_files(role_job(strategy="fsdp", shared_output=True, fsdp_config={"sync_module_states": False}), node())
    batch = copy.deepcopy(files)
    batch["deepspeed"]["train_batch_size"] = 64  # right for 8 ranks, not for 16
    results = check(
        train_python,
        [spec(accumulation, "rocm"), spec(clipping, "rocm"), spec(typo, "rocm"), spec(unknown, "rocm"),
         spec(fsdp, "rocm"), spec(batch, "rocm", world_size=8), spec(batch, "rocm", world_size=16)],
    )  # fmt: skip
    problems = [r["problems"] for r in results]
    assert problems[0] == [
        "transformers finds ds_config.json at odds with the Trainer's arguments (ds gradient_accumulation_steps=8 "
        "vs hf gradient_accumulation_steps=4): set the job's finetune_* setting for it and leave the key out of "
        'finetune_deepspeed_extra (or give it as "auto")'
    ]
    assert "ds gradient_clipping=1.0 vs hf max_grad_norm=0.5" in problems[1][0]
    assert problems[2][0].startswith("DeepSpeed refuses ds_config.json: ")
    assert "stage3_gather_16bit_weights_on_model_sav" in problems[2][0]
    assert problems[3][0].startswith("LLaMA-Factory refuses the training settings: ")
    assert "lora_rnak" in problems[3][0]
    assert "`sync_module_states` must be" in problems[4][0]
    assert problems[5] == []
    assert "ds train_batch_size=64 vs hf train_batch_size (calculated)=128" in problems[6][0]


def load_script():
    """check_job.py as a module: it imports the training libraries only inside check()."""
    loader = importlib.machinery.SourceFileLoader("check_job_script", str(CHECK))
    module = types.ModuleType(loader.name)
    loader.exec_module(module)
    return module


def test_a_passed_check_is_answered_from_its_record_until_something_it_depends_on_changes(train_python, tmp_path):
    stamp = tmp_path / "cache" / "check-job" / "job.json"
    env = {**os.environ, "INSTINCT_CHECK_JOB_STAMP": str(stamp), "INSTINCT_CHECK_JOB_SCRIPT": "a" * 64}
    good = spec(zero3(), "rocm")
    bad = copy.deepcopy(good)
    bad["train"]["lora_rnak"] = 16

    # Check mode records nothing.
    first = check(train_python, [good, bad], {**env, "INSTINCT_CHECK_JOB_RECORD": "no"})
    assert not stamp.exists()
    assert [r.get("cached") for r in first] == [None, None]

    env["INSTINCT_CHECK_JOB_RECORD"] = "yes"
    recorded = check(train_python, [good, bad], env)
    assert recorded == first
    assert len(json.loads(stamp.read_text())) == 1  # the passed check only

    again = check(train_python, [good, bad], env)
    assert again[0] == {**first[0], "cached": True}
    # The problem is found again by the libraries, never answered from the record.
    assert "cached" not in again[1]
    assert again[1]["problems"] == first[1]["problems"]

    # Another spec, or the same spec checked by another version of the script, is proved again.
    changed = copy.deepcopy(good)
    changed["train"]["lora_rank"] = 4
    assert "cached" not in check(train_python, [changed], env)[0]
    assert "cached" not in check(train_python, [good], {**env, "INSTINCT_CHECK_JOB_SCRIPT": "b" * 64})[0]
    # The record keeps only its latest run's keys.
    assert len(json.loads(stamp.read_text())) == 1


def test_the_record_key_covers_the_venv_python_and_devices():
    script = load_script()
    env = script.environment()
    assert any(package.startswith("pytest==") for package in env["packages"])
    base = script.stamp_key("a" * 64, {"train": {}}, env)
    assert script.stamp_key("a" * 64, {"train": {}}, dict(env)) == base
    upgraded = dict(env, packages=[*env["packages"], "deepspeed==0.99.0"])
    assert script.stamp_key("a" * 64, {"train": {}}, upgraded) != base
    assert script.stamp_key("a" * 64, {"train": {}}, dict(env, python="3.12.0")) != base
    assert script.stamp_key("a" * 64, {"train": {}}, dict(env, devices=["/dev/kfd"])) != base


def test_an_unreadable_record_is_no_record(tmp_path):
    script = load_script()
    (tmp_path / "job.json").write_text("{not json")
    assert script.read_stamps(str(tmp_path / "job.json")) == {}
    assert script.read_stamps(str(tmp_path / "absent.json")) == {}
