# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Check a job's model and dataset with the libraries that will use them, before any unit starts, and
tokenize the dataset once for every run and resume of the job (issue 33).

Without it a dataset file of invalid JSON, a model folder without ``config.json`` or a ``lora_target``
that names no module is found out by every rank of every node after the units started, and each node
tokenizes the dataset inside the job, inside the stall window and ``ddp_timeout``, on every run and
every resume. A dataset of 3 rows under a global batch of 8 "succeeds", every step seeing the same rows.

Run in the node's training venv as the training account. Each argument is base64 of a JSON document
(the job's settings, see :func:`settings`); for each it prints one line ``instinct-check-inputs:
{"problems": [...], "checked": [...], "notes": [...], "key": ..., "tokenized": ...}`` among the
libraries' own log lines (the libraries load once for all of them). Exit 0 when every spec passed, 3
when it could check and found problems; a library that does not import fails it with Python's
traceback, as ``instinct-check-job`` does.

1. The model: ``config.json`` accepted by transformers' ``AutoConfig``; tokenizer files present and
   loaded by LLaMA-Factory's own ``load_tokenizer``; every shard a safetensors index names present and
   its header readable by the ``safetensors`` library (names, dtypes and shapes: never the tensors);
   the ``lora_target`` module names present among the weights; the memory of the model states per GPU
   and per node, from the headers' parameter counts and DeepSpeed's own
   ``estimate_zero3_model_states_mem_needs`` (which returns numbers; its ``_all_live`` variant needs the
   model in memory). A job that cannot fit is refused with the estimate and the settings that would.
2. The dataset, with a cheap pass over the raw file first so that the messages can name the file, line,
   row and column (LLaMA-Factory's own errors name none, and it silently skips a sharegpt row with a
   role tag it does not know); then LLaMA-Factory's own pipeline (its argument parser, tokenizer,
   template and ``get_dataset``) for the job's settings, saved into ``tokenized_path``, which the job
   then loads instead of tokenizing. Beside the saved set, ``instinct-inputs.json`` records what it was
   made from and the key of that (dataset files, its dataset_info entry, LLaMA-Factory's data settings,
   tokenizer files, library versions): the next run with the same key reuses the set, a changed input
   (a cutoff, a row) makes it again. The key is in the result so that the job's fingerprint can hold it.
   Then the numbers the Trainer will meet: a train split smaller than one global batch, a validation
   split of no rows where evaluation is asked.

