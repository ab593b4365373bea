"""Root never runs the training venv's code (issue 32, finding 1): the training account can write the
venv, so a .pth file it drops in site-packages runs in every Python started from that venv. Every
task of every role that runs a program of the venv (its Python, pip, ds_report, the node tools' entry
points installed there) must run it as the training account."""

import json

from tests.unit.conftest import role_tasks

# The modules through which a task runs a program.
RUNNERS = (
    "ansible.builtin.command",
    "ansible.builtin.shell",
    "ansible.builtin.script",
    "ansible.builtin.pip",
    "instinct.finetune.venv_probe",
    "instinct.finetune.node_tools",
)


def venv_runs():
    """(file, task name, become_user) of every task whose program or interpreter is the venv's."""
    for path, task in role_tasks():
        runner = next((name for name in RUNNERS if name in task), None)
        if runner and "instinct_venv" in json.dumps(task[runner]):
            yield str(path), task.get("name"), task.get("become_user")


def test_every_run_of_the_venvs_code_is_the_training_accounts():
    runs = list(venv_runs())
    assert len(runs) > 20, runs  # the scan finds the roles' probes, pip runs and launches
    as_root = [(path, name) for path, name, user in runs if user != "{{ instinct_user }}"]
    assert as_root == []
