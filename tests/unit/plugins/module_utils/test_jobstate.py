"""Where a fine-tune job stands (module_utils/jobstate.py), on recordings of a real two-node
LLaMA-Factory run (tests/fixtures/finetune/SOURCES.md), and the filters that decide for the job."""

import json

import pytest

from ansible_collections.instinct.finetune.plugins.filter.finetune import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import (
    checkpoints,
    launch_record,
    launched_settings,
    node_state,
    other_jobs,
    other_jobs_problem,
    parse_exit_record,
    parse_launch_record,
    parse_systemctl_show,
    parse_trainer_log,
    plan_launch,
    progress,
    progress_line,
    rank_order,
    root_errors,
    round_summary,
    settings_change,
    settings_differences,
)
from tests.unit.conftest import FIXTURES
from tests.unit.plugins.module_utils.test_jobspec import job_files, sandbox_job, sandbox_node

TRAINER_LOG = (FIXTURES / "finetune" / "trainer_log.jsonl").read_text(encoding="utf-8")
FILTERS = FilterModule().filters()

# Lines 250-333 of rank 1's train.log in the recorded sandbox run: its third launch dying of a
# PermissionError (wrapped by torchrun and by llamafactory-cli), then the unit's launch line of the
# fourth launch and its first lines. See tests/fixtures/finetune/SOURCES.md.
RANK1_LOG = """\
[INFO|2026-12-03 04:44:59] llamafactory.data.loader:144 >> Loading dataset tiny-instruct.json...
[rank1]: Traceback (most recent call last):
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/launcher.py", line 185, in <module>
[rank1]:     run_exp()
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/train/tuner.py", line 149, in run_exp
[rank1]:     _training_function(config={"args": args, "callbacks": callbacks})
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/train/tuner.py", line 117, in _training_function
[rank1]:     run_sft(model_args, data_args, training_args, finetuning_args, generating_args, callbacks)
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/train/sft/workflow.py", line 52, in run_sft
[rank1]:     dataset_module = get_dataset(template, model_args, data_args, training_args, stage="sft", **tokenizer_module)
[rank1]:                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/data/loader.py", line 303, in get_dataset
[rank1]:     dataset = _get_merged_dataset(data_args.dataset, model_args, data_args, training_args, stage)
[rank1]:               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/data/loader.py", line 181, in _get_merged_dataset
[rank1]:     datasets[dataset_name] = _load_single_dataset(dataset_attr, model_args, data_args, training_args)
[rank1]:                              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/data/loader.py", line 131, in _load_single_dataset
[rank1]:     dataset = load_dataset(
[rank1]:               ^^^^^^^^^^^^^
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/datasets/load.py", line 1392, in load_dataset
[rank1]:     builder_instance = load_dataset_builder(
[rank1]:                        ^^^^^^^^^^^^^^^^^^^^^
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/datasets/load.py", line 1166, in load_dataset_builder
[rank1]:     builder_instance: DatasetBuilder = builder_cls(
[rank1]:                                        ^^^^^^^^^^^^
[rank1]:   File "/opt/instinct/venv/lib/python3.11/site-packages/datasets/builder.py", line 384, in __init__
[rank1]:     os.makedirs(self._cache_dir_root, exist_ok=True)
[rank1]:   File "<frozen os>", line 215, in makedirs
[rank1]:   File "<frozen os>", line 225, in makedirs
[rank1]: PermissionError: [Errno 13] Permission denied: '/var/lib/instinct-finetune/hf-home'
E1203 04:45:01.270000 18266 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 18269) of binary: /opt/instinct/venv/bin/python3.11
Traceback (most recent call last):
  File "/opt/instinct/venv/bin/torchrun", line 7, in <module>
    sys.exit(main())
             ^^^^^^
  File "/opt/instinct/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 367, in wrapper
    return f(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^
  File "/opt/instinct/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main
    run(args)
  File "/opt/instinct/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1019, in run
    elastic_launch(
  File "/opt/instinct/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 194, in __call__
    return launch_agent(
           ^^^^^^^^^^^^^
  File "/opt/instinct/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/launcher.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_04:45:01
  host      : instinct-sandbox-node2
  rank      : 1 (local_rank: 0)
  exitcode  : 1 (pid: 18269)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
Traceback (most recent call last):
  File "/opt/instinct/venv/bin/llamafactory-cli", line 7, in <module>
    sys.exit(main())
             ^^^^^^
  File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/cli.py", line 24, in main
    launcher.launch()
  File "/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/launcher.py", line 115, in launch
    process = subprocess.run(
              ^^^^^^^^^^^^^^^
  File "/opt/site-python/3.11/lib/python3.11/subprocess.py", line 571, in run
    raise CalledProcessError(retcode, process.args,
subprocess.CalledProcessError: Command '['torchrun', '--nnodes', '2', '--node_rank', '1', '--nproc_per_node', '1', '--master_addr', '172.29.20.2', '--master_port', '29500', '/opt/instinct/venv/lib/python3.11/site-packages/llamafactory/launcher.py', '/etc/instinct-finetune/jobs/sandbox-tiny/train.yaml']' returned non-zero exit status 1.
==== instinct.finetune launch of rank 1 at 2026-12-03T04:45:55+00:00 ====
[INFO|2026-12-03 04:46:01] llamafactory.launcher:144 >> Initializing 1 distributed tasks at: 172.29.20.2:29500
[INFO|2026-12-03 04:46:01] llamafactory.launcher:144 >> Multi-node training enabled: num nodes: 2, node rank: 1
[transformers] warmup_ratio is deprecated and will be removed in v5.2. Use `warmup_steps` instead.
/opt/instinct/venv/lib/python3.11/site-packages/accelerate/state.py:271: UserWarning: OMP_NUM_THREADS/MKL_NUM_THREADS unset, we set it at 2 to improve oob performance.
  warnings.warn(
[WARNING|2026-12-03 04:46:11] llamafactory.hparams.parser:149 >> We recommend enable mixed precision training.
[INFO|2026-12-03 04:46:11] llamafactory.hparams.parser:523 >> Process rank: 1, world size: 2, device: cpu:0, distributed training: True, compute dtype: None
"""  # noqa: E501
PERMISSION_ERROR = "[rank1]: PermissionError: [Errno 13] Permission denied: '/var/lib/instinct-finetune/hf-home'"


