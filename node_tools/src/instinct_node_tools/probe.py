# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The one probe of the training venv, read without changing it; prints one JSON document.

``torch``: version, GPU backend (hip/cuda), whether it sees GPUs, how many, the archs it was built
for and where it is installed (or ``error``); ``companions``: torchvision/torchaudio import errors
(None when they import or are left out); ``deepspeed_error``/``llamafactory_error``; ``trainer``:
what ``import llamafactory.train.tuner`` did in a child Python (``rc`` and the output's tail, None when
LLaMA-Factory itself does not import: its trainer pulls in torchaudio, which ``import llamafactory``
does not); and ``distributions``: the installed version and location of torch, its companions, DeepSpeed and
LLaMA-Factory. ``--torch`` prints ``python`` and ``torch`` alone; ``--distributions`` prints only what
is installed (:func:`installed`), importing nothing. Run it from the venv, as the training account.
"""

import importlib.metadata
import json
import platform
import subprocess
import sys
import traceback

# What the trainer imports (LLaMA-Factory 0.9.5's run_exp): its data pipeline imports torchaudio at
# module level. A child process, so that a crash in an extension (SIGSEGV, SIGILL) is an answer too.
TRAINER_IMPORT = "import llamafactory.train.tuner"
TRAINER_TIMEOUT = 300
OUTPUT_TAIL = 4000


def _error():
    return traceback.format_exc().strip().splitlines()[-1][:400]


def _distribution(name):
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return {"version": dist.version, "location": str(dist.locate_file(""))}


def _torch():
    try:
        import torch  # noqa: PLC0415 - a failing import is the answer
    except Exception:
        return {"error": _error()}
    try:
        available = torch.cuda.is_available()
        return {
            "version": torch.__version__,
            "hip": getattr(torch.version, "hip", None),
            "cuda": getattr(torch.version, "cuda", None),
            "available": available,
            "device_count": torch.cuda.device_count() if available else 0,
            "arch_list": torch.cuda.get_arch_list() if available else [],
            "file": torch.__file__,
        }
    except Exception:
        return {"error": _error()}


def _imports(names):
    errors = {}
    for name in names:
        try:
            __import__(name)
            errors[name] = None
        except ModuleNotFoundError:
            errors[name] = None  # left out on purpose is not a fault
        except Exception:
            errors[name] = _error()
    return errors


def trainer_import(timeout=TRAINER_TIMEOUT):
    """``{rc, output}`` of ``python -c "import llamafactory.train.tuner"`` in this venv; ``rc`` None
    when it did not finish in ``timeout`` seconds."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", TRAINER_IMPORT],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"rc": None, "output": f"{TRAINER_IMPORT} did not finish in {timeout} s"}
    return {"rc": done.returncode, "output": (done.stdout + done.stderr)[-OUTPUT_TAIL:]}


def probe():
    """What the venv holds, as a dict."""
    result = {"python": platform.python_version(), "torch": _torch()}
    result["companions"] = _imports(("torchvision", "torchaudio"))
    for name in ("deepspeed", "llamafactory"):
        try:
            __import__(name)
            result[f"{name}_error"] = None
        except Exception:
            result[f"{name}_error"] = _error()
    result["trainer"] = trainer_import() if result["llamafactory_error"] is None else None
    result["distributions"] = {
        name: _distribution(name) for name in ("torch", "torchvision", "torchaudio", "deepspeed", "llamafactory")
    }
    return result


def installed():
    """The torch family (version and location) and LLaMA-Factory's version, without importing them."""
    family = {name: _distribution(name) for name in ("torch", "torchvision", "torchaudio")}
    llamafactory = _distribution("llamafactory")
    return dict(family, llamafactory=llamafactory["version"] if llamafactory else None)


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if "--distributions" in args:
        # What is installed, nothing imported: the llama_factory stage's before/after comparison.
        print(json.dumps(installed()))
    elif "--torch" in args:
        # torch alone, for the pytorch stage, before DeepSpeed and LLaMA-Factory are installed.
        print(json.dumps({"python": platform.python_version(), "torch": _torch()}))
    else:
        print(json.dumps(probe()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
