# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Parse the output of DeepSpeed's ``ds_report`` into facts: which ops are installed (pre-built)
and compatible (could be JIT-built), which accelerator DeepSpeed chose, and the versions it saw."""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[(?:9[0-7]|0)m")
_OP = re.compile(r"^(?P<name>[A-Za-z0-9_]+)\s*\.*\s*\[(?P<installed>YES|NO)\]\s*\.*\s*\[(?P<compatible>OKAY|NO)\]\s*$")
_KEY_VALUE = re.compile(r"^(?P<key>[a-z][a-z0-9 ./()_-]*?)\s*\.{3,}\s*(?P<value>.*)$")
# "Setting ds_accelerator to cuda (auto detect)"; newer releases on CPU: "Setting accelerator to CPU."
_ACCELERATOR = re.compile(r"Setting (?:ds_)?accelerator to (?P<name>\w+)")

# "torch hip version" in the environment block is the one sure sign of a ROCm torch; the log line
# naming the accelerator says "cuda" on ROCm too, since DeepSpeed drives HIP through torch.cuda.
_ENV_KEYS = {
    "torch version": "torch_version",
    "torch cuda version": "torch_cuda_version",
    "torch hip version": "torch_hip_version",
    "nvcc version": "nvcc_version",
    "deepspeed wheel compiled w.": "compiled_with",
    "shared memory (/dev/shm) size": "shm_size",
}


class DsReportError(ValueError):
    """ds_report printed something this parser does not understand."""


def _none(value):
    value = value.strip()
    return None if value in ("", "None", "none") else value


def parse_ds_report(text):
    """``ds_report`` stdout (colour codes and warnings included) -> dict of facts."""
    if not isinstance(text, str) or not text.strip():
        raise DsReportError("ds_report printed nothing")
    ops = {}
    env = {}
    accelerator = None
    in_env = False
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).strip()
        found = _ACCELERATOR.search(line)
        if found:
            accelerator = found.group("name").lower()
            continue
        if line.startswith("DeepSpeed general environment info"):
            in_env = True
            continue
        match = _OP.match(line)
        if match and not in_env:
            ops[match.group("name")] = {
                "installed": match.group("installed") == "YES",
                "compatible": match.group("compatible") == "OKAY",
            }
            continue
        if in_env:
            match = _KEY_VALUE.match(line)
            if match:
                env[match.group("key").strip()] = match.group("value").strip()
    if not ops:
        raise DsReportError("no op table found (is this ds_report output?)")
    if "torch version" not in env:
        raise DsReportError("no 'DeepSpeed general environment info' block found")
    facts = {key: _none(env.get(name, "")) for name, key in _ENV_KEYS.items()}
    info = [part.strip() for part in env.get("deepspeed info", "").split(",")]
    facts["deepspeed_version"] = _none(info[0]) if info else None
    facts["accelerator"] = accelerator
    # "torch 0.0" means the ops were not pre-built into the wheel (JIT only).
    compiled = facts["compiled_with"] or ""
    facts["ops_prebuilt"] = bool(compiled) and not compiled.startswith("torch 0.0")
    facts["ops"] = ops
    facts["installed_ops"] = sorted(name for name, op in ops.items() if op["installed"])
    facts["incompatible_ops"] = sorted(name for name, op in ops.items() if not op["compatible"])
    return facts


def ds_op_problems(report, wanted_ops):
    """Which requested ops (DS_BUILD_* names such as ``CPU_ADAM``) the report does not show as installed.

    ds_report names an op by its builder's NAME: mostly the DS_BUILD_ name in lower case, but the
    CPU communication ops are ``deepspeed_shm_comm`` and ``deepspeed_ccl_comm`` (DS_BUILD_SHM_COMM,
    DS_BUILD_CCL_COMM) and async I/O is ``async_io`` (DS_BUILD_AIO)."""
    installed = {name.lower() for name in report.get("installed_ops") or []}
    return [
        op for op in wanted_ops or []
        if not {op.lower(), f"deepspeed_{op.lower()}", _OP_ALIASES.get(op, "")} & installed
    ]  # fmt: skip


# Builders whose NAME is not their switch's: DS_BUILD_AIO builds async_io.
_OP_ALIASES = {"AIO": "async_io"}


_OP_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def ds_build_env(build_ops, skip_ops=None):
    """DeepSpeed's build switches: ``"all"`` -> DS_BUILD_OPS=1 with each of ``skip_ops`` switched
    off; a list -> DS_BUILD_OPS=0 with each listed op switched on. Op names as in DS_BUILD_<NAME>."""

    def checked(names):
        names = list(names or [])
        bad = [n for n in names if not isinstance(n, str) or not _OP_NAME.match(n)]
        if bad:
            raise ValueError(f"{bad} are not DeepSpeed op names (DS_BUILD_<NAME> style, e.g. CPU_ADAM)")
        return names

    if build_ops == "all":
        env = {"DS_BUILD_OPS": "1"}
        env.update({f"DS_BUILD_{name}": "0" for name in checked(skip_ops)})
        return env
    if isinstance(build_ops, str):
        raise ValueError(f"'{build_ops}' is neither 'all' nor a list of op names")
    env = {"DS_BUILD_OPS": "0"}
    env.update({f"DS_BUILD_{name}": "1" for name in checked(build_ops)})
    return env