# --- systemctl show and the exit record ---------------------------------------------------------


def test_parse_systemctl_show_of_a_running_unit():
    # systemctl show --no-pager -p ActiveState -p SubState -p Result -p ExecMainStatus -p MainPID
    # prints the service's properties before the unit's, whatever the order of -p.
    text = "MainPID=20417\nResult=success\nExecMainStatus=0\nActiveState=active\nSubState=running\n"
    assert parse_systemctl_show(text) == {
        "MainPID": "20417",
        "Result": "success",
        "ExecMainStatus": "0",
        "ActiveState": "active",
        "SubState": "running",
    }


def test_parse_systemctl_show_keeps_values_with_equals_signs_and_skips_other_lines():
    text = "ActiveState=failed\nSubState=failed\nStatusText=exit=1 \n\nnot a property\n"
    assert parse_systemctl_show(text) == {"ActiveState": "failed", "SubState": "failed", "StatusText": "exit=1"}


def test_parse_exit_record():
    # ExecStopPost: echo "result=$SERVICE_RESULT code=$EXIT_CODE status=$EXIT_STATUS at=$(date +%s.%N)"
    assert parse_exit_record("result=exit-code code=exited status=1 at=1796273101.344512907\n") == {
        "result": "exit-code",
        "code": "exited",
        "status": "1",
        "at": "1796273101.344512907",
    }
    assert parse_exit_record("result=success code=killed status=TERM at=1796273160.5")["status"] == "TERM"
    assert parse_exit_record("") is None
    assert parse_exit_record(None) is None
    assert parse_exit_record("garbage without pairs\n") is None


# --- trainer_log.jsonl ---------------------------------------------------------------------------


def test_parse_trainer_log_reads_every_entry_of_a_real_log():
    entries = parse_trainer_log(TRAINER_LOG)
    assert len(entries) == 23
    assert entries[0]["current_steps"] == 2
    assert entries[0]["loss"] == 6.516677379608154
    assert [e["current_steps"] for e in entries if "eval_loss" in e] == [20, 40]


