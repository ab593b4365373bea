"""Every file and folder the finetune and evaluate roles write on a node is no other local user's (issue 32):
the modes their tasks give (a job's settings, dataset, model copy, checkpoints' folders, logs, records,
evaluations) grant nothing to "other"; the one exception is the job's systemd unit, which holds no data.
What the stage writes is checked on a real run in test_finetune_stage.py; this covers every task, those
that need a trained job to run (the evaluation's, the launch's) included."""

import re

import yaml

from tests.unit.conftest import ROOT, tasks_of

# Written where systemd reads units; no data of the job in it.
UNIT_TASK = "Install the job's systemd unit"
MODULES = ("ansible.builtin.copy", "ansible.builtin.template", "ansible.builtin.file", "ansible.builtin.lineinfile")


# The launch environment's mode: root's alone under systemd, root's and the account's group under Slurm.
ENV_MODE = "{{ finetune_env_mode }}"


def env_modes():
    """The modes vars/main.yml's finetune_env_mode chooses between (each a literal of the expression)."""
    expression = yaml.safe_load((ROOT / "roles" / "finetune" / "vars" / "main.yml").read_text())["finetune_env_mode"]
    modes = re.findall(r"'(0[0-7]{3})'", expression)
    assert len(modes) == 2, expression
    return modes


def written_modes():
    """(file, task name, option, mode) of every mode a node-side task of the two roles sets."""
    for role in ("finetune", "evaluate"):
        for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml")):
            for task in tasks_of(yaml.safe_load(path.read_text())):
                if task.get("delegate_to") == "localhost":
                    continue  # the controller's collect folder
                for module in MODULES:
                    args = task.get(module) or {}
                    for option in ("mode", "directory_mode"):
                        # The stage's folders take theirs from finetune_stage_dirs, read below.
                        if option in args and args[option] == ENV_MODE:
                            # Either launcher's, as vars/main.yml chooses it.
                            for mode in env_modes():
                                yield path.name, task["name"], option, mode
                        elif option in args and args[option] != "{{ item.mode }}":
                            yield path.name, task["name"], option, str(args[option])
    stage_dirs = yaml.safe_load((ROOT / "roles" / "finetune" / "vars" / "main.yml").read_text())["finetune_stage_dirs"]
    for folder in stage_dirs:
        yield "vars/main.yml", folder["path"], "mode", folder["mode"]


def test_no_task_opens_a_jobs_data_to_other_users():
    modes = list(written_modes())
    assert len(modes) > 20
    for where, name, option, mode in modes:
        if name == UNIT_TASK:
            continue
        assert mode.isdigit() and len(mode) == 4, (where, name, option, mode)
        assert int(mode, 8) & 0o007 == 0, (where, name, option, mode)
