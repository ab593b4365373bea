"""PEP 517 backend of the stand-in torchaudio tree (instinct.finetune molecule test double).

``pip wheel --no-build-isolation .`` calls it as it would call torchaudio's setup.py, which imports
the torch installed in the build's environment and compiles against it. This one imports that torch
too (a build without torch fails the same way), builds a pure-Python wheel named torchaudio at
BUILD_VERSION whose requirement is ``torch==PYTORCH_VERSION`` (as torchaudio's setup.py writes it),
and records in torchaudio/_stand_in_build.json the torch it was built against and the build
environment. It compiles nothing.
"""

import base64
import hashlib
import json
import os
import pathlib
import zipfile

import torch  # torchaudio's setup.py does the same: no torch, no build

ROOT = pathlib.Path(__file__).resolve().parent
RECORDED_ENV = (
    "PYTORCH_ROCM_ARCH",
    "MAX_JOBS",
    "USE_ROCM",
    "USE_CUDA",
    "ROCM_PATH",
    "BUILD_VERSION",
    "PYTORCH_VERSION",
    "BUILD_SOX",
    "BUILD_CTC_DECODER",
)
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    source_version = (ROOT / "version.txt").read_text().strip()
    version = os.environ.get("BUILD_VERSION") or source_version
    record = {
        "version": version,
        "source_version": source_version,
        "env": {name: os.environ.get(name) for name in RECORDED_ENV},
        # The torch this build compiled against: the stand-in torch's own record of its build.
        "torch_version": torch.__version__,
        "torch_build": getattr(torch, "_stand_in_build", None),
    }
    requirement = "torch==" + os.environ["PYTORCH_VERSION"] if os.environ.get("PYTORCH_VERSION") else "torch"
    dist_info = f"torchaudio-{version}.dist-info"
    files = {
        "torchaudio/__init__.py": (ROOT / "torchaudio" / "__init__.py").read_bytes(),
        "torchaudio/_stand_in_build.json": (json.dumps(record, indent=2, sort_keys=True) + "\n").encode(),
        f"{dist_info}/METADATA": (
            "Metadata-Version: 2.1\nName: torchaudio\n"
            f"Version: {version}\n"
            "Summary: Stand-in for torchaudio from instinct.finetune's molecule tests (not torchaudio)\n"
            f"Requires-Dist: {requirement}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: stand_in_audio_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    lines = [f"{path},{_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{dist_info}/RECORD"] = ("\n".join([*lines, f"{dist_info}/RECORD,,"]) + "\n").encode()
    name = f"torchaudio-{version}-py3-none-any.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return name
