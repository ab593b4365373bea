"""Root never runs the training venv's code, and the training account never changes the venv (issue 32,
findings 1 and 2). A .pth file in site-packages runs in every Python started from the venv: were root to
run one, whoever can write the venv would become root. The venv and the wheel store belong to the
build account (instinct_build_user), which runs pip; the training account, whose jobs run remote-code
models and unpickle checkpoints, reads them and cannot write them. Every task of every role that runs a
program of the venv (its Python, pip, ds_report, the node tools' entry points installed there) runs it
as one of those two unprivileged accounts, and every install into it as the build account."""

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
# The modules that change what the venv holds.
INSTALLERS = ("ansible.builtin.pip", "instinct.finetune.node_tools")
TRAINING, BUILD = "{{ instinct_user }}", "{{ instinct_build_user }}"


def venv_runs():
    """(file, task name, runner, become_user) of every task whose program or interpreter is the venv's."""
    for path, task in role_tasks():
        runner = next((name for name in RUNNERS if name in task), None)
        if runner is None:
            continue
        args = json.dumps(task[runner])
        if "instinct_venv }}/bin/" in args or (runner not in RUNNERS[:3] and "instinct_venv" in args):
            yield str(path), task.get("name"), runner, task.get("become_user")


def test_every_run_of_the_venvs_code_is_an_unprivileged_accounts():
    runs = list(venv_runs())
    assert len(runs) > 20, runs  # the scan finds the roles' probes, pip runs and launches
    as_root = [(path, name) for path, name, _runner, user in runs if user not in {TRAINING, BUILD}]
    assert as_root == []


def test_every_install_into_the_venv_is_the_build_accounts_and_the_probes_are_the_training_accounts():
    runs = list(venv_runs())
    installs = [(path, name, user) for path, name, runner, user in runs if runner in INSTALLERS]
    assert len(installs) >= 6, installs  # python, torch, DeepSpeed, LLaMA-Factory and its set, the node tools
    assert [(path, name) for path, name, user in installs if user != BUILD] == []
    probes = [(path, name) for path, name, runner, user in runs if runner == "instinct.finetune.venv_probe"]
    assert probes and all(
        user == TRAINING for _p, _n, runner, user in runs if runner == "instinct.finetune.venv_probe"
    ), probes


def test_the_build_account_owns_the_venv_and_the_wheel_store_and_never_logs_in():
    tasks = {task.get("name"): task for _path, task in role_tasks()}
    account = tasks["Make sure the build account exists"]["ansible.builtin.user"]
    assert account["name"] == BUILD and account["shell"] == "/usr/sbin/nologin" and account["system"] is True
    folders = tasks["Create the venv's parent owned by root and the venv directory owned by the build account"]
    assert {item["path"]: item["owner"] for item in folders["loop"]} == {
        "{{ instinct_venv | dirname }}": "root", "{{ instinct_venv }}": BUILD}  # fmt: skip
    store = tasks["Create the wheel store and the log folders"]
    assert {item["path"]: (item["owner"], item["group"]) for item in store["loop"]} == {
        "{{ wheel_build_dir }}": (BUILD, "{{ instinct_build_group }}"),
        "{{ instinct_log_root }}": ("root", "root"),
        "{{ wheel_build_log_dir }}": (BUILD, "{{ instinct_build_group }}"),
    }
    assert store["ansible.builtin.file"]["mode"] == "0755"


# Folders the build account owns: what root writes, creates or removes there would follow a link that
# account put in its place (issue 32's review: a compromised build, a malicious sdist, becomes root).
BUILD_OWNED = (
    "wheel_build_out",
    "wheel_build_serve_plan",
    "{{ wheel_build_dir }}/",
    "llama_factory_dependency_dir",
    "pytorch_build_script",
    "pytorch_audio_script",
)
WRITERS = ("ansible.builtin.file", "ansible.builtin.copy", "ansible.builtin.template", "ansible.builtin.get_url")


def test_root_writes_nothing_inside_a_folder_the_build_account_owns():
    inside = []
    for path, task in role_tasks():
        writer = next((name for name in WRITERS if name in task), None)
        if writer is None:
            continue
        target = json.dumps([task[writer].get("path"), task[writer].get("dest"), task.get("loop")])
        if any(marker in target for marker in BUILD_OWNED):
            inside.append((str(path), task.get("name"), task.get("become_user")))
    assert len(inside) >= 8, inside  # the store's folders, records, pins, fetches, scripts and plan
    assert [(path, name) for path, name, user in inside if user != BUILD] == []
