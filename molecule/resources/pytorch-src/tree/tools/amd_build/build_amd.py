"""Stand-in for PyTorch's hipify step (test double, compiles and converts nothing).

PyTorch's tools/amd_build/build_amd.py rewrites the CUDA sources for HIP in place before a ROCm
build. This one only leaves build/hipify-stand-in.json behind, so the wheel (and the tests) can
tell whether the build script ran it, from where, and with which arch list.
"""

import json
import os
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
marker = root / "build" / "hipify-stand-in.json"
marker.parent.mkdir(parents=True, exist_ok=True)
record = {
    "ran": True,
    "cwd": os.getcwd(),
    "python": sys.executable,
    "PYTORCH_ROCM_ARCH": os.environ.get("PYTORCH_ROCM_ARCH"),
}
marker.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
print(f"stand-in hipify: nothing converted, marker written to {marker}")
