"""The finetune role's pre-launch check (instinct-check-job, installed over the training libraries)
on the files the role renders, run with the real training libraries at the roles' pinned versions (LLaMA-Factory's
argument parser and TrainingArguments, transformers' DeepSpeed/Trainer consistency check,
DeepSpeed's config parser), from the venv scripts/ensure-train-libs.sh builds. No mocks: a broken
setting must be refused by the library that would refuse it at run time."""

import base64
import copy
import json

import pytest

from tests.unit.conftest import ROOT
from tests.unit.plugins.module_utils.test_jobspec import job_files, node, role_job

STRATEGIES = ("deepspeed_zero3", "fsdp", "ddp")
TYPES = ("lora", "full", "freeze")
DEVICES = ("rocm", "cpu")
PARSER = "LLaMA-Factory's argument parser and TrainingArguments"


def spec(files, device, world_size=16):
    return {"train": files["train"], "deepspeed": files["deepspeed"], "world_size": world_size, "device": device}


def check(train_tools, specs):
    encoded = [base64.b64encode(json.dumps(s).encode()).decode() for s in specs]
    proc = train_tools.run("instinct-check-job", *encoded, timeout=600, cwd=ROOT)
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    # No setting the role writes is one transformers has deprecated (it logs them as it parses).
    assert "is deprecated" not in proc.stderr, [line for line in proc.stderr.splitlines() if "deprecated" in line]
    mark = "instinct-check-job: "
    results = [json.loads(line[len(mark) :]) for line in proc.stdout.splitlines() if line.startswith(mark)]
    assert len(results) == len(specs), proc.stdout
    # Exit 0 only when every spec passed: venv_probe records only that answer.
    assert proc.returncode == (3 if any(r["problems"] for r in results) else 0)
    return results


def combinations():
    for strategy in STRATEGIES:
        for finetuning_type in TYPES:
            for device in DEVICES:
                if strategy == "fsdp" and device == "cpu":
                    continue  # refused before the check (test_jobspec: device_problems)
                yield strategy, finetuning_type, device


@pytest.fixture(scope="module")
def rendered_results(train_tools):
    cases = list(combinations())
    specs = []
    for strategy, finetuning_type, device in cases:
        job = role_job(strategy=strategy, finetuning_type=finetuning_type, shared_output=strategy == "fsdp")
        specs.append(spec(job_files(job, node(device, shared_output=strategy == "fsdp")), device))
    return dict(zip(cases, check(train_tools, specs), strict=True))


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


def test_the_libraries_refuse_what_the_role_must_never_launch(train_tools):
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
        train_tools,
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
