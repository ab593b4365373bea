"""Drive instinct.finetune.finetune_watch through ansible-playbook for a chosen number of rounds,
against jobs that stay running (shared by tests/soak and bench/bench_watch.py).

The nodes are local aliases of this machine (ansible_connection local), each with its own Python
(``bin/python-HOST``, its ansible_python_interpreter, which notes each module run in
``HOST/python.log``); their units are answered by a stand-in ``systemctl`` first on PATH (the systemd
boundary): ``show`` reports the unit active for ``rounds`` reads, then inactive with an exit record
written as the unit's ExecStopPost would, and ``stop`` ends it as systemd's stop does. Every round of
the watch is a real module run of finetune_job_status on every node, over that node's connection.
"""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SYSTEMCTL = r"""#!/bin/sh
# Stand-in for systemd (see watch_soak.py). finetune_job_status's "show --no-pager -p ... UNIT" counts
# the unit's reads: it runs for as many reads as its .rounds file says, then ends as its .ends file
# says (the exit record its ExecStopPost would write). systemd_service's "show UNIT" and "stop UNIT"
# see and end the same unit; a stop ends it as systemd's stop does (SIGTERM).
unit=""
for arg in "$@"; do unit=$arg; done
dir=$(dirname "$0")/../units
ended() {
  [ -f "$dir/$unit.exit" ] || echo "$1 at=$(date +%s)" > "$(cat "$dir/$unit.exitpath")"
  touch "$dir/$unit.exit"
}
case "$1" in
show)
  if [ "$2" = "--no-pager" ]; then
    count=$(cat "$dir/$unit.count" 2>/dev/null || echo 0)
    count=$((count + 1))
    echo "$count" > "$dir/$unit.count"
    [ "$count" -le "$(cat "$dir/$unit.rounds")" ] || ended "$(cat "$dir/$unit.ends")"
  fi
  if [ -f "$dir/$unit.exit" ]; then
    printf 'LoadState=loaded\nActiveState=inactive\nSubState=dead\nResult=success\nExecMainStatus=0\nMainPID=0\n'
  else
    printf 'LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\nExecMainStatus=0\nMainPID=4711\n'
  fi
  ;;
stop) ended "result=success code=killed status=TERM" ;;
*) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""

# How a unit ends once its reads run out: as a job that finished, or as a rank that failed.
SUCCEEDED = "result=success code=exited status=0"
FAILED = "result=exit-code code=exited status=1"

PLAYBOOK = textwrap.dedent(
    """\
    ---
    - name: Watch jobs that stay running
      hosts: nodes
      gather_facts: false
      tasks:
        - name: Record where the watch reads each node's part of the job
          ansible.builtin.set_fact:
            soak_status:
              unit: "instinct-finetune-soak-{{ inventory_hostname }}.service"
              exit_file: "{{ soak_dir }}/{{ inventory_hostname }}/exit-status"
              fingerprint_file: "{{ soak_dir }}/{{ inventory_hostname }}/fingerprint"
              output_dir: "{{ soak_dir }}/{{ inventory_hostname }}/output"
              log_path: "{{ soak_dir }}/{{ inventory_hostname }}/train.log"
              metrics_dir: "{{ soak_dir }}/{{ inventory_hostname }}/metrics"

        - name: Watch the job
          instinct.finetune.finetune_watch:
            job: soak
            ranks: "{{ groups['nodes'] }}"
            status: "{{ dict(groups['nodes'] | zip(groups['nodes'] | map('extract', hostvars, 'soak_status'))) }}"
            interval: 0
            timeout: 3600
            stall_minutes: 30
          run_once: true
          register: watched

        - name: Hand the result to the driver
          ansible.builtin.copy:
            content: "{{ watched | to_json }}"
            dest: "{{ soak_dir }}/{{ inventory_hostname }}.result.json"
            mode: "0600"
          delegate_to: localhost
    """
)


def soak(workdir, rounds, hosts=("node-a", "node-b"), forks=None, failing=()):
    """Run the watch until every host's unit was read ``rounds`` times, then ended as a finished job;
    a host in ``failing`` ends as a failed rank instead, and the others then run on until the watch
    stops them. ``forks``: ansible-playbook's --forks (its default when None). Returns the seconds it
    took, the controller's peak RSS in MiB (the largest ansible process), every host's registered
    result, and the play's output."""
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
        # With a failing rank, the others would run far longer than the watch needs to stop them.
        runs = rounds if host in failing or not failing else rounds * 1000
        (workdir / "units" / f"{unit}.rounds").write_text(str(runs))
        (workdir / "units" / f"{unit}.ends").write_text(FAILED if host in failing else SUCCEEDED)
        (workdir / "units" / f"{unit}.exitpath").write_text(str(workdir / host / "exit-status"))
        # Each node's own Python (its ansible_python_interpreter), which notes every module run on it.
        python = workdir / "bin" / f"python-{host}"
        python.write_text(f'#!/bin/sh\necho run >> "{workdir / host / "python.log"}"\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
    inventory = workdir / "hosts.yml"
    node_vars = {
        host: {"ansible_connection": "local", "ansible_python_interpreter": str(workdir / "bin" / f"python-{host}")}
        for host in hosts
    }
    inventory.write_text(json.dumps({"nodes": {"hosts": node_vars}}))
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
    # Reaped with wait4, for this run's own peak (its workers included): RUSAGE_CHILDREN is the
    # largest of every child this process ever had.
    with (workdir / "stdout.txt").open("w+") as out, (workdir / "stderr.txt").open("w+") as err:
        proc = subprocess.Popen(
            [str(ansible) if ansible.exists() else "ansible-playbook", "-i", str(inventory), str(workdir / "watch.yml"),
             "-e", f"soak_dir={workdir}", *(["--forks", str(forks)] if forks else [])],
            stdout=out, stderr=err, env=env, cwd=ROOT,
        )  # fmt: skip
        timer = threading.Timer(3600, proc.kill)
        timer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    seconds = time.monotonic() - start
    peak_mib = usage.ru_maxrss / 1024
    assert proc.returncode == 0, stdout[-4000:] + stderr[-4000:]
    results = {host: json.loads((workdir / f"{host}.result.json").read_text()) for host in hosts}
    return seconds, peak_mib, results, stdout
