# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The node tools package as the controller builds it: its content hash, stamped version and wheel.

The collection's ``node_tools/`` folder is a normal Python project (``pyproject.toml``, console entry
points). :func:`build_wheel` builds it once per content hash with pip and setuptools, stamping the
version as ``<version>+<hash>``; the ``instinct.finetune.node_tools`` action installs that wheel on a
node only where the venv's marker names another version, so a re-run is one read per venv.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

PACKAGE = "instinct_node_tools"
DISTRIBUTION = "instinct-node-tools"
MARKER = ".instinct-node-tools"
_SKIP = re.compile(r"(^|/)(__pycache__|\.pytest_cache|build|dist|[^/]*\.egg-info)(/|$)|\.pyc$")
_VERSION = re.compile(r'^__version__ = "([^"+]+)"$', re.MULTILINE)


def source_files(root):
    """The files that make the package, relative to ``root``, sorted (links followed)."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for name in files:
            relative = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            if not _SKIP.search(relative) and (relative == "pyproject.toml" or relative.startswith("src/")):
                found.append(relative)
    return sorted(found)


def digest(root):
    """sha256 over every source file's path and content: what the installed version is stamped with."""
    total = hashlib.sha256()
    for relative in source_files(root):
        with open(os.path.join(root, relative), "rb") as handle:
            content = handle.read()
        total.update(relative.encode() + b"\0" + hashlib.sha256(content).hexdigest().encode() + b"\n")
    return total.hexdigest()


def base_version(init_text):
    match = _VERSION.search(init_text)
    if not match:
        raise ValueError('node_tools: __init__.py has no __version__ = "X.Y.Z" line')
    return match.group(1)


def stamped_version(root):
    """``<version>+<first 12 of the content hash>``: a PEP 440 local version."""
    with open(os.path.join(root, "src", PACKAGE, "__init__.py"), encoding="utf-8") as handle:
        version = base_version(handle.read())
    return "%s+%s" % (version, digest(root)[:12])


def sha256_file(path):
    total = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            total.update(block)
    return total.hexdigest()


def build_wheel(root, cache_dir, python=None):
    """Build (or find built) the wheel of ``root``; returns ``(path, version)``.

    The build runs on a copy with links resolved and the version stamped, in ``cache_dir/<version>``,
    under a lock: every host's worker of a play asks at once, and one builds.
    """
    version = stamped_version(root)
    target = os.path.join(cache_dir, version)
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(cache_dir, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = glob.glob(os.path.join(target, "*.whl"))
        if built:
            return built[0], version
        work = tempfile.mkdtemp(prefix="node-tools-", dir=cache_dir)
        try:
            copy = os.path.join(work, "src")
            os.makedirs(copy)
            for relative in source_files(root):
                os.makedirs(os.path.dirname(os.path.join(copy, relative)), exist_ok=True)
                shutil.copyfile(os.path.join(root, relative), os.path.join(copy, relative))
            init = os.path.join(copy, "src", PACKAGE, "__init__.py")
            with open(init, encoding="utf-8") as handle:
                text = handle.read()
            with open(init, "w", encoding="utf-8") as handle:
                handle.write(_VERSION.sub('__version__ = "%s"' % version, text))
            argv = [
                python or sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--quiet",
                "--wheel-dir",
                os.path.join(work, "out"),
                copy,
            ]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    "building the node tools wheel failed (%s): %s"
                    % (" ".join(argv), (done.stderr or done.stdout).strip()[-2000:])
                )
            wheel = glob.glob(os.path.join(work, "out", "*.whl"))[0]
            final = os.path.join(target, os.path.basename(wheel))
            os.replace(wheel, final)
            return final, version
        finally:
            shutil.rmtree(work, ignore_errors=True)


DEFAULT_CACHE = "~/.cache/instinct-finetune/node-tools"


def wheel_for(args, collection_root):
    """The wheel an action's task asks for: ``args``' ``source`` (default: the collection's
    ``node_tools/``) built into ``cache_dir``; returns ``(path, version)``."""
    source = args.get("source") or os.path.join(collection_root, "node_tools")
    cache_dir = os.path.expanduser(args.get("cache_dir") or DEFAULT_CACHE)
    return build_wheel(source, cache_dir)


def stamp(version, pins):
    """What the venv's marker records: the node tools' version, and with pins a digest of them, so that
    a changed pin (a security release of one) installs again even when the node tools did not change."""
    if not pins:
        return version
    text = json.dumps(sorted((str(p["name"]), str(p["version"]), str(p["sha256"])) for p in pins))
    return "%s pins:%s" % (version, hashlib.sha256(text.encode()).hexdigest()[:16])


def requirements(wheel_path, wheel_sha256, pins):
    """pip's requirements file text: the wheel and each pin, every line with its hash."""
    lines = ["%s --hash=sha256:%s" % (wheel_path, wheel_sha256)]
    for pin in pins:
        lines.append("%s==%s --hash=sha256:%s" % (pin["name"], pin["version"], pin["sha256"]))
    return "\n".join(lines) + "\n"
