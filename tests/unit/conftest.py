"""Make ``ansible_collections.instinct.finetune`` importable from a checkout.

`make venv` links this repository into .venv/collections/ansible_collections/instinct/finetune;
the unit tests import the plugins through that path, exactly as Ansible does. The node tools
package's modules (node_tools/src) are importable too: the monitoring tests read its metric names.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".venv" / "collections"
FIXTURES = ROOT / "tests" / "fixtures"

if not (COLLECTIONS / "ansible_collections" / "instinct" / "finetune").exists():
    raise RuntimeError(f"{COLLECTIONS} lacks instinct/finetune: run `make venv` first")
sys.path.insert(0, str(COLLECTIONS))
sys.path.insert(0, str(ROOT / "node_tools" / "src"))


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def run_module(module, args, extra=()):
    """Run ``ansible localhost -m instinct.finetune.<module> -a <args>`` as a user would (implicit
    localhost, the controller's Python; ``extra``: more ansible options, ``--check`` say) and return
    ``(exit code, the host's result)``."""
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_NOCOLOR="1",
    )
    ansible = Path(sys.executable).parent / "ansible"
    argv = [str(ansible) if ansible.exists() else "ansible", "localhost", "-m", f"instinct.finetune.{module}"]
    proc = subprocess.run(
        [*argv, *extra, "-a", args], capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=120
    )
    start = proc.stdout.find("{")
    assert start >= 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout[start:])["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return proc.returncode, result


def role_step_playbook(role, task_file, what, hosts="all"):
    """A playbook that runs one task file of ``role`` with the role's variables (and common's), not
    through include_role: the role's dependencies (the node tools install) would otherwise run on the
    controller."""
    files = [ROOT / "roles" / name / kind / "main.yml" for name in ("common", role) for kind in ("defaults", "vars")]
    listed = "".join(f"    - {path}\n" for path in files if path.exists())
    return f"""\
- name: Run the {role} role's {task_file} step
  hosts: {hosts}
  gather_facts: false
  vars_files:
{listed}  tasks:
    - name: {what}
      ansible.builtin.include_tasks: {ROOT}/roles/{role}/tasks/{task_file}
"""


def fabric_step_playbook(task_file, what, hosts="all"):
    """role_step_playbook of the fabric role."""
    return role_step_playbook("fabric", task_file, what, hosts)


def run_local_play(playbook, extravars, check=False, bin_dir=None, env=None, *, inventory="node1,"):  # noqa: PLR0913
    """``ansible-playbook`` of ``playbook`` (a path) on one local node named node1, with this venv's
    Python, the checkout's collection and ``extravars``; ``bin_dir`` first on PATH (the stand-ins of
    the hardware's and the system's tools), ``env`` added to the environment. ``inventory``: another
    inventory (a file of several nodes, each on the local connection). Returns the process."""
    extravars = {"ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
                 **extravars}  # fmt: skip
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
    run_env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                   ANSIBLE_NOCOLOR="1", PATH=path, **(env or {}))  # fmt: skip
    command = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run(
        [str(command) if command.exists() else "ansible-playbook", "-i", str(inventory), str(playbook),
         "-e", json.dumps(extravars), *(["--check"] if check else [])],
        capture_output=True, text=True, env=run_env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip


def tasks_of(items):
    """Every task of a task list, the tasks of its blocks (block, rescue, always) included."""
    for task in items or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from tasks_of(task.get(key))


def role_tasks(roles="*"):
    """(path relative to ROOT, task) of every task in the task files of ``roles`` (a glob)."""
    for path in sorted(ROOT.glob(f"roles/{roles}/tasks/*.yml")):
        for task in tasks_of(yaml.safe_load(path.read_text())):
            yield path.relative_to(ROOT), task
