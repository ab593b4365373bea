"""PEP 517 backend of the stand-in PyTorch tree (instinct.finetune molecule test double).

``pip wheel --no-build-isolation .`` calls it as it would call PyTorch's setup.py. It builds a
pure-Python wheel named torch at PYTORCH_BUILD_VERSION (as PyTorch's build does) and records in
torch/_stand_in_build.json the build environment it saw, whether hipify ran, which revision of
the submodule was checked out and the version of each ROCm CMake config that LoadHIP.cmake requires
(it refuses to build without one, as CMake does). It compiles nothing.
"""

import base64
import hashlib
import json
import os
import pathlib
import re
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent
# The variables PyTorch's ROCm build reads (and ccache's), recorded as the build saw them.
RECORDED_ENV = (
    "PYTORCH_ROCM_ARCH",
    "MAX_JOBS",
    "USE_ROCM",
    "USE_CUDA",
    "ROCM_PATH",
    "PYTORCH_BUILD_VERSION",
    "CMAKE_C_COMPILER_LAUNCHER",
    "CMAKE_CXX_COMPILER_LAUNCHER",
    "CMAKE_HIP_COMPILER_LAUNCHER",
    "CCACHE_DIR",
)
# The ROCm components PyTorch's cmake/public/LoadHIP.cmake finds in config mode and requires (those
# the simulated AMD repository ships a config for): a build without one stops, as CMake does.
LOADHIP_REQUIRED = (
    "rocrand",
    "hiprand",
    "rocblas",
    "hipblas",
    "miopen",
    "hipfft",
    "hipsparse",
    "rocprim",
    "hipcub",
    "rocthrust",
    "hipsolver",
    "rocsolver",
    "hipblaslt",
)
HIPIFY_MARKER = ROOT / "build" / "hipify-stand-in.json"
SUBMODULE_FILE = ROOT / "third_party" / "stand_in" / "REVISION"
# Fixed zip timestamps: the same inputs give the same wheel.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _rocm_packages():
    """{name: version} of each LoadHIP component's config under ROCM_PATH, or the CMake error."""
    rocm = pathlib.Path(os.environ.get("ROCM_PATH") or "/opt/rocm")
    found = {}
    for name in LOADHIP_REQUIRED:
        config = rocm / "lib" / "cmake" / name / f"{name}-config.cmake"
        if not config.is_file():
            # What CMake says, in short, when find_package(NAME REQUIRED) finds no config.
            raise RuntimeError(
                f"CMake Error at cmake/public/LoadHIP.cmake (find_package): Could not find a package "
                f'configuration file provided by "{name}" with any of the following names: {name}Config.cmake, '
                f"{name}-config.cmake (looked in {rocm}/lib/cmake/{name})"
            )
        match = re.search(r'set\(\w+_VERSION "([^"]+)"\)', config.read_text())
        found[name] = match.group(1) if match else None
    return found


def _record():
    rocm_packages = _rocm_packages()
    if not SUBMODULE_FILE.is_file():
        # What PyTorch's setup.py says, in short, when the submodules were not checked out.
        raise RuntimeError("third_party/stand_in is empty: clone with --recurse-submodules")
    source_version = (ROOT / "version.txt").read_text().strip()
    hipify = json.loads(HIPIFY_MARKER.read_text()) if HIPIFY_MARKER.is_file() else None
    return {
        "version": os.environ.get("PYTORCH_BUILD_VERSION") or source_version,
        "source_version": source_version,
        "env": {name: os.environ.get(name) for name in RECORDED_ENV},
        "hipify_ran": hipify is not None,
        "hipify": hipify,
        "submodule_revision": SUBMODULE_FILE.read_text().strip(),
        "rocm_cmake_packages": rocm_packages,
    }


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    record = _record()
    version = record["version"]
    dist_info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": (ROOT / "torch" / "__init__.py").read_bytes(),
        "torch/_stand_in_build.json": (json.dumps(record, indent=2, sort_keys=True) + "\n").encode(),
        f"{dist_info}/METADATA": (
            "Metadata-Version: 2.1\nName: torch\n"
            f"Version: {version}\n"
            "Summary: Stand-in for PyTorch from instinct.finetune's molecule tests (not PyTorch)\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: stand_in_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    lines = [f"{path},{_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{dist_info}/RECORD"] = ("\n".join([*lines, f"{dist_info}/RECORD,,"]) + "\n").encode()
    name = f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return name
