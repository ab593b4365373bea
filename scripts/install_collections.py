#!/usr/bin/env python
"""Install the collections pinned in requirements.yml without Ansible Galaxy.

Galaxy is not reachable from every network (it is not from our CI), but the ``ansible`` bundle
on PyPI carries the same collections. This script downloads the bundle wheel named on the
``# offline-source: ansible==X.Y.Z`` line of requirements.yml (pip caches it), extracts only the
pinned collections into ``<dest>/ansible_collections/``, checks that each extracted
MANIFEST.json has exactly the pinned version, and links this repository in as
``instinct.finetune`` so that FQCNs resolve from a checkout.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def read_pins(requirements: Path) -> tuple[str, dict[str, str]]:
    text = requirements.read_text()
    match = re.search(r"^#\s*offline-source:\s*(ansible==[0-9.]+)\s*$", text, re.MULTILINE)
    if not match:
        sys.exit(f"{requirements}: missing the '# offline-source: ansible==X.Y.Z' line")
    pins = {c["name"]: str(c["version"]) for c in yaml.safe_load(text)["collections"]}
    return match.group(1), pins


def download_bundle(spec: str, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    name = spec.replace("==", "-")
    found = sorted(cache.glob(f"{name}-py3-none-any.whl"))
    if found:
        return found[0]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(cache),
            spec,
        ],
        check=True,
    )
    found = sorted(cache.glob(f"{name}-py3-none-any.whl"))
    if not found:
        sys.exit(f"pip download {spec} produced no wheel in {cache}")
    return found[0]


def extract(wheel: Path, pins: dict[str, str], dest: Path) -> None:
    root = dest / "ansible_collections"
    with zipfile.ZipFile(wheel) as bundle:
        for fqcn, version in pins.items():
            namespace, name = fqcn.split(".")
            prefix = f"ansible_collections/{namespace}/{name}/"
            manifest = json.loads(bundle.read(prefix + "MANIFEST.json"))
            shipped = manifest["collection_info"]["version"]
            if shipped != version:
                sys.exit(
                    f"{wheel.name} ships {fqcn} {shipped}, requirements.yml pins {version}: "
                    "change the pin or the offline-source bundle so they agree"
                )
            target = root / namespace / name
            installed = target / "MANIFEST.json"
            if installed.exists() and json.loads(installed.read_text())["collection_info"]["version"] == version:
                continue
            shutil.rmtree(target, ignore_errors=True)
            with tempfile.TemporaryDirectory(dir=dest) as tmp:
                members = [m for m in bundle.namelist() if m.startswith(prefix)]
                bundle.extractall(tmp, members)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(Path(tmp) / prefix), target)
            print(f"installed {fqcn} {version} from {wheel.name}")


def link_self(dest: Path) -> None:
    link = dest / "ansible_collections" / "instinct" / "finetune"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.resolve() == ROOT:
            return
        link.unlink()
    link.symlink_to(ROOT, target_is_directory=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requirements", type=Path, default=ROOT / "requirements.yml")
    parser.add_argument("--dest", type=Path, default=ROOT / ".venv" / "collections")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "instinct-finetune" / "wheels")
    args = parser.parse_args()
    spec, pins = read_pins(args.requirements)
    args.dest.mkdir(parents=True, exist_ok=True)
    extract(download_bundle(spec, args.cache), pins, args.dest)
    link_self(args.dest)


if __name__ == "__main__":
    main()
