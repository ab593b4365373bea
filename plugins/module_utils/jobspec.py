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
import shlex

from ansible.module_utils.parsing.convert_bool import boolean

STRATEGIES = ("deepspeed_zero3", "fsdp", "ddp")
FINETUNING_TYPES = ("lora", "full", "freeze")
STAGES = ("sft", "pt")
DATASET_FORMATS = ("alpaca", "sharegpt")
JOB_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
RUNBOOK = "docs/runbooks/finetune-job.md"

# The strategy files the role writes beside the training YAML, by strategy.
STRATEGY_FILES = {"deepspeed_zero3": "ds_config.json", "fsdp": None, "ddp": None}


# The Trainer's own default for max_grad_norm; LLaMA-Factory's DeepSpeed examples hand it to DeepSpeed
# through "gradient_clipping": "auto".
# How long a rank waits in one collective before it raises (finetune_ddp_timeout_minutes).
DEFAULT_DDP_TIMEOUT_MINUTES = 60
DEFAULT_MAX_GRAD_NORM = 1.0

# LLaMA-Factory's FSDP settings (examples/accelerate/fsdp_config.yaml) under the names transformers'
# fsdp_config takes: prefetch the next shard during the backward pass, load the weights on rank 0
# only and broadcast them (CPU-RAM-efficient loading needs the broadcast), and wrap each
# transformer block (auto_wrap without min_num_params wraps the model's _no_split_modules).
FSDP_DEFAULTS = {
    "backward_prefetch": "backward_pre",
    "forward_prefetch": False,
    "cpu_ram_efficient_loading": True,
    "sync_module_states": True,
    "use_orig_params": True,
}

# Training settings the role writes from its own finetune_* variables (some of them into
# ds_config.json too); finetune_extra_args may not set them a second time.
OWNED_TRAIN_KEYS = {
    "per_device_train_batch_size": "finetune_per_device_train_batch_size",
    "gradient_accumulation_steps": "finetune_gradient_accumulation_steps",
    "max_grad_norm": "finetune_max_grad_norm",
    "learning_rate": "finetune_learning_rate",
    "bf16": "finetune_bf16",
    "val_size": "finetune_val_size",
    "seed": "finetune_seed",
    "deepspeed": "finetune_strategy and finetune_deepspeed_extra",
    "fsdp": "finetune_strategy",
    "fsdp_config": "finetune_fsdp_config",
    "output_dir": "finetune_root and finetune_job_name",
    "dataset_dir": "finetune_dataset_src",
    "model_name_or_path": "finetune_model or finetune_model_src",
    "finetuning_type": "finetune_finetuning_type",
}

# Keys of ds_config.json that the Trainer checks against its own arguments
# (transformers' HfTrainerDeepSpeedConfig.trainer_config_process), with the job setting behind each.
DEEPSPEED_MATCHED_KEYS = {
    "train_micro_batch_size_per_gpu": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "max_grad_norm",
}

# Settings that ask the Trainer to evaluate during training; without a validation split
# LLaMA-Factory stops with "Please make sure eval_dataset be provided or val_size >1e-6".
EVAL_KEYS = ("do_eval", "eval_strategy", "eval_steps", "load_best_model_at_end", "eval_dataset")


def _warmup_fraction(job):
    """finetune_warmup_ratio as transformers 5's warmup_steps: a fraction of the steps, below 1."""
    return float(job.get("warmup_ratio", 0.1))


def max_grad_norm(job):
    value = job.get("max_grad_norm")
    return DEFAULT_MAX_GRAD_NORM if value in (None, "") else float(value)