def test_parse_trainer_log_skips_torn_and_foreign_lines():
    lines = TRAINER_LOG.splitlines()
    # A log read while the Trainer appends: a line cut off mid-write, plus lines that are not entries.
    text = "\n".join([lines[0], "", "not json", "[1, 2]", '{"epoch": 0.1}', *lines[1:5], lines[5][:40]])
    entries = parse_trainer_log(text)
    assert [e["current_steps"] for e in entries] == [2, 4, 6, 8, 10]
    assert parse_trainer_log("") == []
    assert parse_trainer_log(None) == []


def test_progress_of_the_real_run():
    prog = progress(parse_trainer_log(TRAINER_LOG))
    assert prog["current_steps"] == 40
    assert prog["total_steps"] == 40
    assert prog["percentage"] == 100.0
    assert prog["loss"] == 4.244116306304932  # the last logged training loss
    assert prog["eval_loss"] == 4.547991752624512  # the run's all_results.json eval_loss
    assert prog["elapsed_time"] == "0:00:07"
    assert len(prog["losses"]) == 20
    assert [step for step, _loss in prog["losses"]] == list(range(2, 41, 2))
    assert prog["losses"][0] == [2, 6.516677379608154]
    assert prog["losses"][-1][1] < prog["losses"][0][1] - 2  # the loss curve went down


def test_progress_midway_and_before_any_step():
    prog = progress(parse_trainer_log("\n".join(TRAINER_LOG.splitlines()[:10])))
    assert (prog["current_steps"], prog["total_steps"], prog["percentage"]) == (20, 40, 50.0)
    assert prog["loss"] == 4.9271464347839355
    assert prog["eval_loss"] is None
    assert progress([]) == {
        "current_steps": 0,
        "total_steps": None,
        "percentage": None,
        "loss": None,
        "eval_loss": None,
        "elapsed_time": None,
        "remaining_time": None,
        "losses": [],
    }


def test_progress_line():
    prog = progress(parse_trainer_log(TRAINER_LOG))
    assert progress_line(prog) == "step 40/40 (100.0%), loss 4.244, eval loss 4.548, elapsed 0:00:07, left 0:00:00"
    midway = progress(parse_trainer_log("\n".join(TRAINER_LOG.splitlines()[:6])))
    assert progress_line(midway) == "step 12/40 (30.0%), loss 5.434, elapsed 0:00:02, left 0:00:05"
    assert progress_line({}) == "no step logged yet"
    assert progress_line(progress([])) == "no step logged yet"


# --- checkpoints and the state of a node ---------------------------------------------------------

COMPLETE = ["config.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state_0.pth", "trainer_state.json"]


def test_checkpoints_by_step_with_completeness():
    listing = {
        "checkpoint-10": COMPLETE,
        "checkpoint-100": COMPLETE,
        "checkpoint-20": ["config.json", "model.safetensors"],  # cut off mid-save
        "checkpoint-x": COMPLETE,
        "runs": [],
        "eval": ["eval_results.json"],
    }
    assert checkpoints(listing) == [
        {"name": "checkpoint-10", "step": 10, "complete": True},
        {"name": "checkpoint-20", "step": 20, "complete": False},
        {"name": "checkpoint-100", "step": 100, "complete": True},
    ]
    assert checkpoints({}) == []


SUCCESS = {"result": "success", "code": "exited", "status": "0", "at": "1796273160.1"}


@pytest.mark.parametrize(
    ("active", "record", "on_node", "wanted", "state"),
    [
        ("active", None, "", "abc", "running"),
        ("activating", None, "", "abc", "running"),
        ("deactivating", SUCCESS, "abc", "abc", "running"),
        ("active", SUCCESS, "old", "abc", "running"),  # a running job is watched, never judged stale
        ("inactive", None, "", "abc", "absent"),
        ("inactive", SUCCESS, "abc", "abc", "succeeded"),
        ("inactive", SUCCESS, "old", "abc", "stale"),
        ("inactive", SUCCESS, "", "abc", "succeeded"),  # no fingerprint written: nothing to compare
        ("inactive", SUCCESS, "abc", "", "succeeded"),
        ("failed", {"result": "exit-code", "code": "exited", "status": "1", "at": "1"}, "abc", "abc", "failed"),
        # systemctl stop: SIGTERM counts as a clean end for systemd, but the rank did not finish.
        ("inactive", {"result": "success", "code": "killed", "status": "TERM", "at": "1"}, "abc", "abc", "failed"),
        ("failed", {"result": "signal", "code": "killed", "status": "KILL", "at": "1"}, "abc", "abc", "failed"),
        ("failed", {"result": "timeout", "code": "killed", "status": "TERM", "at": "1"}, "old", "abc", "failed"),
    ],
)
def test_node_state(active, record, on_node, wanted, state):
    unit = parse_systemctl_show(f"MainPID=0\nResult=success\nExecMainStatus=0\nActiveState={active}\nSubState=dead\n")
    assert node_state(unit, record, on_node, wanted) == state


