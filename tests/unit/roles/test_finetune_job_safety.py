"""The finetune role's data safety of jobs (issue 32), step by step through ansible-playbook on local
nodes with the role's defaults and variables: the guard step (guard.yml) refuses a job while another
one trains on any of its nodes, naming it, and lets the same job through to re-attach; the plan and
launch steps (plan.yml, launch.yml) refuse a resume whose checkpoints were saved with other training
settings, naming the setting that changed and the fix, and resume them with finetune_resume: force,
appending the forced launch to the job's history of launches (never rewriting it).

systemd is answered by a stand-in systemctl first on PATH (the systemd boundary): each unit's state is
a file the test writes, and every start or stop it is asked for is logged. The job's files are under
the test's temporary folder."""

import grp
import json
import re

import yaml

from tests.unit.conftest import ROOT, role_step_playbook, run_local_play

# A group this machine has (the role gives the job's files to the training account's group).
GROUP = next(name for name in ("nogroup", "users", "daemon") if name in {group.gr_name for group in grp.getgrall()})

SYSTEMCTL = r"""#!/bin/sh
# Stand-in for systemd: a unit's ActiveState is the content of states/UNIT (inactive without one).
dir=$(dirname "$0")/..
state() { cat "$dir/states/$1" 2>/dev/null || echo inactive; }
case "$1" in
is-active)
  shift; rc=0
  for unit in "$@"; do s=$(state "$unit"); echo "$s"; [ "$s" = active ] || rc=3; done
  exit $rc ;;
show)
  unit=""
  for arg in "$@"; do unit=$arg; done
  printf 'LoadState=loaded\nActiveState=%s\nSubState=dead\nResult=exit-code\nExecMainStatus=1\nMainPID=0\n' \
    "$(state "$unit")" ;;
daemon-reload) ;;
start|stop)
  echo "$1 $2" >> "$dir/calls.log"
  [ "$1" = start ] && echo active > "$dir/states/$2" || echo inactive > "$dir/states/$2" ;;
*) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""


def stand_in_systemd(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "states").mkdir()
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text(SYSTEMCTL)
    systemctl.chmod(0o755)
    return tmp_path / "bin"


# --- one job at a time on a node ------------------------------------------------------------------

PASSED = "The guard let the job through"
GUARD_PLAYBOOK = role_step_playbook("finetune", "guard.yml", "Refuse the job while another job trains on its nodes") + (
    f"""
    - name: {PASSED}
      ansible.builtin.debug:
        msg: passed
