# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Will a job's checkpoints fit on a node? (issue 32). A checkpoint of a 7B full fine-tune with its
optimizer state is about 100 GB; preflight's floor (``preflight_min_free_disk_gb``) knows nothing of the
job, so a job used to find out at its first ``save_steps``, hours in, with a half-written checkpoint
and every rank dead (docs/runbooks/disk-full.md).

The estimate reads the model's parameter shapes from its safetensors headers (the first 8 bytes give
the header's length, the header is JSON: ``{name: {dtype, shape, data_offsets}}``, per the format's
specification at https://github.com/huggingface/safetensors), never the weights. It runs with the
node's own Python, which has no safetensors package; the header is all it reads.

What a checkpoint holds, per the layouts the job's libraries write:
- DeepSpeed ZeRO-3 (and FSDP's sharded state): every rank saves its partition of the fp32 master
  weights and of Adam's two moments, 12 bytes per trainable parameter over the world; the master also
  writes the weights gathered in the model's own dtype (stage3_gather_16bit_weights_on_model_save),
  the whole model for a full fine-tune, the adapter for LoRA;
- DDP (the Trainer alone): the master saves the weights and Adam's two moments (8 bytes per trainable
  parameter).
LoRA's trainable parameters are ``rank x (rows + columns)`` for every 2-D weight of a targeted linear
layer (``all``: every linear layer but the embeddings and the output head, as PEFT's all-linear), kept
in fp32. A node keeps ``save_total_limit`` checkpoints, writes one more before the Trainer removes the
oldest, and the master holds the final weights too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct

# Bytes per element of each safetensors dtype.
DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip
# A header larger than this is not a safetensors header (the format caps it at 100 MB).
MAX_HEADER = 100 * 1000 * 1000
# Adam's moments in fp32; ZeRO and FSDP also keep an fp32 master copy of each trainable weight.
ADAM_MOMENTS = 8
FP32 = 4
# Never LoRA targets under "all" (PEFT's all-linear leaves the output head out; embeddings are not linear).
NOT_LINEAR = ("embed", "lm_head", "wte", "wpe")


def read_header(path):
    """{tensor name: (dtype, shape)} from one safetensors file's header. A ValueError names a file that is
    not one."""
    with open(path, "rb") as handle:
        size_bytes = handle.read(8)
        if len(size_bytes) != 8:
            raise ValueError("%s: shorter than a safetensors header" % path)
        (size,) = struct.unpack("<Q", size_bytes)
        if size > MAX_HEADER:
            raise ValueError("%s: a header of %d bytes is not a safetensors header" % (path, size))
        raw = handle.read(size)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError("%s: the safetensors header is not JSON (%s)" % (path, error)) from None
    if not isinstance(header, dict):
        raise ValueError("%s: the safetensors header is not a JSON object" % path)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        known = isinstance(entry, dict) and entry.get("dtype") in DTYPE_BYTES and isinstance(entry.get("shape"), list)
        if not known:
            raise ValueError("%s: tensor %s has no known dtype and shape" % (path, name))
        tensors[name] = (entry["dtype"], [int(n) for n in entry["shape"]])
    return tensors


def model_files(model_dir):
    """The safetensors files of a model folder: the shards its index names, else every *.safetensors
    file. A ValueError names an index that names a missing shard."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as handle:
            shards = sorted(set(json.load(handle).get("weight_map", {}).values()))
        missing = [shard for shard in shards if not os.path.isfile(os.path.join(model_dir, shard))]
        if missing:
            raise ValueError("%s names shards that are not there: %s" % (index, ", ".join(missing)))
        return [os.path.join(model_dir, shard) for shard in shards]
    return sorted(os.path.join(model_dir, name) for name in os.listdir(model_dir) if name.endswith(".safetensors"))


def model_tensors(model_dir):
    """{name: (dtype, shape)} over every safetensors file of the model (empty when it has none)."""
    tensors = {}
    for path in model_files(model_dir):
        tensors.update(read_header(path))
    return tensors


def count(shape):
    total = 1
    for n in shape:
        total *= n
    return total


def lora_targets(target):
    """The module names a LoRA target setting names, or None for every linear layer (``all``)."""
    names = [name.strip() for name in str(target).split(",") if name.strip()]
    return None if names in ([], ["all"]) else names


def lora_trainable(tensors, rank, target):
    """LoRA's trainable parameters: rank x (rows + columns) for each targeted 2-D linear weight."""
    wanted = lora_targets(target)
    total = 0
    for name, (_dtype, shape) in tensors.items():
        if len(shape) != 2 or not name.endswith(".weight"):
            continue
        module = name[: -len(".weight")].rsplit(".", 1)[-1]
        if wanted is None:
            if any(part in name for part in NOT_LINEAR):
                continue
        elif module not in wanted:
            continue
        total += int(rank) * (shape[0] + shape[1])
    return total


def checkpoint_estimate(tensors, job):
    """The bytes a node needs for the job's checkpoints and final weights, with how they add up.
    ``job``: finetuning_type, lora_rank, lora_target, strategy, world_size, local_ranks (on this node),
    master (this node holds rank 0) and save_total_limit."""
    finetuning_type, strategy, master = job["finetuning_type"], job["strategy"], job["master"]
    params = sum(count(shape) for _dtype, shape in tensors.values())
    model_bytes = sum(count(shape) * DTYPE_BYTES[dtype] for dtype, shape in tensors.values())
    if finetuning_type == "lora":
        trainable = lora_trainable(tensors, job["lora_rank"], job["lora_target"])
        saved_weights = trainable * FP32
    else:
        # full (and freeze, whose trained layers are a part of the model: counted whole, on the safe side)
        trainable = params
        saved_weights = model_bytes
    world_size = max(int(job["world_size"]), 1)
    if strategy == "ddp":
        optimizer = (trainable * ADAM_MOMENTS) if master else 0
    else:
        optimizer = trainable * (FP32 + ADAM_MOMENTS) * int(job["local_ranks"]) // world_size
    per_checkpoint = optimizer + (saved_weights if master else 0)
    kept = max(int(job["save_total_limit"]), 1)
    # One checkpoint more is written before the Trainer removes the oldest; the master keeps the final weights.
    needed = per_checkpoint * (kept + 1) + (saved_weights if master else 0)
    return {
        "params": params,
        "trainable": trainable,
        "per_checkpoint_bytes": per_checkpoint,
        "checkpoints": kept + 1,
        "final_weights_bytes": saved_weights if master else 0,
        "needed_bytes": needed,
    }


def tree_bytes(path):
    """Bytes of the files under ``path`` (0 when it does not exist or is a link); links are not followed."""
    total = 0
    if os.path.islink(path):
        return 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def free_bytes(path):
    """Free bytes for an unprivileged writer on the filesystem that holds ``path`` (or its nearest
    existing parent, for a job folder not made yet)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    stats = os.statvfs(probe)
    return stats.f_bavail * stats.f_frsize


def gb(value):
    return "%.1f GB" % (value / 1e9)


def space_problem(estimate, free, reusable, margin_percent, output_dir):
    """The refusal for a job whose checkpoints do not fit, or None. ``reusable``: bytes the job's
    output already holds (its own checkpoints, rotated out as new ones come)."""
    wanted = estimate["needed_bytes"] * (100 + int(margin_percent)) // 100
    available = free + reusable
    if wanted <= available:
        return None
    return (
        "the job's checkpoints need about %s in %s (%d checkpoints of %s each, %s of final weights, "
        "%d%% margin; %s parameters, %s trained) and the filesystem has %s free%s."
        % (gb(wanted), output_dir, estimate["checkpoints"], gb(estimate["per_checkpoint_bytes"]),
           gb(estimate["final_weights_bytes"]), int(margin_percent), "{:,}".format(estimate["params"]),
           "{:,}".format(estimate["trainable"]), gb(free),
           (" (and %s in the job's own checkpoints)" % gb(reusable)) if reusable else "")
    )  # fmt: skip
