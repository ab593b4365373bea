# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""What a PyTorch source build needs from AMD's apt repository (pure data and functions).

PyTorch's ``cmake/public/LoadHIP.cmake`` (v2.10.0 and the revisions around it) finds each ROCm
component in CMake config mode under ``ROCM_PATH``; every one marked REQUIRED below stops CMake
when its development package is missing. MIOpen's is the one ``rocm-hip-sdk`` does not bring:
``miopen-hip-dev`` comes with ``rocm-ml-sdk``.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

# CMake package (as LoadHIP.cmake names it) -> (AMD apt package that ships its config, required).
# "required" is LoadHIP.cmake's REQUIRED; the optional ones are installed too, because PyTorch's
# build silently leaves the feature out without them (RCCL: no distributed GPU training at all).
LOADHIP_PACKAGES = {
    "hip": ("hip-dev", True),
    "hiprtc": ("hip-dev", True),
    "amd_comgr": ("comgr", True),
    "hsa-runtime64": ("hsa-rocr-dev", True),
    "rocrand": ("rocrand-dev", True),
    "hiprand": ("hiprand-dev", True),
    "rocblas": ("rocblas-dev", True),
    "hipblas": ("hipblas-dev", True),
    "hipblaslt": ("hipblaslt-dev", True),
    "miopen": ("miopen-hip-dev", True),
    "hipfft": ("hipfft-dev", True),
    "hipsparse": ("hipsparse-dev", True),
    "rocprim": ("rocprim-dev", True),
    "hipcub": ("hipcub-dev", True),
    "rocthrust": ("rocthrust-dev", True),
    "hipsolver": ("hipsolver-dev", True),
    "rocsolver": ("rocsolver-dev", True),
    "rccl": ("rccl-dev", False),
    "hipsparselt": ("hipsparselt-dev", False),
    # find_library(roctx64): "roctx is part of roctracer"; linked into libtorch_hip when found.
    "roctx64": ("roctracer-dev", False),
}

# AMD's meta packages that bring the above with "=" dependencies on one release:
#   rocm-ml-sdk          -> rocm-hip-sdk, miopen-hip-dev (the ML libraries' development files)
#   rocm-hip-runtime-dev -> hip-dev, hipcc, hsa-rocr-dev, comgr; named on its own because ROCm
#                           7.1.0's rocm-hip-sdk lost its dependency on it (ROCm/ROCm#5610)
META_PACKAGES = ("rocm-ml-sdk", "rocm-hip-runtime-dev")

# The packages whose files come with a meta package above, so that the explicit list below names
# only what LoadHIP.cmake finds and a meta package cannot provide from another release.
_COMES_WITH_RUNTIME_DEV = ("hip-dev", "comgr", "hsa-rocr-dev")


def source_build_packages(extra=None):
    """The AMD apt packages a PyTorch ROCm source build installs, in install order.

    The meta packages first, then every development package LoadHIP.cmake finds (so that a meta
    package whose dependencies change between releases fails at ``apt install`` naming the package,
    not hours later in CMake), then ``extra`` (the site's additions); each name once.
    """
    names = list(META_PACKAGES)
    for deb, _required in LOADHIP_PACKAGES.values():
        if deb not in _COMES_WITH_RUNTIME_DEV:
            names.append(deb)
    names.extend(extra or [])
    seen = set()
    ordered = []
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a package name must be a non-empty string, got {name!r}")
        if name not in seen:
            seen.add(name)
            ordered.append(name)
    return ordered


# <upstream>.<REL>-<BUILD>~<distro>: 7.0.2.70002-56~22.04, 3.5.0.70002-56~22.04
_RELEASE_SUFFIX = re.compile(r"(\.\d{5,}-[0-9A-Za-z.+~]+)$")


def release_suffix(rocm_core_version):
    """``.70002-56~22.04`` from rocm-core's version: the part every package of that release shares."""
    match = _RELEASE_SUFFIX.search((rocm_core_version or "").strip())
    if not match:
        raise ValueError(
            f"rocm-core version {rocm_core_version!r} is not AMD's <upstream>.<release>-<build>~<distro> "
            "(is the rocm role's ROCm installed?)"
        )
    return match.group(1)


def release_pins(packages, madison, rocm_core_version):
    """``name=version`` for each package, at the version of the installed ROCm release.

    ``madison`` is ``apt-cache madison PACKAGES`` output. The release is read from the installed
    rocm-core, not from another role's variables: the build must link against the ROCm that
    ``/opt/rocm`` is. Raises ValueError naming every package that release does not offer.
    """
    suffix = release_suffix(rocm_core_version)
    found = {}
    for line in (madison or "").splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) != 3 or not parts[2].endswith("Packages"):
            continue
        name, version = parts[0], parts[1]
        if version.endswith(suffix) and name not in found:
            found[name] = version
    missing = [name for name in packages if name not in found]
    if missing:
        raise ValueError(
            f"the apt sources offer no {', '.join(missing)} of the installed ROCm release (rocm-core "
            f"{rocm_core_version}, versions ending {suffix}); see docs/runbooks/wheel-build-failed.md"
        )
    return [f"{name}={found[name]}" for name in packages]
