# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Check a job's rendered files with the libraries that will run them, before anything launches.

Run in the node's training venv (the finetune role runs it before it writes a file). Each argument
is base64 of a JSON document ``{"train": {...}, "deepspeed": {...} or null, "world_size": N,
"device": "rocm" | "cpu"}``; for each it prints one line ``instinct-check-job: {"problems": [...],
"checked": [...], "adjusted": [...]}`` among the libraries' own log lines (the libraries load once
for all of them). Exit 0 when every spec passed, 3 when it could check and found problems; a library
that does not import fails it with Python's traceback. The role runs it through venv_probe, which
records an answer of exit 0 so that an unchanged job on an unchanged venv is not checked again.

1. LLaMA-Factory's own argument parser (transformers' HfArgumentParser over its dataclasses): an
   unknown or mistyped key of ``finetune_extra_args``, and every check of TrainingArguments'
   ``__post_init__``, FSDP's settings among them.
2. transformers' own DeepSpeed/Trainer consistency check (``HfTrainerDeepSpeedConfig``'s
   ``trainer_config_process``, which the Trainer runs and whose mismatches it raises at the first
   step), at the job's real world size rather than this one process's.
3. DeepSpeed's own config parser (``DeepSpeedConfig``): unknown keys, types and values.

A job rendered for GPUs and checked on a host without one (the unit tests) is parsed with
``use_cpu`` so that transformers does not refuse bf16 for the host; that change is reported under
``adjusted``. On a node the device is the node's own and nothing is adjusted. A CPU job (Gloo) is
parsed inside a process group of this one process on a loopback port, as TrainingArguments sets up
its device while it is built.
"""

import base64
import copy
import json
import socket
import sys

import torch
import torch.distributed as dist
from deepspeed.runtime.config import DeepSpeedConfig
from llamafactory.hparams.parser import _parse_train_args  # LLaMA-Factory 0.9.5's own parser
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

# DeepSpeed's and transformers' loggers write to stdout too: each result line starts with this.
MARK = "instinct-check-job: "


class _AtWorldSize:
    """The job's TrainingArguments as the Trainer sees them at the job's world size: this check runs
    as one process, so ``world_size`` would otherwise be 1."""

    def __init__(self, args, world_size):
        self._args = args
        self.world_size = world_size

    def __getattr__(self, name):
        return getattr(self._args, name)


def _host_has_gpu():
    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


def _one_process_gloo_group():
    """TrainingArguments sets up its device as it is built; with ddp_backend gloo (CPU nodes),
    accelerate then expects torch.distributed to be initialised. A group of this one process on a
    free loopback port stands in for the job's (it never talks to another host)."""
    if dist.is_initialized():
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def check(spec):
    problems, checked, adjusted = [], [], []
    train = dict(spec["train"])
    ds_config = spec.get("deepspeed")
    world_size = int(spec.get("world_size") or 1)
    if ds_config is not None:
        # TrainingArguments takes the DeepSpeed settings as a dict as well as a path; the path in
        # train.yaml names the file this same dict is written to.
        train["deepspeed"] = copy.deepcopy(ds_config)
    if spec.get("device") == "rocm" and not _host_has_gpu():
        train["use_cpu"] = True
        adjusted.append("use_cpu: this host has no GPU, the job's nodes have")

    if train.get("ddp_backend") == "gloo":
        _one_process_gloo_group()

    training_args = None
    try:
        training_args = _parse_train_args(train)[2]
        checked.append("LLaMA-Factory's argument parser and TrainingArguments")
    except (ValueError, TypeError) as error:
        problems.append(f"LLaMA-Factory refuses the training settings: {error}")

    if ds_config is not None and training_args is not None:
        hf_config = HfTrainerDeepSpeedConfig(copy.deepcopy(ds_config))
        hf_config.trainer_config_process(_AtWorldSize(training_args, world_size))
        checked.append(f"transformers' DeepSpeed/Trainer consistency check at world size {world_size}")
        for mismatch in hf_config.mismatches:
            problems.append(
                "transformers finds ds_config.json at odds with the Trainer's arguments "
                f"({mismatch.lstrip('- ')}): set the job's finetune_* setting for it and leave the key out "
                'of finetune_deepspeed_extra (or give it as "auto")'
            )

    if ds_config is not None:
        # DeepSpeed's parser takes the world size from torch.distributed, 1 here: the job's total
        # batch was compared at its real world size above, so it is left to that check.
        parsed = {key: value for key, value in copy.deepcopy(ds_config).items() if key != "train_batch_size"}
        try:
            DeepSpeedConfig(parsed)
            checked.append("DeepSpeed's config parser")
        except Exception as error:  # pydantic, assertions and ValueErrors alike
            problems.append(f"DeepSpeed refuses ds_config.json: {type(error).__name__}: {error}")
    return {"problems": problems, "checked": checked, "adjusted": adjusted}


def main(argv):
    found = False
    for encoded in argv[1:]:
        result = check(json.loads(base64.b64decode(encoded)))
        found = found or bool(result["problems"])
        print(MARK + json.dumps(result), flush=True)
    return 3 if found else 0


def cli():
    return main(sys.argv)