def test_node_state_without_a_unit_reading():
    assert node_state(None, None, "", "abc") == "absent"
    assert node_state({}, SUCCESS, "abc", "abc") == "succeeded"


# --- plan_launch -------------------------------------------------------------------------------


def status(state, complete=(), incomplete=(), at=None):
    found = [{"name": f"checkpoint-{s}", "step": s, "complete": True} for s in complete]
    found += [{"name": f"checkpoint-{s}", "step": s, "complete": False} for s in incomplete]
    return {
        "state": state,
        "checkpoints": sorted(found, key=lambda c: c["step"]),
        "exit": None if at is None else {"result": "exit-code", "code": "exited", "status": "1", "at": str(at)},
    }


RANKS = ["node1", "node2"]


def test_plan_skips_a_job_finished_on_every_node():
    plan = plan_launch({"node1": status("succeeded", [10]), "node2": status("succeeded", [10])}, RANKS)
    assert plan == {"action": "skip", "resume_step": None, "stop": [], "reason": "finished on every node", "fix": "",
                    "forced": ""}  # fmt: skip


@pytest.mark.parametrize("other", ["succeeded", "failed", "running", "absent"])
def test_plan_refuses_a_job_finished_with_other_settings(other):
    plan = plan_launch({"node1": status(other), "node2": status("stale", [10])}, RANKS)
    assert plan["action"] == "refuse"
    assert plan["reason"] == "finished with other settings on node2"
    assert plan["stop"] == []
    assert plan["fix"] == "rename"


def test_plan_attaches_to_a_job_running_on_every_node():
    plan = plan_launch({"node1": status("running", [10]), "node2": status("running", [10])}, RANKS)
    assert plan == {"action": "attach", "resume_step": None, "stop": [], "reason": "running on every node", "fix": "",
                    "forced": ""}  # fmt: skip


def test_plan_relaunches_a_half_running_job_from_the_newest_checkpoint_complete_everywhere():
    statuses = {
        # node1 was cut off while saving checkpoint-30; node2 finished saving it, then died.
        "node1": status("running", complete=[10, 20], incomplete=[30]),
        "node2": status("failed", complete=[10, 20, 30], at=1796273101.3),
    }
    plan = plan_launch(statuses, RANKS)
    assert plan == {"action": "launch", "resume_step": 20, "stop": ["node1"], "reason": "resume from checkpoint-20",
                    "fix": "", "forced": ""}  # fmt: skip


def test_plan_stops_the_running_ranks_in_rank_order():
    ranks = ["node3", "node1", "node2"]
    statuses = {
        "node1": status("running", [10]),
        "node2": status("failed", [10], at=5),
        "node3": status("running", [10]),
    }
    plan = plan_launch(statuses, ranks)
    assert (plan["action"], plan["stop"], plan["resume_step"]) == ("launch", ["node3", "node1"], 10)


@pytest.mark.parametrize(
    "statuses",
    [
        {"node1": status("failed", [10, 20], at=1), "node2": status("failed", [30], at=2)},  # nothing in common
        {"node1": status("failed", [10], at=1), "node2": status("absent")},  # a node that kept nothing
        {"node1": status("failed", incomplete=[10], at=1), "node2": status("failed", [10], at=2)},
        {"node1": status("absent"), "node2": status("absent")},  # never ran
    ],
)
def test_plan_starts_afresh_without_a_checkpoint_complete_on_every_node(statuses):
    plan = plan_launch(statuses, RANKS)
    assert plan == {"action": "launch", "resume_step": None, "stop": [], "reason": "start", "fix": "", "forced": ""}


def test_plan_filter_reads_the_status_every_rank_registered():
    hostvars = {
        "node1": {"finetune_status_raw": status("failed", [10, 20], at=1), "inventory_hostname": "node1"},
        "node2": {"finetune_status_raw": status("running", [10, 20, 30]), "inventory_hostname": "node2"},
    }
    plan = FILTERS["finetune_plan"](hostvars, RANKS)
    assert (plan["action"], plan["resume_step"], plan["stop"]) == ("launch", 20, ["node2"])