"""
)


def run_guard(tmp_path, job, units):
    """guard.yml for ``job`` on node1 and node2, whose unit folders hold ``units`` ({host: {unit
    name: state}})."""
    bin_dir = stand_in_systemd(tmp_path)
    for host in ("node1", "node2"):
        (tmp_path / "units" / host).mkdir(parents=True)
        for name, state in units.get(host, {}).items():
            (tmp_path / "units" / host / f"instinct-finetune-{name}.service").write_text("[Service]\n")
            (tmp_path / "states" / f"instinct-finetune-{name}.service").write_text(state + "\n")
    (tmp_path / "play.yml").write_text(GUARD_PLAYBOOK)
    extravars = {
        "finetune_job_name": job,
        # Each node's own unit folder (the role reads the folder of its job's unit).
        "finetune_unit_path": f"{tmp_path}/units/{{{{ inventory_hostname }}}}/instinct-finetune-{job}.service",
    }
    return run_local_play(tmp_path / "play.yml", extravars, bin_dir=bin_dir, inventory="node1,node2,")


def test_a_second_job_is_refused_on_every_node_naming_the_running_one_and_where(tmp_path):
    proc = run_guard(tmp_path, "new-job", {"node2": {"sandbox-fault": "active", "old-job": "inactive"}})
    assert proc.returncode != 0
    for host in ("node1", "node2"):
        assert (
            f"{host}: job new-job is refused before any change: job sandbox-fault is training on node2 "
            "(unit instinct-finetune-sandbox-fault.service)." in proc.stdout
        ), proc.stdout[-3000:]
    assert "old-job" not in proc.stdout.split("TASK [Refuse the job while another one trains")[1]
    assert "systemctl stop instinct-finetune-<job>.service" in proc.stdout
    assert "See docs/runbooks/finetune-job.md" in proc.stdout
    assert PASSED not in proc.stdout
    # Each node read its units, then failed; nothing changed.
    assert len(re.findall(r"node[12] +: ok=2 +changed=0 +unreachable=0 +failed=1 ", proc.stdout)) == 2, proc.stdout


def test_the_same_job_running_again_passes_the_guard_to_re_attach(tmp_path):
    proc = run_guard(
        tmp_path, "sandbox-fault", {"node1": {"sandbox-fault": "active"}, "node2": {"sandbox-fault": "active"}}
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.count(f"TASK [{PASSED}]") == 1 and "failed=0" in proc.stdout


def test_a_job_that_ended_is_no_conflict(tmp_path):
    proc = run_guard(
        tmp_path, "new-job", {"node1": {"sandbox-fault": "inactive"}, "node2": {"sandbox-fault": "failed"}}
    )
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_the_guard_runs_before_the_role_writes_anything():
    """In the role's order, the guard comes right after the checks that only read (validate.yml), and
    before the steps that write on the nodes or start a unit."""
    block = yaml.safe_load((ROOT / "roles/finetune/tasks/main.yml").read_text())[0]["block"]
    steps = [task.get("ansible.builtin.include_tasks") for task in block]
    assert steps.index("guard.yml") == steps.index("validate.yml") + 1
    assert steps.index("guard.yml") < steps.index("stage.yml") < steps.index("launch.yml")


def test_the_run_lock_is_released_after_the_launch_and_before_the_watch():
    """Issue 32: a re-run of site.yml during the job re-attaches; the stages before the watch hold the lock."""
    block = yaml.safe_load((ROOT / "roles/finetune/tasks/main.yml").read_text())[0]["block"]
    steps = [task.get("ansible.builtin.include_tasks") or task.get("instinct.finetune.run_lock", {}).get("state")
             for task in block]  # fmt: skip
    assert steps.index("launch.yml") < steps.index("released") == steps.index("watch.yml") - 1
    release = block[steps.index("released")]
    assert "when" not in release  # also when the play does not wait (finetune_wait: false)


# --- a resume with other settings: refused, or forced with a trail --------------------------------

JOB = "safety-job"
UNIT = f"instinct-finetune-{JOB}.service"
DATA = "5d41402abc4b2a76b9719d911017c592"
SETTINGS = {"learning_rate": 0.005, "lora_rank": 8, "ds_config.zero_optimization.stage": 3}
LAUNCHED = f"aaaaaaaaaaaaaaaa world_size=1 dataset_sha1={DATA}"
CHANGED = f"bbbbbbbbbbbbbbbb world_size=1 dataset_sha1={DATA}"
FIRST_LAUNCH = json.dumps({"at": "2026-12-03T04:40:00Z", "record": LAUNCHED, "resume_step": None, "forced": "",
                           "over": "", "settings": SETTINGS})  # fmt: skip

PLAN_PLAYBOOK = f"""\
- name: Run the finetune role's plan and launch steps
  hosts: all
  gather_facts: false
  vars_files:
    - {ROOT}/roles/common/defaults/main.yml
    - {ROOT}/roles/finetune/defaults/main.yml
    - {ROOT}/roles/finetune/vars/main.yml
  tasks:
    - name: Plan the job and launch it, with the role's status settings
      module_defaults:
        instinct.finetune.finetune_job_status:
          unit: "{{{{ finetune_unit }}}}"
          exit_file: "{{{{ finetune_exit_file }}}}"
          fingerprint_file: "{{{{ finetune_fingerprint_file }}}}"
          fingerprint: "{{{{ finetune_launch_record }}}}"
          output_dir: "{{{{ finetune_output_dir }}}}"
          log_path: "{{{{ finetune_log_path }}}}"
          metrics_dir: "{{{{ finetune_metrics_dir }}}}"
      block:
        - name: Decide whether to skip, attach to, resume or start the job
          ansible.builtin.include_tasks: {ROOT}/roles/finetune/tasks/plan.yml

        - name: Launch one LLaMA-Factory process per node
          ansible.builtin.include_tasks: {ROOT}/roles/finetune/tasks/launch.yml
          when: finetune_plan.action == 'launch'
