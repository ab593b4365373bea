# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""A fine-tune job as LLaMA-Factory and DeepSpeed files (pure functions).

The finetune role passes a job (its ``finetune_*`` variables without the prefix) and what it knows
of the node; these functions return the dictionaries that the role writes as YAML or JSON. Keeping
the mapping here lets the unit tests pin it, setting by setting, without a node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import math
import re

from ansible.module_utils.parsing.convert_bool import boolean

STRATEGIES = ("deepspeed_zero3", "fsdp", "ddp")
FINETUNING_TYPES = ("lora", "full", "freeze")
STAGES = ("sft", "pt")
DATASET_FORMATS = ("alpaca", "sharegpt")
JOB_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
RUNBOOK = "docs/runbooks/finetune-job.md"

# The strategy files the role writes beside the training YAML, by strategy.
STRATEGY_FILES = {"deepspeed_zero3": "ds_config.json", "fsdp": None, "ddp": None}


def deepspeed_zero3_config(job, bf16):
    """The ZeRO-3 JSON: the field report's settings, with the batch sizes of the job.

    The Trainer refuses a DeepSpeed file whose batch sizes differ from its own arguments, so the
    micro batch and the accumulation steps come from the job rather than being written twice.
    """
    zero = {"stage": 3}
    if _flag(job, "deepspeed_offload_optimizer", True):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if _flag(job, "deepspeed_offload_param", False):
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    zero["overlap_comm"] = True
    zero["contiguous_gradients"] = True
    config = {
        "bf16": {"enabled": bool(bf16)},
        "zero_optimization": zero,
        "train_micro_batch_size_per_gpu": int(job["per_device_train_batch_size"]),
        "gradient_accumulation_steps": int(job["gradient_accumulation_steps"]),
    }
    return _merge(config, job.get("deepspeed_extra") or {})


def _merge(base, extra):
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _flag(settings, name, default):
    """A switch: a bool, or text such as "false", which is what ``-e finetune_<name>=false`` passes."""
    value = settings.get(name)
    return default if value is None else boolean(value, strict=False)


def use_bf16(job, device):
    """bf16 on ROCm nodes (MI200/MI300 run it natively), off on CPU nodes unless asked for."""
    setting = job.get("bf16", "auto")
    if isinstance(setting, bool):
        return setting
    if str(setting).lower() in ("true", "yes", "1"):
        return True
    if str(setting).lower() in ("false", "no", "0"):
        return False
    return device == "rocm"


