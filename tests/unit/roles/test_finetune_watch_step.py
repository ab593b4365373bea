"""The finetune role's watch step (roles/finetune/tasks/watch.yml, issue 31) and the result step after it
(result.yml), through ansible-playbook on one local node with the role's defaults and variables: the
node's own status settings reach the watch, run once, through hostvars; the watch follows the job to
its end; result.yml reads how it ended on the node, the watch's stall message included. The unit is
answered by the soak's stand-in systemctl (the systemd boundary); the job's files are under the test's
temporary folder. More nodes than forks, and the stop of every other rank, are tests/soak's."""

from tests.soak.watch_soak import FAILED, SUCCEEDED, SYSTEMCTL
from tests.unit.conftest import ROOT, run_local_play

JOB = "watch-step"
UNIT = f"instinct-finetune-{JOB}.service"

PLAYBOOK = f"""\
- name: Run the finetune role's watch and result steps
  hosts: all
  gather_facts: false
  vars_files:
    - {ROOT}/roles/common/defaults/main.yml
    - {ROOT}/roles/finetune/defaults/main.yml
    - {ROOT}/roles/finetune/vars/main.yml
  tasks:
    - name: Watch the job and read how it ended, with the role's status settings
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
        - name: Watch the job until it ends
          ansible.builtin.include_tasks: {ROOT}/roles/finetune/tasks/watch.yml

        - name: Check how the job ended
          ansible.builtin.include_tasks: {ROOT}/roles/finetune/tasks/result.yml
"""


def run_job(tmp_path, reads, ends):
    """The job's unit runs for ``reads`` reads of its state, then ends as ``ends`` says."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "units").mkdir()
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text(SYSTEMCTL)
    systemctl.chmod(0o755)
    root = tmp_path / "jobs"
    (root / JOB).mkdir(parents=True)
    (tmp_path / "units" / f"{UNIT}.rounds").write_text(str(reads))
    (tmp_path / "units" / f"{UNIT}.ends").write_text(ends)
    (tmp_path / "units" / f"{UNIT}.exitpath").write_text(str(root / JOB / "exit-status"))
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    extravars = {
        "finetune_job_name": JOB,
        "finetune_root": str(root),
        "finetune_log_dir": str(tmp_path / "log"),
        # The launch record of the job's settings, which the job's own steps would make.
        "finetune_launch_record": "",
        "finetune_progress_interval": 0,
        "finetune_timeout_hours": 1,
    }
    return run_local_play(playbook, extravars, bin_dir=tmp_path / "bin")


def test_the_role_watches_the_job_to_its_end_and_reads_it_succeeded(tmp_path):
    proc = run_job(tmp_path, reads=3, ends=SUCCEEDED)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.count(f"job {JOB}, round ") == 4
    assert "rank 0 node1: running" in proc.stdout and "rank 0 node1: succeeded" in proc.stdout
    assert "failed=0" in proc.stdout and "skipped=1" in proc.stdout  # result.yml's failure skipped


def test_a_failed_rank_fails_the_play_naming_it_and_the_runbook(tmp_path):
    proc = run_job(tmp_path, reads=2, ends=FAILED)
    assert proc.returncode != 0
    assert proc.stdout.count(f"job {JOB}, round ") == 3
    assert f"node1: rank 0 of job {JOB} ended: at=" in proc.stdout
    assert "code=exited result=exit-code status=1" in proc.stdout
    assert "The first rank to die was on node1" in proc.stdout
    assert "docs/runbooks/rank-failed.md" in proc.stdout
