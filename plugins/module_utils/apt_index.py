# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Decide whether apt's package index can be trusted (pure functions).

Ansible's apt module judges the index by its age alone (the mtime of
``/var/lib/apt/periodic/update-success-stamp``, else of ``/var/lib/apt/lists``). A freshly built
image or a minimal installation has an empty lists folder with a recent mtime: judged by age it is
fresh, and every install then fails with "No package matching". These functions look at what the
index holds instead.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# apt names its index files <uri>_dists_<suite>_<component>_binary-<arch>_Packages, stored
# uncompressed or, with Acquire::GzipIndexes, compressed.
_PACKAGES_INDEX = re.compile(r"_Packages(\.(gz|xz|lz4|zst|bz2|lzma))?$")
_POLICY_HEAD = re.compile(r"^(\S+):$")
_POLICY_FIELD = re.compile(r"^\s+(Installed|Candidate|Package pin):\s*(.*)$")
# A version line of the table: " *** 1.2-3 500" (installed) or "     1.2-3 500"; apt 2.x adds
# " (phased 20%)" to a version that Ubuntu rolls out in phases.
_POLICY_VERSION = re.compile(r"^\s(?:\*\*\*|   )\s(\S+)\s+-?\d+(?:\s+\(phased \d+%\))?$")
# A source line under a version: "        500 http://... jammy/main amd64 Packages".
_POLICY_SOURCE = re.compile(r"^\s+-?\d+\s+(\S+)")
_NONE = "(none)"
_DPKG_STATUS = "/var/lib/dpkg/status"


def has_package_lists(names):
    """True when the lists folder (``names``: its entries) holds at least one Packages index."""
    return any(_PACKAGES_INDEX.search(name) for name in names)


def policy_versions(text):
    """Parse ``apt-cache policy NAME...`` into ``{name: {installed, candidate, versions}}``.

    ``versions`` maps each version of the table to the sources offering it; dpkg's status file is
    not a source (it only says the version is installed). A name apt does not know is absent.
    """
    packages = {}
    current = None
    version = None
    for line in text.splitlines():
        head = _POLICY_HEAD.match(line)
        if head:
            current = {"installed": None, "candidate": None, "versions": {}}
            packages[head.group(1)] = current
            version = None
            continue
        if current is None:
            continue
        field = _POLICY_FIELD.match(line)
        if field:
            value = field.group(2).strip()
            key = field.group(1).lower().replace("package pin", "pin")
            current[key] = None if value == _NONE else value
            continue
        ver = _POLICY_VERSION.match(line)
        if ver:
            version = ver.group(1)
            current["versions"].setdefault(version, [])
            continue
        src = _POLICY_SOURCE.match(line)
        if src and version is not None and src.group(1) != _DPKG_STATUS:
            current["versions"][version].append(src.group(1))
    return packages


def _split_spec(spec):
    """``"name=1.2"`` -> ``("name", "1.2")``; ``"name"`` -> ``("name", None)``."""
    name, _sep, version = spec.partition("=")
    return name.strip(), (version.strip() or None)


def unknown_packages(specs, policy):
    """The specs of ``specs`` that apt could not install from the index that ``policy`` describes.

    A name is known when it is installed, has a candidate, or any source offers a version (a pin can
    leave the candidate at ``(none)`` while an exact version still installs). With ``name=version``
    that version must be installed or offered. Trailing ``*`` globs in a version are honoured.
    """
    unknown = []
    for spec in specs:
        name, version = _split_spec(spec)
        entry = policy.get(name)
        if entry is None:
            unknown.append(spec)
            continue
        offered = [v for v, sources in entry["versions"].items() if sources]
        if version is None:
            if not (entry["installed"] or entry["candidate"] or offered):
                unknown.append(spec)
            continue
        wanted = offered + ([entry["installed"]] if entry["installed"] else [])
        ok = any(v.startswith(version[:-1]) for v in wanted) if version.endswith("*") else version in wanted
        if not ok:
            unknown.append(spec)
    return unknown


def missing_packages(specs, policy):
    """The specs of ``specs`` that are not installed as asked: the name not installed at all, or with
    ``name=version`` another version installed (a trailing ``*`` matches as apt does). An install of
    the others would change nothing, as ``apt state=present`` leaves an installed package alone."""
    missing = []
    for spec in specs:
        name, version = _split_spec(spec)
        installed = (policy.get(name) or {}).get("installed")
        as_asked = installed is not None and (
            version is None or (installed.startswith(version[:-1]) if version.endswith("*") else installed == version)
        )
        if not as_asked:
            missing.append(spec)
    return missing


def update_errors(stdout, stderr):
    """What apt-get update said went wrong: its E: lines, with the W: and Err: lines that name the
    cause (a NO_PUBKEY or BADSIG in a "W: GPG error", a 404 in an "Err:" line)."""
    lines = (stderr or "").splitlines() + (stdout or "").splitlines()
    errors = [line.strip() for line in lines if line.startswith("E:")]
    causes = [line.strip() for line in lines if line.startswith(("W:", "Err:"))]
    return errors, causes


def refresh_reason(  # noqa: PLR0911, PLR0913, PLR0917 - one reason per case, in the order they weigh
    has_lists, age_seconds, valid_seconds, force=False, unknown=(), nothing_to_install=False
):
    """Why the index must be refreshed now, or None when it can be trusted.

    ``age_seconds`` is None when apt never recorded an update. An index without any Packages list
    is never trusted, whatever its age says. With ``nothing_to_install`` (every package the install
    names is already installed as asked) the install reads no list, so none is refreshed for it,
    however old or empty: a re-run of a converged node does not update apt on every run.
    """
    if force:
        return "a package source changed"
    if nothing_to_install:
        return None
    if not has_lists:
        return "the package lists are empty"
    if age_seconds is None:
        return "the package lists were never updated"
    if age_seconds > valid_seconds:
        return f"the package lists are {int(age_seconds)} s old (more than {int(valid_seconds)} s)"
    if unknown:
        return "apt does not know " + ", ".join(unknown)
    return None