def train_args(job, node):
    """The LLaMA-Factory training YAML of one job on one node.

    ``node`` holds ``device`` (rocm or cpu), ``model`` (path or hub id as the node sees it),
    ``dataset_dir``, ``output_dir``, ``strategy_file`` (the DeepSpeed JSON path) and
    ``shared_output`` (whether every node writes to the same file system).
    """
    device = node["device"]
    bf16 = use_bf16(job, device)
    args = {
        "model_name_or_path": node["model"],
        "trust_remote_code": _flag(job, "trust_remote_code", False),
        "stage": job.get("stage", "sft"),
        "do_train": True,
        "finetuning_type": job["finetuning_type"],
    }
    if job["finetuning_type"] == "lora":
        args["lora_rank"] = int(job.get("lora_rank", 8))
        args["lora_alpha"] = int(job.get("lora_alpha", 2 * args["lora_rank"]))
        args["lora_target"] = job.get("lora_target", "all")
    args.update(
        {
            "dataset": job["dataset_name"],
            "dataset_dir": node["dataset_dir"],
            "template": job["template"],
            "cutoff_len": int(job["cutoff_len"]),
            "preprocessing_num_workers": int(job.get("preprocessing_num_workers", 4)),
            "output_dir": node["output_dir"],
            "logging_steps": int(job["logging_steps"]),
            "save_steps": int(job["save_steps"]),
            "save_total_limit": int(job.get("save_total_limit", 3)),
            # Resuming needs the optimizer state, and nodes without a shared file system each keep
            # a whole checkpoint, so that any of them can resume.
            "save_only_model": False,
            "save_on_each_node": not _flag(node, "shared_output", False),
            "plot_loss": _flag(job, "plot_loss", True),
            "report_to": "none",
            # The progress export's tokens/s: one small all-gather per step.
            "include_num_input_tokens_seen": _flag(job, "count_tokens", True),
            "per_device_train_batch_size": int(job["per_device_train_batch_size"]),
            "gradient_accumulation_steps": int(job["gradient_accumulation_steps"]),
            "learning_rate": float(job["learning_rate"]),
            "num_train_epochs": float(job["num_train_epochs"]),
            "lr_scheduler_type": job.get("lr_scheduler_type", "cosine"),
            "warmup_ratio": float(job.get("warmup_ratio", 0.1)),
            "bf16": bf16,
            # LLaMA-Factory's own switch: it enables checkpointing on the model itself, which also
            # covers LoRA's frozen base (the Trainer's flag would do it a second time).
            "disable_gradient_checkpointing": not _flag(job, "gradient_checkpointing", True),
            "ddp_timeout": int(job.get("ddp_timeout", 180000000)),
            "seed": int(job.get("seed", 42)),
        }
    )
    if int(job.get("max_steps", 0) or 0) > 0:
        args["max_steps"] = int(job["max_steps"])
    if float(job.get("val_size", 0) or 0) > 0:
        args.update(
            {
                "val_size": float(job["val_size"]),
                "per_device_eval_batch_size": int(job.get("per_device_eval_batch_size", 1)),
                "eval_strategy": "steps",
                "eval_steps": int(job["eval_steps"]),
            }
        )
    strategy = job["strategy"]
    if strategy == "deepspeed_zero3":
        args["deepspeed"] = node["strategy_file"]
    elif strategy == "fsdp":
        args["fsdp"] = "full_shard auto_wrap"
        if job.get("fsdp_config"):
            args["fsdp_config"] = dict(job["fsdp_config"])
    if device == "cpu":
        # Without GPUs, torch.distributed needs Gloo: NCCL/RCCL is for GPUs only.
        args["ddp_backend"] = "gloo"
    return _merge(args, job.get("extra_args") or {})


def eval_args(job, node):
    """The evaluation YAML: the trained weights on the job's validation split, no training.

    LLaMA-Factory splits ``val_size`` off with ``train_test_split(seed=...)``, so the same dataset,
    fraction and seed give back exactly the validation rows the training held out.
    """
    args = {
        "model_name_or_path": node["model"],
        "trust_remote_code": _flag(job, "trust_remote_code", False),
        "stage": job.get("stage", "sft"),
        "do_train": False,
        "do_eval": True,
        "finetuning_type": job["finetuning_type"],
        "dataset": job["dataset_name"],
        "dataset_dir": node["dataset_dir"],
        "template": job["template"],
        "cutoff_len": int(job["cutoff_len"]),
        "val_size": float(job["val_size"]),
        "seed": int(job.get("seed", 42)),
        "per_device_eval_batch_size": int(job.get("per_device_eval_batch_size", 1)),
        "output_dir": node["eval_dir"],
        "report_to": "none",
        "bf16": use_bf16(job, node["device"]),
    }
    if job["finetuning_type"] == "lora":
        args["adapter_name_or_path"] = node["output_dir"]
    else:
        args["model_name_or_path"] = node["output_dir"]
    return args


def dataset_info(job, file_name):
    """The dataset_info.json entry that registers a local JSON or JSONL file under its name."""
    entry = {"file_name": file_name, "formatting": job.get("dataset_format", "alpaca")}
    if job.get("dataset_columns"):
        entry["columns"] = dict(job["dataset_columns"])
    return {job["dataset_name"]: entry}


