#!/usr/bin/env python3
"""The local sandbox cluster's inventory: SANDBOX_NODES Ubuntu 22.04 containers (default 2, up to 32)
started by `make sandbox` (molecule/resources/sandbox/up.yml), reached over SSH as a real cluster is:
each node's management address is fixed (MGMT_PREFIX + 10 + its number), root logs in with a key
that up.yml made for the sandbox, and the nodes' host keys are checked against the known_hosts file
it wrote (both in the sandbox's state folder, state_dir()). No setting of yours is needed. The
first node is also the Prometheus server (it scrapes every node over the management network). Its
group and host variables are the YAML files beside it (group_vars/).

A script, not a YAML file, so that one variable sizes the cluster: Ansible's YAML inventory has no
templating. Run it to see what Ansible sees: SANDBOX_NODES=8 inventories/sandbox/hosts.py --list
"""

import json
import os
import shlex
import sys
from pathlib import Path

LIMIT = 32
# The management network's addresses (molecule/resources/sandbox/up.yml gives each node its own).
MGMT_PREFIX = "172.29.10."
# ssh's own options for the sandbox: the key and known_hosts up.yml wrote and nothing else, the
# connection kept open between tasks (ControlPersist), and no compression (Ansible's default -C costs
# CPU on a local network).
SSH_ARGS = (
    "-o ControlMaster=auto -o ControlPersist=60s -o PreferredAuthentications=publickey"
    # A node removed and started again within ControlPersist: the stale master gives up in 15 s.
    " -o ServerAliveInterval=5 -o ServerAliveCountMax=3"
)


def state_dir(environ=None):
    """The sandbox's state: $INSTINCT_CACHE_DIR/sandbox, by default ~/.cache/instinct-finetune/sandbox."""
    environ = os.environ if environ is None else environ
    base = environ.get("INSTINCT_CACHE_DIR") or (
        Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "instinct-finetune"
    )
    return Path(base) / "sandbox"


def ssh_dir(environ=None):
    """The sandbox's SSH key (id_ed25519) and the nodes' host keys (known_hosts), written by up.yml."""
    return state_dir(environ) / "ssh"


def mgmt_address(index):
    """The management address of node ``index`` (1-based)."""
    return f"{MGMT_PREFIX}{10 + index}"


def node_count(environ):
    raw = environ.get("SANDBOX_NODES", "").strip() or "2"
    if not raw.isdigit() or not 1 <= int(raw) <= LIMIT:
        raise SystemExit(
            f"inventories/sandbox: SANDBOX_NODES={raw!r} is not a node count; set a whole number from 1 to {LIMIT} "
            "(the default is 2). See docs/testing.md"
        )
    return int(raw)


def inventory(count, environ=None):
    nodes = [f"instinct-sandbox-node{index}" for index in range(1, count + 1)]
    keys = ssh_dir(environ)
    return {
        "instinct_nodes": {
            "hosts": nodes,
            "vars": {
                "ansible_connection": "ssh",
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(keys / "id_ed25519"),
                "ansible_ssh_args": SSH_ARGS,
                "ansible_ssh_common_args": shlex.join(
                    [
                        "-o",
                        f"UserKnownHostsFile={keys / 'known_hosts'}",
                        "-o",
                        "StrictHostKeyChecking=yes",
                        "-o",
                        "IdentitiesOnly=yes",
                    ]
                ),
                "ansible_python_interpreter": "/usr/bin/python3",
            },
        },
        "monitoring": {"hosts": nodes[:1]},
        "_meta": {"hostvars": {name: {"ansible_host": mgmt_address(index)} for index, name in enumerate(nodes, 1)}},
    }


def main(argv):
    if "--host" in argv:
        print("{}")
        return 0
    print(json.dumps(inventory(node_count(os.environ)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
