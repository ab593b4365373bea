# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""One release map from the node's ROCm to the PyTorch wheels built for it, and the check that the
installed torch was built for the ROCm in /opt/rocm.

PyTorch publishes its ROCm builds on one index per ROCm minor release
(``https://download.pytorch.org/whl/rocm7.1``), with the local version label ``+rocm7.1``, and builds
each torch minor release for two ROCm minors only. The map of which torch minor is on which index
(``pytorch_rocm_wheels`` in roles/pytorch/vars/main.yml, with its sources) is data; this module
derives the index and the label from a ROCm release and refuses a torch the index does not have.
"""

from __future__ import absolute_import, division, print_function

import re

from ansible_collections.instinct.finetune.plugins.module_utils.rocm_release import normalize_version

__metaclass__ = type

WHEEL_INDEX_BASE = "https://download.pytorch.org/whl"
RUNBOOK = "torch-rocm-mismatch.md"

_TORCH = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?(?:[a-z]+\d*)?(?:\+[A-Za-z0-9.]+)?$")
_HIP = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?(?:-[0-9A-Za-z]+)?$")


def rocm_minor(version):
    """``"7.1.1"`` -> ``"7.1"``; a malformed ROCm version raises ValueError."""
    major, minor, _patch = normalize_version(version).split(".")
    return f"{major}.{minor}"


def torch_minor(version):
    """``"2.10.0"`` (or ``2.10.0+rocm7.0``) -> ``"2.10"``; anything else raises ValueError."""
    match = _TORCH.match(str(version).strip())
    if not match:
        raise ValueError(f"pytorch_version '{version}' is not a torch release such as 2.10.0")
    return f"{int(match.group(1))}.{int(match.group(2))}"


def hip_minor(hip_version):
    """torch.version.hip (``"7.0.51831-a3e329ad8"``) -> ``"7.0"``, or None when it is unset or unreadable."""
    match = _HIP.match(str(hip_version or "").strip())
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def _published(builds, minor):
    """The ROCm minors (``["7.0", "7.1"]``) the map says the index has for a torch minor."""
    known = {torch_minor(k): [str(v) for v in values] for k, values in (builds or {}).items()}
    return known.get(minor), sorted(known, key=lambda v: tuple(int(p) for p in v.split(".")))


def rocm_release_source(record_version, rocm_version):
    """Which ROCm release the node has: ``(version, source)``. The rocm stage's record comes first (what
    was installed on this node, also when the pytorch stage runs alone), then the rocm_version variable
    (a node the rocm stage has not recorded yet: a check run, or a ROCm installed otherwise); ``(None,
    "none")`` when neither says."""
    if str(record_version or "").strip():
        return normalize_version(record_version), "record"
    if str(rocm_version or "").strip():
        return normalize_version(rocm_version), "rocm_version"
    return None, "none"


def torch_wheel(rocm_version, torch_version, builds, index_base=WHEEL_INDEX_BASE):
    """The ROCm wheel of ``torch_version`` for ``rocm_version``: a dict with ``index_url``,
    ``local_version`` (``rocm7.1``), ``rocm_minor`` and ``published`` (the ROCm indexes that have this
    torch minor). Raises ValueError with the fix when the map does not know the torch minor or the
    index of this ROCm has no build of it."""
    rocm = rocm_minor(rocm_version)
    torch = torch_minor(torch_version)
    published, known = _published(builds, torch)
    label = f"rocm{rocm}"
    if published is None:
        raise ValueError(
            f"torch {torch_version} is not in the ROCm wheel map (known torch releases: {', '.join(known)}); "
            f"add its ROCm indexes to pytorch_rocm_wheels, or set pytorch_index_url and pytorch_local_version "
            f"to the index and label that have it"
        )
    if rocm not in published:
        others = [v for v in known if rocm in _published(builds, v)[0]]
        raise ValueError(
            f"PyTorch publishes no torch {torch_version} for ROCm {rocm} ({index_base}/{label} has none; torch "
            f"{torch} is built for {', '.join('ROCm ' + r for r in published)}); set pytorch_version to a torch "
            f"built for ROCm {rocm} ({', '.join(others) or 'none in the map'}) or rocm_version to a "
            f"{' or '.join(r + '.x' for r in published)} release"
        )
    return {
        "index_url": f"{index_base.rstrip('/')}/{label}",
        "local_version": label,
        "rocm_minor": rocm,
        "published": [f"rocm{r}" for r in published],
    }


def hip_problem(hip_version, rocm_version, torch_version="", index_base=WHEEL_INDEX_BASE):
    """What is wrong when the installed torch's HIP (``torch.version.hip``) is of another ROCm minor
    release than the ROCm in /opt/rocm, with the fix; an empty string when they agree or when torch is
    no ROCm build (that is :func:`pystack.torch_problems`' to say)."""
    hip = hip_minor(hip_version)
    if hip is None or not str(rocm_version or "").strip():
        return ""
    rocm = rocm_minor(rocm_version)
    if hip == rocm:
        return ""
    which = f"torch {torch_version}" if torch_version else "torch"
    return (
        f"{which} was built for ROCm {hip} (torch.version.hip {hip_version}) but /opt/rocm "
        f"is ROCm {normalize_version(rocm_version)}: DeepSpeed's ops and every extension compile against "
        f"/opt/rocm and then load beside torch's own ROCm {hip} libraries. Install the torch of "
        f"{index_base.rstrip('/')}/rocm{rocm} (leave pytorch_index_url and pytorch_local_version empty so that "
        f"they follow the ROCm release, or set them to that index and rocm{rocm}), or set rocm_version to a "
        f"{hip}.x release and run the rocm stage again"
    )


def choose_wheel(record_version, rocm_version, torch_version, builds, overrides=None):
    """The ROCm wheel a node installs, as the pytorch role uses it: the node's ROCm release (the rocm
    stage's ``record_version`` first, then ``rocm_version``), the index and the label derived from the map,
    or the operator's ``overrides`` where set: ``index_url`` (``none``: no index, only the find-links
    folders), ``local_version`` and ``index_base``. A label set by hand is taken as it is; a derived one
    must be on the map.

    Returns a dict with ``rocm_version``, ``rocm_version_source`` (``record``, ``rocm_version`` or
    ``none``), ``index_url``, ``local_version``, ``published``, ``problem`` (None, or why no wheel can be
    chosen, with the fix) and ``note`` (None, or a word about a record and a variable that disagree)."""
    overrides = overrides or {}
    index_url = str(overrides.get("index_url") or "").strip()
    local_version = str(overrides.get("local_version") or "").strip()
    index_base = str(overrides.get("index_base") or WHEEL_INDEX_BASE)
    result = {"index_url": "", "local_version": "", "published": [], "problem": None, "note": None}
    try:
        version, source = rocm_release_source(record_version, rocm_version)
    except ValueError as err:
        return dict(result, rocm_version=None, rocm_version_source="none", problem=str(err))
    result.update(rocm_version=version, rocm_version_source=source)
    if source == "record" and str(rocm_version or "").strip():
        try:
            wanted = normalize_version(rocm_version)
        except ValueError:
            wanted = str(rocm_version)
        if wanted != version:
            result["note"] = (
                f"rocm_version is {wanted} but the rocm stage installed ROCm {version} on this node: torch "
                f"follows the installed release; run the rocm stage (playbooks/provision.yml) to change it"
            )
    if local_version:
        result["local_version"] = local_version
        if index_url:
            result["index_url"] = "" if index_url == "none" else index_url
        elif version:
            result["index_url"] = f"{index_base.rstrip('/')}/rocm{rocm_minor(version)}"
        return result
    if version is None:
        result["problem"] = (
            "no ROCm release is known for this node: the rocm stage has left no record and rocm_version is not "
            "set. Run the rocm stage first (playbooks/provision.yml), set rocm_version to the ROCm in /opt/rocm, "
            "or set pytorch_local_version (and pytorch_index_url) to the wheel to install"
        )
        return result
    try:
        wheel = torch_wheel(version, torch_version, builds, index_base)
    except ValueError as err:
        result["problem"] = str(err)
        return result
    result.update(local_version=wheel["local_version"], published=wheel["published"], index_url=wheel["index_url"])
    if index_url:
        result["index_url"] = "" if index_url == "none" else index_url
    return result