def deepspeed_zero3_config(job, bf16):
    """The ZeRO-3 JSON: the field report's settings, with the batch sizes and clipping of the job.

    The Trainer refuses a DeepSpeed file whose batch sizes or clipping differ from its own
    arguments, so they come from the job rather than being written twice. Under DeepSpeed the
    Trainer does not clip gradients itself and DeepSpeed's own default is no clipping, so the job's
    max_grad_norm is written as gradient_clipping (LLaMA-Factory's examples say "auto", which the
    Trainer fills with the same number). Full fine-tuning under ZeRO-3 only saves loadable weights
    (model.safetensors) when the shards are gathered on save, as LLaMA-Factory's examples set.
    """
    zero = {"stage": 3}
    if _flag(job, "deepspeed_offload_optimizer", False):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if _flag(job, "deepspeed_offload_param", False):
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    zero["overlap_comm"] = True
    zero["contiguous_gradients"] = True
    zero["stage3_gather_16bit_weights_on_model_save"] = _flag(job, "deepspeed_gather_16bit_weights", True)
    config = {
        "bf16": {"enabled": bool(bf16)},
        "zero_optimization": zero,
        "train_micro_batch_size_per_gpu": int(job["per_device_train_batch_size"]),
        "gradient_accumulation_steps": int(job["gradient_accumulation_steps"]),
        "gradient_clipping": max_grad_norm(job),
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
            # The progress export's tokens/s: one small all-gather per step. "non_padding" counts the
            # tokens that are trained on (the attention mask), not the padding of each batch, which
            # True ("all") would count.
            "include_num_input_tokens_seen": "non_padding" if _flag(job, "count_tokens", True) else "no",
            "per_device_train_batch_size": int(job["per_device_train_batch_size"]),
            "gradient_accumulation_steps": int(job["gradient_accumulation_steps"]),
            "learning_rate": float(job["learning_rate"]),
            "num_train_epochs": float(job["num_train_epochs"]),
            "lr_scheduler_type": job.get("lr_scheduler_type", "cosine"),
            # transformers 5 deprecates warmup_ratio; warmup_steps below 1 is the same fraction.
            "warmup_steps": _warmup_fraction(job),
            "max_grad_norm": max_grad_norm(job),
            "bf16": bf16,
            # LLaMA-Factory's own switch: it enables checkpointing on the model itself, which also
            # covers LoRA's frozen base (the Trainer's flag would do it a second time).
            "disable_gradient_checkpointing": not _flag(job, "gradient_checkpointing", True),
            # Finite, so that a collective whose peer hung raises instead of waiting for years
            # (LLaMA-Factory's examples use 180000000 s so that a long dataset preprocessing on
            # the main rank cannot time the others out: the default leaves an hour for it).
            "ddp_timeout": int(float(job.get("ddp_timeout_minutes", DEFAULT_DDP_TIMEOUT_MINUTES)) * 60),
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
        args["fsdp_config"] = _merge(FSDP_DEFAULTS, job.get("fsdp_config") or {})
    if device == "cpu":
        # Without GPUs, torch.distributed needs Gloo: NCCL/RCCL is for GPUs only.
        args["ddp_backend"] = "gloo"
    if node.get("tokenized_path"):
        # Tokenized once before launch by instinct-check-inputs (the finetune role's inputs.yml) with
        # LLaMA-Factory's own pipeline: every rank of every launch loads it instead of tokenizing.
        args["tokenized_path"] = node["tokenized_path"]
    return _merge(args, job.get("extra_args") or {})


# Settings of finetune_extra_args that change which rows form the validation split or which tokens
# are labels: the evaluation must use the training's, or it scores other rows or other tokens.
SPLIT_AND_LABEL_KEYS = (
    "max_samples",
    "train_on_prompt",
    "mask_history",
    "packing",
    "neat_packing",
    "streaming",
    "buffer_size",
    "mix_strategy",
    "interleave_probs",
    "default_system",
    "enable_thinking",
    "tool_format",
)


def eval_args(job, node, base=False):
    """The evaluation YAML: the trained weights (or, with ``base``, the base model they started
    from) on the job's validation split, no training.

    LLaMA-Factory splits ``val_size`` off with ``train_test_split(seed=...)``, so the same dataset,
    fraction, seed and sample cap give back exactly the validation rows the training held out; the
    settings that decide the labels (the prompt masked or not, packing) come along too.
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
        "output_dir": node["base_eval_dir"] if base else node["eval_dir"],
        "report_to": "none",
        "bf16": use_bf16(job, node["device"]),
    }
    extra = job.get("extra_args") or {}
    args.update({key: extra[key] for key in SPLIT_AND_LABEL_KEYS if key in extra})
    if base:
        return args
    if job["finetuning_type"] == "lora":
        args["adapter_name_or_path"] = node["output_dir"]
    else:
        args["model_name_or_path"] = node["output_dir"]
    return args


# Settings of a base evaluation that differ between jobs without changing its result: where it
# writes, the job's own copy of the dataset (its content is keyed by checksum), and the fine-tuning
# type (no adapter is loaded, so every type scores the same base model).
_BASE_KEY_IGNORED = ("output_dir", "dataset_dir", "finetuning_type")


def base_eval_key(base_args, dataset_checksum):
    """The cache key of a base model's evaluation: its settings and the dataset file's content, so
    that a base model is scored once per model, dataset and split, whichever job asks."""
    settings = {key: value for key, value in base_args.items() if key not in _BASE_KEY_IGNORED}
    return fingerprint(settings, {"dataset_sha1": dataset_checksum})


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
    ddp_timeout = _number(job.get("ddp_timeout_minutes", DEFAULT_DDP_TIMEOUT_MINUTES))
    if ddp_timeout is None or not 1 <= ddp_timeout <= 7 * 24 * 60:
        bad("ddp_timeout_minutes", job.get("ddp_timeout_minutes"),
            "set the minutes a rank may wait in one collective, from 1 to 10080 (a week), e.g. 60")  # fmt: skip
    val_size = _number(job.get("val_size", 0) or 0)
    if val_size is None or not 0 <= val_size < 1:
        bad("val_size", job.get("val_size"), "set a fraction between 0 and 1 (0 = no validation split)")
    elif val_size > 0 and not _positive_int(job.get("eval_steps")):
        bad("eval_steps", job.get("eval_steps"), "set a whole number of at least 1 when val_size is set")
    if not job.get("dataset_name"):
        bad("dataset_name", job.get("dataset_name"), "name the dataset (the key in dataset_info.json)")
    if not job.get("model"):
        bad("model", job.get("model"), "set a path on the nodes, a hub id, or finetune_model_src")
    norm = _number(job.get("max_grad_norm", DEFAULT_MAX_GRAD_NORM))
    if norm is None or norm < 0:
        bad(
            "max_grad_norm",
            job.get("max_grad_norm"),
            "set a number of at least 0 (1.0 clips as the Trainer does; 0 = off)",
        )
    if job.get("finetuning_type") == "lora" and not _positive_int(job.get("lora_rank", 8)):
        bad("lora_rank", job.get("lora_rank"), "set a whole number of at least 1 (8, 16 or 64 are usual)")
    _combination_problems(job, val_size, bad)
    return problems


def _combination_problems(job, val_size, bad):
    """Settings that are each valid but cannot work together, reported through ``bad`` before
    anything launches."""
    extra = job.get("extra_args") or {}
    ds_extra = job.get("deepspeed_extra") or {}
    for setting, value in (
        ("extra_args", extra),
        ("deepspeed_extra", ds_extra),
        ("fsdp_config", job.get("fsdp_config") or {}),
    ):
        if not isinstance(value, dict):
            bad(setting, value, "give a mapping of setting: value (LLaMA-Factory's or DeepSpeed's own names)")
            return
    for key in sorted(set(extra) & set(OWNED_TRAIN_KEYS)):
        owner = OWNED_TRAIN_KEYS[key]
        bad(
            "extra_args",
            {key: extra[key]},
            f"the role writes {key} itself from {owner} (into ds_config.json too, where DeepSpeed and the "
            f"Trainer must agree); set {owner} instead and leave {key} out of finetune_extra_args",
        )
    asked = [key for key in EVAL_KEYS if key in extra and extra[key] not in (False, "no", None)]
    if asked and val_size == 0:
        bad(
            "val_size",
            job.get("val_size"),
            f"finetune_extra_args asks for evaluation ({', '.join(asked)}), which needs a validation split: "
            "set finetune_val_size (e.g. 0.1) or leave the evaluation settings out",
        )
    strategy = job.get("strategy")
    if strategy == "deepspeed_zero3":
        for ds_key, setting in DEEPSPEED_MATCHED_KEYS.items():
            if ds_key not in ds_extra or ds_extra[ds_key] == "auto":
                continue
            ours = max_grad_norm(job) if setting == "max_grad_norm" else _number(job.get(setting))
            if _number(ds_extra[ds_key]) != ours:
                bad(
                    "deepspeed_extra",
                    {ds_key: ds_extra[ds_key]},
                    f"ds_config.json's {ds_key} would be {ds_extra[ds_key]!r} but the Trainer's {setting} is "
                    f"{ours:g}, and transformers refuses the mismatch; set finetune_{setting} instead",
                )
        zero = ds_extra.get("zero_optimization") if isinstance(ds_extra.get("zero_optimization"), dict) else {}
        gather = zero.get("stage3_gather_16bit_weights_on_model_save", job.get("deepspeed_gather_16bit_weights"))
        if (
            job.get("finetuning_type") in ("full", "freeze")
            and gather is not None
            and not boolean(gather, strict=False)
        ):
            bad(
                "deepspeed_gather_16bit_weights",
                gather,
                f"{job.get('finetuning_type')} fine-tuning under ZeRO-3 then saves only the sharded optimizer "
                "state (global_step*/), no model.safetensors that transformers can load or evaluate; set it to true",
            )
    if strategy == "fsdp" and not _flag(job, "shared_output", False):
        bad(
            "strategy",
            strategy,
            "FSDP checkpoints are written by rank 0 only, so without a shared output folder the other nodes "
            "could not resume; set finetune_shared_output: true on a shared file system, or use deepspeed_zero3",
        )


def device_problems(job, device, world_size, host=""):
    """What cannot work on the node's device or at the job's world size (after the node was probed,
    still before anything is written)."""
    where = f"{host}: " if host else ""
    problems = []
    if job.get("strategy") == "fsdp" and device != "rocm":
        problems.append(
            f"{where}finetune_strategy is 'fsdp', but this node has no GPU (device {device}): torch's FSDP "
            "shards over accelerators and stops with 'There are currently no available devices found'. "
            f"Use ddp or deepspeed_zero3 on CPU nodes. See {RUNBOOK}"
        )
    ds_extra = job.get("deepspeed_extra") or {}
    wanted = ds_extra.get("train_batch_size") if isinstance(ds_extra, dict) else None
    if job.get("strategy") == "deepspeed_zero3" and wanted not in (None, "auto"):
        per_step = int(world_size) * int(job["per_device_train_batch_size"]) * int(job["gradient_accumulation_steps"])
        if _number(wanted) != per_step:
            problems.append(
                f"{where}finetune_deepspeed_extra sets train_batch_size {wanted!r}, but {world_size} ranks x "
                f"{job['per_device_train_batch_size']} per device x {job['gradient_accumulation_steps']} accumulation "
                f"steps make {per_step}; leave train_batch_size out (DeepSpeed computes it). See {RUNBOOK}"
            )
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
# The tokenized set's folder is the job's own; what it is made from (the dataset's sha1, the data
# settings) is fingerprinted already.
NOT_FINGERPRINTED = ("include_num_input_tokens_seen", "tokenized_path")
# ddp_timeout decides when a hung rank gives up, not what trains: it is fingerprinted at the value
# every job had before it became a setting (LLaMA-Factory's), so a finished job keeps its fingerprint
# whatever finetune_ddp_timeout_minutes says.
FINGERPRINTED_DDP_TIMEOUT = 180000000


def job_files(job, node):
    """Every file of a job on a node, plus the fingerprint that tells a finished job from a new one."""
    ds_config = None
    if job["strategy"] == "deepspeed_zero3":
        ds_config = deepspeed_zero3_config(job, use_bf16(job, node["device"]))
    train = train_args(job, node)
    trained = {key: value for key, value in train.items() if key not in NOT_FINGERPRINTED}
    # max_grad_norm at the Trainer's default trains as it did before the role wrote it out, so a
    # finished DDP or FSDP job keeps its fingerprint; ZeRO-3's ds_config.json does change (it did
    # not clip before) and with it the fingerprint.
    if trained.get("max_grad_norm") == DEFAULT_MAX_GRAD_NORM:
        del trained["max_grad_norm"]
    # The same warm-up under the name it had before transformers 5 deprecated it: a finished job
    # keeps its fingerprint.
    if "warmup_steps" in trained:
        trained["warmup_ratio"] = trained.pop("warmup_steps")
    trained["ddp_timeout"] = FINGERPRINTED_DDP_TIMEOUT
    return {
        "train": train,
        "deepspeed": ds_config,
        "fingerprint": fingerprint(trained, ds_config),
        "settings": fingerprinted_settings(trained, ds_config),
    }


def fingerprinted_settings(trained, ds_config=None):
    """What the fingerprint is a hash of, as one flat mapping (``learning_rate``, ``lora_rank``,
    ``ds_config.zero_optimization.stage``...): the job's launch history keeps it, so that a refused or
    forced resume can name the settings that changed, not only two hashes."""
    flat = {}
    _flatten(trained, "", flat)
    if ds_config is not None:
        _flatten(ds_config, "ds_config.", flat)
    return flat


def _flatten(document, prefix, flat):
    for key, value in document.items():
        if isinstance(value, dict) and value:
            _flatten(value, f"{prefix}{key}.", flat)
        else:
            flat[f"{prefix}{key}"] = value


def parse_env_file(text):
    """KEY=VALUE lines of an environment file as a dict (comments and blank lines skipped). The roles
    write each value as a POSIX shell quotes it (Ansible's quote filter: systemd's EnvironmentFile reads
    that quoting the same way), so a value is read back with the shell's rules: 'it'"'"'s' is it's,
    not the text between the first and the last quote. A value the shell could not read (an unclosed
    quote: a file edited by hand) is kept as written."""
    values = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        try:
            values[key.strip()] = " ".join(shlex.split(value))
        except ValueError:
            values[key.strip()] = value.strip()
    return values


# --- What the evaluate role checks and writes (issue 16) --------------------------------------

# What eval.json's perplexity is, in words (transformers' Trainer.evaluate and LLaMA-Factory's SFT
# labels, at the pinned versions).
PERPLEXITY_DEFINITION = (
    "perplexity = exp(eval_loss). eval_loss is transformers' Trainer.evaluate loss on the job's "
    "validation split (the rows val_size and seed hold out of the dataset): the mean over evaluation "
    "batches of each batch's mean cross-entropy over its label tokens, each batch weighted by its "
    "number of samples; with per_device_eval_batch_size 1, the mean over validation samples of each "
    "sample's mean token cross-entropy. Label tokens are the response tokens (LLaMA-Factory masks the "
    "prompt unless train_on_prompt is set); padding is never a label. The base model is scored on the "
    "same rows, tokens and settings."
)


def weights_problems(finetuning_type, report):
    """Why the weights in an output folder cannot be evaluated (empty when they can).

    ``report`` is what roles/evaluate/files/check_weights.py read: full and freeze fine-tuning need
    model*.safetensors that safetensors can open with at least one tensor (a ZeRO-3 run without
    gathered weights leaves none); LoRA needs adapter_model.safetensors and adapter_config.json whose
    tensors are not empty (an adapter saved from ZeRO-3 shards without gathering has 0-element tensors).
    """
    files = report.get("files") or {}
    tensors = report.get("safetensors") or {}
    names = report.get("names") or list(files)
    problems = []
    if finetuning_type == "lora":
        wanted = ["adapter_model.safetensors"]
        if "adapter_config.json" not in files:
            problems.append("adapter_config.json is missing")
    else:
        wanted = sorted(name for name in tensors if name.startswith("model") and name.endswith(".safetensors"))
        if not wanted:
            shards = [name for name in names if name.startswith("global_step") or name in ("latest", "zero_to_fp32.py")]
            hint = " (only DeepSpeed's ZeRO shards were saved)" if shards else ""
            problems.append(f"no model*.safetensors{hint}")
        if "config.json" not in files:
            problems.append("config.json is missing")
    for name in wanted:
        entry = tensors.get(name)
        if entry is None:
            problems.append(f"{name} is missing")
        elif entry.get("error"):
            problems.append(f"{name} cannot be read: {entry['error']}")
        elif not entry.get("tensors"):
            problems.append(f"{name} holds no tensor")
        elif entry.get("empty"):
            shown = ", ".join(entry["empty"][:3]) + (", ..." if len(entry["empty"]) > 3 else "")
            problems.append(f"{name} has {len(entry['empty'])} empty tensors ({shown})")
    return problems


# What a parity check's tolerance is, in words (eval.json's reference comparison and the README).
PARITY_TOLERANCE_SOURCE = (
    "relative difference of the evaluation loss; bf16's unit roundoff is 2^-8 (0.39 %), and two platforms "
    "differ in kernels and reduction order, so the same job's losses agree to about 1 % after training, not "
    "bit for bit (evaluate_reference_tolerance)"
)
# Settings that must agree for two evaluations to be of the same job on the same rows.
_PARITY_SAME = ("dataset", "val_size", "seed", "finetuning_type", "eval_samples")


def _relative(value, reference):
    if value is None or reference is None or not math.isfinite(value) or not math.isfinite(reference):
        return None
    if reference == 0:
        return 0.0 if value == 0 else float("inf")
    return abs(value - reference) / abs(reference)


def eval_reference_problems(text):
    """Why ``text`` (a reference run's eval.json, as read) cannot be compared with: [] when it can."""
    try:
        reference = json.loads(text) if isinstance(text, (str, bytes)) else text
    except ValueError as err:
        return [f"it is not JSON ({err})"]
    if not isinstance(reference, dict):
        return [f"it holds {type(reference).__name__}, not an evaluation's mapping"]
    loss = _number(reference.get("eval_loss"))
    if loss is None or not math.isfinite(loss):
        return [f"it holds no finite eval_loss ({reference.get('eval_loss')!r}): it is not an eval.json of this role"]
    return []


def eval_parity(result, reference, tolerance=0.01):
    """The job's evaluation (eval.json) against a reference run's (the same job on another cluster or
    platform): ``{"comparable", "within", "problems", "eval_loss", "reference_eval_loss", "loss_delta",
    "relative_loss_delta", "perplexity", "reference_perplexity", "perplexity_delta", "tolerance",
    "tolerance_source", "reference_job", "base_relative_loss_delta"}``. Two evaluations are comparable
    when they scored the same rows (dataset, split, seed, row count, fine-tuning type) and their base
    models' losses agree within the tolerance; ``within`` when the fine-tuned losses do too."""
    tolerance = _number(tolerance)
    if tolerance is None or tolerance < 0:
        raise ValueError(f"evaluate_reference_tolerance is {tolerance!r}, not a relative difference of 0 or more")
    result = result if isinstance(result, dict) else {}
    reference = reference if isinstance(reference, dict) else {}
    problems = []
    ours, theirs = _number(result.get("eval_loss")), _number(reference.get("eval_loss"))
    if theirs is None or not math.isfinite(theirs):
        problems.append(f"the reference holds no finite eval_loss ({reference.get('eval_loss')!r})")
    for key in _PARITY_SAME:
        if key not in result or key not in reference:
            # Not known on both sides is not the same: the rows scored could differ.
            where = "here" if key not in result else "in the reference"
            problems.append(f"{key} is not recorded {where}, so the two cannot be shown to score the same rows")
        elif result[key] != reference[key]:
            problems.append(f"{key} is {result[key]!r} here and {reference[key]!r} in the reference")
    base_delta = _relative(_number(result.get("base_eval_loss")), _number(reference.get("base_eval_loss")))
    if base_delta is None:
        problems.append("the base model's eval loss is not recorded on both sides, so the models cannot be compared")
    if base_delta is not None and base_delta > tolerance:
        problems.append(
            f"the base model's eval loss differs by {base_delta:.2%} ({result.get('base_eval_loss')} here, "
            f"{reference.get('base_eval_loss')} in the reference): the two evaluations did not score the same "
            f"model on the same rows"
        )
    delta = _relative(ours, theirs)
    mine, its = perplexity(ours), perplexity(theirs)
    comparable = not problems
    return {
        "reference_job": reference.get("job"),
        "comparable": comparable,
        "within": comparable and delta is not None and delta <= tolerance,
        "problems": problems,
        "eval_loss": ours,
        "reference_eval_loss": theirs,
        "loss_delta": None if ours is None or theirs is None else ours - theirs,
        "relative_loss_delta": delta,
        "perplexity": mine,
        "reference_perplexity": its,
        "perplexity_delta": None if mine is None or its is None else mine - its,
        "base_relative_loss_delta": base_delta,
        "tolerance": tolerance,
        "tolerance_source": PARITY_TOLERANCE_SOURCE,
    }


def eval_judgement(tuned_loss, base_loss):
    """Both perplexities, their ratio and the relative improvement (None where a loss is missing)."""
    tuned = perplexity(tuned_loss)
    base = perplexity(base_loss)
    ratio = None
    if tuned is not None and base not in (None, 0) and math.isfinite(base) and math.isfinite(tuned):
        ratio = tuned / base
    return {
        "perplexity": tuned,
        "base_perplexity": base,
        "ratio": ratio,
        "improvement": None if ratio is None else 1 - ratio,
        "better": ratio is not None and ratio < 1,
    }
