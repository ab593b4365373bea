"""The training account and pip's settings (issue 32, hardening).

- The account has no login shell: every task that creates it gives it instinct_user_shell, /usr/sbin/nologin
  unless a site sets one, and nothing becomes the account in a way that would run its login shell
  (Ansible's sudo runs ``/bin/sh -c`` itself; ``su`` or ``sudo -i`` would run nologin).
- The venv's pip.conf, which may name a mirror with its credentials, is root's and the account's group's
  (0640: the account runs pip, and pip skips a file it cannot read without a word) and never in --diff:
  the role's own task, run on a local node with --diff and a mirror URL holding a password."""

import grp
import os
import stat
from pathlib import Path

import pytest
import yaml

from tests.unit.conftest import ROOT, role_tasks, run_local_play

ROLES = ROOT / "roles"
COMMON = yaml.safe_load((ROLES / "common" / "defaults" / "main.yml").read_text())


def test_the_training_account_gets_no_login_shell():
    assert COMMON["instinct_user_shell"] == "/usr/sbin/nologin"
    created = [(path, task) for path, task in role_tasks() if "ansible.builtin.user" in task]
    # The rocm role (GPU groups) and the instinct_python role both make the training account; the
    # instinct_python role makes the build account (the venv's owner, issue 32), never with a shell.
    makers = sorted((str(path), task["ansible.builtin.user"]["name"]) for path, task in created)
    assert makers == [("roles/instinct_python/tasks/venv.yml", "{{ instinct_build_user }}"),
                      ("roles/instinct_python/tasks/venv.yml", "{{ instinct_user }}"),
                      ("roles/rocm/tasks/access.yml", "{{ instinct_user }}")]  # fmt: skip
    for path, task in created:
        want = "/usr/sbin/nologin" if "build" in task["ansible.builtin.user"]["name"] else "{{ instinct_user_shell }}"
        assert task["ansible.builtin.user"]["shell"] == want, path


def test_nothing_becomes_the_account_through_its_login_shell():
    accounts = ("{{ instinct_user }}", "{{ instinct_build_user }}")
    becoming = [(path, task) for path, task in role_tasks() if task.get("become_user") in accounts]
    assert len(becoming) > 20  # the venv, the wheels, the probes, the checks, the collection of a job's files
    for path, task in becoming:
        # The default method, sudo, runs Ansible's own /bin/sh -c; su and a login (-i) would run nologin.
        assert task.get("become_method", "sudo") == "sudo", (path, task["name"])
        assert not any(flag in str(task.get("become_flags", "")).split() for flag in ("-i", "-s", "--login")), path
    cfg = (ROOT / "ansible.cfg").read_text()
    assert "become_method" not in cfg and "become_flags" not in cfg


PIP_TASK = "Configure pip inside the venv"


def pip_conf_play(tmp_path):
    """The role's own pip.conf task, as its tasks file has it, in a play of the role's defaults."""
    tasks = yaml.safe_load((ROLES / "instinct_python" / "tasks" / "venv.yml").read_text())
    (task,) = [task for task in tasks if task.get("name") == PIP_TASK]
    task["ansible.builtin.template"]["src"] = str(ROLES / "instinct_python" / "templates" / "pip.conf.j2")
    play = [{
        "name": "Write pip.conf",
        "hosts": "all",
        "gather_facts": False,
        "vars_files": [str(ROLES / name / "defaults" / "main.yml") for name in ("common", "instinct_python")],
        "tasks": [task],
    }]  # fmt: skip
    path = tmp_path / "pip-conf.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="the file is written owned by root")
def test_pip_conf_is_the_build_accounts_group_only_and_never_shown_in_diff(tmp_path):
    # The build account's group (it runs pip; the training account does not read the file): not root's,
    # so that a file left root's group is seen.
    group = next(name for name in ("nogroup", "users", "daemon") if name in {entry.gr_name for entry in grp.getgrall()})
    mirror = "https://builder:s3cr3t-pw@mirror.example/simple"
    venv = tmp_path / "venv"
    venv.mkdir()
    playbook = pip_conf_play(tmp_path)
    extravars = {"instinct_venv": str(venv), "instinct_build_group": group, "instinct_python_pip_index_url": mirror}
    proc = run_local_play(playbook, extravars, env={"ANSIBLE_DIFF_ALWAYS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    conf = Path(venv / "pip.conf")
    assert f"index-url = {mirror}" in conf.read_text()
    found = conf.stat()
    assert (stat.S_IMODE(found.st_mode), found.st_uid, grp.getgrgid(found.st_gid).gr_name) == (0o640, 0, group)
    assert "s3cr3t-pw" not in proc.stdout + proc.stderr
    # A changed mirror rewrites it, still without showing either password.
    extravars["instinct_python_pip_index_url"] = "https://builder:0ther-pw@mirror.example/simple"
    again = run_local_play(playbook, extravars, env={"ANSIBLE_DIFF_ALWAYS": "1"})
    assert again.returncode == 0 and "changed=1" in again.stdout, again.stdout[-3000:]
    assert "s3cr3t-pw" not in again.stdout and "0ther-pw" not in again.stdout


MPI_TASK = "Fail when Open MPI could not start ranks on the other nodes as the training account"


def mpi_check(tmp_path, nodes, **extravars):
    """The fabric role's check of the account's shell before rccl-tests runs, as smoke.yml has it."""
    tasks = yaml.safe_load((ROLES / "fabric" / "tasks" / "smoke.yml").read_text())
    (task,) = [task for task in tasks if task.get("name") == MPI_TASK]
    play = [{
        "name": "Check the account's shell for Open MPI",
        "hosts": "all",
        "gather_facts": False,
        "vars_files": [str(ROLES / name / kind / "main.yml") for name in ("common", "fabric")
                       for kind in ("defaults", "vars")],
        "tasks": [task],
    }]  # fmt: skip
    playbook = tmp_path / "mpi-check.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("".join(f"{node}\n" for node in nodes))
    return run_local_play(playbook, {"fabric_rccl_tests_path": "/opt/rccl-tests/all_reduce_perf", **extravars},
                          inventory=inventory)  # fmt: skip


def test_rccl_tests_over_several_nodes_is_refused_while_the_account_has_no_shell(tmp_path):
    proc = mpi_check(tmp_path, ["node1", "node2"])
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert (
        "node1: fabric_rccl_tests_path asks Open MPI to run all_reduce_perf on 2 nodes, which it starts over SSH as "
        "instinct, but that account's login shell is /usr/sbin/nologin (instinct_user_shell)"
    ) in out
    assert "Set instinct_user_shell: /bin/bash" in out and "docs/runbooks/fabric-bandwidth.md" in out
    # A site that gives the account a shell, or runs it on one node (no SSH), goes on.
    assert mpi_check(tmp_path, ["node1", "node2"], instinct_user_shell="/bin/bash").returncode == 0
    assert mpi_check(tmp_path, ["node1"]).returncode == 0