# --- round_summary -----------------------------------------------------------------------------


def test_round_names_the_rank_that_died_first_first():
    ranks = ["node1", "node2", "node3", "node4"]
    statuses = {
        "node1": dict(status("running"), progress=progress(parse_trainer_log(TRAINER_LOG))),
        "node2": status("failed", at=1796273101.9),
        "node3": status("failed", at=1796273101.344),  # ended first: the cause
        "node4": status("absent"),  # never ran: no time, last
    }
    summary = round_summary(statuses, ranks)
    assert summary["failed"] == ["node3", "node2", "node4"]
    assert summary["running"] == ["node1"]
    assert summary["done"] is False
    assert summary["lines"] == [
        "rank 0 node1: running, step 40/40 (100.0%), loss 4.244, eval loss 4.548, elapsed 0:00:07, left 0:00:00",
        "rank 1 node2: failed, no step logged yet",
        "rank 2 node3: failed, no step logged yet",
        "rank 3 node4: absent, no step logged yet",
    ]


def test_round_is_done_when_no_rank_runs():
    statuses = {"node1": status("succeeded"), "node2": status("succeeded")}
    summary = round_summary(statuses, RANKS)
    assert (summary["failed"], summary["running"], summary["done"]) == ([], [], True)


def test_round_filter_reads_another_variable():
    hostvars = {
        "node1": {"finetune_final": status("failed", at=9)},
        "node2": {"finetune_final": status("failed", at=3)},
    }
    assert FILTERS["finetune_round"](hostvars, RANKS, "finetune_final")["failed"] == ["node2", "node1"]


# --- root_errors -------------------------------------------------------------------------------

MARK_AT = RANK1_LOG.splitlines().index("==== instinct.finetune launch of rank 1 at 2026-12-03T04:45:55+00:00 ====")


def test_root_errors_skip_the_launchers_wrappers():
    before_relaunch = RANK1_LOG.splitlines()[:MARK_AT]
    assert any("ChildFailedError" in line for line in before_relaunch)
    assert any("CalledProcessError" in line for line in before_relaunch)
    assert root_errors(before_relaunch) == [PERMISSION_ERROR]


def test_root_errors_only_look_after_the_last_launch():
    # The fourth launch runs: the third one's error is history.
    assert root_errors(RANK1_LOG.splitlines()) == []
    earlier = [
        "==== instinct.finetune launch of rank 1 at 2026-12-03T04:40:00+00:00 ====",
        "[rank1]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB.",
        "==== instinct.finetune launch of rank 1 at 2026-12-03T04:44:49+00:00 ====",
    ]
    assert root_errors(earlier + RANK1_LOG.splitlines()[:MARK_AT]) == [PERMISSION_ERROR]


def test_root_errors_keep_the_last_ones():
    lines = [
        "ModuleNotFoundError: No module named 'torchaudio'",
        "OSError: libcudart.so.13: cannot open shared object file: No such file or directory",
        '    raise OSError(f"Could not load this library: {path}") from e',
        "OSError: Could not load this library: "
        "/opt/instinct/venv/lib/python3.11/site-packages/torchaudio/lib/_torchaudio.so",
        "[rank0]: torch.OutOfMemoryError: HIP out of memory.",
        "[rank0]: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
    ]
    assert root_errors(lines) == [lines[3], lines[4], lines[5]]
    assert root_errors(lines, limit=1) == [lines[5]]
    assert root_errors([]) == []


# --- the launch record: what makes checkpoints loadable (issue 17) -------------------------------

FP = "14cec2609bbd0aa6"
RECORD = launch_record(FP, 2, "5d41402abc4b2a76b9719d911017c592")


def test_the_launch_record_reads_back():
    assert f"{FP} world_size=2 dataset_sha1=5d41402abc4b2a76b9719d911017c592" == RECORD
    assert parse_launch_record(RECORD) == (FP, {"world_size": "2", "dataset_sha1": "5d41402abc4b2a76b9719d911017c592"})
    assert parse_launch_record(f"{FP}\n") == (FP, {})  # a file of an earlier release
    assert launch_record(FP) == FP


