"""The deepspeed role's build script (templates/build-deepspeed.sh.j2), rendered as the role renders it
and run with a stand-in for the venv's python that records the environment pip would build in: on a
GPU node the ops are compiled for the cluster's arch set only (PYTORCH_ROCM_ARCH), on a CPU node for
no GPU arch."""

import os
import shlex
import subprocess

import jinja2
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils.build import pytorch_rocm_arch
from ansible_collections.instinct.finetune.plugins.module_utils.ds_ops import deepspeed_ops
from tests.unit.conftest import ROOT

ROLE = ROOT / "roles" / "deepspeed"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def build_environments(tmp_path, variant, gfx_archs):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    python = venv / "bin" / "python"
    # Each call: its arguments, then the build variables of its environment.
    python.write_text(
        "#!/bin/sh\n"
        f'echo "CALL $*" >> {calls}\n'
        f"env | grep -E '^(PYTORCH_ROCM_ARCH|ROCM_PATH|DS_BUILD_[A-Z_]+)=' | sort >> {calls}\n"
    )
    python.chmod(0o755)
    # The role's defaults for a default job (deepspeed_zero3, optimizer not offloaded).
    plan = deepspeed_ops(
        variant, "deepspeed_zero3", False, {}, DEFAULTS["deepspeed_build_ops"], DEFAULTS["deepspeed_extra_ops"],
        DEFAULTS["deepspeed_skip_ops"],
    )  # fmt: skip
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)  # noqa: S701 - a shell script
    env.filters["quote"] = lambda value: shlex.quote(str(value))
    text = env.from_string((ROLE / "templates" / "build-deepspeed.sh.j2").read_text()).render(
        ansible_managed="managed",
        deepspeed_version="0.16.9",
        pytorch_variant=variant,
        deepspeed_ops_env=plan["env"],
        deepspeed_max_jobs=4,
        deepspeed_rocm_arch="" if variant == "cpu" else pytorch_rocm_arch(gfx_archs),
        deepspeed_rocm_path=str(tmp_path / "rocm"),
        instinct_venv=str(venv),
    )
    script = tmp_path / "build.sh"
    script.write_text(text)
    environ = {key: value for key, value in os.environ.items() if key != "PYTORCH_ROCM_ARCH"}
    subprocess.run(["bash", str(script)], env=dict(environ, WHEEL_BUILD_OUT=str(tmp_path)), check=True)
    wheel_call = calls.read_text().split("CALL ")[-1].splitlines()
    assert wheel_call[0].startswith("-m pip wheel --no-build-isolation --no-deps --no-binary deepspeed")
    return dict(line.split("=", 1) for line in wheel_call[1:])


def test_a_gpu_nodes_ops_are_built_for_its_arch_set_only(tmp_path):
    built = build_environments(tmp_path, "rocm", ["gfx942:sramecc+:xnack-"])
    assert built["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert built["ROCM_PATH"] == str(tmp_path / "rocm")
    # Only the ops the job loads are compiled; any other is left to a JIT compile at first use.
    assert {k: v for k, v in built.items() if k.startswith("DS_BUILD_")} == {
        "DS_BUILD_OPS": "0",
        "DS_BUILD_CPU_ADAM": "1",
        "DS_BUILD_FUSED_ADAM": "1",
    }


def test_two_arch_sets_of_a_cluster_each_build_for_their_own(tmp_path):
    assert build_environments(tmp_path, "rocm", ["gfx942", "gfx90a"])["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx942"


def test_a_cpu_node_builds_for_no_gpu_arch(tmp_path):
    built = build_environments(tmp_path, "cpu", [])
    assert "PYTORCH_ROCM_ARCH" not in built and "ROCM_PATH" not in built
    assert built["DS_BUILD_OPS"] == "0"
    assert built["DS_BUILD_CPU_ADAM"] == "1"
    assert built["DS_BUILD_SHM_COMM"] == "1"
