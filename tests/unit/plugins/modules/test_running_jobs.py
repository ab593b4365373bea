"""instinct.finetune.running_jobs, the check every stage that could disturb a training job makes
before it acts: a job launched through Slurm (finetune_launcher: slurm) has no systemd unit, so the
module also reads each job folder's Slurm job id and asks squeue. Run in-process with systemctl and
squeue answered by the test (the system's and Slurm's boundary); squeue's lines are the recorded
tables' jobs in the collection's format, as test_finetune_job_status.py builds them."""

import json

import pytest
import yaml
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.instinct.finetune.plugins.modules import running_jobs
from tests.unit.conftest import ROOT, role_tasks
from tests.unit.plugins.modules.test_finetune_job_status import PENDING_RESOURCES, RUNNING_TWO_NODES, SQUEUE_FORGOT

# squeue-l_orfeo-areasciencepark-2026's job 882655 as the collection's format reads a finished one.
COMPLETED = "882655|COMPLETED|None|1|dgx003|2:10:07|12:00:00|Acid_rag\n"


def ours(line, job):
    """A recorded squeue line as the finetune role's job JOB: its sbatch --job-name (the last field)."""
    return line.rsplit("|", 1)[0] + f"|{running_jobs.SLURM_NAME_PREFIX}{job}\n"


def test_the_name_it_expects_is_the_one_the_finetune_role_submits_under():
    """The module reads the job's name from its folder the way the finetune role names the job to
    sbatch: were they to part, every running Slurm fine-tune would read as another job's id."""
    variables = yaml.safe_load((ROOT / "roles/finetune/vars/main.yml").read_text())
    assert variables["finetune_slurm_job_name"] == running_jobs.SLURM_NAME_PREFIX + "{{ finetune_job_name }}"


def run(monkeypatch, capsys, tmp_path, ids, answers, *, found=("systemctl", "squeue"), units=()):  # noqa: PLR0913
    """main() over a unit folder holding ``units`` (all active) and a jobs folder whose job folders
    hold ``ids`` ({job: text of slurm-job-id}); squeue answers answers[job id]. Returns (rc, result,
    the squeue calls)."""
    unit_dir, jobs_dir = tmp_path / "units", tmp_path / "jobs"
    unit_dir.mkdir(parents=True)
    for unit in units:
        (unit_dir / unit).write_text("[Service]\n")
    for job, text in ids.items():
        (jobs_dir / job).mkdir(parents=True)
        (jobs_dir / job / "slurm-job-id").write_text(text)
    (jobs_dir / "systemd-job").mkdir(parents=True, exist_ok=True)  # a job folder without a Slurm id
    calls = []

    def run_command(_module, argv, *_args, **_kwargs):
        if argv[0].endswith("systemctl"):
            return 0, "active\n" * len(units), ""
        calls.append(argv)
        job_id = argv[1].removeprefix("--jobs=")
        return answers[job_id]

    def get_bin_path(_module, name, required=False, *_a, **_k):
        return f"/usr/bin/{name}" if name in found else None

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    params = {"unit_dir": str(unit_dir), "jobs_dir": str(jobs_dir)}
    with patch_module_args(params), pytest.raises(SystemExit) as ended:
        running_jobs.main()
    return ended.value.code, json.loads(capsys.readouterr().out), calls


