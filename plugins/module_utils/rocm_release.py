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
            "add it to instinct_rocm_releases with its amdgpu driver version"
        )
    entry = known[full]
    amdgpu = entry.get("amdgpu")
    # A map from the inventory: YAML reads an unquoted 30.20 as the number 30.2, a folder AMD does not have.
    if not isinstance(amdgpu, str) or not amdgpu.strip():
        raise ValueError(
            f"instinct_rocm_releases entry {full} has amdgpu {amdgpu!r}; it must be the driver release as a quoted "
            'string (amdgpu: "30.20"): YAML reads an unquoted 30.20 as the number 30.2'
        )
    entry.update({"version": full, "repo_folder": repo_folder(full), "amdgpu_folder": amdgpu.strip()})
    return entry


# ------------------------------------------------------------------ what a node already has installed
# The release a package belongs to is read from its version, never compared as a dpkg version: AMD's
# 6.4 driver carries an epoch (1:6.12.12.60404-...) that no longer orders it below the 7.x drivers'
# own numbering, so dpkg's order says nothing about which release is newer.

_RELEASE_PACKAGES = ("rocm-core", "amdgpu-dkms")


def parse_dpkg_query(text):
    """``{package: version}`` of the installed packages in ``dpkg-query -W -f
    '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'`` output: those whose files are on the node
    (status ``i``, or unpacked and not configured yet); one removed with its configuration kept (``rc``)
    is left out."""
    found = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[1].strip():
            continue
        status = parts[2].strip()
        if len(status) >= 2 and status[1] in "iUHFWt":
            found[parts[0].strip()] = parts[1].strip()
    return found


def _upstream(version):
    text = str(version or "").strip()
    text = text.split(":", 1)[1] if ":" in text.split("-", 1)[0] else text
    return text.split("-", 1)[0]


def rocm_core_release(version):
    """``7.1.0.70100-20~22.04`` (rocm-core's version) -> ``7.1.0``; None when it is not AMD's form
    (MAJOR.MINOR.PATCH.<release number>, the number being MAJOR*10000 + MINOR*100 + PATCH)."""
    parts = _upstream(version).split(".")
    if len(parts) < 4 or not all(part.isdigit() for part in parts[:4]):
        return None
    major, minor, patch, number = (int(part) for part in parts[:4])
    if number != major * 10000 + minor * 100 + patch:
        return None
    return f"{major}.{minor}.{patch}"


def amdgpu_release(version):
    """The amdgpu driver release in amdgpu-dkms's version, as the release map writes it.

    Since ROCm 7.0 the fourth field is the driver's own number: ``1:6.16.6.30200000-2238411.22.04``
    -> ``30.20``, ``...30100200-...`` -> ``30.10.2`` (two digits each for major, minor, patch and a
    hotfix, trailing zeros left out). Before, it was ROCm's: ``1:6.12.12.60404-...`` -> ``6.4.4``,
    which orders below every 30.x. None when the version is not in either form.
    """
    parts = _upstream(version).split(".")
    if len(parts) < 4 or not parts[3].isdigit():
        return None
    number = parts[3]
    if len(number) == 8:
        fields = [int(number[i : i + 2]) for i in range(0, 8, 2)]
        while len(fields) > 2 and fields[-1] == 0:
            fields.pop()
        return ".".join(str(field) for field in fields)
    if len(number) in (5, 6):
        value = int(number)
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return None


def release_key(release):
    """``"30.10.2"`` -> ``(30, 10, 2)``, for ordering releases (``30.10`` == ``30.10.0``)."""
    fields = [int(part) for part in str(release).split(".")]
    while len(fields) > 1 and fields[-1] == 0:
        fields.pop()
    return tuple(fields)


