# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Which DeepSpeed ops to pre-build into the wheel, from the job's strategy and settings.

What each path loads, read from DeepSpeed v0.16.9, accelerate and transformers:

- The Trainer's DeepSpeed integration has no optimizer block in our ZeRO JSON, so it hands DeepSpeed
  the Trainer's own (torch) AdamW. With ``offload_optimizer`` on, accelerate swaps it for
  ``DeepSpeedCPUAdam`` (op CPU_ADAM) before ``deepspeed.initialize``; without offload the torch
  optimizer runs on the GPU and DeepSpeed loads no optimizer op. (accelerate 1.11's
  ``map_pytorch_optim_to_deepspeed`` swaps a Trainer ``optim`` of Adagrad for DeepSpeedCPUAdagrad and
  bitsandbytes' 32-bit Lion for DeepSpeedCPULion: such a job adds CPU_ADAGRAD or CPU_LION through
  ``deepspeed_extra_ops``; the Trainer's arguments are not read here.) An optimizer block in the JSON
  (``finetune_deepspeed_extra``) makes DeepSpeed build its own: Adam/AdamW -> FUSED_ADAM (GPU) or
  CPU_ADAM (offloaded), Adagrad -> CPU_ADAGRAD when offloaded, Lamb -> FUSED_LAMB, Lion -> FUSED_LION
  or CPU_LION (``runtime/engine.py: _configure_basic_optimizer``).
- ZeRO-2 and ZeRO-3 themselves load no op, except AIO when a state is offloaded to NVMe
  (``runtime/swap_tensor``) and QUANTIZER for ZeRO++'s quantized weights or gradients
  (``zero/partition_parameters.py``, ``runtime/comm/coalesced_collectives.py``).
- On CPU ranks ``deepspeed.comm`` (``comm/torch.py: build_shm_op``) loads SHM_COMM at start-up; on a
  GPU the CUDA/HIP accelerator has no such builder and loads nothing.
- Plain DDP and FSDP never initialise DeepSpeed: they load no op.

The pre-built set is a floor that does not move with the job (CPU_ADAM and FUSED_ADAM on GPU nodes,
CPU_ADAM and SHM_COMM on CPU nodes), plus what the job's settings add, plus the site's own list. A floor
that followed each job would rebuild the wheel (its key names the op set) whenever a job switches
strategy or offload, and a stack built without a job's variables would leave CPU Adam to a JIT compile
on every rank of the first offloaded job.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

STRATEGIES = ("deepspeed_zero3", "fsdp", "ddp")
DEVICES = ("rocm", "cpu")
RUNBOOK = "docs/runbooks/deepspeed-ops.md"

FLOOR = {
    "rocm": {
        "CPU_ADAM": "DeepSpeedCPUAdam, which accelerate puts in place of the Trainer's AdamW when the "
        "optimizer is offloaded",
        "FUSED_ADAM": "DeepSpeed's Adam on the GPU when the DeepSpeed config names an Adam optimizer",
    },
    "cpu": {
        "CPU_ADAM": "DeepSpeedCPUAdam, the offloaded optimizer",
        "SHM_COMM": "deepspeed.comm loads it on every CPU rank at start-up (a JIT compile per launch without it)",
    },
}

# DeepSpeed config optimizer type (lower case) -> (op when offloaded, op on the device).
_OPTIMIZER_OPS = {
    "adam": ("CPU_ADAM", "FUSED_ADAM"),
    "adamw": ("CPU_ADAM", "FUSED_ADAM"),
    "adagrad": ("CPU_ADAGRAD", None),
    "lamb": ("FUSED_LAMB", "FUSED_LAMB"),
    "lion": ("CPU_LION", "FUSED_LION"),
}
# The builders of DeepSpeed's CPU accelerator (op_builder/cpu): an op outside them cannot be built or
# loaded on a CPU node, whatever the job asks.
CPU_BUILDERS = ("AIO", "CPU_ADAM", "FUSED_ADAM", "SHM_COMM")
# Op names are DeepSpeed's build switches without DS_BUILD_ (async I/O's is DS_BUILD_AIO, op async_io).
_QUANTIZED = ("zero_quantized_weights", "zero_quantized_gradients", "zero_quantized_nontrainable_weights")
_OP_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


class DsOpsError(ValueError):
    """A setting the op decision cannot use; the message names the runbook."""

    def __init__(self, message):
        super().__init__(f"{message}. See {RUNBOOK}")


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _offload_device(zero, name, default="none"):
    """The device a ZeRO section offloads to; ``default`` when the settings do not say."""
    section = zero.get(name)
    if isinstance(section, dict) and section.get("device") is not None:
        return str(section["device"]).lower()
    return default


def job_ops(strategy, device, offload_optimizer=False, deepspeed_extra=None):
    """The ops the job's ranks load beyond the floor, as {op: why}, in the order found."""
    if strategy != "deepspeed_zero3":
        return {}
    extra = deepspeed_extra or {}
    if not isinstance(extra, dict):
        raise DsOpsError(f"the DeepSpeed settings are {extra!r}, not a mapping")
    zero = extra.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise DsOpsError(f"zero_optimization is {zero!r}, not a mapping")
    # The job's switch writes {"device": "cpu"}; finetune_deepspeed_extra is merged over it.
    optimizer_device = _offload_device(zero, "offload_optimizer", "cpu" if _truthy(offload_optimizer) else "none")
    offloaded = optimizer_device in ("cpu", "nvme")
    ops = {}
    if offloaded:
        ops["CPU_ADAM"] = "the optimizer is offloaded (accelerate's DeepSpeedCPUAdam)"
    optimizer = extra.get("optimizer")
    if isinstance(optimizer, dict) and optimizer.get("type"):
        name = str(optimizer["type"]).lower()
        params = optimizer.get("params") if isinstance(optimizer.get("params"), dict) else {}
        if name in ("adam", "adamw") and _truthy(params.get("torch_adam", False)):
            pass  # torch's own Adam: no op
        elif name in _OPTIMIZER_OPS:
            op = _OPTIMIZER_OPS[name][0 if offloaded else 1]
            if op:
                ops.setdefault(op, f"the DeepSpeed config's {optimizer['type']} optimizer")
    if "nvme" in (optimizer_device, _offload_device(zero, "offload_param")):
        ops["AIO"] = "a ZeRO state is offloaded to NVMe (libaio-dev needed to build it)"
    if any(_truthy(zero.get(key, False)) for key in _QUANTIZED):
        ops["QUANTIZER"] = "ZeRO++ quantized weights or gradients"
    if device == "cpu":
        ops = {op: why for op, why in ops.items() if op in CPU_BUILDERS}
    return ops


def _names(value, what):
    names = list(value or [])
    bad = [n for n in names if not isinstance(n, str) or not _OP_NAME.match(n)]
    if bad:
        raise DsOpsError(f"{what} holds {bad}, which are not DeepSpeed op names (DS_BUILD_<NAME> style, e.g. CPU_ADAM)")
    return names


def deepspeed_ops(  # noqa: PLR0913, PLR0917 - one per setting read, positional for the filter
    device, strategy="deepspeed_zero3", offload_optimizer=False, deepspeed_extra=None, build_ops="job",
    extra_ops=None, skip_ops=None,
):  # fmt: skip
    """The DeepSpeed build for a node: ``{"env": DS_BUILD_* switches, "ops": what ds_report must show
    installed, "reasons": {op: why}}``.

    ``build_ops``: ``"job"`` (the floor for the device, what the job's settings load, and ``extra_ops``),
    ``"all"`` (DS_BUILD_OPS=1 minus ``skip_ops``; the job's ops are still required) or a list (exactly
    those). ``device``: ``rocm`` or ``cpu`` (the pytorch role's variant)."""
    if device not in DEVICES:
        raise DsOpsError(f"device '{device}' is neither of {', '.join(DEVICES)}")
    if strategy not in STRATEGIES:
        raise DsOpsError(f"strategy '{strategy}' is none of {', '.join(STRATEGIES)}")
    extra_ops = _names(extra_ops, "deepspeed_extra_ops")
    skip_ops = _names(skip_ops, "deepspeed_skip_ops")
    if isinstance(build_ops, (list, tuple)):
        ops = _names(build_ops, "deepspeed_build_ops")
        reasons = dict.fromkeys(ops, "listed in deepspeed_build_ops")
        return {"env": _env(ops), "ops": ops, "reasons": reasons}
    if build_ops not in ("job", "all"):
        raise DsOpsError(f"deepspeed_build_ops is {build_ops!r}: use job, all or a list of op names")
    reasons = dict(FLOOR[device])
    for op, why in job_ops(strategy, device, offload_optimizer, deepspeed_extra).items():
        reasons.setdefault(op, why)
    for op in extra_ops:
        reasons.setdefault(op, "listed in deepspeed_extra_ops")
    if build_ops == "all":
        skipped = [op for op in reasons if op in skip_ops]
        if skipped:
            raise DsOpsError(
                f"deepspeed_skip_ops leaves out {skipped}, which this node needs; take them out of the list"
            )
        env = {"DS_BUILD_OPS": "1"}
        env.update({f"DS_BUILD_{name}": "0" for name in skip_ops})
        return {"env": env, "ops": sorted(reasons), "reasons": reasons}
    ops = sorted(reasons)
    return {"env": _env(ops), "ops": ops, "reasons": reasons}


def _env(ops):
    env = {"DS_BUILD_OPS": "0"}
    env.update({f"DS_BUILD_{name}": "1" for name in ops})
    return env