The pure functions (estimates, raw row checks, the key) import nothing beyond the standard library and
the collection's ``ckptspace`` (linked into this package from plugins/module_utils: the checkpoint-space
check reads the same headers and counts LoRA's parameters the same way); the training libraries are
imported when a spec is checked.
"""

import base64
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile

from instinct_node_tools import ckptspace

# The libraries' loggers write to stdout too: each result line starts with this.
MARK = "instinct-check-inputs: "
RUNBOOK = "docs/runbooks/job-inputs.md"
SEE = f" See {RUNBOOK}"
# Written into the tokenized set's folder, beside LLaMA-Factory's dataset_dict.json (which ignores it).
KEY_FILE = "instinct-inputs.json"

# Bytes per parameter. DeepSpeed's estimator counts 18 per trained parameter under ZeRO-3; LoRA's frozen
# weights are kept in 16 bits and have no gradient or optimizer state.
HALF = 2
# DDP (the Trainer alone) keeps the whole model on every GPU: a trained parameter in fp32 with its fp32
# gradient and Adam's two moments (LLaMA-Factory upcasts trainable parameters unless pure_bf16).
DDP_TRAINED = 16
# DeepSpeed's own default headroom for host memory (additional_buffer_factor).
BUFFER = 1.5
# How far "more nodes" is searched before it is no answer.
MAX_NODES = 1024
# LoRA's rank when suggesting LoRA to a full fine-tune (the role's default).
SUGGESTED_LORA_RANK = 8
# Rows named in one message; the count says how many more there are.
SHOWN = 3

# What AutoTokenizer loads a tokenizer from: any one of these sets.
TOKENIZER_SETS = (
    ("tokenizer.json",),
    ("tokenizer.model",),
    ("spiece.model",),
    ("sentencepiece.bpe.model",),
    ("vocab.json", "merges.txt"),
    ("vocab.txt",),
    ("tiktoken.model",),
    ("qwen.tiktoken",),
)
# Files whose content decides the token ids (config.json picks the tokenizer class when
# tokenizer_config.json does not): hashed into the tokenized set's key.
TOKENIZER_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    *sorted({name for group in TOKENIZER_SETS for name in group}),
)
# DataArguments that name places, not content (the dataset files are hashed instead), or only say
# how to cache: left out of the key so that a moved folder does not re-tokenize.
KEY_IGNORED_DATA_ARGS = ("tokenized_path", "dataset_dir", "media_dir", "overwrite_cache", "data_shared_file_system")
# ModelArguments that change the tokens of a text (patch_tokenizer and AutoTokenizer's arguments).
KEY_TOKENIZER_ARGS = ("use_fast_tokenizer", "split_special_tokens", "add_tokens", "add_special_tokens")

# LLaMA-Factory 0.9.5's DatasetAttr: the columns each format reads by default, and the names a
# dataset_info entry's "columns" may map. An entry with "columns" reads only the ones it maps.
DEFAULT_COLUMNS = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output"},
    "sharegpt": {"messages": "conversations"},
    "openai": {"messages": "conversations"},
}
COLUMN_NAMES = (
    "prompt", "query", "response", "history", "messages", "system", "tools",
    "images", "videos", "audios", "chosen", "rejected", "kto_tag",
)  # fmt: skip
# Its sharegpt tags, and the role each stands for (an entry with "tags" reads only the ones it maps).
DEFAULT_TAGS = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "observation_tag": "observation",
    "function_tag": "function_call",
    "system_tag": "system",
}
TAG_ROLES = (
    ("user_tag", "user"),
    ("assistant_tag", "assistant"),
    ("observation_tag", "observation"),
    ("function_tag", "function"),
    ("system_tag", "system"),
)
# The file types datasets reads as JSON (LLaMA-Factory's FILEEXT2TYPE): the only ones pre-checked here.
JSON_EXTENSIONS = (".json", ".jsonl")


# ----------------------------------------------------------------------------------------------------
# Settings


def settings(spec):
    """The job's settings with their defaults (the finetune role's). ``spec`` holds:

    - ``model``: the model's folder on this node; ``trust_remote_code``;
    - ``dataset_dir`` and ``dataset`` (the dataset_info.json entry), ``stage`` (sft, pt), ``template``,
      ``cutoff_len``, ``packing`` (null: LLaMA-Factory's default), ``val_size``, ``seed``,
      ``preprocessing_num_workers``, ``data_args`` (other LLaMA-Factory data settings of the job:
      train_on_prompt, mask_history, max_samples ...);
    - ``finetuning_type`` (lora, full, freeze), ``lora_rank``, ``lora_target``;
    - ``strategy`` (deepspeed_zero3, fsdp, ddp), ``offload_optimizer``, ``offload_param``;
    - ``nodes``, ``ranks_per_node``, ``world_size`` (any two give the third);
      ``per_device_train_batch_size``, ``gradient_accumulation_steps``; ``do_eval`` (the job evaluates);
    - ``gpu_memory_bytes`` (one GPU's; null for CPU ranks), ``host_memory_bytes`` (one node's);
    - ``tokenized_path``: where the tokenized set is saved and reused (null: tokenize and keep nothing).
    """
    job = {
        "model": spec.get("model") or "",
        "trust_remote_code": bool(spec.get("trust_remote_code", False)),
        "dataset_dir": spec.get("dataset_dir") or "",
        "dataset": spec.get("dataset") or "",
        "stage": spec.get("stage") or "sft",
        "template": spec.get("template") or "default",
        "cutoff_len": int(spec.get("cutoff_len") or 1024),
        "packing": spec.get("packing"),
        "val_size": float(spec.get("val_size") or 0),
        "seed": int(spec["seed"] if spec.get("seed") is not None else 42),
        "preprocessing_num_workers": spec.get("preprocessing_num_workers"),
        "data_args": dict(spec.get("data_args") or {}),
        "finetuning_type": spec.get("finetuning_type") or "lora",
        "lora_rank": int(spec.get("lora_rank") or 8),
        "lora_target": spec.get("lora_target") or "all",
        "strategy": spec.get("strategy") or "deepspeed_zero3",
        "offload_optimizer": bool(spec.get("offload_optimizer", False)),
        "offload_param": bool(spec.get("offload_param", False)),
        "per_device_train_batch_size": int(spec.get("per_device_train_batch_size") or 1),
        "gradient_accumulation_steps": int(spec.get("gradient_accumulation_steps") or 1),
        "do_eval": bool(spec.get("do_eval", False)),
        "gpu_memory_bytes": spec.get("gpu_memory_bytes"),
        "host_memory_bytes": spec.get("host_memory_bytes"),
        "tokenized_path": spec.get("tokenized_path"),
    }
    nodes, per_node, world = spec.get("nodes"), spec.get("ranks_per_node"), spec.get("world_size")
    nodes = int(nodes or (int(world) // int(per_node) if world and per_node else 1))
    per_node = int(per_node or (int(world) // nodes if world else 1))
    job.update(nodes=max(nodes, 1), ranks_per_node=max(per_node, 1))
    job["world_size"] = int(world or job["nodes"] * job["ranks_per_node"])
    return job


def size(value):
    """Bytes as a short decimal figure: 4.3 MB, 80.0 GB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{int(value)} B"


def _more(items, shown=SHOWN):
    """``a, b, c`` or ``a, b, c and 7 more``."""
    head = ", ".join(str(item) for item in items[:shown])
    return head + (f" and {len(items) - shown} more" if len(items) > shown else "")


# ----------------------------------------------------------------------------------------------------
# Model (pure): what the safetensors headers say


def module_params(tensors):
    """{module: parameters} over ``{tensor name: (dtype, shape)}``: a module's own tensors (its weight
    and bias), as DeepSpeed's ``model_to_params`` counts one layer."""
    modules = {}
    for name, (_dtype, shape) in tensors.items():
        module = name.rsplit(".", 1)[0]
        modules[module] = modules.get(module, 0) + ckptspace.count(shape)
    return modules


def model_summary(tensors, lora_rank, lora_target, finetuning_type):
    """Parameter counts for the estimator: all of them, the largest layer's (the one ZeRO-3 gathers
    whole), the trained ones for the job's fine-tuning type (LoRA: ckptspace's count of the adapter) and
    LoRA's over every linear layer (the suggestion for a full fine-tune that does not fit)."""
    params = sum(ckptspace.count(shape) for _dtype, shape in tensors.values())
    largest = max(module_params(tensors).values(), default=0)
    lora_all = ckptspace.lora_trainable(tensors, lora_rank or SUGGESTED_LORA_RANK, "all")
    trainable = ckptspace.lora_trainable(tensors, lora_rank, lora_target) if finetuning_type == "lora" else params
    return {"params": params, "largest_layer_params": largest, "trainable": trainable, "lora_all_trainable": lora_all}


def linear_modules(tensors):
    """The last names of the modules with a 2-D weight (the ones LoRA can wrap), sorted."""
    names = set()
    for name, (_dtype, shape) in tensors.items():
        if name.endswith(".weight") and len(shape) == 2:
            names.add(name[: -len(".weight")].rsplit(".", 1)[-1])
    return sorted(names)


def lora_target_problem(tensors, target, model_dir):
    """The refusal of a ``lora_target`` naming a module the model does not have, or None. PEFT matches a
    target against the end of each module's dotted name; "all" is every linear layer."""
    wanted = ckptspace.lora_targets(target)
    if wanted is None:
        return None
    modules = {name.rsplit(".", 1)[0] for name in tensors}
    missing = [t for t in wanted if not any(m == t or m.endswith("." + t) for m in modules)]
    if not missing:
        return None
    return (
        f"model: finetune_lora_target {target!r} names {', '.join(missing)}, which no module of {model_dir} "
        f"is called (its linear layers: {', '.join(linear_modules(tensors))}); PEFT would stop every rank "
        f'with "Target modules {set(missing)} not found in the base model". Name modules from that list, '
        f"or set finetune_lora_target: all.{SEE}"
    )


# ----------------------------------------------------------------------------------------------------
# Memory (pure): DeepSpeed's estimator is passed in, so that this arithmetic is tested on its own


def states_estimate(summary, job, zero3):
    """``(bytes per GPU, bytes of host memory per node)`` for the model states (weights, gradients,
    optimizer) of ``job`` (strategy, offload_optimizer, offload_param, nodes, ranks_per_node).

    ``zero3`` is DeepSpeed's ``estimate_zero3_model_states_mem_needs``. It assumes every parameter is
    trained with Adam, so it is given the trained ones; LoRA's frozen base adds 2 bytes a parameter,
    partitioned over every GPU (or over the nodes' memory when parameters are offloaded, with
    DeepSpeed's buffer factor), as ZeRO-3 partitions frozen parameters too. The largest layer is the
    base model's: ZeRO-3 gathers it whole whether it trains or not. FSDP's full shard is counted as
    ZeRO-3. DDP keeps the whole model on every GPU and nothing is estimated for the host.
    """
    trained, frozen = summary["trainable"], summary["params"] - summary["trainable"]
    if job["strategy"] == "ddp":
        return trained * DDP_TRAINED + frozen * HALF, 0
    nodes, per_node = job["nodes"], job["ranks_per_node"]
    # DeepSpeed's estimator moves parameters to the host only with the optimizer: so does this.
    offload = bool(job["offload_optimizer"])
    offload_params = offload and bool(job["offload_param"])
    host, gpu, _largest = zero3(
        total_params=trained,
        largest_layer_params=summary["largest_layer_params"],
        num_gpus_per_node=per_node,
        num_nodes=nodes,
        cpu_offload=offload,
        cpu_offload_params=offload_params,
        zero_init=True,
        additional_buffer_factor=BUFFER,
    )
    if frozen:
        if offload_params:
            host += int(frozen * HALF / nodes * BUFFER)
        else:
            gpu += int(frozen * HALF / (nodes * per_node))
    return int(gpu), int(host)


def node_needs(summary, job, zero3):
    """What one GPU and one node's host memory need. CPU ranks (no GPU memory given) hold their "GPU"
    share in the host's memory, every rank of the node."""
    gpu, host = states_estimate(summary, job, zero3)
    if job.get("gpu_memory_bytes") is None:
        return {"gpu": None, "host": host + gpu * job["ranks_per_node"], "per_rank": gpu}
    return {"gpu": gpu, "host": host, "per_rank": gpu}


def fits(needs, job):
    gpu_ok = needs["gpu"] is None or job.get("gpu_memory_bytes") is None or needs["gpu"] <= job["gpu_memory_bytes"]
    host_ok = job.get("host_memory_bytes") is None or needs["host"] <= job["host_memory_bytes"]
    return gpu_ok and host_ok


def _describe_needs(needs):
    if needs["gpu"] is None:
        return f"{size(needs['host'])} of host memory per node, {size(needs['per_rank'])} a rank"
    return f"{size(needs['gpu'])} per GPU, {size(needs['host'])} of host memory per node"


def _offload_words(job):
    if job["strategy"] == "ddp":
        return "DDP: the whole model on every GPU"
    if not job["offload_optimizer"]:
        return "no offload"
    return "optimizer and parameters offloaded" if job["offload_param"] else "optimizer offloaded"


def fitting_settings(summary, job, zero3):
    """The settings that would fit, each as ``(what to set, its estimate)``, least change first: offload,
    ZeRO-3 instead of DDP, LoRA instead of a full fine-tune, then the fewest nodes that would do (with
    the job's offload, else with everything offloaded)."""
    sharded = job["strategy"] != "ddp"
    offloaded = {"offload_optimizer": True, "offload_param": True}
    options = []

    def consider(label, counts, **changes):
        changed = dict(job, **changes)
        needs = node_needs(counts, changed, zero3)
        if fits(needs, changed):
            options.append((label, needs))
            return True
        return False

    if sharded and not job["offload_optimizer"]:
        consider("finetune_deepspeed_offload_optimizer: true", summary, offload_optimizer=True)
    if sharded and not (job["offload_optimizer"] and job["offload_param"]):
        consider(
            "finetune_deepspeed_offload_optimizer: true and finetune_deepspeed_offload_param: true",
            summary,
            **offloaded,
        )
    if not sharded:
        consider("finetune_strategy: deepspeed_zero3", summary, strategy="deepspeed_zero3")
    if job["finetuning_type"] != "lora":
        lora = dict(summary, trainable=summary["lora_all_trainable"])
        rank = job.get("lora_rank") or SUGGESTED_LORA_RANK
        trained = summary["lora_all_trainable"]
        label = f"finetune_finetuning_type: lora (rank {rank}, all linear layers: {trained:,} trained)"
        if not consider(label, lora, finetuning_type="lora") and sharded:
            consider(label + " with the optimizer and parameters offloaded", lora, finetuning_type="lora", **offloaded)
    strategy = job["strategy"] if sharded else "deepspeed_zero3"
    under = "" if sharded else " under finetune_strategy: deepspeed_zero3"
    for offloads, words in (({}, ""), (offloaded, " with the optimizer and parameters offloaded")):
        more = range(job["nodes"] + 1, MAX_NODES + 1)
        label = f"{{}} nodes of {job['ranks_per_node']} ranks{words}{under}"
        if any(consider(label.format(n), summary, nodes=n, strategy=strategy, **offloads) for n in more):
            break
    return options


def memory_problem(summary, job, zero3, model_dir, deepspeed_version="0.16.9"):
    """``(problem or None, what was estimated)``: a job whose model states do not fit its GPUs or its
    nodes' memory is refused with the estimate and the settings that would fit."""
    needs = node_needs(summary, job, zero3)
    kind = "LoRA" if job["finetuning_type"] == "lora" else "full fine-tune"
    basis = (
        f"{kind} of {summary['params']:,} parameters ({summary['trainable']:,} trained) under {job['strategy']}, "
        f"{job['nodes']} node(s) x {job['ranks_per_node']} ranks, {_offload_words(job)}; "
        f"DeepSpeed {deepspeed_version}'s estimate_zero3_model_states_mem_needs, activations come on top"
    )
    estimate = f"{_describe_needs(needs)} ({basis})"
    if fits(needs, job):
        return None, estimate
    have = []
    if needs["gpu"] is not None and job.get("gpu_memory_bytes") is not None and needs["gpu"] > job["gpu_memory_bytes"]:
        have.append(f"a GPU has {size(job['gpu_memory_bytes'])}")
    if job.get("host_memory_bytes") is not None and needs["host"] > job["host_memory_bytes"]:
        have.append(f"a node has {size(job['host_memory_bytes'])} of memory")
    options = fitting_settings(summary, job, zero3)
    if options:
        fix = "Settings that would fit: " + "; ".join(f"{label} ({_describe_needs(n)})" for label, n in options)
    else:
        fix = f"No offload, LoRA or node count up to {MAX_NODES} fits: use GPUs with more memory or a smaller model"
    problem = f"model: the job cannot fit: {model_dir} needs about {estimate}, and {' and '.join(have)}. {fix}.{SEE}"
    return problem, estimate


# ----------------------------------------------------------------------------------------------------
# Dataset (pure): the raw file as LLaMA-Factory's loader will read it


def read_rows(text, path):
    """``(rows, problem)``: the rows of a .json or .jsonl file as the datasets library reads them (a JSON
    list of objects, or one object a line, whatever the extension), each as ``(row number, line number
    or None, row)``; or the refusal naming the position that does not parse."""
    stripped = text.lstrip()
    if not stripped:
        return [], None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as error:
        whole, whole_error = None, error
    else:
        whole_error = None
    if whole_error is None:
        if isinstance(whole, list):
            rows = [(number, None, row) for number, row in enumerate(whole, 1)]
            return rows, _not_objects(rows, path)
        if isinstance(whole, dict) and len([line for line in text.splitlines() if line.strip()]) > 1:
            return [], (
                f"dataset: {path} holds one JSON object over several lines, not a list of rows: write a list of "
                f"objects ([{{...}}, {{...}}]) or one object a line (.jsonl).{SEE}"
            )
        if not isinstance(whole, dict):
            return [], (
                f"dataset: {path} holds a JSON {type(whole).__name__}, not a list of rows: write a list of "
                f"objects ([{{...}}, {{...}}]) or one object a line (.jsonl).{SEE}"
            )
    # One object a line (a single object parses whole as well: it is a one-line JSON Lines file).
    if stripped.startswith("[") and not path.endswith(".jsonl"):
        return [], (
            f"dataset: {path} is not valid JSON: {whole_error.msg} at line {whole_error.lineno} column "
            f"{whole_error.colno} (character {whole_error.pos}). Fix the file there (a .json dataset is one "
            f"JSON list of objects; check it with python3 -m json.tool).{SEE}"
        )
    return _json_lines(text, path)


def _json_lines(text, path):
    lines = text.splitlines()
    rows, bad = [], []
    for line_number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append((len(rows) + 1, line_number, json.loads(line)))
        except json.JSONDecodeError as error:
            bad.append((line_number, error))
    if bad:
        first, error = bad[0]
        others = f"; {len(bad)} of the {len(lines)} lines do not parse (lines {_more([n for n, _e in bad])})"
        return [], (
            f"dataset: {path} line {first} of {len(lines)} is not valid JSON: {error.msg} at column "
            f"{error.colno}{others if len(bad) > 1 else ''}. Fix or remove that line (each line of a JSON "
            f"Lines file is one JSON object).{SEE}"
        )
    return rows, _not_objects(rows, path)


def _where(number, line):
    return f"row {number}" + (f" (line {line})" if line else "")


def _not_objects(rows, path):
    odd = [(number, line, row) for number, line, row in rows if not isinstance(row, dict)]
    if not odd:
        return None
    number, line, row = odd[0]
    return (
        f"dataset: {path} {_where(number, line)} is a JSON {type(row).__name__}, not an object "
        f"({len(odd)} of {len(rows)} rows are not objects): each row is one object of columns.{SEE}"
    )


def used_columns(entry):
    """{LLaMA-Factory's name: the file's column} that its converter reads for this dataset_info entry."""
    if "columns" in entry:
        mapped = entry.get("columns") or {}
        return {name: mapped[name] for name in COLUMN_NAMES if mapped.get(name)}
    return dict(DEFAULT_COLUMNS.get(entry.get("formatting", "alpaca"), {}))


def column_problems(rows, entry, path, name):
    """A column the converter reads that no row has: LLaMA-Factory stops with a KeyError of the name."""
    present = sorted({key for _n, _l, row in rows for key in row})
    formatting = entry.get("formatting", "alpaca")
    problems = []
    for attr, column in used_columns(entry).items():
        if column in present:
            continue
        source = (
            f"mapped to {attr} by the {name} entry's columns in dataset_info.json (finetune_dataset_columns)"
            if "columns" in entry
            else f"the {formatting} format's {attr} column when no columns are mapped"
        )
        problems.append(
            f"dataset: {path} has no column {column!r} ({source}); its {len(rows)} rows have the columns "
            f"{', '.join(present) or 'none'}. Map {attr} to one of them in finetune_dataset_columns, or add "
            f"the column to the file.{SEE}"
        )
    return problems


def sharegpt_tags(entry):
    if "tags" in entry:
        mapped = entry.get("tags") or {}
        return {tag: mapped.get(tag) for tag in DEFAULT_TAGS}
    return dict(DEFAULT_TAGS)


def role_tag_problems(rows, entry, path, name):
    """The sharegpt rows LLaMA-Factory's converter would skip with only a log line: a role tag it does
    not know, or turns out of order (user or observation, then assistant or function, in turn)."""
    tags = sharegpt_tags(entry)
    column = used_columns(entry).get("messages")
    role_tag, content_tag = tags["role_tag"], tags["content_tag"]
    known = {tags[tag]: role for tag, role in TAG_ROLES if tags[tag]}
    accepted = ((tags["user_tag"], tags["observation_tag"]), (tags["assistant_tag"], tags["function_tag"]))
    unknown, disorder, malformed = [], [], []
    for number, line, row in rows:
        where = _where(number, line)
        messages = row.get(column)
        if not isinstance(messages, list):
            malformed.append(f"{where}: {column} is {type(messages).__name__}, not a list of turns")
            continue
        turns = messages
        if tags["system_tag"] and turns and isinstance(turns[0], dict) and turns[0].get(role_tag) == tags["system_tag"]:
            turns = turns[1:]
        for turn_number, turn in enumerate(turns):
            if not isinstance(turn, dict) or role_tag not in turn or content_tag not in turn:
                malformed.append(f"{where} turn {turn_number + 1}: no {role_tag!r} and {content_tag!r} keys")
                break
            tag = turn[role_tag]
            if tag not in known:
                unknown.append((where, turn_number + 1, tag))
                break
            if tag not in accepted[turn_number % 2]:
                expected = " or ".join(repr(t) for t in accepted[turn_number % 2] if t)
                disorder.append(f"{where} turn {turn_number + 1}: {tag!r} where {expected} comes")
                break
        else:
            if len(turns) % 2:
                disorder.append(f"{where}: {len(turns)} turns, which leaves a prompt without an answer")
    source = f"the {name} entry's tags in dataset_info.json" if "tags" in entry else "the sharegpt defaults"
    allowed = ", ".join(f"{tag} ({role})" for tag, role in known.items())
    problems = []
    if unknown:
        where, turn, tag = unknown[0]
        others = f" ({len(unknown)} rows in all: {_more([w for w, _t, _g in unknown])})" if len(unknown) > 1 else ""
        problems.append(
            f"dataset: {path} {where} turn {turn} has {role_tag}: {tag!r}, a role tag that dataset {name} does "
            f"not know{others}; the tags it knows, from {source}: {allowed}. LLaMA-Factory would skip the row "
            f'without an error. Rename the tag in the file, or map it under "tags" in the entry.{SEE}'
        )
    if disorder:
        problems.append(
            f"dataset: {path} has {len(disorder)} rows whose turns LLaMA-Factory would skip: {_more(disorder)}. "
            f"A conversation alternates user (or observation) and assistant (or function) turns, after an "
            f"optional system turn, and ends with an answer.{SEE}"
        )
    if malformed:
        problems.append(
            f"dataset: {path} has {len(malformed)} rows that are not sharegpt conversations: {_more(malformed)}. "
            f"Each row's {column!r} is a list of {{{role_tag!r}: ..., {content_tag!r}: ...}} turns.{SEE}"
        )
    return problems


def row_problems(rows, entry, path, name):
    """What LLaMA-Factory's loader and converter would trip on or silently skip, by row and column."""
    if not rows:
        return [
            f"dataset: {path} has no rows: the train split would be empty. Put the examples in the file "
            f"(a JSON list of objects, or one object a line).{SEE}"
        ]
    problems = column_problems(rows, entry, path, name)
    if not problems and entry.get("formatting", "alpaca") == "sharegpt":
        problems += role_tag_problems(rows, entry, path, name)
    return problems


# ----------------------------------------------------------------------------------------------------
# Splits (pure): the numbers the Trainer meets


def split_problems(job, read, train, validation):
    """A train split smaller than one global batch, and no validation rows where evaluation is asked.
    ``read``: rows in the raw file(s) (None: not counted); ``train``/``validation``: rows after
    LLaMA-Factory's split and tokenization (None: not known yet)."""
    problems = []
    world, batch, steps = job["world_size"], job["per_device_train_batch_size"], job["gradient_accumulation_steps"]
    global_batch = world * batch * steps
    rows_read = f"{read} rows read" if read is not None else "rows read: not counted"
    if train is not None and train < global_batch:
        held = f", {validation} held out for validation" if validation else ""
        if world > train:
            fit = f"add rows, or train on {train} or fewer ranks (one row per rank is already more than the split)"
        else:
            per_rank = train // world
            fit = (
                f"add rows, or lower finetune_per_device_train_batch_size x finetune_gradient_accumulation_steps "
                f"to at most {per_rank} (e.g. {min(batch, per_rank)} x {max(per_rank // min(batch, per_rank), 1)})"
            )
        problems.append(
            f"dataset: the train split of {job['dataset']} has {train} rows after tokenizing ({rows_read}{held}) "
            f"and one global batch takes {global_batch} rows (world size {world} x "
            f"finetune_per_device_train_batch_size {batch} x finetune_gradient_accumulation_steps {steps}): an "
            f"epoch would be one optimizer step, its batch filled by repeating rows. {fit[0].upper()}{fit[1:]}.{SEE}"
        )
    if job["do_eval"] and validation is not None and validation == 0:
        if job["val_size"] <= 0:
            why = f"finetune_val_size is {job['val_size']:g}, so no row is held out; {rows_read}"
            fix = (
                "Set finetune_val_size (e.g. 0.1) so that the split holds rows, or take the evaluation settings "
                "(do_eval, eval_strategy, eval_steps) out of finetune_extra_args"
            )
        else:
            why = f"finetune_val_size {job['val_size']:g} held out rows that tokenizing dropped; {rows_read}"
            fix = (
                "Raise finetune_val_size, or fix the rows LLaMA-Factory drops (an empty answer, a prompt that "
                "fills cutoff_len)"
            )
        problems.append(
            f"dataset: evaluation is asked but the validation split of {job['dataset']} has 0 rows ({why}). {fix}.{SEE}"
        )
    return problems


# ----------------------------------------------------------------------------------------------------
# The tokenized set's key (pure)


def inputs_key(inputs):
    """A short stable hash of what the tokenized set is made from."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changed_inputs(old, new, prefix=""):
    """What differs between two input documents, as ``path: old -> new`` (sorted)."""
    changes = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            changes += changed_inputs(before, after, f"{prefix}{key}.")
        else:
            changes.append(f"{prefix}{key}: {json.dumps(before, default=str)} -> {json.dumps(after, default=str)}")
    return changes


# ----------------------------------------------------------------------------------------------------
# The checks on this node (impure: files and the training libraries)


def sha256_file(path):
    total = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            total.update(block)
    return total.hexdigest()


def read_tensors(files):
    """``({tensor name: (dtype, shape)}, {file: its tensor names}, problems)`` from the headers, read by
    the safetensors library (never the tensors)."""
    from safetensors import safe_open  # noqa: PLC0415 - a training library: imported when checking

    tensors, names, problems = {}, {}, []
    for path in files:
        try:
            with safe_open(path, "np") as handle:
                names[path] = list(handle.keys())
                for name in names[path]:
                    piece = handle.get_slice(name)
                    tensors[name] = (piece.get_dtype(), list(piece.get_shape()))
        except Exception as error:  # SafetensorError, OSError: a truncated, foreign or unreadable file
            problems.append(
                f"model: {path} is not a readable safetensors file ({type(error).__name__}: {error}; "
                f"{os.path.getsize(path) if os.path.exists(path) else 0:,} bytes): the copy is cut short or is "
                f"not safetensors. Copy it again from the source and compare its sha256.{SEE}"
            )
    return tensors, names, problems


def _index_problems(model_dir, names):
    """Tensors the index places in a shard that does not hold them (transformers would not find them)."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.isfile(index):
        return []
    with open(index) as handle:
        weight_map = json.load(handle).get("weight_map", {})
    absent = [
        f"{tensor} ({shard})"
        for tensor, shard in sorted(weight_map.items())
        if os.path.join(model_dir, shard) in names and tensor not in names[os.path.join(model_dir, shard)]
    ]
    if not absent:
        return []
    return [
        f"model: {index} places {len(absent)} tensors in shards that do not hold them: {_more(absent)}. "
        f"The index and the shards come from different copies: copy the model folder again.{SEE}"
    ]


def has_tokenizer(model_dir):
    return any(all(os.path.isfile(os.path.join(model_dir, n)) for n in group) for group in TOKENIZER_SETS)


def check_model(job, libs, parsed, result):
    """The model's files, config, tokenizer, weights' headers, LoRA targets and memory. LLaMA-Factory's
    tokenizer module goes to ``parsed.tokenizer`` (it stays None when the dataset cannot be tokenized)."""
    model_dir = job["model"]
    problems, checked = result["problems"], result["checked"]
    if not os.path.isdir(model_dir):
        problems.append(
            f"model: {model_dir!r} is not a folder on this node: finetune_model must name the model's folder "
            f"as the node sees it (a hub model is downloaded into one before this check).{SEE}"
        )
        return
    present = sorted(os.listdir(model_dir))
    config_ok = os.path.isfile(os.path.join(model_dir, "config.json"))
    if not config_ok:
        problems.append(
            f"model: {model_dir} has no config.json (it holds {_more(present, 8) or 'nothing'}): transformers "
            f'cannot tell the architecture and every rank would stop with "Unrecognized model in {model_dir}". '
            f"Copy the model's whole folder, or point finetune_model (finetune_model_src) at the folder that "
            f"holds config.json.{SEE}"
        )
    else:
        try:
            config = libs.AutoConfig.from_pretrained(model_dir, trust_remote_code=job["trust_remote_code"])
            checked.append(
                f"model: config.json accepted by transformers {libs.versions['transformers']} ({type(config).__name__})"
            )
        except Exception as error:  # ValueError, OSError, KeyError: whatever the config's class raises
            config_ok = False
            problems.append(
                f"model: transformers {libs.versions['transformers']} refuses {model_dir}/config.json: "
                f"{type(error).__name__}: {_first_line(error)}. Fix the file, or use a model this transformers "
                f"supports.{SEE}"
            )
    if not has_tokenizer(model_dir):
        problems.append(
            f"model: {model_dir} has no tokenizer files (tokenizer.json, tokenizer.model, vocab.json with "
            f"merges.txt, or vocab.txt; it holds {_more(present, 8) or 'nothing'}). Copy them from the model's "
            f"source with the weights.{SEE}"
        )
    elif config_ok and parsed is not None:
        parsed.tokenizer = _load_tokenizer(job, libs, parsed.model_args, result)
    _check_weights(job, libs, result)


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _check_weights(job, libs, result):
    model_dir = job["model"]
    problems, checked, notes = result["problems"], result["checked"], result["notes"]
    try:
        files = ckptspace.model_files(model_dir)
    except json.JSONDecodeError as error:
        problems.append(
            f"model: {model_dir}/model.safetensors.index.json is not valid JSON: {error.msg} at line "
            f"{error.lineno} column {error.colno}. Copy the index again from the model's source.{SEE}"
        )
        return
    except ValueError as error:  # an index naming missing shards
        problems.append(
            f"model: {error}. Copy the missing shards (or the whole folder) again: transformers loads every "
            f"shard the index names.{SEE}"
        )
        return
    if not files:
        notes.append(f"model: {model_dir} has no safetensors weights: memory and lora_target not checked")
        return
    tensors, names, bad = read_tensors(files)
    problems.extend(bad)
    if bad:
        return
    problems.extend(_index_problems(model_dir, names))
    summary = model_summary(tensors, job["lora_rank"], job["lora_target"], job["finetuning_type"])
    result["model"] = dict(summary, shards=len(files), tensors=len(tensors))
    checked.append(
        f"model: {len(files)} safetensors file(s), {len(tensors)} tensors, {summary['params']:,} parameters "
        f"(headers read with safetensors {libs.versions['safetensors']})"
    )
    if job["finetuning_type"] == "lora":
        problem = lora_target_problem(tensors, job["lora_target"], model_dir)
        if problem:
            problems.append(problem)
        else:
            checked.append(f"model: lora_target {job['lora_target']!r} names modules of the model")
    if job.get("gpu_memory_bytes") is None and job.get("host_memory_bytes") is None:
        notes.append("memory: no GPU or host memory given, not estimated")
        return
    problem, estimate = memory_problem(
        summary, job, libs.zero3_estimate(), model_dir, deepspeed_version=libs.versions["deepspeed"]
    )
    needs = node_needs(summary, job, libs.zero3_estimate())
    result["memory"] = {"gpu_bytes": needs["gpu"], "host_bytes": needs["host"], "estimate": estimate}
    if problem:
        problems.append(problem)
    else:
        checked.append(f"memory: the model states need about {estimate}")


def _load_tokenizer(job, libs, model_args, result):
    """LLaMA-Factory's own load_tokenizer (AutoTokenizer, patched as the job patches it)."""
    try:
        module = libs.load_tokenizer(model_args)
    except Exception as error:  # it raises OSError("Failed to load tokenizer.") from the real cause
        cause = error.__cause__ or error
        result["problems"].append(
            f"model: LLaMA-Factory cannot load the tokenizer of {job['model']}: {type(cause).__name__}: "
            f"{_first_line(cause)}. Copy the tokenizer files from the model's source again.{SEE}"
        )
        return None
    result["checked"].append(f"model: tokenizer loaded by LLaMA-Factory ({type(module['tokenizer']).__name__})")
    return module


def _llamafactory_args(job, work, tokenized_path=None):
    """The job's settings as LLaMA-Factory's training arguments, for its own parser. Tokenizing needs no
    device: the check runs on the CPU and leaves the GPUs alone."""
    args = {
        "model_name_or_path": job["model"],
        "trust_remote_code": job["trust_remote_code"],
        "stage": job["stage"],
        "do_train": True,
        "finetuning_type": job["finetuning_type"],
        "dataset": job["dataset"],
        "dataset_dir": job["dataset_dir"],
        "template": job["template"],
        "cutoff_len": job["cutoff_len"],
        "val_size": job["val_size"],
        "seed": job["seed"],
        "report_to": "none",
        "use_cpu": True,
        "output_dir": work or tempfile.gettempdir(),
    }
    if job["finetuning_type"] == "lora":
        args.update(lora_rank=job["lora_rank"], lora_target=job["lora_target"])
    if job["packing"] is not None:
        args["packing"] = bool(job["packing"])
    if job["preprocessing_num_workers"]:
        args["preprocessing_num_workers"] = int(job["preprocessing_num_workers"])
    if work:
        # The datasets library's cache of the raw file and of each map step goes with the check's own
        # folder instead of the training account's home, and is removed with it.
        args["cache_dir"] = os.path.join(work, "cache")
    if tokenized_path:
        args["tokenized_path"] = tokenized_path
    args.update(job["data_args"])
    return args


def dataset_entry(job, result):
    """``(entry, files)`` of the job's dataset_info entry, or ``(None, None)`` with the problem recorded."""
    info = os.path.join(job["dataset_dir"], "dataset_info.json")
    try:
        with open(info) as handle:
            entries = json.load(handle)
    except FileNotFoundError:
        result["problems"].append(
            f"dataset: {info} does not exist: LLaMA-Factory finds dataset {job['dataset']!r} through it. Set "
            f"finetune_dataset_src to the dataset file, which the role registers there.{SEE}"
        )
        return None, None
    except json.JSONDecodeError as error:
        result["problems"].append(
            f"dataset: {info} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}.{SEE}"
        )
        return None, None
    entry = entries.get(job["dataset"]) if isinstance(entries, dict) else None
    if not isinstance(entry, dict):
        result["problems"].append(
            f"dataset: {info} has no entry {job['dataset']!r} (it has {_more(sorted(entries), 8) or 'none'}): "
            f"set finetune_dataset_name to the dataset's name.{SEE}"
        )
        return None, None
    if "file_name" not in entry:
        result["notes"].append(f"dataset: {job['dataset']} is not a local file: its rows are not pre-checked")
        return entry, []
    local = os.path.join(job["dataset_dir"], entry["file_name"])
    if os.path.isdir(local):
        files = sorted(os.path.join(local, name) for name in os.listdir(local))
    elif os.path.isfile(local):
        files = [local]
    else:
        result["problems"].append(
            f"dataset: {local} (file_name of {job['dataset']} in {info}) does not exist on this node. Check "
            f"finetune_dataset_src.{SEE}"
        )
        return None, None
    return entry, files


def precheck_rows(job, entry, files, result):
    """Read the raw JSON/JSONL files as the datasets library will; returns the rows read (None: not
    counted) and records the problems by file, line, row and column."""
    total = 0
    for path in files:
        if not path.endswith(JSON_EXTENSIONS):
            result["notes"].append(f"dataset: {path} is not JSON or JSONL: left to LLaMA-Factory's loader")
            return None
        with open(path, "rb") as handle:
            raw = handle.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            line = raw.count(b"\n", 0, error.start) + 1
            result["problems"].append(
                f"dataset: {path} is not UTF-8 text at byte {error.start} (line {line}): {error.reason}. Save the "
                f"file as UTF-8.{SEE}"
            )
            return None
        rows, problem = read_rows(text, path)
        if problem:
            result["problems"].append(problem)
            return None
        found = row_problems(rows, entry, path, job["dataset"])
        if found:
            result["problems"].extend(found)
            return None
        total += len(rows)
    result["checked"].append(
        f"dataset: {total} rows of {', '.join(os.path.basename(p) for p in files)} read "
        f"({entry.get('formatting', 'alpaca')}, columns {', '.join(used_columns(entry).values())})"
    )
    return total


def key_inputs(job, libs, source, parsed):
    """What the tokenized set is made from: hashed into its key and written beside it."""
    entry, files = source
    data = {
        key: value
        for key, value in vars(parsed.data_args).items()
        if key not in KEY_IGNORED_DATA_ARGS and not key.startswith("_")
    }
    inputs = {
        "versions": {name: libs.versions[name] for name in ("llamafactory", "datasets", "transformers", "tokenizers")},
        "stage": job["stage"],
        "seed": job["seed"],
        "data": data,
        "tokenizer": {key: getattr(parsed.model_args, key, None) for key in KEY_TOKENIZER_ARGS},
        "dataset_info": {job["dataset"]: entry},
        "dataset_files": {os.path.relpath(p, job["dataset_dir"]): sha256_file(p) for p in files},
        "tokenizer_files": {
            name: sha256_file(os.path.join(job["model"], name))
            for name in TOKENIZER_FILES
            if os.path.isfile(os.path.join(job["model"], name))
        },
    }
    # As it reads back from the file beside the set (tuples as lists), so that the two compare.
    return json.loads(json.dumps(inputs, sort_keys=True, default=str))


def stored_inputs(path):
    try:
        with open(os.path.join(path, KEY_FILE)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _foreign(path):
    """A non-empty folder (or a file) at ``path`` without the key file: not a set this check made."""
    if not os.path.lexists(path):
        return False
    if not os.path.isdir(path) or os.path.islink(path):
        return True
    return bool(os.listdir(path)) and not os.path.exists(os.path.join(path, KEY_FILE))


@contextlib.contextmanager
def _locked(path):
    """One check at a time per tokenized set: nodes sharing an output folder, or a retried task."""
    parent = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(parent, exist_ok=True)
    with open(os.path.abspath(path) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield parent


class Parsed:
    """The job's settings as LLaMA-Factory's own parser made them, and the tokenizer it loaded."""

    def __init__(self, model_args, data_args, training_args):
        self.model_args, self.data_args, self.training_args = model_args, data_args, training_args
        self.tokenizer = None


def parse(job, libs, scratch, result):
    """LLaMA-Factory's own parser over the job's settings, or None with the refusal recorded. Then what
    its get_train_args does after parsing (that needs a distributed launch; this check is one process)."""
    try:
        model_args, data_args, training_args, finetuning_args, _generating = libs.parse(
            _llamafactory_args(job, scratch)
        )
    except (ValueError, TypeError) as error:
        result["problems"].append(f"settings: LLaMA-Factory refuses the job's data settings: {error}.{SEE}")
        return None
    model_args.model_max_length = data_args.cutoff_len
    data_args.packing = data_args.packing if data_args.packing is not None else finetuning_args.stage == "pt"
    return Parsed(model_args, data_args, training_args)


def check_dataset(job, libs, parsed, result):
    """The dataset: its entry, its raw rows, then LLaMA-Factory's pipeline into (or from) tokenized_path."""
    source = dataset_entry(job, result)
    if source[0] is None:
        return
    inputs = key_inputs(job, libs, source, parsed)
    key = inputs_key(inputs)
    result["key"] = key
    target = job["tokenized_path"]
    if not target:
        _tokenize(job, libs, parsed, source, result)
        return
    with _locked(target) as parent:
        stored = stored_inputs(target)
        if stored and stored.get("key") == key:
            try:
                splits = libs.load_from_disk(target)
            except Exception as error:  # a set cut short or changed by hand: made again below
                result["notes"].append(f"dataset: {target} does not load ({type(error).__name__}): made again")
            else:
                result.update(tokenized="reused", tokenized_path=target)
                _count(job, stored.get("rows_read"), splits, result)
                result["checked"].append(f"dataset: tokenized set {target} reused (key {key})")
                return
        if _foreign(target):
            result["problems"].append(
                f"dataset: tokenized_path {target} holds files this check did not write (no {KEY_FILE}): it "
                f"replaces an outdated set there, so it leaves a folder it does not know alone. Move the folder "
                f"aside, or give the job a tokenized path of its own.{SEE}"
            )
            return
        if stored:
            result["tokenized_reason"] = changed_inputs(stored.get("inputs") or {}, inputs)
        work = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.partial-", dir=parent)
        try:
            parsed.data_args.tokenized_path = os.path.join(work, "set")
            read = _tokenize(job, libs, parsed, source, result)
            if read is False:
                return
            record = {"key": key, "rows_read": read, "inputs": inputs}
            with open(os.path.join(parsed.data_args.tokenized_path, KEY_FILE), "w") as handle:
                json.dump(record, handle, indent=1, sort_keys=True)
            # The job loads whatever non-empty folder it finds there: only a whole set is put in place.
            if os.path.lexists(target):
                shutil.rmtree(target)
            os.rename(parsed.data_args.tokenized_path, target)
            result.update(tokenized="written", tokenized_path=target)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _tokenize(job, libs, parsed, source, result):
    """Pre-check the raw rows, then run LLaMA-Factory's dataset pipeline; returns the rows read (None:
    not counted), or False when nothing was tokenized."""
    entry, files = source
    before = len(result["problems"])
    read = precheck_rows(job, entry, files, result) if files else None
    if len(result["problems"]) == before and job["do_eval"] and job["val_size"] <= 0:
        # Known before tokenizing: the rows read give the message its numbers.
        result["problems"].extend(split_problems(job, read, None, 0))
    if len(result["problems"]) > before:
        return False
    if parsed.tokenizer is None:
        result["notes"].append("dataset: not tokenized: the model's config or tokenizer is refused above")
        return False
    try:
        template = libs.get_template_and_fix_tokenizer(parsed.tokenizer["tokenizer"], parsed.data_args)
        module = libs.get_dataset(
            template, parsed.model_args, parsed.data_args, parsed.training_args, job["stage"], **parsed.tokenizer
        )
    except Exception as error:  # whatever the loader, converter or processor raise, named with the file
        result["problems"].append(
            f"dataset: LLaMA-Factory {libs.versions['llamafactory']} cannot tokenize {job['dataset']} "
            f"({', '.join(files) or 'not a local file'}; template {job['template']}, cutoff_len "
            f"{job['cutoff_len']}): {type(error).__name__}: {_first_line(error)}.{SEE}"
        )
        return False
    splits = {"train": module.get("train_dataset"), "validation": module.get("eval_dataset")}
    _count(job, read, splits, result)
    result["checked"].append(
        f"dataset: tokenized by LLaMA-Factory {libs.versions['llamafactory']} (template {job['template']}, "
        f"cutoff_len {job['cutoff_len']}, packing {parsed.data_args.packing}): {result['rows']['train']} train "
        f"rows, {result['rows']['validation']} validation rows"
    )
    return read


def _count(job, read, splits, result):
    train, validation = splits.get("train"), splits.get("validation")
    rows = {"read": read, "train": len(train) if train is not None else 0}
    rows["validation"] = len(validation) if validation is not None else 0
    result["rows"] = rows
    result["problems"].extend(split_problems(job, read, rows["train"], rows["validation"]))


class Libraries:
    """The training libraries, imported once for every spec (about five seconds)."""

    def __init__(self):
        # The model is a local folder (hub models are staged before this runs): offline, a missing file
        # fails here at once instead of waiting on a hub the node may not reach.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        from datasets import load_from_disk  # noqa: PLC0415
        from llamafactory.data import get_dataset, get_template_and_fix_tokenizer  # noqa: PLC0415
        from llamafactory.hparams.parser import _parse_train_args  # noqa: PLC0415 - LLaMA-Factory 0.9.5's own
        from llamafactory.model import load_tokenizer  # noqa: PLC0415
        from transformers import AutoConfig  # noqa: PLC0415

        self.AutoConfig = AutoConfig
        self.parse = _parse_train_args
        self.load_tokenizer = load_tokenizer
        self.get_template_and_fix_tokenizer = get_template_and_fix_tokenizer
        self.get_dataset = get_dataset
        self.load_from_disk = load_from_disk
        names = ("llamafactory", "transformers", "datasets", "tokenizers", "safetensors", "deepspeed")
        self.versions = {name: _version(name) for name in names}

    @staticmethod
    def zero3_estimate():
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs  # noqa: PLC0415

        return estimate_zero3_model_states_mem_needs


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def gpu_memory(spec):
    """One GPU's memory when the spec asks for the node's own (``gpu_memory_bytes: "device"``): torch's
    view of GPU 0 (the node's GPUs are one model), None where torch sees no GPU."""
    if spec.get("gpu_memory_bytes") != "device":
        return spec.get("gpu_memory_bytes")
    import torch  # noqa: PLC0415 - a training library: imported when checking

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def check(spec, libs):
    job = settings(dict(spec, gpu_memory_bytes=gpu_memory(spec)))
    result = {"problems": [], "checked": [], "notes": [], "key": None, "tokenized": None, "tokenized_path": None}
    if not job["model"] or not job["dataset_dir"] or not job["dataset"]:
        result["problems"].append(f"settings: the check needs model, dataset_dir and dataset, got {sorted(spec)}.{SEE}")
        return result
    # The datasets library caches the raw file and each map step in the check's own folder (not the
    # training account's home), beside the tokenized set (the filesystem meant for it), and removes it.
    near = os.path.dirname(os.path.abspath(job["tokenized_path"])) if job["tokenized_path"] else None
    try:
        if near:
            os.makedirs(near, exist_ok=True)
        scratch_folder = tempfile.TemporaryDirectory(prefix=".instinct-check-inputs-", dir=near)
    except OSError as error:
        result["problems"].append(
            f"dataset: the training account cannot write beside tokenized_path {job['tokenized_path']} "
            f"({type(error).__name__}: {error}). Give the job a tokenized path in a folder it owns.{SEE}"
        )
        return result
    with scratch_folder as scratch:
        parsed = parse(job, libs, scratch, result)
        check_model(job, libs, parsed, result)
        if parsed is not None:
            check_dataset(job, libs, parsed, result)
    return result


def main(argv):
    libs = Libraries()
    found = False
    for encoded in argv[1:]:
        result = check(json.loads(base64.b64decode(encoded)), libs)
        found = found or bool(result["problems"])
        print(MARK + json.dumps(result, default=str), flush=True)
    return 3 if found else 0


def cli():
    return main(sys.argv)
