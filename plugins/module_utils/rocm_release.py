# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""ROCm release arithmetic: version format, repository folders and the amdgpu driver that matches."""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def normalize_version(version):
    """``"7.1"`` -> ``"7.1.0"``; anything that is not MAJOR.MINOR[.PATCH] raises ValueError."""
    match = _VERSION.match(str(version).strip())
    if not match:
        raise ValueError(f"rocm_version '{version}' is not MAJOR.MINOR.PATCH (for example 7.0.2)")
    major, minor, patch = match.groups()
    return f"{int(major)}.{int(minor)}.{int(patch or 0)}"


def repo_folder(version):
    """AMD's ROCm apt folder drops a trailing ``.0``: 7.1.0 -> ``7.1``, but 7.0.2 stays ``7.0.2``."""
    full = normalize_version(version)
    return full[:-2] if full.endswith(".0") else full


def rocm_release(version, releases):
    """The release entry for ``version`` from the ``releases`` map, with the folders filled in.

    Raises ValueError naming the supported releases when ``version`` is unknown, so that a typo
    or a release this collection has not been taught about stops the play before any change.
    """
    full = normalize_version(version)
    known = {normalize_version(v): dict(entry) for v, entry in releases.items()}
    if full not in known:
        raise ValueError(
            f"rocm_version {full} is not in the supported release map (known: {', '.join(sorted(known))}); "
            "add it to rocm_releases with its amdgpu driver version"
        )
    entry = known[full]
    entry.update({"version": full, "repo_folder": repo_folder(full), "amdgpu_folder": str(entry["amdgpu"])})
    return entry