def test_a_slurm_job_pending_or_running_counts_as_running_and_a_finished_or_forgotten_one_does_not(
    tmp_path, monkeypatch, capsys
):
    ids = {"waits": "403035\n", "trains": "424906;cluster2\n", "done": "882655\n", "gone": "4242\n"}
    answers = {"403035": (0, ours(PENDING_RESOURCES, "waits"), ""),
               "424906": (0, ours(RUNNING_TWO_NODES, "trains"), ""),
               "882655": (0, ours(COMPLETED, "done"), ""), "4242": SQUEUE_FORGOT}  # fmt: skip
    rc, result, calls = run(monkeypatch, capsys, tmp_path, ids, answers, units=["instinct-finetune-unit-job.service"])
    assert rc == 0
    assert result["jobs"] == ["trains", "unit-job", "waits"]
    assert result["by_launcher"] == {"systemd": ["unit-job"], "slurm": ["trains", "waits"]}
    assert result["slurm"]["waits"] == {"job_id": "403035", "state": "PENDING", "error": "", "other_name": None}
    assert result["slurm"]["done"]["state"] == "COMPLETED" and result["slurm"]["gone"]["state"] == ""
    assert "systemd-job" not in result["slurm"]
    assert sorted(call[1] for call in calls) == ["--jobs=403035", "--jobs=4242", "--jobs=424906", "--jobs=882655"]
    assert all(call[2:4] == ["--noheader", "--states=all"] for call in calls)


def test_an_id_that_names_another_job_now_does_not_hold_the_stages_back(tmp_path, monkeypatch, capsys):
    """Slurm numbers its jobs again after it lost its saved state: the id a finished job left on the node
    then names someone else's running job, which is not this job (before, every stage held back for it)."""
    answers = {"424906": (0, RUNNING_TWO_NODES, ""), "403035": (0, ours(PENDING_RESOURCES, "waits"), "")}
    rc, result, _calls = run(monkeypatch, capsys, tmp_path, {"old": "424906\n", "waits": "403035\n"}, answers)
    assert rc == 0 and result["jobs"] == ["waits"]
    assert result["slurm"]["old"] == {"job_id": "424906", "state": "", "error": "", "other_name": "qe"}


def test_a_slurm_job_squeue_cannot_answer_for_counts_as_running(tmp_path, monkeypatch, capsys):
    """A stage holds back rather than disturb a job it cannot see: no squeue on the node, squeue
    failing, or an id file that is not what sbatch --parsable printed."""
    rc, result, _calls = run(monkeypatch, capsys, tmp_path, {"trains": "424906\n"}, {}, found=("systemctl",))
    assert rc == 0 and result["jobs"] == ["trains"]
    assert result["slurm"]["trains"]["error"] == "squeue is not on this node's PATH"
    refused = {"424906": (1, "", "squeue stand-in: Unable to contact slurm controller\n")}
    rc, result, _calls = run(monkeypatch, capsys, tmp_path / "failing", {"trains": "424906\n"}, refused)
    assert result["jobs"] == ["trains"] and "squeue exited 1" in result["slurm"]["trains"]["error"]
    rc, result, calls = run(monkeypatch, capsys, tmp_path / "text", {"odd": "Submitted batch job 4242\n"}, {})
    assert result["jobs"] == ["odd"] and calls == []


def test_no_slurm_job_on_record_asks_no_squeue(tmp_path, monkeypatch, capsys):
    rc, result, calls = run(monkeypatch, capsys, tmp_path, {"never": ""}, {}, found=("systemctl",))
    assert rc == 0 and result["jobs"] == [] and result["slurm"] == {} and calls == []


def test_every_stage_that_holds_back_for_a_job_reads_the_slurm_jobs_folder_too():
    """Each running_jobs task of the roles names the common role's folder of job settings exactly as
    written (a quoting slip once made it a relative path that matched nothing, so those stages saw
    no job launched through Slurm); and the module refuses a relative folder."""
    calls = [(path, task["instinct.finetune.running_jobs"]) for path, task in role_tasks()
             if "instinct.finetune.running_jobs" in task]  # fmt: skip
    assert len(calls) >= 8, calls
    for path, args in calls:
        assert (args or {}).get("jobs_dir") == "{{ instinct_jobs_conf_dir }}", (str(path), args)


def test_a_relative_jobs_folder_is_refused(tmp_path, monkeypatch, capsys):
    params = {"unit_dir": str(tmp_path), "jobs_dir": '"/etc/instinct-finetune/jobs"'}
    with patch_module_args(params), pytest.raises(SystemExit) as ended:
        running_jobs.main()
    result = json.loads(capsys.readouterr().out)
    assert ended.value.code == 1 and "is not an absolute path" in result["msg"]