def test_a_finished_job_of_an_earlier_release_is_still_the_same_job():
    assert node_state({"ActiveState": "inactive"}, {"result": "success", "status": "0"}, FP, RECORD) == "succeeded"


@pytest.mark.parametrize(
    "on_node",
    [launch_record(FP, 4, "5d41402abc4b2a76b9719d911017c592"), launch_record(FP, 2, "0" * 32),
     launch_record("0" * 16, 2, "5d41402abc4b2a76b9719d911017c592")],
)  # fmt: skip
def test_a_job_finished_at_another_world_size_or_on_other_data_is_another_job(on_node):
    assert node_state({"ActiveState": "inactive"}, {"result": "success", "status": "0"}, on_node, RECORD) == "stale"


def test_checkpoints_saved_at_another_world_size_are_not_resumed():
    saved = dict(status("failed", [10, 20], at=5), fingerprint=launch_record(FP, 4, "5d41402abc4b2a76b9719d911017c592"))
    plan = plan_launch({"node1": saved, "node2": dict(saved)}, RANKS, RECORD)
    assert plan["action"] == "refuse"
    assert plan["reason"] == "its checkpoints on node1 were saved with world_size 4 (now 2)"
    assert plan["fix"] == "rename"


def test_a_fresh_job_is_launched_whatever_its_record():
    assert plan_launch({"node1": status("absent"), "node2": status("absent")}, RANKS, RECORD)["action"] == "launch"


# --- a resume with other settings, and the history of launches (issue 32) ----------------------

DATA = "5d41402abc4b2a76b9719d911017c592"
# The sandbox job as launched, and again with another learning rate (the e2e suite's refused resume).
LAUNCHED = job_files(sandbox_job(), sandbox_node())
CHANGED = job_files({**sandbox_job(), "learning_rate": "1.0e-3"}, sandbox_node())
LAUNCHED_RECORD = launch_record(LAUNCHED["fingerprint"], 2, DATA)
CHANGED_RECORD = launch_record(CHANGED["fingerprint"], 2, DATA)


def interrupted(record=LAUNCHED_RECORD, settings=LAUNCHED["settings"]):
    """A node of the job killed after checkpoint-20, as finetune_job_status reads it with the history."""
    return dict(status("failed", [20], at=5), fingerprint=record, launched_settings=settings)


def test_the_changed_setting_is_the_only_difference_of_the_two_launches():
    assert LAUNCHED["fingerprint"] != CHANGED["fingerprint"]
    assert settings_differences(LAUNCHED["settings"], CHANGED["settings"]) == [("learning_rate", 0.005, 0.001)]
    assert settings_differences(LAUNCHED["settings"], dict(LAUNCHED["settings"])) == []


def test_a_resume_whose_learning_rate_changed_is_refused_naming_it_and_the_fix():
    plan = plan_launch({"node1": interrupted(), "node2": interrupted()}, RANKS, CHANGED_RECORD, CHANGED["settings"])
    assert plan["action"] == "refuse"
    assert plan["reason"] == (
        "its checkpoints on node1 were saved with other training settings: learning_rate 0.005 (now 0.001)"
    )
    # What lifts it: a new job name, or finetune_resume: force.
    assert (plan["fix"], plan["forced"], plan["resume_step"], plan["stop"]) == ("force", "", None, [])


def test_without_the_launchs_settings_the_refusal_names_the_two_fingerprints():
    # A launch of an earlier release: its history has no entry, only the fingerprint file.
    saved = interrupted(settings={})
    plan = plan_launch({"node1": saved, "node2": dict(saved)}, RANKS, CHANGED_RECORD, CHANGED["settings"])
    assert plan["action"] == "refuse"
    assert plan["reason"].endswith(
        f"other training settings: settings fingerprint {LAUNCHED['fingerprint']} (now {CHANGED['fingerprint']})"
    )


def test_a_forced_resume_goes_on_from_the_common_checkpoint_and_says_what_it_changed():
    plan = plan_launch({"node1": interrupted(), "node2": interrupted()}, RANKS, CHANGED_RECORD, CHANGED["settings"],
                       force=True)  # fmt: skip
    assert (plan["action"], plan["resume_step"], plan["fix"]) == ("launch", 20, "")
    assert plan["forced"] == (
        "its checkpoints on node1 were saved with other training settings: learning_rate 0.005 (now 0.001)"
    )
    assert plan["reason"] == f"resume from checkpoint-20, forced (finetune_resume: force): {plan['forced']}"