def job_problems(job, host=""):  # noqa: PLR0912 - one branch per setting reads best as a checklist
    """What is wrong with a job's settings, one message per problem (empty when it can launch)."""
    where = f"{host}: " if host else ""
    problems = []

    def bad(setting, value, fix):
        problems.append(f"{where}finetune_{setting} is {value!r}: {fix}. See {RUNBOOK}")

    name = str(job.get("job_name", ""))
    if not JOB_NAME.match(name):
        bad("job_name", name, "use 1-63 lower-case letters, digits, '.', '_' or '-' (it names files and a unit)")
    if job.get("strategy") not in STRATEGIES:
        bad("strategy", job.get("strategy"), f"use one of {', '.join(STRATEGIES)}")
    if job.get("finetuning_type") not in FINETUNING_TYPES:
        bad("finetuning_type", job.get("finetuning_type"), f"use one of {', '.join(FINETUNING_TYPES)}")
    if job.get("stage", "sft") not in STAGES:
        bad("stage", job.get("stage"), f"use one of {', '.join(STAGES)}")
    if job.get("dataset_format", "alpaca") not in DATASET_FORMATS:
        bad("dataset_format", job.get("dataset_format"), f"use one of {', '.join(DATASET_FORMATS)}")
    for setting in ("per_device_train_batch_size", "gradient_accumulation_steps", "cutoff_len", "save_steps"):
        value = job.get(setting)
        if not _positive_int(value):
            bad(setting, value, "set a whole number of at least 1")
    if job.get("logging_steps") is not None and not _positive_int(job.get("logging_steps")):
        bad("logging_steps", job.get("logging_steps"), "set a whole number of at least 1")
    lr = _number(job.get("learning_rate"))
    if lr is None or not 0 < lr < 1:
        bad("learning_rate", job.get("learning_rate"), "set a number between 0 and 1, e.g. 1.0e-4")
    epochs = _number(job.get("num_train_epochs"))
    max_steps = _number(job.get("max_steps", 0) or 0)
    if (epochs is None or epochs <= 0) and (max_steps is None or max_steps <= 0):
        bad("num_train_epochs", job.get("num_train_epochs"), "set a positive number of epochs, or max_steps")
    val_size = _number(job.get("val_size", 0) or 0)
    if val_size is None or not 0 <= val_size < 1:
        bad("val_size", job.get("val_size"), "set a fraction between 0 and 1 (0 = no validation split)")
    elif val_size > 0 and not _positive_int(job.get("eval_steps")):
        bad("eval_steps", job.get("eval_steps"), "set a whole number of at least 1 when val_size is set")
    if not job.get("dataset_name"):
        bad("dataset_name", job.get("dataset_name"), "name the dataset (the key in dataset_info.json)")
    if not job.get("model"):
        bad("model", job.get("model"), "set a path on the nodes, a hub id, or finetune_model_src")
    return problems


def _positive_int(value):
    number = _number(value)
    return number is not None and number >= 1 and number.is_integer()


def _number(value):
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def fingerprint(*documents):
    """A short stable hash of the rendered job files: a finished job is only "the same job" if equal."""
    digest = hashlib.sha256()
    for document in documents:
        digest.update(json.dumps(document, sort_keys=True, separators=(",", ":")).encode())
    return digest.hexdigest()[:16]


def perplexity(eval_loss):
    """exp(eval loss), or None when there is no finite loss to take it of."""
    loss = _number(eval_loss)
    if loss is None:
        return None
    try:
        return math.exp(loss)
    except OverflowError:
        return float("inf")


# Training settings that change what is reported, not what is trained: a finished job re-run with
# only these changed is still the same job.
NOT_FINGERPRINTED = ("include_num_input_tokens_seen",)


def job_files(job, node):
    """Every file of a job on a node, plus the fingerprint that tells a finished job from a new one."""
    ds_config = None
    if job["strategy"] == "deepspeed_zero3":
        ds_config = deepspeed_zero3_config(job, use_bf16(job, node["device"]))
    train = train_args(job, node)
    trained = {key: value for key, value in train.items() if key not in NOT_FINGERPRINTED}
    return {
        "train": train,
        "deepspeed": ds_config,
        "fingerprint": fingerprint(trained, ds_config),
    }


def parse_env_file(text):
    """KEY=VALUE lines of an environment file as a dict (comments and blank lines skipped)."""
    values = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"').strip("'")
    return values
