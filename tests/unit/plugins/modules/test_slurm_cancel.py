"""instinct.finetune.slurm_cancel, the one way the roles end a Slurm job of theirs (the finetune
launch's half-failed job, health's allocation and an interrupted health run's leftover): squeue reads
what the filters match, scancel ends exactly that. Run in-process with squeue and scancel answered
by the test (Slurm's boundary) and the node's accounts stood in for; the job ids are those of the
recorded tables (tests/fixtures/slurm/SOURCES.md), scancel's "nothing left" line is GC3Pie's
recording (its job 15)."""

import json
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.instinct.finetune.plugins.modules import slurm_cancel
from tests.unit.conftest import role_tasks
from tests.unit.plugins.modules.test_finetune_job_status import SQUEUE_FORGOT

SCANCEL_NOTHING_LEFT = (Path(__file__).parents[3] / "fixtures/slurm/scancel_gc3pie_invalid-job-id.txt").read_text()
ACCOUNTS = ("instinct", "root")


def listed(*ids, name="instinct-health"):
    """squeue's answer to the module's --format=%i|%j."""
    return (0, "".join(f"{job_id}|{name}\n" for job_id in ids), "")


def run(monkeypatch, capsys, params, squeue, scancel=(0, "", ""), *, check_mode=False):  # noqa: PLR0913
    """main() with squeue answering ``squeue`` and scancel ``scancel`` ((rc, out, err) each).
    Returns (rc, result, the commands run)."""
    calls = []

    def run_command(_module, argv, *_args, **_kwargs):
        calls.append(argv)
        return squeue if argv[0] == "squeue" else scancel

    def getpwnam(name):
        if name not in ACCOUNTS:
            raise KeyError(name)
        return name

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(slurm_cancel.pwd, "getpwnam", getpwnam)
    args = {"name": "instinct-health", "user": "instinct", **params}
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit) as ended:
        slurm_cancel.main()
    return ended.value.code, json.loads(capsys.readouterr().out), calls


def test_a_job_it_finds_is_cancelled_by_its_id_under_the_same_filters(monkeypatch, capsys):
    rc, result, calls = run(monkeypatch, capsys, {"job_id": "424906"}, listed("424906"))
    assert rc == 0 and result["changed"] is True and result["cancelled"] == ["424906"]
    assert calls[0][:4] == ["squeue", "--all", "--noheader", "--name=instinct-health"]
    assert "--user=instinct" in calls[0] and "--jobs=424906" in calls[0] and calls[0][-1] == "--format=%i|%j"
    assert calls[1] == ["scancel", "--name=instinct-health", "--user=instinct", "424906"]


def test_nothing_matched_is_no_change_and_runs_no_scancel(monkeypatch, capsys):
    """Before the module, a filtered scancel that matched nothing exited 0 and read as a release."""
    rc, result, calls = run(monkeypatch, capsys, {"job_id": "424906"}, (0, "", ""))
    assert rc == 0 and result["changed"] is False and result["cancelled"] == [] and len(calls) == 1
    # An id the controller forgot: squeue exits 1, "Invalid job id specified".
    rc, result, calls = run(monkeypatch, capsys, {"job_id": "4242"}, SQUEUE_FORGOT)
    assert rc == 0 and result["changed"] is False and len(calls) == 1
    # squeue's --name ignores case; scancel's does not: another job of the account is not listed as ended.
    rc, result, calls = run(monkeypatch, capsys, {"nodes": ["hbnode-38"]}, listed("424906", name="Instinct-Health"))
    assert rc == 0 and result["changed"] is False and len(calls) == 1


