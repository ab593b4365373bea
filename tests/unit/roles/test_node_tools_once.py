"""The node_tools role, a dependency of most stages, reads each venv's marker once per playbook run:
site.yml includes it about seven times a node, and each include used to ask apt, read the tools venv's
marker and the training venv's owner and marker again. Through ansible-playbook on this machine: two
plays of one run, as site.yml's stages are, each including the role (the real entry, its argument
spec first), then a second run.

The venvs are real (the node tools wheel built and installed by the collection's module); the
training venv is this user's, standing in for the build account, and takes no pins (they come from
an index). No apt package is asked for: the list is empty, so nothing on this machine is installed;
the distribution's python3-prometheus-client that the tools venv reads is this venv's
prometheus_client, put on PYTHONPATH alone."""

import re
import subprocess
import sys
from pathlib import Path

import prometheus_client
import pytest

from tests.unit.conftest import run_local_play

PLAY = """\
- name: {name}
  hosts: all
  gather_facts: false
  roles:
    - role: instinct.finetune.node_tools
"""

TOOLS = "Install the node tools into the tools venv"
TRAINING = "Install the node tools into the training venv"
OWNER = "Read who owns the training venv"
APT = "Make sure apt can install what the tools venv needs"


def outcomes(stdout, task):
    """Each run of ``task`` in the play output, in order: ok, changed or skipping."""
    found = []
    for block in stdout.split("\nTASK [")[1:]:
        if block.startswith(f"instinct.finetune.node_tools : {task}]"):
            state = re.search(r"^(ok|changed|skipping|failed|fatal):", block, re.M)
            found.append(state.group(1) if state else "?")
    return found


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("node-tools-once")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True)
    (tmp / "site.yml").write_text(PLAY.format(name="First stage") + PLAY.format(name="Second stage"))
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    extravars = {
        "instinct_tools_dir": str(tmp / "tools"),
        "instinct_venv": str(tmp / "venv"),
        "instinct_build_user": user,
        "node_tools_python": sys.executable,
        "node_tools_os_packages": [],
        "node_tools_training_pins": [],
    }
    # What the distribution's package gives the tools venv (system site packages), and nothing else.
    (tmp / "site").mkdir()
    (tmp / "site" / "prometheus_client").symlink_to(Path(prometheus_client.__file__).parent)
    return tmp, extravars


def run(playbook, extravars, tmp, check=False):
    return run_local_play(playbook, extravars, check=check, env={"PYTHONPATH": str(tmp / "site")})


def test_one_run_reads_each_venv_once_however_many_stages_include_the_role(node):
    tmp, extravars = node
    first = run(tmp / "site.yml", extravars, tmp)
    assert first.returncode == 0, first.stdout[-3000:]
    # The first stage installs into both venvs; the second reads neither again.
    assert outcomes(first.stdout, TOOLS) == ["changed", "skipping"]
    assert outcomes(first.stdout, TRAINING) == ["changed", "skipping"]
    assert outcomes(first.stdout, OWNER) == ["ok", "skipping"]
    assert outcomes(first.stdout, APT) == ["ok", "skipping"]
    # A new run of ansible-playbook reads the markers again, once, and changes nothing.
    again = run(tmp / "site.yml", extravars, tmp)
    assert again.returncode == 0, again.stdout[-3000:]
    assert outcomes(again.stdout, TOOLS) == ["ok", "skipping"]
    assert outcomes(again.stdout, TRAINING) == ["ok", "skipping"]
    assert re.search(r"node1\s*: ok=\d+\s+changed=0 ", again.stdout), again.stdout[-1500:]
    # And a check run of a converged node skips the second read too (the venvs held this version).
    checked = run(tmp / "site.yml", extravars, tmp, check=True)
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert outcomes(checked.stdout, TOOLS) == ["ok", "skipping"]
    assert outcomes(checked.stdout, TRAINING) == ["ok", "skipping"]


def test_a_stage_that_leaves_out_the_training_venv_does_not_count_it_ready(node, tmp_path):
    """monitoring and wheel_build include the role with node_tools_training_venv false: a stage after
    them still installs into the training venv."""
    tmp, extravars = node
    extravars = dict(extravars, instinct_venv=str(tmp_path / "venv"))
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    (tmp_path / "site.yml").write_text(
        PLAY.format(name="Monitoring").replace(
            "role: instinct.finetune.node_tools",
            "role: instinct.finetune.node_tools\n      node_tools_training_venv: false",
        )
        + PLAY.format(name="Fine-tune")
    )
    done = run(tmp_path / "site.yml", extravars, tmp)
    assert done.returncode == 0, done.stdout[-3000:]
    assert outcomes(done.stdout, TOOLS)[1:] == ["skipping"]
    assert outcomes(done.stdout, TRAINING) == ["skipping", "changed"]
