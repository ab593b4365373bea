# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Read ``apt-cache madison`` output (pure functions)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def madison_versions(text, source_prefix):
    """``{package: version}`` for the versions that ``source_prefix`` (a repository URL) offers.

    madison lists one ``name | version | source suite/component arch Packages`` line per version
    and source, newest first; the first one from the wanted repository wins.
    """
    prefix = source_prefix.rstrip("/")
    found = {}
    for line in text.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) != 3 or not parts[2].endswith("Packages"):
            continue
        name, version, source = parts
        url = source.split()[0].rstrip("/")
        if url == prefix and name not in found:
            found[name] = version
    return found


def pinned_specs(packages, versions):
    """``["rocminfo=1.0.0.70002-56~22.04", ...]``; raises ValueError listing packages with no version."""
    missing = [name for name in packages if name not in versions]
    if missing:
        raise ValueError("not offered by the repository: " + ", ".join(missing))
    return [f"{name}={versions[name]}" for name in packages]
