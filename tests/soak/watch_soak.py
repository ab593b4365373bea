"""Drive instinct.finetune.finetune_watch through ansible-playbook for a chosen number of rounds,
against jobs that stay running (shared by tests/soak and bench/bench_watch.py).

The nodes are local aliases of this machine (ansible_connection local); their units are answered by a
stand-in ``systemctl`` first on PATH (the systemd boundary): ``show`` reports the unit active for
``rounds`` calls, then inactive with an exit record written as the unit's ExecStopPost would. Every
round of the watch is a real module run of finetune_job_status on the node and a real board exchange.
"""

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SYSTEMCTL = r"""#!/bin/sh
# Stand-in for systemd: "show UNIT" is answered from a call counter per unit (see watch_soak.py).
unit=""
for arg in "$@"; do unit=$arg; done
dir=$(dirname "$0")/../units
case "$1" in
show)
  count=$(cat "$dir/$unit.count" 2>/dev/null || echo 0)
  count=$((count + 1))
  echo "$count" > "$dir/$unit.count"
  if [ "$count" -le "$(cat "$dir/$unit.rounds")" ]; then
    printf 'ActiveState=active\nSubState=running\nResult=success\nExecMainStatus=0\nMainPID=4711\n'
  else
    [ -f "$dir/$unit.exit" ] ||
      echo "result=success code=exited status=0 at=$(date +%s)" > "$(cat "$dir/$unit.exitpath")"
    touch "$dir/$unit.exit"
    printf 'ActiveState=inactive\nSubState=dead\nResult=success\nExecMainStatus=0\nMainPID=0\n'
  fi
  ;;
*) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""

PLAYBOOK = textwrap.dedent(
    """\
    ---
    - name: Watch jobs that stay running
      hosts: nodes
      gather_facts: false
      tasks:
        - name: Watch the job
          instinct.finetune.finetune_watch:
            job: soak
            ranks: "{{ groups['nodes'] }}"
            unit: "instinct-finetune-soak-{{ inventory_hostname }}.service"
            status:
              unit: "instinct-finetune-soak-{{ inventory_hostname }}.service"
              exit_file: "{{ soak_dir }}/{{ inventory_hostname }}/exit-status"
              fingerprint_file: "{{ soak_dir }}/{{ inventory_hostname }}/fingerprint"
              output_dir: "{{ soak_dir }}/{{ inventory_hostname }}/output"
              log_path: "{{ soak_dir }}/{{ inventory_hostname }}/train.log"
              metrics_dir: "{{ soak_dir }}/{{ inventory_hostname }}/metrics"
            interval: 0
            timeout: 3600
            stall_minutes: 30
          register: watched

        - name: Hand the result to the driver
          ansible.builtin.copy:
            content: "{{ watched | to_json }}"
            dest: "{{ soak_dir }}/{{ inventory_hostname }}.result.json"
            mode: "0600"
          delegate_to: localhost
    """
)


def soak(workdir, rounds, hosts=("node-a", "node-b")):
    """Run the watch for ``rounds`` rounds on each of ``hosts``; returns the seconds it took, the
    controller's peak RSS in MiB (the largest ansible process) and every host's registered result."""
    workdir = Path(workdir)
    (workdir / "bin").mkdir(parents=True)
    (workdir / "units").mkdir()
    systemctl = workdir / "bin" / "systemctl"
    systemctl.write_text(SYSTEMCTL)
    systemctl.chmod(0o755)
    for host in hosts:
        unit = f"instinct-finetune-soak-{host}.service"
        for sub in ("output", "metrics"):
            (workdir / host / sub).mkdir(parents=True)
        (workdir / host / "train.log").write_text("")
        (workdir / "units" / f"{unit}.rounds").write_text(str(rounds))
        (workdir / "units" / f"{unit}.exitpath").write_text(str(workdir / host / "exit-status"))
    inventory = workdir / "hosts.yml"
    node_vars = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(json.dumps({"nodes": {"hosts": {h: node_vars for h in hosts}}}))
    (workdir / "watch.yml").write_text(PLAYBOOK)
    env = dict(
        os.environ,
        PATH=f"{workdir / 'bin'}{os.pathsep}{os.environ['PATH']}",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".venv" / "collections"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_NOCOLOR="1",
    )
    ansible = Path(sys.executable).parent / "ansible-playbook"
    start = time.monotonic()
    proc = subprocess.run(
        [str(ansible) if ansible.exists() else "ansible-playbook", "-i", str(inventory), str(workdir / "watch.yml"),
         "-e", f"soak_dir={workdir}"],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=3600,
    )  # fmt: skip
    seconds = time.monotonic() - start
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    results = {host: json.loads((workdir / f"{host}.result.json").read_text()) for host in hosts}
    return seconds, peak_mib, results, proc.stdout
