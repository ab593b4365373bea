#!/usr/bin/env python3
"""The local sandbox cluster's inventory: SANDBOX_NODES Ubuntu 22.04 containers (default 2, up to 32)
started by `make sandbox` (molecule/resources/sandbox/up.yml), reached through the Docker connection
plugin, no SSH needed. The first node is also the Prometheus server (it scrapes every node over the
management network). Its group and host variables are the YAML files beside it (group_vars/).

A script, not a YAML file, so that one variable sizes the cluster: Ansible's YAML inventory has no
templating. Run it to see what Ansible sees: SANDBOX_NODES=8 inventories/sandbox/hosts.py --list
"""

import json
import os
import sys

LIMIT = 32


def node_count(environ):
    raw = environ.get("SANDBOX_NODES", "").strip() or "2"
    if not raw.isdigit() or not 1 <= int(raw) <= LIMIT:
        raise SystemExit(
            f"inventories/sandbox: SANDBOX_NODES={raw!r} is not a node count; set a whole number from 1 to {LIMIT} "
            "(the default is 2). See docs/testing.md"
        )
    return int(raw)


def inventory(count):
    nodes = [f"instinct-sandbox-node{index}" for index in range(1, count + 1)]
    return {
        "instinct_nodes": {
            "hosts": nodes,
            "vars": {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"},
        },
        "monitoring": {"hosts": nodes[:1]},
        "_meta": {"hostvars": {}},
    }


def main(argv):
    if "--host" in argv:
        print("{}")
        return 0
    print(json.dumps(inventory(node_count(os.environ)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
