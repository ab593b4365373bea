#!/usr/bin/env python
"""Seconds from the start of the fabric stage to its failure, for two wrong settings, beside what a
training launch would wait instead.

A fabric that cannot carry the job should fail in the fabric stage, naming the node, not in the
training launch: torchrun's static rendezvous (``--master_addr``, the launch every job unit uses)
waits 900 s for its peers before it gives up (torch/distributed/launcher/api.py, LaunchConfig's
default rendezvous timeout), and a collective that hangs waits ``finetune_ddp_timeout_minutes``.
Target: each failure under 30 s from the start of the fabric stage.

Two cases on the converged sandbox cluster (run `make sandbox` first):

- **wrong interface**: node2 pinned to an interface it does not have (``fabric_interface: eth9``);
- **unreachable master**: node2 taken off the master's rail (``docker network disconnect``), so its
  only interface in ``fabric_cidr`` is the other rail and the master's address is reached, if at
  all, through the management network. Reconnected afterwards.

Run: make bench-fabric, or scripts/env.sh-ed: python bench/bench_fabric_failure.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_sandbox import load_sandbox  # bench/ is on the path when run as a script

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 30
RENDEZVOUS_SECONDS = 900  # torchrun's static rendezvous default (LaunchConfig, torch 2.x)
FABRIC_PLAY = "Choose the fabric NIC, write the RCCL environment and run the all-reduce smoke test"
MASTERS_RAIL = "instinct-sandbox-2-fabric"
NODE2 = "instinct-sandbox-node2"

WRONG_INTERFACE = f"""\
---
- name: Pin node2 to an interface it does not have
  hosts: {NODE2}
  gather_facts: false
  tasks:
    - name: Set the wrong explicit interface
      ansible.builtin.set_fact:
        fabric_interface: eth9

- name: Run the fabric playbook with that mistake
  ansible.builtin.import_playbook: {ROOT}/playbooks/fabric.yml
"""


class Clock:
    """The time of the fabric play's start and of the first task failure, from the run's events."""

    def __init__(self):
        self.started = None
        self.failed = None

    def __call__(self, event):
        data = event.get("event_data") or {}
        if event.get("event") == "playbook_on_play_start" and data.get("play") == FABRIC_PLAY:
            self.started = time.monotonic()
        elif (event.get("event") in ("runner_on_failed", "runner_on_unreachable") and self.failed is None
              and not data.get("ignore_errors")):  # fmt: skip
            self.failed = time.monotonic()


def measure(sandbox, name, playbook):
    clock = Clock()
    result = sandbox.run_playbook(playbook, cmdline=sandbox.site_cmdline(), quiet=True, on_event=clock)
    if result.rc == 0 or clock.started is None or clock.failed is None:
        raise SystemExit(f"{name}: the fabric stage did not fail (rc {result.rc}); is the sandbox converged?")
    failure = result.failures[0]
    return {
        "case": name,
        "seconds": clock.failed - clock.started,
        "host": failure["host"],
        "task": failure["task"],
        "msg": " ".join(str(failure["msg"]).split())[:160],
    }


def docker_network(action, network, container):
    subprocess.run(["docker", "network", action, network, container], check=True)


def main():
    sandbox = load_sandbox()
    sandbox.sandbox_env()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fabric-") as folder:
        wrong = Path(folder) / "wrong-interface.yml"
        wrong.write_text(WRONG_INTERFACE)
        rows.append(measure(sandbox, "wrong interface", wrong))
    docker_network("disconnect", MASTERS_RAIL, NODE2)
    try:
        rows.append(measure(sandbox, "unreachable master", "fabric.yml"))
    finally:
        docker_network("connect", MASTERS_RAIL, NODE2)
    print(f"seconds from the start of the fabric stage to its failure (target: under {TARGET_SECONDS} s; "
          f"a training launch would wait {RENDEZVOUS_SECONDS} s for torchrun's rendezvous)")  # fmt: skip
    print(f"  {'case':<20} {'seconds':>8}  {'vs rendezvous':>13}  target  failed on, in task: message")
    worst = 0.0
    for row in rows:
        worst = max(worst, row["seconds"])
        verdict = "met" if row["seconds"] < TARGET_SECONDS else "MISSED"
        share = row["seconds"] / RENDEZVOUS_SECONDS
        print(f"  {row['case']:<20} {row['seconds']:>8.1f}  {share:>12.1%}  {verdict:>6}  "
              f"{row['host']}, in {row['task']!r}: {row['msg']}")  # fmt: skip
    return 0 if worst < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