def installed_releases(installed):
    """What ``installed`` (``{package: version}``) says: ``{rocm, rocm_package, amdgpu, amdgpu_package}``,
    a release None when its package is absent or its version unreadable."""
    rocm_package = installed.get("rocm-core")
    amdgpu_package = installed.get("amdgpu-dkms")
    return {
        "rocm": rocm_core_release(rocm_package) if rocm_package else None,
        "rocm_package": rocm_package,
        "amdgpu": amdgpu_release(amdgpu_package) if amdgpu_package else None,
        "amdgpu_package": amdgpu_package,
    }


def downgrade_problem(installed, target, check_driver=True):
    """Why installing ``target`` (a ``rocm_release`` entry) would take ``installed`` (``{package:
    version}``) back to an older ROCm or amdgpu, or ``""``. ``check_driver``: the role installs the
    driver too (rocm_install_driver)."""
    have = installed_releases(installed)
    older = []
    if have["rocm"] and release_key(have["rocm"]) > release_key(target["version"]):
        older.append(f"ROCm {have['rocm']} (rocm-core {have['rocm_package']}) is installed")
    if check_driver and have["amdgpu"] and release_key(have["amdgpu"]) > release_key(target["amdgpu_folder"]):
        older.append(f"amdgpu {have['amdgpu']} (amdgpu-dkms {have['amdgpu_package']}) is installed")
    if not older:
        return ""
    return (
        f"{' and '.join(older)}, newer than the pinned ROCm {target['version']} with amdgpu {target['amdgpu_folder']} "
        f"(rocm_version); installing would downgrade it. Nothing was changed. Either keep what is installed: "
        f"rocm_manage: verify (checks it against instinct_rocm_releases and changes nothing), or rocm_version: "
        f"{have['rocm'] or target['version']} if instinct_rocm_releases lists it; or downgrade on purpose: "
        "rocm_allow_downgrade: true"
    )


def existing_release(installed, releases, check_driver=True):
    """The release entry (as ``rocm_release``) of the ROCm that ``installed`` (``{package: version}``)
    holds, for a node whose ROCm is used as it is (rocm_manage: verify). Raises ValueError with the
    reason and the fix when no ROCm is installed, the release is not in ``releases``, or (with
    ``check_driver``) amdgpu-dkms is missing or is not the release's driver in the map."""
    have = installed_releases(installed)
    if not have["rocm_package"]:
        raise ValueError(
            "rocm_manage is verify but no ROCm is installed (no rocm-core package): install it with "
            "rocm_manage: install, or the way AMD documents, first"
        )
    if not have["rocm"]:
        raise ValueError(
            f"rocm-core {have['rocm_package']} is installed, a version that does not name a ROCm release the "
            "way AMD's packages do (MAJOR.MINOR.PATCH.<number>-<build>): this role cannot verify it; use "
            "rocm_manage: install to install AMD's packages"
        )
    try:
        entry = rocm_release(have["rocm"], releases)
    except ValueError as err:
        if "not in the supported release map" not in str(err):
            raise
        raise ValueError(
            f"ROCm {have['rocm']} is installed (rocm-core {have['rocm_package']}), which is not in the supported "
            f"release map ({err}); add it to instinct_rocm_releases in the inventory with its amdgpu release, or "
            "install a supported release with rocm_manage: install and rocm_version"
        ) from None
    if not check_driver:
        return entry
    if not have["amdgpu_package"]:
        raise ValueError(
            f"ROCm {have['rocm']} is installed but amdgpu-dkms is not: set rocm_install_driver: false when the "
            "node's amdgpu comes from elsewhere (its image, the kernel), or install AMD's driver"
        )
    if have["amdgpu"] is None or release_key(have["amdgpu"]) != release_key(entry["amdgpu_folder"]):
        raise ValueError(
            f"amdgpu {have['amdgpu'] or 'of an unknown release'} is installed (amdgpu-dkms {have['amdgpu_package']}) "
            f"but the release map pairs ROCm {have['rocm']} with amdgpu {entry['amdgpu_folder']}: install that "
            f"driver, or, where AMD supports the pair, set instinct_rocm_releases['{have['rocm']}'].amdgpu to "
            f"{have['amdgpu'] or 'its release'} in the inventory"
        )
    return entry
