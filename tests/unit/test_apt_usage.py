"""One way to trust apt's lists (issue 15): no task in the roles or the test harness lets Ansible's
apt module judge the lists by their age (update_cache / cache_valid_time), and every install is
preceded, in its own file, by instinct.finetune.apt_index (or by the file that refreshes for it)."""

import pytest
import yaml

from tests.unit.conftest import ROOT

# Task files whose installs rely on the refresh of another file of the same role, run before them.
REFRESHED_BY = {
    "roles/rocm/tasks/driver.yml": "roles/rocm/tasks/repositories.yml",
    "roles/rocm/tasks/install-pinned.yml": "roles/rocm/tasks/repositories.yml",
}
APT = ("ansible.builtin.apt", "apt")
INDEX = "instinct.finetune.apt_index"


def flat_tasks(tasks):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        if "block" in task:
            yield from flat_tasks(task["block"])
            yield from flat_tasks(task.get("rescue"))
            yield from flat_tasks(task.get("always"))
        elif "tasks" in task:  # a play
            yield from flat_tasks(task.get("pre_tasks"))
            yield from flat_tasks(task["tasks"])
        else:
            yield task


def task_files():
    for folder in ("roles", "molecule"):
        for path in sorted((ROOT / folder).rglob("*.yml")):
            text = path.read_text()
            if "apt" not in text:
                continue
            data = yaml.safe_load(text)
            if isinstance(data, list):
                yield path.relative_to(ROOT).as_posix(), list(flat_tasks(data))


FILES = dict(task_files())
INSTALLING = {path: tasks for path, tasks in FILES.items() if any(k in t for t in tasks for k in APT)}


def test_the_guard_sees_the_installs():
    # The roles that install packages, as of issue 15; a new one joins this list.
    roles = {path.split("/")[1] for path in INSTALLING if path.startswith("roles/")}
    assert roles >= {"preflight", "rocm", "instinct_python", "pytorch", "monitoring"}


@pytest.mark.parametrize("path", sorted(INSTALLING))
def test_no_apt_task_trusts_the_age_of_the_lists(path):
    for task in INSTALLING[path]:
        for key in APT:
            args = task.get(key)
            if isinstance(args, dict):
                assert not {"update_cache", "cache_valid_time"} & set(args), (
                    f"{path}: '{task.get('name')}' lets the apt module judge the lists by age; "
                    f"call {INDEX} before it instead"
                )


@pytest.mark.parametrize("path", sorted(INSTALLING))
def test_every_install_follows_apt_index(path):
    tasks = INSTALLING[path]
    if path in REFRESHED_BY:
        assert any(INDEX in t for t in FILES[REFRESHED_BY[path]]), REFRESHED_BY[path]
        return
    seen_index = False
    for task in tasks:
        seen_index = seen_index or INDEX in task
        if any(isinstance(task.get(key), dict) and task[key].get("name") for key in APT):
            assert seen_index, f"{path}: '{task.get('name')}' installs before any {INDEX} task"
