# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""What the training venv holds, read without changing it: torch (version, backend, devices,
compiled archs), whether torchvision/torchaudio/deepspeed/llamafactory import, and their errors.
Run with the venv's python; prints one JSON document."""

import json
import platform
import traceback


def _error():
    return traceback.format_exc().strip().splitlines()[-1][:400]


result = {"python": platform.python_version(), "torch": {}, "companions": {}}
try:
    import torch

    available = torch.cuda.is_available()
    result["torch"] = {
        "version": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "available": available,
        "device_count": torch.cuda.device_count() if available else 0,
        "arch_list": torch.cuda.get_arch_list() if available else [],
    }
except Exception:
    result["torch"] = {"error": _error()}
for name in ("torchvision", "torchaudio"):
    try:
        __import__(name)
        result["companions"][name] = None
    except ModuleNotFoundError:
        result["companions"][name] = None  # left out on purpose is not a fault
    except Exception:
        result["companions"][name] = _error()
for name, key in (("deepspeed", "deepspeed_error"), ("llamafactory", "llamafactory_error")):
    try:
        __import__(name)
        result[key] = None
    except Exception:
        result[key] = _error()
print(json.dumps(result))
