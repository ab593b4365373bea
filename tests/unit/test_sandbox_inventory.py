"""inventories/sandbox/hosts.py: the sandbox is reached over SSH as a real cluster is, each node at
its own management address, with the key and known_hosts that molecule/resources/sandbox/up.yml
writes into the sandbox's state folder, and host keys checked."""

import importlib.util
import shlex

import pytest

from tests.unit.conftest import ROOT


@pytest.fixture(scope="module")
def hosts():
    spec = importlib.util.spec_from_file_location("sandbox_inventory", ROOT / "inventories" / "sandbox" / "hosts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_node_is_reached_over_ssh_at_its_own_management_address(hosts, tmp_path):
    environ = {"SANDBOX_NODES": "8", "INSTINCT_CACHE_DIR": str(tmp_path)}
    found = hosts.inventory(hosts.node_count(environ), environ)
    nodes = found["instinct_nodes"]["hosts"]
    addresses = [found["_meta"]["hostvars"][name]["ansible_host"] for name in nodes]
    assert addresses == [f"172.29.10.{10 + index}" for index in range(1, 9)]
    settings = found["instinct_nodes"]["vars"]
    assert settings["ansible_connection"] == "ssh" and settings["ansible_user"] == "root"
    assert settings["ansible_ssh_private_key_file"] == str(tmp_path / "sandbox" / "ssh" / "id_ed25519")
    # The nodes' host keys are checked against up.yml's known_hosts, never accepted on first sight.
    common = shlex.split(settings["ansible_ssh_common_args"])
    assert f"UserKnownHostsFile={tmp_path / 'sandbox' / 'ssh' / 'known_hosts'}" in common
    assert "StrictHostKeyChecking=yes" in common
    # One connection a node, kept between tasks, and no compression.
    ssh_args = shlex.split(settings["ansible_ssh_args"])
    assert "ControlPersist=60s" in ssh_args and "-C" not in ssh_args


def test_the_state_folder_follows_the_cache_settings(hosts, tmp_path):
    assert hosts.state_dir({"INSTINCT_CACHE_DIR": str(tmp_path)}) == tmp_path / "sandbox"
    assert hosts.state_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "instinct-finetune" / "sandbox"