def test_the_same_settings_resume_without_force_and_record_nothing_forced():
    plan = plan_launch({"node1": interrupted(), "node2": interrupted()}, RANKS, LAUNCHED_RECORD, LAUNCHED["settings"])
    assert plan == {"action": "launch", "resume_step": 20, "stop": [], "reason": "resume from checkpoint-20",
                    "fix": "", "forced": ""}  # fmt: skip


@pytest.mark.parametrize(
    ("record", "moved"),
    [(launch_record(LAUNCHED["fingerprint"], 4, DATA), "world_size 4 (now 2)"),
     (launch_record(LAUNCHED["fingerprint"], 2, "0" * 32), f"dataset_sha1 {'0' * 32} (now {DATA})")],
)  # fmt: skip
def test_force_does_not_resume_checkpoints_that_cannot_load(record, moved):
    saved = interrupted(record)
    plan = plan_launch({"node1": saved, "node2": dict(saved)}, RANKS, CHANGED_RECORD, CHANGED["settings"], force=True)
    assert plan["action"] == "refuse"
    assert plan["reason"] == (
        f"its checkpoints on node1 were saved with {moved} and other training settings: learning_rate 0.005 (now 0.001)"
    )
    assert plan["fix"] == "rename"


def test_a_job_that_never_saved_a_checkpoint_starts_with_its_new_settings():
    saved = dict(status("failed", at=5), fingerprint=LAUNCHED_RECORD, launched_settings=LAUNCHED["settings"])
    plan = plan_launch({"node1": saved, "node2": dict(saved)}, RANKS, CHANGED_RECORD, CHANGED["settings"])
    assert (plan["action"], plan["resume_step"], plan["forced"]) == ("launch", None, "")


def test_a_running_job_is_not_attached_to_with_other_settings():
    running = dict(status("running", [20]), fingerprint=LAUNCHED_RECORD, launched_settings=LAUNCHED["settings"])
    plan = plan_launch({"node1": running, "node2": dict(running)}, RANKS, CHANGED_RECORD, CHANGED["settings"])
    assert plan["action"] == "refuse"
    assert (
        plan["reason"]
        == "it runs on node1 with other settings: other training settings: learning_rate 0.005 (now 0.001)"
    )
    assert (plan["fix"], plan["stop"]) == ("wait", [])
    # With the settings it runs with, the same job is re-attached to.
    again = plan_launch({"node1": running, "node2": dict(running)}, RANKS, LAUNCHED_RECORD, LAUNCHED["settings"])
    assert again["action"] == "attach"


def test_a_finished_job_with_other_settings_names_them_and_force_does_not_retrain_it():
    done = dict(status("stale", [60]), fingerprint=LAUNCHED_RECORD, launched_settings=LAUNCHED["settings"])
    plan = plan_launch({"node1": done, "node2": dict(done)}, RANKS, CHANGED_RECORD, CHANGED["settings"], force=True)
    assert plan["action"] == "refuse"
    assert plan["reason"] == "finished with other settings on node1, node2: learning_rate 0.005 (now 0.001)"
    assert plan["fix"] == "rename"


def test_the_plan_filter_takes_the_settings_and_force_by_name():
    hostvars = {host: {"finetune_status_raw": interrupted()} for host in RANKS}
    refused = FILTERS["finetune_plan"](hostvars, RANKS, "finetune_status_raw", CHANGED_RECORD,
                                       settings=CHANGED["settings"])  # fmt: skip
    forced = FILTERS["finetune_plan"](hostvars, RANKS, "finetune_status_raw", CHANGED_RECORD,
                                      settings=CHANGED["settings"], force=True)  # fmt: skip
    assert (refused["action"], forced["action"], forced["resume_step"]) == ("refuse", "launch", 20)


def test_settings_change_names_a_few_settings_then_counts_the_rest():
    before = {f"s{n}": n for n in range(9)} | {"gone": True}
    # A setting set to None reads as one left out: no difference.
    after = {f"s{n}": n + 1 for n in range(9)} | {"new": None, "added": False}
    assert settings_change(before, after) == (
        "added unset (now false), gone true (now unset), s0 0 (now 1), s1 1 (now 2), s2 2 (now 3), s3 3 (now 4), "
        "and 5 more"
    )
    assert settings_change({}, after, ("aaaa", "bbbb")) == "settings fingerprint aaaa (now bbbb)"


