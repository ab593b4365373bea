"""Where a fine-tune job stands (module_utils/jobstate.py), on recordings of a real two-node
LLaMA-Factory run (tests/fixtures/finetune/SOURCES.md), and the filters that decide for the job."""

import pytest

from ansible_collections.instinct.finetune.plugins.filter.finetune import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import (
    checkpoints,
    launch_record,
    node_state,
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
)
from tests.unit.conftest import FIXTURES

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
    assert plan == {"action": "skip", "resume_step": None, "stop": [], "reason": "finished on every node"}


@pytest.mark.parametrize("other", ["succeeded", "failed", "running", "absent"])
def test_plan_refuses_a_job_finished_with_other_settings(other):
    plan = plan_launch({"node1": status(other), "node2": status("stale", [10])}, RANKS)
    assert plan["action"] == "refuse"
    assert plan["reason"] == "finished with other settings on node2"
    assert plan["stop"] == []


def test_plan_attaches_to_a_job_running_on_every_node():
    plan = plan_launch({"node1": status("running", [10]), "node2": status("running", [10])}, RANKS)
    assert plan == {"action": "attach", "resume_step": None, "stop": [], "reason": "running on every node"}


def test_plan_relaunches_a_half_running_job_from_the_newest_checkpoint_complete_everywhere():
    statuses = {
        # node1 was cut off while saving checkpoint-30; node2 finished saving it, then died.
        "node1": status("running", complete=[10, 20], incomplete=[30]),
        "node2": status("failed", complete=[10, 20, 30], at=1796273101.3),
    }
    plan = plan_launch(statuses, RANKS)
    assert plan == {"action": "launch", "resume_step": 20, "stop": ["node1"], "reason": "resume from checkpoint-20"}


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
    assert plan == {"action": "launch", "resume_step": None, "stop": [], "reason": "start"}


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


def test_checkpoints_of_changed_settings_at_the_same_world_size_resume_as_before():
    # A changed learning rate, say: the documented behaviour (the job resumes with the new settings).
    saved = dict(
        status("failed", [10, 20], at=5), fingerprint=launch_record("0" * 16, 2, "5d41402abc4b2a76b9719d911017c592")
    )
    plan = plan_launch({"node1": saved, "node2": dict(saved)}, RANKS, RECORD)
    assert (plan["action"], plan["resume_step"]) == ("launch", 20)


def test_a_fresh_job_is_launched_whatever_its_record():
    assert plan_launch({"node1": status("absent"), "node2": status("absent")}, RANKS, RECORD)["action"] == "launch"


def test_rank_order_keeps_the_plays_order_with_the_master_first():
    hosts = [f"instinct-sandbox-node{n}" for n in range(1, 9)]
    assert rank_order(hosts, hosts[0]) == hosts
    assert rank_order(hosts, hosts[4]) == [hosts[4], *hosts[:4], *hosts[5:]]
    # What 8-node no-change runs showed: a set difference gave other node ranks on every run, and
    # rewrote each node's launch environment and unit. The order must not depend on hashing.
    assert rank_order(list(hosts), hosts[0]) == rank_order(hosts, hosts[0])
    with pytest.raises(ValueError, match="not among the play's hosts"):
        rank_order(hosts, "node9")
