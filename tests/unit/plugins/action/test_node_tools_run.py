"""instinct.finetune.node_tools_run through ansible-playbook on localhost: a node tool runs from the
wheel in the task's temporary folder, and nothing is installed or left behind."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.conftest import COLLECTIONS, ROOT

PLAYBOOK = """\
- name: Run a node tool from the wheel
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Read the disk with the diagnose role's reader
      instinct.finetune.node_tools_run:
        module: instinct_node_tools.gather
        argv: ["{{ settings | to_json }}", disk]
        python: "{{ ansible_python_interpreter }}"
      register: gathered
"""


def run(tmp_path, extra=None, check=False, playbook_text=PLAYBOOK):
    (tmp_path / "play.yml").write_text(playbook_text)
    extravars = {
        "ansible_python_interpreter": sys.executable,
        "ansible_remote_tmp": str(tmp_path / "remote-tmp"),
        "settings": {"disk_paths": [str(tmp_path)], "log_root": str(tmp_path), "service_user": "root"},
        **(extra or {}),
    }
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", HOME=str(tmp_path / "home"),
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    argv = [str(playbook) if playbook.exists() else "ansible-playbook", "-i", "localhost,", "-c", "local",
            str(tmp_path / "play.yml"), "-e", json.dumps(extravars), *(["--check"] if check else [])]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300)


def result(proc):
    """The task's result on localhost, from the json callback's report."""
    report = json.loads(proc.stdout[proc.stdout.index("{") :])
    got = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return dict(got, out=json.loads(got["stdout"]) if got.get("stdout") else None)


def test_a_tool_runs_from_the_wheel_and_nothing_stays_on_the_node(tmp_path):
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    got = result(proc)
    assert got["rc"] == 0 and got["changed"] is False
    assert got["version"].startswith("0.") and "+" in got["version"]
    # The reader ran and read the asked folder's filesystem.
    assert str(tmp_path) in json.dumps(got["out"]["disk"])
    # The wheel went into the task's temporary folder and went with it: nothing installed, nothing left.
    left = list((tmp_path / "remote-tmp").rglob("*")) if (tmp_path / "remote-tmp").exists() else []
    assert not [path for path in left if path.suffix == ".whl"], left


def test_it_reads_in_check_mode_too(tmp_path):
    proc = run(tmp_path, check=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    got = result(proc)
    # It ran (the command module alone would have skipped it in check mode and printed nothing).
    assert got["rc"] == 0 and str(tmp_path) in json.dumps(got["out"]["disk"]), got


def test_only_the_node_tools_modules_can_be_run(tmp_path):
    proc = run(tmp_path, playbook_text=PLAYBOOK.replace("instinct_node_tools.gather", "os"))
    assert proc.returncode != 0
    assert "module must be one of instinct_node_tools's modules" in result(proc)["msg"]