"""


class Node:
    """One node holding the job killed after checkpoint-20, launched once with SETTINGS."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.bin = stand_in_systemd(tmp_path)
        self.job_dir = tmp_path / "jobs" / JOB
        self.conf_dir = tmp_path / "conf" / JOB
        checkpoint = self.job_dir / "output" / "checkpoint-20"
        checkpoint.mkdir(parents=True)
        (checkpoint / "trainer_state.json").write_text("{}")
        self.conf_dir.mkdir(parents=True)
        self.fingerprint.write_text(LAUNCHED + "\n")
        self.history.write_text(FIRST_LAUNCH + "\n")
        self.killed()
        (tmp_path / "play.yml").write_text(PLAN_PLAYBOOK)

    @property
    def fingerprint(self):
        return self.job_dir / "fingerprint"

    @property
    def history(self):
        return self.conf_dir / "launches.jsonl"

    def killed(self):
        """The unit ended as a killed rank's does (its ExecStopPost's record)."""
        (self.tmp / "states" / UNIT).write_text("failed\n")
        (self.job_dir / "exit-status").write_text("result=signal code=killed status=KILL at=1796273101.3\n")

    def calls(self):
        log = self.tmp / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def run(self, record, settings, resume="auto"):
        extravars = {
            "finetune_job_name": JOB,
            "finetune_root": str(self.tmp / "jobs"),
            "instinct_jobs_conf_dir": str(self.tmp / "conf"),
            "finetune_log_dir": str(self.tmp / "log"),
            # What the render step gives the plan: this run's launch record and training settings.
            "finetune_launch_record": record,
            "finetune_files": {"fingerprint": record.split()[0], "settings": settings},
            "finetune_resume": resume,
            # The job's files go to the training account's group (issue 32): one this machine has.
            "instinct_group": GROUP,
        }
        return run_local_play(self.tmp / "play.yml", extravars, bin_dir=self.bin)


def test_a_resume_with_another_learning_rate_is_refused_before_anything_changes(tmp_path):
    node = Node(tmp_path)
    proc = node.run(CHANGED, {**SETTINGS, "learning_rate": 0.001})
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert (
        f"node1: job {JOB} cannot go on: its checkpoints on node1 were saved with other training settings: "
        f"learning_rate 0.005 (now 0.001) (launched with '{LAUNCHED}', now '{CHANGED}'). Give the changed job a new "
        "finetune_job_name (its checkpoints stay as they are), or set finetune_resume: force to resume them with "
        f"the new settings (every launch is kept in {node.history})." in out
    ), out[-3000:]
    assert "See docs/runbooks/finetune-job.md" in out
    # Nothing was started, written or forgotten.
    assert node.calls() == []
    assert node.fingerprint.read_text() == LAUNCHED + "\n"
    assert node.history.read_text() == FIRST_LAUNCH + "\n"
    assert (node.job_dir / "exit-status").exists()
    assert not (node.conf_dir / "resume.env").exists()
    assert "changed=0" in proc.stdout


def test_a_forced_resume_goes_on_and_leaves_a_trail_that_a_later_resume_reads(tmp_path):
    node = Node(tmp_path)
    changed = {**SETTINGS, "learning_rate": 0.001}
    proc = node.run(CHANGED, changed, resume="force")
    assert proc.returncode == 0, proc.stdout[-3000:]
    what = "its checkpoints on node1 were saved with other training settings: learning_rate 0.005 (now 0.001)"
    # The play says so (its output wraps long lines).
    said = " ".join(proc.stdout.split())
    assert f"job {JOB}: launch (resume from checkpoint-20, forced (finetune_resume: force): {what})" in said, said
    assert node.calls() == [f"start {UNIT}"]
    assert (node.conf_dir / "resume.env").read_text().endswith(f"/{JOB}/output/checkpoint-20\n")
    assert node.fingerprint.read_text() == CHANGED + "\n"
    # The first launch stays as it was; the forced one is added after it.
    first, forced = node.history.read_text().splitlines()
    assert first == FIRST_LAUNCH
    entry = json.loads(forced)
    assert {key: entry[key] for key in ("record", "resume_step", "forced", "over", "settings")} == {
        "record": CHANGED, "resume_step": 20, "forced": what, "over": LAUNCHED, "settings": changed,
    }  # fmt: skip
    assert entry["at"].endswith("Z")

    # Killed again: its checkpoints now belong to the forced settings, and going back is a change too.
    node.killed()
    again = node.run(LAUNCHED, SETTINGS)
    assert again.returncode != 0
    assert "were saved with other training settings: learning_rate 0.001 (now 0.005)" in " ".join(again.stdout.split())
    assert node.calls() == [f"start {UNIT}"]
    assert node.history.read_text().splitlines() == [first, forced]