def test_a_job_that_ended_between_the_read_and_the_cancel_is_no_failure_and_not_counted(monkeypatch, capsys):
    rc, result, calls = run(monkeypatch, capsys, {"job_id": "15"}, listed("15"), (1, "", SCANCEL_NOTHING_LEFT))
    assert rc == 0 and result["changed"] is False and result["cancelled"] == [] and result["ended_meanwhile"] is True
    assert len(calls) == 2
    # Of two leftovers, one ended meanwhile: the other was ended by this cancel.
    rc, result, _calls = run(monkeypatch, capsys, {"nodes": ["hbnode-38"]}, listed("15", "424906"),
                             (1, "", SCANCEL_NOTHING_LEFT))  # fmt: skip
    assert rc == 0 and result["changed"] is True and result["cancelled"] == ["424906"]


def test_any_other_answer_fails_naming_the_job_what_slurm_said_and_the_runbook(monkeypatch, capsys):
    denied = (1, "", "scancel: error: Kill job error on job id 424906: Access/permission denied\n")
    rc, result, _calls = run(monkeypatch, capsys, {"job_id": "424906"}, listed("424906"), denied)
    assert rc == 1 and "424906" in result["msg"] and "Access/permission denied" in result["msg"]
    assert "docs/runbooks/slurm.md" in result["msg"]
    # Nothing is reported ended by a cancel that failed.
    assert result["cancelled"] == [] and result["changed"] is False
    down = (1, "", "squeue stand-in: Unable to contact slurm controller (connect failure)\n")
    rc, result, calls = run(monkeypatch, capsys, {"job_id": "424906"}, down)
    assert rc == 1 and "Unable to contact slurm controller" in result["msg"] and "scontrol ping" in result["msg"]
    assert len(calls) == 1


def test_the_leftovers_on_some_nodes_are_all_ended_and_check_mode_only_names_them(monkeypatch, capsys):
    params = {"nodes": ["hbnode-38", "hbnode-39"]}
    rc, result, calls = run(monkeypatch, capsys, params, listed("403035", "424906", "403035"), check_mode=True)
    assert rc == 0 and result["changed"] is True and result["cancelled"] == ["403035", "424906"]
    assert len(calls) == 1 and "--nodelist=hbnode-38,hbnode-39" in calls[0]
    assert not any(arg.startswith("--jobs=") for arg in calls[0])
    rc, result, calls = run(monkeypatch, capsys, params, listed("403035", "424906"))
    assert calls[1] == ["scancel", "--name=instinct-health", "--user=instinct", "403035", "424906"]


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"job_id": "-u root"}, "not a Slurm job id"),
        ({"nodes": ["--all"]}, "not distinct Slurm node names"),
        ({"job_id": "1", "user": "a|b"}, "holds '|'"),
        ({"job_id": "1", "user": "instinct,root"}, "holds ','"),
        # An empty id from a template slip is not "every job of that name".
        ({"job_id": ""}, "needs a job id or nodes"),
        ({"nodes": []}, "needs a job id or nodes"),
        # squeue 21.08 lists nothing for an unknown --user and exits 0: the cancel would read as done.
        ({"job_id": "1", "user": "instinkt"}, "no account 'instinkt' on this node"),
    ],
)
def test_a_value_that_cannot_name_the_job_fails_before_any_command(monkeypatch, capsys, params, said):
    rc, result, calls = run(monkeypatch, capsys, params, listed("1"))
    assert rc == 1 and calls == [] and said in result["msg"] and "docs/runbooks/slurm.md" in result["msg"]


RUNNERS = ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.raw", "ansible.builtin.script",
           "command", "shell", "raw", "script")  # fmt: skip


def test_the_roles_end_slurm_jobs_only_through_the_module():
    """One way to cancel: no role runs scancel itself, through any module that runs a command (its
    filters' silence on no match and its failure rules are the module's)."""
    by_hand = [(str(path), task.get("name")) for path, task in role_tasks()
               if any("scancel" in json.dumps(task.get(runner, "")) for runner in RUNNERS)]  # fmt: skip
    assert by_hand == []
    users = sorted(str(path) for path, task in role_tasks() if "instinct.finetune.slurm_cancel" in task)
    assert users == ["roles/finetune/tasks/launch.yml", "roles/health/tasks/allocate.yml",
                     "roles/health/tasks/main.yml"]  # fmt: skip
