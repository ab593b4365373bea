#!/usr/bin/env python
"""Time to put one built wheel on every node: node to node (the wheel_build role's way) against
through the controller (the way it was: fetch to the controller, copy to every other node).

Starts NODES containers (default 8) of the Ubuntu 22.04 test image on their own network, writes a
file of SIZE MiB (default 1024) of random bytes as a wheel on the first (the builder), then
  1. through the controller: ansible.builtin.fetch from the builder, ansible.builtin.copy to the others;
  2. node to node: the role's own share step (roles/wheel_build/tasks/share.yml through include_role),
     the builder serving over HTTP and the others fetching in parallel, each checking the sha256;
and prints the seconds of each, their ratio, and the bytes each way moves through the controller.
The containers and network are removed at the end.

Run: make bench-distribution, or scripts/env.sh-ed with INSTINCT_IMAGE_JAMMY set:
     python bench/bench_distribution.py [--nodes 8] [--size-mb 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NETWORK = "instinct-bench-dist"
SUBNET = "172.29.30.0/24"
OUT = "/opt/instinct/wheels/bench/1.0/cpu"
WHEEL = "bench-1.0-py3-none-any.whl"

THROUGH_CONTROLLER = textwrap.dedent(
    """\
    ---
    - name: Fetch the wheel from the builder to the controller
      hosts: builder
      gather_facts: false
      tasks:
        - name: Fetch the wheel
          ansible.builtin.fetch:
            src: "{{ out }}/{{ wheel }}"
            dest: "{{ cache }}/"
            flat: true

    - name: Copy the wheel from the controller to every other node
      hosts: peers
      gather_facts: false
      tasks:
        - name: Copy the wheel
          ansible.builtin.copy:
            src: "{{ cache }}/{{ wheel }}"
            dest: "{{ out }}/{{ wheel }}"
            mode: "0644"
    """
)

NODE_TO_NODE = textwrap.dedent(
    """\
    ---
    - name: Share the wheel node to node, as the wheel_build role does after a build
      hosts: nodes
      gather_facts: true
      tasks:
        - name: Plan as the role does (the first node builds for the set)
          ansible.builtin.set_fact:
            wheel_build_plan_entry: {builder: "{{ groups['nodes'][0] }}", hosts: "{{ groups['nodes'] }}"}

        - name: Share the wheel with the other nodes of the arch set
          ansible.builtin.include_role:
            name: instinct.finetune.wheel_build
            tasks_from: share
          vars:
            wheel_build_name: bench
            wheel_build_out: "{{ out }}"
            instinct_user: root
            instinct_group: root
    """
)


def sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def ansible(playbook, inventory, extravars, env):
    start = time.monotonic()
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), str(playbook), "-e", json.dumps(extravars)],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT,
    )  # fmt: skip
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{playbook.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--size-mb", type=int, default=1024)
    args = parser.parse_args()
    image = os.environ.get("INSTINCT_IMAGE_JAMMY") or "instinct-test-jammy:latest"
    names = [f"instinct-bench-dist-node{i}" for i in range(1, args.nodes + 1)]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    with tempfile.TemporaryDirectory(prefix="instinct-bench-dist-") as folder:
        tmp = Path(folder)
        inventory = tmp / "hosts.json"
        inventory.write_text(json.dumps({
            "nodes": {"hosts": {n: None for n in names},
                      "vars": {"ansible_connection": "community.docker.docker",
                               "ansible_python_interpreter": "/usr/bin/python3"}},
            "builder": {"hosts": {names[0]: None}},
            "peers": {"hosts": {n: None for n in names[1:]}},
        }))  # fmt: skip
        (tmp / "through-controller.yml").write_text(THROUGH_CONTROLLER)
        (tmp / "node-to-node.yml").write_text(NODE_TO_NODE)
        sh("docker", "network", "rm", NETWORK, check=False)
        sh("docker", "network", "create", "--subnet", SUBNET, NETWORK)
        try:
            for name in names:
                sh("docker", "rm", "-f", name, check=False)
                sh("docker", "run", "-d", "--name", name, "--network", NETWORK, image, "sleep", "infinity")
                sh("docker", "exec", name, "mkdir", "-p", OUT)
            sh("docker", "exec", names[0], "sh", "-c", f"head -c {args.size_mb}M /dev/urandom > {OUT}/{WHEEL}")
            extravars = {"out": OUT, "wheel": WHEEL, "cache": str(tmp / "cache")}
            through = ansible(tmp / "through-controller.yml", inventory, extravars, env)
            for name in names[1:]:
                sh("docker", "exec", name, "rm", "-f", f"{OUT}/{WHEEL}")
            direct = ansible(tmp / "node-to-node.yml", inventory, extravars, env)
            want = sh("docker", "exec", names[0], "sha256sum", f"{OUT}/{WHEEL}").stdout.split()[0]
            got = {n: sh("docker", "exec", n, "sha256sum", f"{OUT}/{WHEEL}").stdout.split()[0] for n in names[1:]}
            if set(got.values()) != {want}:
                raise SystemExit(f"node to node left other files: {got}")
        finally:
            for name in names:
                sh("docker", "rm", "-f", name, check=False)
            sh("docker", "network", "rm", NETWORK, check=False)
    size, peers = args.size_mb, args.nodes - 1
    print(f"a {size} MiB wheel from the builder to {peers} other nodes ({args.nodes} in all):")
    print(f"  through the controller  {through:7.1f} s   {size * (peers + 1)} MiB through the controller")
    print(f"  node to node            {direct:7.1f} s   0 MiB through the controller (sha256 checked on every node)")
    print(f"  node to node takes {direct / through:.2f}x the time of through the controller (target: below 1)")
    return 0 if direct < through else 1


if __name__ == "__main__":
    sys.exit(main())
