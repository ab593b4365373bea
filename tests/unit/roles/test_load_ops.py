"""The deepspeed role's op loader (roles/deepspeed/files/load_ops.py), run in the pinned training
libraries' venv, where DeepSpeed comes from PyPI without pre-built ops: an op that was not
pre-built is reported and not compiled, and a name DeepSpeed does not know is named."""

import json
import os
import subprocess

import pytest

from tests.unit.conftest import ROOT

SCRIPT = ROOT / "roles" / "deepspeed" / "files" / "load_ops.py"


def run(*ops):
    python = os.environ.get("INSTINCT_TRAIN_PYTHON", "")
    if not python:
        pytest.fail("INSTINCT_TRAIN_PYTHON is not set: run these tests through `make unit` (scripts/test.sh)")
    proc = subprocess.run([python, str(SCRIPT), *ops], capture_output=True, text=True, check=False, timeout=300)
    return proc.returncode, json.loads(proc.stdout.splitlines()[-1])


def test_an_op_that_was_not_pre_built_is_reported_without_a_compile_and_an_unknown_one_is_named():
    rc, problems = run("CPU_ADAM", "NO_SUCH_OP")
    assert rc == 1
    assert problems == [
        "CPU_ADAM: not pre-built in this DeepSpeed (cpu_adam is not in installed_ops)",
        "NO_SUCH_OP: DeepSpeed has no such op",
    ]
