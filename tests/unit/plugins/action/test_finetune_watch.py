"""The finetune_watch action (issue 31) reaches every rank's node from one task as ansible-core reaches
that node for its own task: the same connection plugin and options, shell, become plugin and options,
address, user, port and Python, whatever the node's inventory, group and play variables say, and
none of another node's. Compared through ansible-playbook by a test's action plugin
(watch_probe/watch_connection.py) that reads the plugins' options and connects to nothing. The watch
itself runs through ansible-playbook in tests/soak (more nodes than forks, to the end)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.conftest import COLLECTIONS, ROOT, run_module

PROBE = Path(__file__).parent / "watch_probe"
HOSTS = ["node1", "node2", "node3", "node4"]

PLAYBOOK = """\
- name: Compare how the watch and ansible-core reach each node
  hosts: nodes
  gather_facts: false
  become: true
  vars:
    ansible_timeout: 17
  tasks:
    - name: Read the connection ansible-core made for the node's own task
      watch_connection:
        mode: own

    - name: Read the connections the watch makes from one task
      watch_connection:
        mode: ranks
        hosts: "{{ ansible_play_hosts_all }}"
      run_once: true
"""


def inventory(python):
    return {
        "nodes": {
            "hosts": {
                "node1": {
                    "ansible_host": "192.0.2.11",
                    "ansible_port": 2201,
                    "ansible_user": "ops",
                    "ansible_become": False,
                    "ansible_python_interpreter": "/opt/py1/bin/python3",
                },
                "node2": {
                    "ansible_become_method": "su",
                    "ansible_become_user": "trainer",
                    "ansible_python_interpreter": "{{ node2_python }}",
                    "node2_python": "/usr/bin/python3.10",
                    "ansible_ssh_common_args": "-o ProxyJump=bastion",
                    "ansible_password": "secret",
                },
                "node3": {"ansible_connection": "local", "ansible_python_interpreter": python},
                # The sandbox's connection.
                "node4": {
                    "ansible_connection": "community.docker.docker",
                    "ansible_docker_extra_args": "--tls",
                    "ansible_python_interpreter": "/usr/bin/python3",
                },
            },
            "vars": {"ansible_ssh_private_key_file": "/keys/id_ed25519", "ansible_become_flags": "-H -S -n"},
        }
    }


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    work = tmp_path_factory.mktemp("watch-connections")
    (work / "hosts.json").write_text(json.dumps(inventory(sys.executable)))
    (work / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_ACTION_PLUGINS=str(PROBE), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_NOCOLOR="1")  # fmt: skip
    command = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(command) if command.exists() else "ansible-playbook", "-i", str(work / "hosts.json"),
         str(work / "play.yml"), "--forks", "2"],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    tasks = json.loads(proc.stdout[proc.stdout.find("{") :])["plays"][0]["tasks"]
    own = {host: result["own"] for host, result in tasks[0]["hosts"].items()}
    ranks = next(iter(tasks[1]["hosts"].values()))["ranks"]
    return own, ranks


@pytest.mark.parametrize("host", HOSTS)
def test_the_watch_reaches_each_node_as_its_own_task_does(compared, host):
    own, ranks = compared
    assert ranks[host] == own[host]


def test_each_node_keeps_its_own_settings_and_none_of_another_nodes(compared):
    _own, ranks = compared
    node1, node2, node3, node4 = (ranks[host] for host in HOSTS)
    assert (node1["connection"], node1["remote_addr"], node1["port"], node1["remote_user"]) == (
        "ssh", "192.0.2.11", 2201, "ops")  # fmt: skip
    assert node1["become"] is None and node1["python"] == "/opt/py1/bin/python3"
    # node2 has no address, port or user of its own: its name and the defaults, not node1's.
    assert node2["remote_addr"] == "node2" and node2["port"] != 2201 and node2["remote_user"] != "ops"
    assert node2["become"] == "su" and node2["become_options"]["become_user"] == "trainer"
    assert node2["python"] == "/usr/bin/python3.10"  # templated from the node's own variables
    assert node2["options"]["ssh_common_args"] == "-o ProxyJump=bastion"
    assert node2["secrets"]["password"] is True and node1["secrets"]["password"] is False
    # The play's become, its variables and the group's variables reach every node.
    assert node3["connection"] == "local" and node3["become"] == "sudo"
    assert node3["become_options"]["become_flags"] == "-H -S -n"
    assert node1["options"]["timeout"] == 17 and node1["options"]["private_key_file"] == "/keys/id_ed25519"
    assert node4["connection"].endswith("community.docker.plugins.connection.docker")
    assert node4["options"]["remote_addr"] == "node4" and node4["options"]["docker_extra_args"] == "--tls"


def test_a_rank_without_status_options_is_refused_naming_it_and_the_runbook():
    args = {"job": "sft", "ranks": ["localhost"], "status": {"node9": {"unit": "x.service"}}, "timeout": 10}
    rc, result = run_module("finetune_watch", json.dumps(args))
    assert rc != 0 and result["failed"]
    assert result["msg"].startswith("localhost: watching job sft needs the status options of every rank: none for "
                                    "localhost (status has node9)")  # fmt: skip
    assert "docs/runbooks/finetune-job.md" in result["msg"]
