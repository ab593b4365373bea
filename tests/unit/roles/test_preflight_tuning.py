"""preflight's host tuning record (roles/preflight/tasks/tuning.yml, read-tuning.yml) through
ansible-playbook on this machine, read by the summary's decision (module_utils/host_tuning.py,
issue 30): what a first run with the default preflight_apply_tuning: false records, and that a check
run with preflight_apply_tuning: true changes nothing, so the settings are still reported missing.
This machine's own /proc/cmdline and numa_balancing are the state read; nothing on it is changed."""

import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils.host_tuning import tuning_findings
from tests.unit.conftest import ROOT, run_local_play

PLAYBOOK = """\
- name: Run preflight's host tuning step
  hosts: all
  gather_facts: false
  tasks:
    - name: Report and apply the host tuning
      ansible.builtin.include_role:
        name: instinct.finetune.preflight
        tasks_from: tuning.yml
"""
ARGS = ["iommu=pt", "pci=realloc=off"]


def run_tuning(tmp_path, apply, check):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    json_output = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}
    proc = run_local_play(tmp_path / "play.yml", {"preflight_apply_tuning": apply}, check=check, env=json_output)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = json.loads(proc.stdout[proc.stdout.find("{") :])
    tasks = out["plays"][0]["tasks"]
    records = [
        t["hosts"]["node1"]["ansible_facts"]["preflight_tuning"]
        for t in tasks
        if t["task"]["name"].endswith("Record the host tuning state")
    ]
    names = [t["task"]["name"] for t in tasks]
    return records, names


@pytest.mark.skipif(not Path("/proc/sys/kernel/numa_balancing").exists(), reason="no NUMA balancing knob here")
@pytest.mark.parametrize("apply", [False, True], ids=["default", "apply-in-check-mode"])
def test_the_record_holds_what_the_node_runs_with_and_a_check_run_applies_nothing(tmp_path, apply):
    records, names = run_tuning(tmp_path, apply=apply, check=apply)
    # Read once; with preflight_apply_tuning read again after the apply (and its handlers).
    assert len(records) == (2 if apply else 1)
    if apply:
        assert any(name.endswith("Run the tuning handlers before the state is read again") for name in names)
    record = records[-1]
    cmdline = Path("/proc/cmdline").read_text().split()
    assert record["cmdline_missing"] == [arg for arg in ARGS if arg not in cmdline]
    assert record["numa_balancing"] == Path("/proc/sys/kernel/numa_balancing").read_text().strip()
    assert record["c2"] in ("on", "off", "unknown")
    # Native booleans, not text: check mode applied nothing.
    assert record["applied"] is False and record["reboot_allowed"] is False
    findings = tuning_findings(record, 8)
    missing = [f["setting"] for f in findings if f["state"] == "missing"]
    assert [f"kernel command line {arg}" for arg in record["cmdline_missing"]] == missing[
        : len(record["cmdline_missing"])
    ]
    assert all(f["state"] == "missing" and "preflight_apply_tuning: true" in f["fix"] for f in findings)


def test_every_reboot_takes_one_node_at_a_time_and_preflights_waits_for_the_running_job():
    """Issue 32: a reboot handler that ignored running jobs and rebooted every node at once. Each reboot
    in the roles is throttled to one node; preflight's asks the running-job guard first (the rocm role
    holds its whole install back while a job trains)."""

    reboots = {}
    for path in sorted((ROOT / "roles").glob("*/*/*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            if isinstance(task, dict) and "ansible.builtin.reboot" in task:
                reboots[path.relative_to(ROOT).as_posix()] = task
    assert sorted(reboots) == ["roles/preflight/handlers/main.yml", "roles/rocm/tasks/reboot.yml"]
    assert all(task.get("throttle") == 1 for task in reboots.values()), reboots
    handler = reboots["roles/preflight/handlers/main.yml"]
    assert "preflight_running_jobs.jobs" in handler["when"]
    steps = yaml.safe_load((ROOT / "roles/preflight/tasks/apply-tuning.yml").read_text())
    names = [step["name"] for step in steps]
    guard = names.index("Find the fine-tune jobs running on this node before it may reboot")
    # The module's own answer, with the folder where a job launched through Slurm leaves its id.
    assert steps[guard]["instinct.finetune.running_jobs"] == {"jobs_dir": "{{ instinct_jobs_conf_dir }}"}
    # Asked before the task that notifies the reboot, and before the handlers are flushed.
    reboot = "Reboot for the new kernel command line"
    notifying = next(i for i, step in enumerate(steps) if reboot in step.get("notify", []))
    assert guard < notifying < names.index("Run the tuning handlers before the state is read again")