def history_line(record, settings, **more):
    return json.dumps({"at": "2026-12-03T04:40:00Z", "record": record, "settings": settings, **more})


def test_the_launchs_settings_are_read_from_the_last_history_entry_of_its_fingerprint():
    older = {"learning_rate": 0.01}
    history = "\n".join([
        history_line(LAUNCHED_RECORD, older),  # a collision cannot happen; the last entry wins anyway
        history_line(CHANGED_RECORD, CHANGED["settings"], forced="..."),
        '{"at": "2026-12-03T04:50:00Z", "record": "torn',  # cut off mid-line
        "not json",
        history_line(launch_record(LAUNCHED["fingerprint"], 4, DATA), LAUNCHED["settings"]),
        "",
    ])  # fmt: skip
    # The same settings at another world size are the same settings.
    assert launched_settings(history, LAUNCHED_RECORD) == LAUNCHED["settings"]
    assert launched_settings(history, CHANGED_RECORD) == CHANGED["settings"]
    assert launched_settings(history, launch_record("f" * 16, 2, DATA)) == {}
    assert launched_settings(history, "") == {}
    assert launched_settings(None, LAUNCHED_RECORD) == {}
    assert launched_settings('[1, 2]\n{"record": "x", "settings": "no"}', LAUNCHED_RECORD) == {}


# --- one job at a time on a node (issue 32) ----------------------------------------------------


def test_other_jobs_lists_the_jobs_of_other_names_by_node():
    running = {"node1": ["sandbox-fault"], "node2": ["other", "sandbox-fault"], "node3": []}
    assert other_jobs(running, "sandbox-fault") == {"other": ["node2"]}
    assert other_jobs(running, "new-job") == {"sandbox-fault": ["node1", "node2"], "other": ["node2"]}
    assert other_jobs({"node1": None}, "new-job") == {}


def test_a_second_job_is_refused_naming_the_running_one_its_nodes_the_fix_and_the_runbook():
    problem = other_jobs_problem({"node1": ["sandbox-fault"], "node2": ["sandbox-fault"]}, "new-job", "node1")
    assert problem.startswith(
        "node1: job new-job is refused before any change: job sandbox-fault is training on node1, node2 "
        "(unit instinct-finetune-sandbox-fault.service). "
    )
    for fix in ("Let it end", "re-attaches", "stop it on every node (systemctl stop", "--limit"):
        assert fix in problem, fix
    assert problem.endswith("See docs/runbooks/finetune-job.md")


def test_the_same_job_running_again_is_no_conflict():
    assert other_jobs_problem({"node1": ["sandbox-fault"], "node2": []}, "sandbox-fault", "node1") == ""


def test_the_conflict_filter_reads_each_nodes_running_jobs_result():
    hostvars = {
        "node1": {"finetune_running_jobs": {"jobs": [], "units": {}}},
        "node2": {"finetune_running_jobs": {"jobs": ["other"], "units": {"instinct-finetune-other.service": "active"}}},
        "node3": {},  # not among the job's nodes: not read
    }
    problem = FILTERS["finetune_job_conflict"](hostvars, ["node1", "node2"], "new-job", "node1", "runbooks/x.md")
    assert problem.startswith("node1: job new-job is refused before any change: job other is training on node2 ")
    assert problem.endswith("See runbooks/x.md")
    assert FILTERS["finetune_job_conflict"](hostvars, ["node1"], "new-job") == ""


def test_rank_order_keeps_the_plays_order_with_the_master_first():
    hosts = [f"instinct-sandbox-node{n}" for n in range(1, 9)]
    assert rank_order(hosts, hosts[0]) == hosts
    assert rank_order(hosts, hosts[4]) == [hosts[4], *hosts[:4], *hosts[5:]]
    # What 8-node no-change runs showed: a set difference gave other node ranks on every run, and
    # rewrote each node's launch environment and unit. The order must not depend on hashing.
    assert rank_order(list(hosts), hosts[0]) == rank_order(hosts, hosts[0])
    with pytest.raises(ValueError, match="not among the play's hosts"):
        rank_order(hosts, "node9")
