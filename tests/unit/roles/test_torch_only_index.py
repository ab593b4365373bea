"""The pytorch role's wheel step (roles/pytorch/tasks/wheel.yml) takes the PyTorch family from the torch
index alone (issue 32): the 2022 torchtriton attack, replayed with two local package indexes. torch on
the torch index depends on a name that only the torch index should serve (here as in PyTorch's ROCm
builds, pytorch-triton-rocm); an attacker publishes a higher version of that name on the general
index the venv's pip.conf names. With the torch index as an extra index, pip took the attacker's; with
it as the only index of the step, the node gets the torch index's own, and nothing of the general
index. The step runs through ansible-playbook on this machine, into a real venv, as stack.yml runs it
(the role's defaults and vars; become off, so the build account's steps run as the test's user)."""

import base64
import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

from tests.unit.conftest import COLLECTIONS, ROOT, role_step_playbook

PLAYBOOK = role_step_playbook("pytorch", "wheel.yml", "Install the PyTorch family")


def wheel(folder, name, version, requires=()):
    """A minimal, valid pure-Python wheel of ``name`` ``version`` that depends on ``requires``."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{info}/METADATA": "".join(
            [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", *(f"Requires-Dist: {r}\n" for r in requires)]
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    project = folder / name
    project.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(project / f"{dist}-{version}-py3-none-any.whl", "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)


def index(folder):
    """PEP 503 pages for the project folders under ``folder`` (pip reads a file:// simple index)."""
    for project in folder.iterdir():
        links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(project.glob("*.whl")))
        (project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return f"file://{folder}"


def installed(venv_dir, name):
    out = subprocess.run(
        [str(venv_dir / "bin" / "python"), "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip() or out.stderr.strip().splitlines()[-1]


def run_wheel_step(tmp_path, general_url, **extra):
    venv_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(venv_dir)  # ensurepip's bundled pip: offline
    # What the instinct_python role writes: the general index, and an extra index besides it.
    (venv_dir / "pip.conf").write_text(
        f"[global]\nindex-url = {general_url}\nextra-index-url = {general_url}\ndisable-pip-version-check = true\n"
    )
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    extravars = {
        "ansible_become": False,
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "instinct_venv": str(venv_dir),
        "instinct_build_user": pwd.getpwuid(os.getuid()).pw_name,
        "instinct_build_group": grp.getgrgid(os.getgid()).gr_name,
        "pytorch_version": "9.9.0",
        "pytorch_wheel_label": "rocm7.0",
        "pytorch_companions": {},
        "pytorch_find_links": [],
        **extra,
    }
    # This machine's own pip settings (find-links, indexes, constraints) stay out of the venv's pip.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", HOME=str(tmp_path), XDG_CONFIG_DIRS=str(tmp_path / "no-xdg"),
               PIP_CONFIG_FILE=str(venv_dir / "pip.conf"))  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(playbook) if playbook.exists() else "ansible-playbook", "-i", "node1,", str(tmp_path / "play.yml"),
         "-e", json.dumps(extravars)],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return proc, " ".join(proc.stdout.split()), venv_dir


def test_torch_and_its_dependencies_come_from_the_torch_index_alone(tmp_path):
    torch_index, general_index = tmp_path / "torch-index", tmp_path / "pypi"
    wheel(torch_index, "torch", "9.9.0+rocm7.0", requires=["pytorch-triton-rocm"])
    wheel(torch_index, "pytorch-triton-rocm", "1.0.0")
    wheel(general_index, "pytorch-triton-rocm", "99.0.0")  # the attacker's
    torch_url, general_url = index(torch_index), index(general_index)
    proc, out, venv_dir = run_wheel_step(tmp_path, general_url, pytorch_wheel_index=torch_url)
    assert proc.returncode == 0, out[-3000:]
    assert installed(venv_dir, "torch") == "9.9.0+rocm7.0"
    # The torch index's own, not the attacker's higher version from the general index.
    assert installed(venv_dir, "pytorch-triton-rocm") == "1.0.0", out[-3000:]


def test_a_torch_from_wheel_folders_only_takes_its_dependencies_from_the_general_index(tmp_path):
    """No torch index (the sandbox's case, an air-gapped folder): the family from the folder alone,
    without its dependencies, then those from the general index, which cannot offer the exact pin."""
    folder, general_index = tmp_path / "wheels", tmp_path / "pypi"
    wheel(folder, "torch", "9.9.0+rocm7.0", requires=["filelock"])
    wheel(general_index, "filelock", "3.0.0")
    wheel(general_index, "torch", "9.9.0")  # not the pinned build, so never taken
    proc, out, venv_dir = run_wheel_step(
        tmp_path, index(general_index), pytorch_wheel_index="", pytorch_find_links=[str(folder / "torch")]
    )
    assert proc.returncode == 0, out[-3000:]
    assert installed(venv_dir, "torch") == "9.9.0+rocm7.0"
    assert installed(venv_dir, "filelock") == "3.0.0"
    assert "Install the dependencies of a torch from the wheel folders from the general index" in out
