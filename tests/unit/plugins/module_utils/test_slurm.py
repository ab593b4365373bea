"""Slurm read and written: squeue, sacct and sinfo on real recorded outputs (tests/fixtures/slurm,
SOURCES.md), host lists and GRES as Slurm 22.05's scontrol expands and compresses them, the batch
script of a fine-tune (2 and 16 nodes of 8 GPUs, hostile values, checked by bash and by sbatch's own
way of reading #SBATCH lines), and slurm.conf, gres.conf and cgroup.conf of a mixed cluster."""

import json
import os
import shlex
import subprocess
import textwrap

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.instinct.finetune.plugins.filter.slurm import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils.slurm import (
    ACTIVE_STATES,
    FINISHED_STATES,
    PENDING_STATES,
    SACCT_FIELDS,
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    SlurmError,
    cancel_candidates,
    cancel_candidates_argv,
    cgroup_conf,
    compress_hostlist,
    expand_hostlist,
    gres_conf,
    gres_count,
    job_phase,
    job_state,
    job_status,
    node_names,
    node_problems,
    parse_duration,
    parse_exit_code,
    parse_gres,
    parse_node_state,
    parse_sacct,
    parse_salloc_granted,
    parse_sbatch_parsable,
    parse_sinfo,
    parse_sinfo_table,
    parse_squeue,
    parse_squeue_table,
    sacct_argv,
    sacct_job,
    salloc_argv,
    sbatch_script,
    scancel_argv,
    scancel_ended_ids,
    scancel_found_nothing,
    sinfo_argv,
    sinfo_nodes,
    slurm_conf,
    slurm_config_files,
    slurm_confinement,
    squeue_argv,
    step_prefix,
)
from tests.unit.conftest import FIXTURES

SLURM = FIXTURES / "slurm"


def text(name):
    return (SLURM / name).read_text()


# --- host lists ----------------------------------------------------------------------------------
# Expected values printed by `scontrol show hostnames` / `show hostlistsorted`, Slurm 22.05.8.
@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("x[001-3]", ["x001", "x002", "x003"]),
        ("n[1-003]", ["n1", "n2", "n3"]),
        ("n[5,3,1]", ["n5", "n3", "n1"]),
        ("n[1-2],n[1-2]", ["n1", "n2", "n1", "n2"]),
        ("node[01-02],node5", ["node01", "node02", "node5"]),
        ("n1 n2", ["n1", "n2"]),
        ("x[098-101]", ["x098", "x099", "x100", "x101"]),
        ("host", ["host"]),
        ("frontier[07041,07043]", ["frontier07041", "frontier07043"]),
        ("", []),
        ("None assigned", []),
        ("(null)", []),
    ],
)
def test_host_lists_expand_as_scontrol_show_hostnames(hostlist, names):
    assert expand_hostlist(hostlist) == names


@pytest.mark.parametrize("hostlist", ["h[9-8]", "n[a-b]", "node[1", "node1]", "n[1-2"])
def test_a_host_list_slurm_refuses_is_refused(hostlist):
    with pytest.raises(SlurmError, match="host list"):
        expand_hostlist(hostlist)


@pytest.mark.parametrize(
    ("names", "hostlist"),
    [
        ("n1,n2,n3,n10,m01,m02,n04,node-a,n05", "m[01-02],n[1-3,04-05,10],node-a"),
        ("n008,n9,n10", "n[9-10,008]"),
        ("c001,c1", "c[1,001]"),
        ("gpu-83,gpu-48,gpu-100,gpu-26,gpu-12,gpu-62,gpu-03,gpu-114", "gpu-[03,12,26,48,62,83,100,114]"),
        ("mi300-02,mi300-01,mi300-07,mi300-03", "mi300-[01-03,07]"),
        ("login01,mi300-01,mi300-02,mi210-01", "login01,mi210-01,mi300-[01-02]"),
        ("n04", "n04"),
        ("a,b,c", "a,b,c"),
    ],
)
def test_host_lists_compress_as_scontrol_show_hostlistsorted(names, hostlist):
    assert compress_hostlist(names.split(",")) == hostlist


def test_compression_drops_repeats_and_refuses_what_is_no_name():
    assert compress_hostlist(["gpu-1", "gpu-3", "gpu-2", "gpu-2"]) == "gpu-[1-3]"
    with pytest.raises(SlurmError):
        compress_hostlist(["node[1-2]"])
    with pytest.raises(SlurmError):
        compress_hostlist(["a b"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["n", "gpu-", "mi300x-", "a1b"]), st.integers(0, 1200), st.sampled_from([0, 2, 3])),
        min_size=1,
        max_size=12,
    )
)
def test_a_compressed_list_expands_to_the_same_names(hosts):
    names = {prefix + str(number).zfill(width) for prefix, number, width in hosts}
    assert set(expand_hostlist(compress_hostlist(names))) == names
    assert len(expand_hostlist(compress_hostlist(names))) == len(names)


# --- GRES, times, exit codes, states -------------------------------------------------------------
@pytest.mark.parametrize(
    ("gres", "entries"),
    [
        ("gpu:8", [("gpu", None, 8, None)]),
        ("gpu:mi300x:8(S:0-1)", [("gpu", "mi300x", 8, "S:0-1")]),
        ("gpu:(null):4(IDX:0-3)", [("gpu", None, 4, "IDX:0-3")]),
        ("gpu:1080ti:1(IDX:0),gpu:980gtx:1(IDX:1)", [("gpu", "1080ti", 1, "IDX:0"), ("gpu", "980gtx", 1, "IDX:1")]),
        ("gpu:tesla:3(IDX:0,2-3)", [("gpu", "tesla", 3, "IDX:0,2-3")]),
        ("gpu:a100:no_consume:4", [("gpu", "a100", 4, None)]),
        ("gpu:2K(S:0-2023)", [("gpu", None, 2048, "S:0-2023")]),
        ("gres/gpu=4", [("gpu", None, 4, None)]),
        ("gres/gpu:h100=2", [("gpu", "h100", 2, None)]),
        ("(null)", []),
        ("", []),
    ],
)
def test_gres_strings_as_slurm_prints_them(gres, entries):
    assert [(e["name"], e["type"], e["count"], e["detail"]) for e in parse_gres(gres)] == entries


def test_gres_of_real_sinfo_outputs():
    # sinfo -O ... Gres, GresUsed on Slurm 20.11.9 (vpenso PR 83).
    rows = [line.split() for line in text("sinfo-h-N-O-gres_vpenso-pr-83_slurm-20.11.9.txt").splitlines()]
    assert [gres_count(row[5]) for row in rows] == [4] * 8 + [0] * 4
    assert [gres_count(row[6]) for row in rows] == [4, 4, 4, 3, 0, 1, 2, 4, 0, 0, 0, 0]
    assert {parse_gres(row[5])[0]["type"] for row in rows[:8]} == {"tesla"}
    assert [parse_node_state(row[4])["state"] for row in rows[:6]] == ["mixed"] * 4 + ["idle", "mixed"]
    # sinfo's GresUsed table (LabShare issue 114): two GPU types on one node, a host list.
    table = parse_sinfo_table(text("sinfo-gresused_labshare-issue-114.txt"))
    assert [row["gpus_used"] for row in table] == [2, 3, 4, 1, 3, 2, 0]
    assert table[-1]["hosts"] == ["fb10dl04", "fb10dl05"]
    # sinfo --json of a node (SlurmCommander issue 5): untyped GPUs with their sockets.
    node = json.loads(text("sinfo-json-gres_slurmcommander-issue-5.txt"))
    assert parse_gres(node["gres"]) == [{"name": "gpu", "type": None, "count": 4, "detail": "S:0-1"}]
    assert gres_count(node["gres_used"]) == 4


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("0:00", 0),
        ("9:59:01", 35941),
        ("10-21:56:46", 10 * 86400 + 21 * 3600 + 56 * 60 + 46),
        ("00:20:53", 1253),
        ("1-00:00:00", 86400),
        ("2-02", 2 * 86400 + 7200),
        ("00:00.004", 0.004),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
    ],
)
def test_slurm_times(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["1:2:3:4", "x-1:00", "abc", "1-2:x"])
def test_what_is_no_slurm_time_is_refused(value):
    with pytest.raises(SlurmError):
        parse_duration(value)


def test_exit_codes_and_states():
    assert parse_exit_code("137:0") == {"code": 137, "signal": 0}
    assert parse_exit_code("0:125") == {"code": 0, "signal": 125}
    assert parse_exit_code("") is None
    with pytest.raises(SlurmError):
        parse_exit_code("1")
    assert job_state("CANCELLED by 30154") == {"state": "CANCELLED", "cancelled_by": 30154}
    assert job_state("PD")["state"] == "PENDING"
    assert job_state("OOM")["state"] == "OUT_OF_MEMORY"
    # sacct's fixed-width table cuts long names with a "+".
    assert job_state("OUT_OF_ME+")["state"] == "OUT_OF_MEMORY"
    assert job_state("CANCELLED+")["state"] == "CANCELLED"
    assert job_state("SOMETHING_NEW")["state"] == "SOMETHING_NEW"
    assert [job_phase(s) for s in ("PENDING", "RUNNING", "COMPLETING", "NODE_FAIL", "SOMETHING_NEW")] == [
        "pending",
        "active",
        "active",
        "finished",
        "unknown",
    ]


@pytest.mark.parametrize(
    ("state", "base", "flags", "usable"),
    [
        ("idle", "idle", [], True),
        ("idle~", "idle", ["powered_off"], False),
        ("drained*", "drained", ["not_responding"], False),
        ("drng@", "draining", ["pending_reboot"], False),
        ("fail*", "fail", ["not_responding"], False),
        ("mix-", "mixed", ["planned"], False),
        ("allocated+", "allocated", ["completing"], False),
        ("alloc", "allocated", [], False),
        ("maint", "maint", [], False),
        ("IDLE+DRAIN", "idle", ["drain"], False),
        ("down*", "down", ["not_responding"], False),
        ("inval", "inval", [], False),
    ],
)
def test_node_states_as_sinfo_and_scontrol_print_them(state, base, flags, usable):
    parsed = parse_node_state(state)
    assert (parsed["state"], parsed["flags"], parsed["usable"]) == (base, flags, usable)


# --- squeue --------------------------------------------------------------------------------------
def test_the_squeue_command_reads_one_job_in_every_state():
    assert squeue_argv(4908935) == [
        "squeue",
        "--jobs=4908935",
        "--noheader",
        "--states=all",
        "--format=%i|%T|%r|%D|%N|%M|%l|%j",
    ]
    with pytest.raises(SlurmError, match="job id"):
        squeue_argv("1; rm -rf /")


def test_plain_squeue_of_a_busy_cluster():
    jobs = parse_squeue_table(text("squeue_hummingbird-ucsc-2025_R-PD-Resources-ReqNodeNotAvail.txt"))
    assert len(jobs) == 159
    by_id = {job["job_id"]: job for job in jobs}
    assert by_id["403035"]["state"] == "PENDING" and by_id["403035"]["reason"] == "Resources"
    assert by_id["403040"]["reason"] == "ReqNodeNotAvail, UnavailableNodes:hbnode-40"
    assert by_id["403040"]["phase"] == "pending" and by_id["403040"]["hosts"] == []
    two = by_id["424906"]
    assert (two["state"], two["nodes"], two["hosts"]) == ("RUNNING", 2, ["hbnode-38", "hbnode-39"])
    assert by_id["400958"]["elapsed_s"] == 10 * 86400 + 21 * 3600 + 56 * 60 + 46
    cut = by_id["397752_[2699-3578%"]
    assert (
        cut["reason"] == "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    )
    assert sum(job["state"] == "PENDING" for job in jobs) == 5
    assert all(job["hosts"] for job in jobs if job["state"] == "RUNNING")


def test_squeue_long_with_held_and_future_jobs():
    jobs = parse_squeue_table(text("squeue-l_orfeo-areasciencepark-2026_PENDING-held-BeginTime-Priority.txt"))
    assert len(jobs) == 34
    held = [job["job_id"] for job in jobs if job["held"]]
    assert held == ["886405_484", "886405_104", "886405_4", "882690_70", "881446_138", "872642_171"]
    begin = next(job for job in jobs if job["job_id"] == "889393")
    assert (begin["state"], begin["reason"], begin["held"], begin["time_limit_s"]) == (
        "PENDING",
        "BeginTime",
        False,
        600,
    )
    assert next(job for job in jobs if job["job_id"] == "877780")["time_limit_s"] == 5 * 86400 + 8 * 3600


def test_the_collections_squeue_format():
    # Lines in SQUEUE_FORMAT, with values from the recordings above (no public recording of this
    # exact format was found).
    out = "\n".join(
        [
            "403040|PENDING|ReqNodeNotAvail, UnavailableNodes:hbnode-40|1||0:00|7-00:00:00|pyscf",
            "424906|RUNNING|None|2|hbnode-[38-39]|1:24:22|UNLIMITED|qe",
            "889393|PENDING|BeginTime|1||0:00|10:00|lora-train|with a | in its name",
        ]
    )
    jobs = parse_squeue(out)
    assert [job["reason"] for job in jobs] == ["ReqNodeNotAvail, UnavailableNodes:hbnode-40", None, "BeginTime"]
    assert jobs[1]["hosts"] == ["hbnode-38", "hbnode-39"] and jobs[1]["time_limit_s"] is None
    assert jobs[2]["name"] == "lora-train|with a | in its name"
    assert parse_squeue("JOBID|STATE|REASON|NODES|NODELIST|TIME|TIME_LIMIT|NAME\n") == []
    assert parse_squeue("") == []
    with pytest.raises(SlurmError, match="squeue line"):
        parse_squeue("403040|PENDING|Resources")
    with pytest.raises(SlurmError, match="format"):
        parse_squeue("1|R", "%i|%Z")


# --- sacct ---------------------------------------------------------------------------------------
def test_the_sacct_command_keeps_its_header():
    argv = sacct_argv("4904689")
    assert argv[:3] == ["sacct", "--jobs=4904689", "--parsable2"]
    assert argv[3] == "--format=" + ",".join(SACCT_FIELDS)
    assert "--noheader" not in argv


def test_a_256_node_job_that_completed():
    job = sacct_job(parse_sacct(text("sacct-P_frontier-mi250x_256node-COMPLETED.txt")), "4908935")
    assert (job["state"], job["exit_code"], job["signal"], job["nodes"], job["success"]) == (
        "COMPLETED",
        0,
        0,
        256,
        True,
    )
    assert [step["step"] for step in job["steps"]] == ["batch", "extern", "0"]
    assert job["elapsed_s"] == 1253 and job["start"] == "2026-06-27T12:14:05"


def test_a_job_whose_rank_was_killed():
    rows = parse_sacct(text("sacct-P_frontier-mi250x_32node-FAILED-137_step-CANCELLED-sig9.txt"))
    job = sacct_job(rows, "4904689")
    assert (job["state"], job["exit_code"], job["success"], job["nodes"]) == ("FAILED", 137, False, 32)
    assert job["failed_steps"] == ["batch", "0"]
    step = job["steps"][-1]
    assert (step["state"], step["exit_code"], step["signal"]) == ("CANCELLED", 0, 9)
    status = job_status("4904689", sacct_text=text("sacct-P_frontier-mi250x_32node-FAILED-137_step-CANCELLED-sig9.txt"))
    assert status["message"] == (
        "Slurm job 4904689 ended FAILED with exit code 137; failed steps: batch FAILED 137:0, 0 CANCELLED 0:9"
    )


def test_a_two_node_job_with_a_rank_out_of_memory():
    status = job_status("4979526", sacct_text=text("sacct-P_frontier-mi250x_2node-FAILED-90_step-OUT_OF_MEMORY.txt"))
    assert (status["state"], status["exit_code"], status["success"]) == ("FAILED", 90, False)
    assert status["hosts"] == ["frontier07041", "frontier07043"]
    assert status["steps"][0]["state"] == "OUT_OF_MEMORY" and status["steps"][0]["signal"] == 125
    assert status["message"].endswith("on frontier[07041,07043]; failed steps: 0 OUT_OF_MEMORY 0:125")


def test_a_completed_job_whose_step_was_cancelled_is_no_success():
    rows = parse_sacct(text("sacct-P_cluster-utils-issue-87_COMPLETED_steps-CANCELLED-sig10.txt"))
    assert len(rows) == 16
    for job_id in ("239023", "239024", "239025", "239026"):
        job = sacct_job(rows, job_id)
        assert job["state"] == "COMPLETED" and job["exit_code"] == 0
        assert job["failed_steps"] == ["0"] and job["success"] is False
        assert job["hosts"] == ["galvani-cn001"]


def test_sacct_without_its_header_timeout_and_cancelled_before_start():
    lines = textwrap.dedent(text("sacct-X-n-P_greatlakes-l40s_TIMEOUT-COMPLETED-CANCELLED-by.txt"))
    fields = ["JobID", "JobName", "Partition", "State", "Elapsed", "ExitCode", "Start", "End", "NodeList"]
    rows = parse_sacct(lines, fields)
    assert [row["state"] for row in rows] == ["TIMEOUT", "COMPLETED", "CANCELLED"]
    timeout, completed, cancelled = (sacct_job(rows, job_id) for job_id in ("301099", "305318", "314831"))
    assert (timeout["state"], timeout["success"], timeout["elapsed_s"]) == ("TIMEOUT", False, 84611)
    assert completed["success"] is True and completed["hosts"] == ["gl111"]
    assert (cancelled["state"], cancelled["cancelled_by"], cancelled["hosts"], cancelled["start"]) == (
        "CANCELLED",
        30154,
        [],
        None,
    )
    assert rows[2]["partition"] == "b200,l40s"
    with pytest.raises(SlurmError, match="header"):
        parse_sacct(lines)


def test_cancelled_by_a_user_and_a_running_job_with_many_steps():
    status = job_status("67", sacct_text=text("sacct-P_hpc-client-lab_CANCELLED-by-1000.txt"))
    assert (status["state"], status["cancelled_by"], status["success"]) == ("CANCELLED", 1000, False)
    assert status["failed_steps"] == ["batch"]
    assert status["message"].startswith("Slurm job 67 ended CANCELLED by uid 1000 with exit code 0")
    running = job_status("2710593", sacct_text=text("sacct-P_vcell-slurm-23.11.10_multistep-RUNNING.txt"))
    assert (running["phase"], running["success"], running["failed_steps"]) == ("active", None, [])
    assert [step["step"] for step in running["steps"]] == ["batch", "extern", *[str(i) for i in range(20)]]


def test_sacct_parsable_with_its_trailing_bar_and_broken_lines():
    rows = parse_sacct("JobID|State|ExitCode|\n123|COMPLETED|0:0|\n123.batch|COMPLETED|0:0|\n")
    assert sacct_job(rows, "123")["success"] is True
    assert parse_sacct("") == [] and sacct_job([], "123") is None
    assert parse_sacct("JobID|JobName|State\n") == []
    with pytest.raises(SlurmError, match="sacct line"):
        parse_sacct("JobID|State\n1|COMPLETED|0:0\n")


# --- job status: squeue and sacct together ------------------------------------------------------
def test_a_pending_job_is_reported_with_slurms_reason():
    squeue = "4990001|PENDING|Resources|16||0:00|2-00:00:00|llama-lora\n"
    status = job_status("4990001", squeue_text=squeue, sacct_text="JobID|JobName|State\n4990001|llama-lora|PENDING\n")
    assert (status["phase"], status["reason"], status["source"]) == ("pending", "Resources", "squeue")
    assert status["message"] == "Slurm job 4990001 is PENDING (Resources)"
    held = job_status("4990002", squeue_text="4990002|PENDING|JobHeldAdmin|2||0:00|UNLIMITED|x\n")
    assert held["held"] is True and held["message"] == "Slurm job 4990002 is PENDING (JobHeldAdmin), held"


def test_a_running_job_reads_squeue_with_sacct_steps():
    squeue = "4908935|RUNNING|None|2|mi300-[01-02]|1:03|UNLIMITED|llama-lora\n"
    sacct = "JobID|JobName|State|ExitCode\n4908935|llama-lora|RUNNING|0:0\n4908935.0|bash|RUNNING|0:0\n"
    status = job_status("4908935", squeue_text=squeue, sacct_text=sacct)
    assert (status["phase"], status["hosts"], status["source"]) == ("active", ["mi300-01", "mi300-02"], "squeue")
    assert [step["step"] for step in status["steps"]] == ["0"]
    assert status["message"] == "Slurm job 4908935 is RUNNING on mi300-[01-02]"


def test_a_finished_job_reads_sacct_and_an_unknown_one_says_so():
    sacct = text("sacct-P_frontier-mi250x_256node-COMPLETED.txt")
    squeue = "4908935|COMPLETED|None|256|frontier[00001-00256]|20:53|30:00|e97-256n-hier-smoke\n"
    status = job_status("4908935", squeue_text=squeue, sacct_text=sacct)
    assert (status["source"], status["success"], status["exit_code"]) == ("sacct", True, 0)
    gone = job_status("4908935", squeue_text=squeue)
    assert (gone["source"], gone["success"], gone["exit_code"]) == ("squeue", True, None)
    unknown = job_status("5", squeue_text="", sacct_text="JobID|JobName|State\n")
    assert (unknown["state"], unknown["phase"]) == (None, "unknown")
    assert unknown["message"] == "Slurm job 5 is known to neither squeue nor sacct"


# --- sbatch's answer and scancel ----------------------------------------------------------------
def test_what_sbatch_parsable_prints_and_the_scancel_command():
    # sbatch(1) --parsable: "the job id number and the cluster name if present", separated by ";".
    assert parse_sbatch_parsable("4242\n") == {"job_id": "4242", "cluster": None}
    assert parse_sbatch_parsable("4908935;frontier") == {"job_id": "4908935", "cluster": "frontier"}
    assert parse_sbatch_parsable("") is None and parse_sbatch_parsable(None) is None
    assert parse_sbatch_parsable(" \n") is None
    for text in ("Submitted batch job 4242", "4242;two words", "42a", "1; rm -rf /"):
        with pytest.raises(SlurmError, match="sbatch --parsable"):
            parse_sbatch_parsable(text)
    assert scancel_argv("4908935") == ["scancel", "4908935"]
    assert scancel_argv(4908935, "/opt/slurm/bin/scancel") == ["/opt/slurm/bin/scancel", "4908935"]
    # Filtered: only the collection's job of the training account is cancelled under that id.
    assert scancel_argv("4908935", name="instinct-finetune-sft", user="instinct") == [
        "scancel", "--name=instinct-finetune-sft", "--user=instinct", "4908935"]  # fmt: skip
    with pytest.raises(SlurmError, match="job id"):
        scancel_argv("-u root")
    assert scancel_argv(["403035", "424906"], name="n", user="u")[-2:] == ["403035", "424906"]
    with pytest.raises(SlurmError, match="filters would cancel every match"):
        scancel_argv([], name="n", user="u")


def test_the_cancel_reads_first_what_its_filters_match():
    argv = cancel_candidates_argv("instinct-health", "instinct", nodes=["hbnode-38", "hbnode-39"])
    assert argv[:5] == ["squeue", "--all", "--noheader", "--name=instinct-health", "--user=instinct"]
    assert argv[-2:] == ["--nodelist=hbnode-38,hbnode-39", "--format=%i|%j"]
    assert cancel_candidates_argv("n", "u", job_id="424906")[-2] == "--jobs=424906"
    # Waiting or holding nodes; not ending already (scancel 21.08 answers those "Invalid job id").
    states = set(argv[5].removeprefix("--states=").split(","))
    assert {"PENDING", "RUNNING", "SUSPENDED"} <= states
    assert not states & (FINISHED_STATES | {"COMPLETING", "STAGE_OUT"})
    assert states <= PENDING_STATES | ACTIVE_STATES
    # An empty id or node list is no "every job of that name".
    for empty in ({"job_id": ""}, {"nodes": []}, {"job_id": None, "nodes": None}):
        with pytest.raises(SlurmError, match="needs a job id or nodes"):
            cancel_candidates_argv("n", "u", **empty)
    # squeue reads a comma as a list of names or users; scancel takes one.
    for name, user in (("a,b", "u"), ("n", "instinct,root")):
        with pytest.raises(SlurmError, match="holds ','"):
            cancel_candidates_argv(name, user, job_id="1")


def test_only_jobs_of_exactly_the_name_are_candidates():
    """squeue's --name ignores case (scancel's does not): a job of another case is no candidate."""
    answer = "403035|instinct-health\n424906|Instinct-Health\n\n403035|instinct-health\n4242|instinct-health\n"
    assert cancel_candidates(answer, "instinct-health") == ["403035", "4242"]
    with pytest.raises(SlurmError, match=r"ID\|NAME"):
        cancel_candidates("403035\n", "instinct-health")
    with pytest.raises(SlurmError, match="job id"):
        cancel_candidates("JOBID|NAME\n", "instinct-health")


def test_scancel_names_the_ids_it_found_nothing_left_of():
    recorded = text("scancel_gc3pie_invalid-job-id.txt")
    assert scancel_ended_ids(recorded) == ["15"]
    assert scancel_ended_ids("scancel: error: Kill job error on job id 424906: Access/permission denied") == []
    assert scancel_ended_ids("") == []


def test_a_hosts_slurm_name_is_its_short_host_name_and_a_host_never_read_is_named():
    hostvars = {"mi300-a.example.org": {"ansible_facts": {"hostname": "mi300-a"}},
                "mi300-b.example.org": {"ansible_facts": {"hostname": "mi300-b"}}, "fresh": {}}  # fmt: skip
    assert node_names(["mi300-b.example.org", "mi300-a.example.org"], hostvars) == ["mi300-b", "mi300-a"]
    with pytest.raises(SlurmError, match=r"^fresh: no host name in its facts"):
        node_names(["mi300-a.example.org", "fresh"], hostvars)
    with pytest.raises(SlurmError, match="distinct"):
        node_names(["mi300-a.example.org", "mi300-a.example.org"], hostvars)


# --- sinfo ---------------------------------------------------------------------------------------
def test_the_sinfo_command():
    assert sinfo_argv() == ["sinfo", "--Node", "--noheader", "--format=%N|%P|%T|%c|%m|%G|%E"]
    assert sinfo_argv(["mi300-02", "mi300-01"])[-1] == "--nodes=mi300-[01-02]"


def test_sinfo_partition_views_expand_to_their_node_counts():
    for name in (
        "sinfo_arjuna-issue-69_drng-at-fail-star-maint.txt",
        "sinfo_elkhorn-ucsc_drng-mix-alloc-idle.txt",
        "sinfo_hummingbird-ucsc_mix-planned-alloc-idle.txt",
    ):
        rows = parse_sinfo_table(text(name))
        assert all(len(row["hosts"]) == row["nodes"] for row in rows), name
    arjuna = parse_sinfo_table(text("sinfo_arjuna-issue-69_drng-at-fail-star-maint.txt"))
    assert (arjuna[0]["state"], arjuna[0]["flags"]) == ("draining", ["pending_reboot"])
    assert (arjuna[1]["state"], arjuna[1]["responding"], arjuna[1]["hosts"]) == ("fail", False, ["f005"])
    assert arjuna[3]["state"] == "maint" and arjuna[6]["default_partition"] and arjuna[6]["partition"] == "debug"
    hummingbird = parse_sinfo_table(text("sinfo_hummingbird-ucsc_mix-planned-alloc-idle.txt"))
    assert (hummingbird[-1]["state"], hummingbird[-1]["flags"]) == ("mixed", ["planned"])
    elkhorn = sinfo_nodes(parse_sinfo_table(text("sinfo_elkhorn-ucsc_drng-mix-alloc-idle.txt")))
    assert len(elkhorn) == 89
    node40 = next(node for node in elkhorn if node["node"] == "node-40")
    assert node40["partitions"] == ["windfall", "lab-colibri-hmem"] and node40["state"] == "mixed"


def test_sinfo_node_long_view():
    rows = parse_sinfo_table(text("sinfo-N-l_orfeo-areasciencepark-2026_idle.txt"))
    assert len(rows) == 13 and all(row["usable"] for row in rows)
    dgx = rows[0]
    assert (dgx["hosts"], dgx["partition"], dgx["cpus"], dgx["memory_mb"]) == (["dgx002"], "DGX", 256, 100000)
    assert (dgx["sockets"], dgx["cores_per_socket"], dgx["threads_per_core"], dgx["reason"]) == (2, 64, 2, None)


def test_sinfo_in_a_bar_separated_format():
    rows = parse_sinfo(text("sinfo-o-pipe_hpc-client-lab_idle-down.txt"), "%P|%T|%n")
    assert [(row["hosts"], row["state"], row["usable"]) for row in rows] == [
        (["compute02"], "idle", True),
        (["compute01"], "down", False),
    ]
    assert node_problems(text("sinfo-o-pipe_hpc-client-lab_idle-down.txt"), {"compute01": 0}, "%P|%T|%n") == [
        "compute01: down, not idle"
    ]


# The collection's own format, lines built from the recordings' values (no public recording of it).
SINFO_OUT = "\n".join(
    [
        "mi300-01|mi300x*|idle|192|2063000|gpu:mi300x:8(S:0-1)|none",
        "mi300-02|mi300x*|drained*|192|2063000|gpu:mi300x:8(S:0-1)|"
        "gres/gpu count reported lower than configured (0 < 8)",
        "mi300-03|mi300x*|idle|192|2063000|gpu:mi300x:4(S:0-1)|none",
        "login01|cpu|idle|32|126000|(null)|none",
        "login01|debug|idle|32|126000|(null)|none",
    ]
)


def test_the_collections_sinfo_format_and_the_idle_check():
    nodes = sinfo_nodes(parse_sinfo(SINFO_OUT))
    assert [node["node"] for node in nodes] == ["mi300-01", "mi300-02", "mi300-03", "login01"]
    assert nodes[0]["gpus"] == 8 and nodes[0]["memory_mb"] == 2063000 and nodes[0]["reason"] is None
    assert nodes[-1]["partitions"] == ["cpu", "debug"] and nodes[-1]["gpus"] == 0
    expected = {"mi300-01": 8, "mi300-02": 8, "mi300-03": 8, "login01": 0, "mi300-04": 8}
    assert node_problems(SINFO_OUT, expected) == [
        "mi300-02: drained (not_responding), not idle, reason: gres/gpu count reported lower than configured (0 < 8)",
        "mi300-03: GRES gpu:mi300x:4(S:0-1) shows 4 GPUs, 8 expected",
        "mi300-04: not in sinfo (not in slurm.conf, or in no partition this user sees)",
    ]
    assert node_problems(SINFO_OUT, {"mi300-01": 8, "login01": 0}) == []
    # A re-run during a job: nodes that run jobs work; a drained one still does not.
    busy = SINFO_OUT.replace("mi300-01|mi300x*|idle", "mi300-01|mi300x*|mixed").replace(
        "login01|cpu|idle", "login01|cpu|allocated+"
    )
    assert node_problems(busy, {"mi300-01": 8, "login01": 0}) == ["mi300-01: mixed, not idle"]
    assert node_problems(busy, {"mi300-01": 8, "login01": 0}, busy_ok=True) == []
    assert node_problems(busy, {"mi300-02": 8}, busy_ok=True) == [
        "mi300-02: drained (not_responding), not working, reason: gres/gpu count reported lower than configured (0 < 8)"
    ]
    assert parse_sinfo("NODELIST|PARTITION|STATE|CPUS|MEMORY|GRES|REASON\n") == []
    with pytest.raises(SlurmError, match="sinfo line"):
        parse_sinfo("mi300-01|mi300x|idle")
    assert SINFO_FORMAT.endswith("%E")


# --- the batch script ----------------------------------------------------------------------------
LAUNCHER = [
    "/opt/instinct/venv/bin/torchrun",
    "--nproc_per_node",
    "8",
    "-m",
    "instinct_node_tools.launch",
    "/etc/instinct-finetune/llama-lora/train.yaml",
]


def job(**overrides):
    base = {
        "name": "llama-lora",
        "nodes": 2,
        "gpus_per_node": 8,
        "command": LAUNCHER,
        "output": "/var/log/instinct-finetune/llama-lora/train.log",
        "env_files": ["/etc/instinct/rccl.env", "/etc/instinct-finetune/llama-lora/launch.env"],
    }
    base.update(overrides)
    return base


TWO_NODES = """\
#!/bin/bash
# instinct.finetune: the fine-tune llama-lora as a Slurm job, 2 nodes with 8 GPUs each.
# One task per node: srun starts the per-node launcher once on every node, which starts one
# rank per GPU. Whole nodes (--exclusive, all their memory); no requeue: a resume is a new job.
#SBATCH --job-name=llama-lora
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --no-requeue
#SBATCH --propagate=NONE
#SBATCH --output=/var/log/instinct-finetune/llama-lora/train.log
#SBATCH --open-mode=append
set -euo pipefail
# The job's environment files, their variables exported (as systemd's EnvironmentFile= does).
set -a
. /etc/instinct/rccl.env
. /etc/instinct-finetune/llama-lora/launch.env
set +a
# torchrun's rendezvous from Slurm's environment: the allocation's first host is the master.
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
export MASTER_ADDR=${nodes%%$'\\n'*}
export MASTER_PORT=29500
export NNODES=$SLURM_JOB_NUM_NODES
# torchrun reads PET_<OPTION> for an option not on its command line.
export PET_MASTER_ADDR=$MASTER_ADDR PET_MASTER_PORT=$MASTER_PORT PET_NNODES=$NNODES
echo "==== instinct.finetune launch of Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST (master $MASTER_ADDR:$MASTER_PORT) at $(date -Is) ===="
# NODE_RANK is the node's place in the allocation, set in each task ($SLURM_NODEID).
exec srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
  --kill-on-bad-exit=1 --cpu-bind=none --cpus-per-task="$SLURM_CPUS_ON_NODE" \\
  /bin/bash -c 'export NODE_RANK=$SLURM_NODEID PET_NODE_RANK=$SLURM_NODEID; exec "$@"' instinct-rank \\
  /opt/instinct/venv/bin/torchrun --nproc_per_node 8 -m instinct_node_tools.launch /etc/instinct-finetune/llama-lora/train.yaml
"""  # noqa: E501 - the script's lines as they are


def test_the_batch_script_for_two_nodes_of_eight_gpus():
    assert sbatch_script(job()).splitlines() == TWO_NODES.splitlines()


def test_the_batch_script_for_sixteen_nodes_with_the_sites_limits():
    script = sbatch_script(
        job(
            nodes=16,
            gpu_type="mi300x",
            partition="mi300x",
            account="llm-team",
            qos="high",
            time_limit="2-00:00:00",
            workdir="/var/lib/instinct/jobs/llama-lora",
            master_port=29511,
            env_files=["/etc/instinct/rccl.env", "-/etc/instinct-finetune/llama-lora/resume.env"],
        )
    )
    lines = script.splitlines()
    assert lines[1] == "# instinct.finetune: the fine-tune llama-lora as a Slurm job, 16 nodes with 8 GPUs each."
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=llama-lora",
        "#SBATCH --nodes=16",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gres=gpu:mi300x:8",
        "#SBATCH --exclusive",
        "#SBATCH --mem=0",
        "#SBATCH --no-requeue",
        "#SBATCH --propagate=NONE",
        "#SBATCH --output=/var/log/instinct-finetune/llama-lora/train.log",
        "#SBATCH --open-mode=append",
        "#SBATCH --partition=mi300x",
        "#SBATCH --account=llm-team",
        "#SBATCH --qos=high",
        "#SBATCH --time=2-00:00:00",
        "#SBATCH --chdir=/var/lib/instinct/jobs/llama-lora",
    ]
    resume = "/etc/instinct-finetune/llama-lora/resume.env"
    assert f"if [[ -r {resume} ]]; then . {resume}; fi" in lines
    assert "export MASTER_PORT=29511" in lines
    # The rest is the two-node script's: nothing else depends on the node count.
    tail = TWO_NODES.splitlines()[
        TWO_NODES.splitlines().index(
            "# torchrun's rendezvous from Slurm's environment: the allocation's first host is the master."
        ) :
    ]
    assert [line.replace("29511", "29500") for line in lines[-len(tail) :]] == tail


def test_a_cpu_job_has_no_gres():
    script = sbatch_script(job(gpus_per_node=0, nodes=2))
    assert "--gres" not in script and "2 nodes with no GPU (CPU ranks)." in script


def sbatch_arguments(line):
    """Slurm's get_argument (src/sbatch/opt.c, 21.08) in Python: how sbatch splits a #SBATCH line
    into arguments (blanks separate, ' and " group, a backslash escapes, an unquoted # ends it)."""
    args, current, quote, escape, has = [], [], None, False, False
    for char in line[len("#SBATCH") :]:
        if escape:
            current.append(char)
            escape, has = False, True
            continue
        if char == "\\":
            escape = True
            continue
        if quote:
            if char == quote:
                quote = None
            else:
                current.append(char)
            continue
        if char in "'\"":
            quote, has = char, True
            continue
        if char == "#":
            break
        if char.isspace():
            if current or has:
                args.append("".join(current))
            current, has = [], False
            continue
        current.append(char)
    assert quote is None, f"unmatched quote in {line!r}"
    if current or has:
        args.append("".join(current))
    return args


HOSTILE = [
    'it\'s "a" job #1',
    "two  spaces and more",
    "back\\slash",
    "$(touch /tmp/pwned) `id` ${HOME}",
    "*?[glob]",
    "--partition=debug",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_names_and_paths_survive_sbatch_s_reading(value):
    script = sbatch_script(job(name=value, output=f"/var/log/{value}.log", workdir=f"/srv/{value}"))
    directives = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            for argument in sbatch_arguments(line):
                option, _eq, rest = argument.partition("=")
                directives[option] = rest
    assert directives["--job-name"] == value
    assert directives["--output"] == f"/var/log/{value}.log"
    assert directives["--chdir"] == f"/srv/{value}"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "a\nrm -rf /"}, "control character"),
        ({"name": "a|b"}, "'|'"),
        ({"name": ""}, "empty"),
        ({"output": "/var/log/x\r.log"}, "control character"),
        ({"partition": "debug --exclusive"}, "not a Slurm name"),
        ({"account": "$(id)"}, "not a Slurm name"),
        ({"time_limit": "tomorrow"}, "not a Slurm time"),
        ({"nodes": 0}, "at least 1"),
        ({"nodes": True}, "whole number"),
        ({"gpus_per_node": -1}, "whole number"),
        ({"master_port": 70000}, "TCP port"),
        ({"command": []}, "non-empty argv"),
        ({"command": "torchrun train.yaml"}, "non-empty argv"),
        ({"command": ["a", None]}, "not text"),
        ({"command": ["a", "b\x00"]}, "NUL"),
        ({"gpu_type": "mi300x:8"}, "GRES type"),
        ({"env_files": ["/etc/a\nb"]}, "control character"),
    ],
)
def test_what_a_batch_script_cannot_carry_is_refused(overrides, message):
    with pytest.raises(SlurmError, match=message):
        sbatch_script(job(**overrides))


HOSTILE_ARGV = [
    "/opt/instinct/venv/bin/torchrun",
    "--nproc_per_node",
    "8",
    "it's",
    '"double"',
    "$(touch pwned)",
    "`touch pwned`",
    "${HOME}",
    "a b\tc",
    "line\nbreak",
    "*",
    ";",
    "&&",
    "",
    "--resume_from_checkpoint=/ckpt/checkpoint-100",
]


def test_the_script_is_valid_bash():
    for script in (sbatch_script(job()), sbatch_script(job(command=HOSTILE_ARGV, name=HOSTILE[0]))):
        result = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr


def test_each_node_gets_the_argv_and_the_rendezvous_from_slurm(tmp_path):
    """The script run by bash, with scontrol and srun replaced by stubs: srun runs its command once
    per node as Slurm would (SLURM_NODEID 0..N-1); each task writes its argv and environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        '#!/bin/bash\n[[ "$1 $2" == "show hostnames" ]] || exit 3\nfor h in mi300-01 mi300-02; do echo "$h"; done\n'
    )
    (bin_dir / "srun").write_text(
        textwrap.dedent(
            """\
            #!/bin/bash
            printf '%s\\n' "$@" > "$OUT/srun-args"
            while [[ $1 == --* ]]; do shift; done
            for id in 0 1; do SLURM_NODEID=$id "$@" || exit; done
            """
        )
    )
    (bin_dir / "rank").write_text(
        textwrap.dedent(
            """\
            #!/usr/bin/env python3
            import json, os, sys
            env = {k: os.environ.get(k) for k in ("NODE_RANK", "PET_NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                                                  "PET_MASTER_ADDR", "NNODES", "PET_NNODES", "FROM_ENV_FILE",
                                                  "RESUME")}
            with open(os.path.join(os.environ["OUT"], "rank" + os.environ["NODE_RANK"]), "w") as out:
                json.dump({"argv": sys.argv[1:], "env": env}, out)
            """
        )
    )
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    env_file = tmp_path / "launch env"
    env_file.write_text("FROM_ENV_FILE='a value with $(no) expansion'\n")
    argv = [str(bin_dir / "rank"), *HOSTILE_ARGV[1:]]
    script = sbatch_script(
        job(command=argv, env_files=[str(env_file), f"-{tmp_path / 'absent.env'}"], nodes=2, master_port=29555)
    )
    environ = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "OUT": str(tmp_path),
        "SLURM_JOB_NODELIST": "mi300-[01-02]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_ID": "4242",
        "SLURM_CPUS_ON_NODE": "192",
        "HOME": str(tmp_path),
    }
    result = subprocess.run(
        ["bash", "-c", script], env=environ, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "launch of Slurm job 4242 on mi300-[01-02] (master mi300-01:29555)" in result.stdout
    srun_args = (tmp_path / "srun-args").read_text().splitlines()
    assert srun_args[:6] == [
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--cpu-bind=none",
        "--cpus-per-task=192",
    ]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}").read_text())
        assert seen["argv"] == HOSTILE_ARGV[1:]
        assert seen["env"] == {
            "NODE_RANK": str(rank),
            "PET_NODE_RANK": str(rank),
            "MASTER_ADDR": "mi300-01",
            "MASTER_PORT": "29555",
            "PET_MASTER_ADDR": "mi300-01",
            "NNODES": "2",
            "PET_NNODES": "2",
            "FROM_ENV_FILE": "a value with $(no) expansion",
            "RESUME": None,
        }
    assert not (tmp_path / "pwned").exists()


def test_shlex_reads_the_launcher_line_back():
    script = sbatch_script(job(command=HOSTILE_ARGV))
    launcher = script.split("instinct-rank \\\n", 1)[1]
    assert shlex.split(launcher) == HOSTILE_ARGV


# --- slurm.conf, gres.conf, cgroup.conf ---------------------------------------------------------
def mixed_cluster(**overrides):
    """A controller that is also a CPU-only login node, two MI300X nodes of 8 GPUs and 2 TB, one
    MI210 node of 4 GPUs and 512 GB."""
    cluster = {
        "cluster_name": "Instinct",
        "controller": "login01",
        "slurm_version": "21.08.5-2ubuntu1",
        "cgroup_version": 2,
        "nodes": [
            {
                "name": "login01",
                "cpus": 32,
                "sockets": 1,
                "cores_per_socket": 16,
                "threads_per_core": 2,
                "real_memory_mb": 126000,
            },
            *[
                {
                    "name": f"mi300-0{i}",
                    "addr": f"10.10.0.1{i}",
                    "cpus": 192,
                    "sockets": 2,
                    "cores_per_socket": 48,
                    "threads_per_core": 2,
                    "real_memory_mb": 2063000,
                    "gpus": 8,
                    "gpu_type": "mi300x",
                }
                for i in (1, 2)
            ],
            {
                "name": "mi210-01",
                "cpus": 64,
                "sockets": 1,
                "cores_per_socket": 64,
                "threads_per_core": 1,
                "real_memory_mb": 515000,
                "gpus": 4,
                "gpu_files": [f"/dev/dri/renderD{n}" for n in (128, 129, 130, 136)],
                "features": ["mi210", "gfx90a"],
            },
        ],
        "partitions": [
            {
                "name": "mi300x",
                "nodes": ["mi300-02", "mi300-01"],
                "default": True,
                "options": {"OverSubscribe": "EXCLUSIVE"},
            },
            {"name": "mi210", "nodes": ["mi210-01"], "max_time": "1-00:00:00"},
            {"name": "cpu", "nodes": ["login01"]},
        ],
    }
    cluster.update(overrides)
    return cluster


def test_slurm_conf_of_a_mixed_cluster():
    lines = slurm_conf(mixed_cluster()).splitlines()
    assert [line for line in lines if line.startswith("NodeName=")] == [
        "NodeName=login01 CPUs=32 Sockets=1 CoresPerSocket=16 ThreadsPerCore=2 RealMemory=126000 State=UNKNOWN",
        "NodeName=mi300-01 NodeAddr=10.10.0.11 CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 "
        "RealMemory=2063000 Gres=gpu:mi300x:8 State=UNKNOWN",
        "NodeName=mi300-02 NodeAddr=10.10.0.12 CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 "
        "RealMemory=2063000 Gres=gpu:mi300x:8 State=UNKNOWN",
        "NodeName=mi210-01 CPUs=64 Sockets=1 CoresPerSocket=64 ThreadsPerCore=1 RealMemory=515000 Gres=gpu:4 "
        "Feature=mi210,gfx90a State=UNKNOWN",
    ]
    assert [line for line in lines if line.startswith("PartitionName=")] == [
        "PartitionName=mi300x Nodes=mi300-[01-02] Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE",
        "PartitionName=mi210 Nodes=mi210-01 MaxTime=1-00:00:00 State=UP",
        "PartitionName=cpu Nodes=login01 MaxTime=INFINITE State=UP",
    ]
    settings = dict(
        line.split("=", 1) for line in lines if line and not line.startswith(("#", "NodeName", "PartitionName"))
    )
    assert settings["ClusterName"] == "instinct" and settings["SlurmctldHost"] == "login01"
    assert settings["GresTypes"] == "gpu" and settings["SelectType"] == "select/cons_tres"
    assert settings["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert (settings["AccountingStorageHost"], settings["AccountingStoragePort"]) == ("login01", "6819")
    # Ubuntu 22.04: Slurm 21.08 on cgroup v2 nodes.
    assert settings["ProctrackType"] == "proctrack/linuxproc" and settings["TaskPlugin"] == "task/affinity"
    assert settings["JobAcctGatherType"] == "jobacct_gather/linux"
    assert any(line.startswith("# memory: a job is not held to its memory (ConstrainRAMSpace)") for line in lines)


def test_gres_conf_of_a_mixed_cluster():
    lines = gres_conf(mixed_cluster()).splitlines()
    assert [line for line in lines if not line.startswith("#")] == [
        "NodeName=mi300-01 Name=gpu Type=mi300x File=/dev/dri/renderD[128-135] Flags=amd_gpu_env",
        "NodeName=mi300-02 Name=gpu Type=mi300x File=/dev/dri/renderD[128-135] Flags=amd_gpu_env",
        "NodeName=mi210-01 Name=gpu File=/dev/dri/renderD[128-130,136] Flags=amd_gpu_env",
    ]
    with_rsmi = [line for line in gres_conf(mixed_cluster(rsmi=True)).splitlines() if "AutoDetect" in line]
    assert with_rsmi == [
        "NodeName=mi300-01 AutoDetect=rsmi",
        "NodeName=mi300-02 AutoDetect=rsmi",
        "NodeName=mi210-01 AutoDetect=rsmi",
    ]
    # The files expand back to the device list as Slurm reads File= (a host list).
    assert expand_hostlist("/dev/dri/renderD[128-130,136]") == [f"/dev/dri/renderD{n}" for n in (128, 129, 130, 136)]


@pytest.mark.parametrize(
    ("version", "cgroup", "proctrack", "task", "unconfined"),
    [
        ("21.08.5", 2, "proctrack/linuxproc", "task/affinity", ["devices", "memory", "cores", "processes"]),
        ("21.08.5", 1, "proctrack/cgroup", "task/affinity,task/cgroup", []),
        ("21.08.5", "hybrid", "proctrack/cgroup", "task/affinity,task/cgroup", []),
        ("slurm-wlm 22.05.8", 2, "proctrack/cgroup", "task/affinity,task/cgroup", []),
        ("23.11.4", "v2", "proctrack/cgroup", "task/affinity,task/cgroup", []),
        ("20.11.9", "unified", "proctrack/linuxproc", "task/affinity", ["devices", "memory", "cores", "processes"]),
    ],
)
def test_confinement_follows_the_slurm_and_the_cgroup_version(version, cgroup, proctrack, task, unconfined):
    chosen = slurm_confinement(version, cgroup)
    assert (chosen["proctrack"], chosen["task_plugin"], chosen["unconfined"]) == (proctrack, task, unconfined)
    assert (chosen["cgroup_conf"] is None) == bool(unconfined)


def test_cgroup_conf_and_the_files_together():
    v1 = cgroup_conf(mixed_cluster(cgroup_version=1)).splitlines()
    assert [line for line in v1 if not line.startswith("#")] == [
        "ConstrainCores=yes",
        "ConstrainDevices=yes",
        "ConstrainRAMSpace=yes",
    ]
    v2 = cgroup_conf(mixed_cluster())
    assert all(line.startswith("#") for line in v2.splitlines())
    files = slurm_config_files(
        mixed_cluster(cgroup_version=1, accounting=False, settings={"SlurmctldDebug": "info", "ReturnToService": "1"})
    )
    assert set(files) == {"slurm.conf", "gres.conf", "cgroup.conf", "confinement"}
    conf = files["slurm.conf"].splitlines()
    assert "AccountingStorageType=accounting_storage/none" in conf and "ProctrackType=proctrack/cgroup" in conf
    assert "ReturnToService=1" in conf and "ReturnToService=2" not in conf and "SlurmctldDebug=info" in conf


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["nodes"][1].update(cpus=100), "neither sockets x cores x threads"),
        (lambda c: c["nodes"].append(dict(c["nodes"][0])), "listed twice"),
        (lambda c: c["partitions"][1].update(nodes=["mi210-09"]), "not in the cluster: mi210-09"),
        (lambda c: c["partitions"][1].update(default=True), "more than one default"),
        (lambda c: c["nodes"][3].update(gpus=8), "4 GPU device files for 8 GPUs"),
        (lambda c: c["nodes"][0].update(name="login 01"), "not a host name"),
        (lambda c: c.update(cgroup_version=3), "cgroup version"),
        (lambda c: c.update(slurm_version="latest"), "not a Slurm version"),
        (lambda c: c.update(settings={"NodeName": "x"}), "come from nodes"),
        (lambda c: c.update(settings={"Bad Key": "x"}), "cannot stand"),
        (lambda c: c.update(nodes=[]), "no nodes"),
    ],
)
def test_what_slurm_conf_cannot_say_is_refused(change, message):
    cluster = mixed_cluster()
    change(cluster)
    with pytest.raises(SlurmError, match=message):
        slurm_config_files(cluster)


def test_a_default_partition_holds_every_node():
    cluster = mixed_cluster()
    del cluster["partitions"]
    assert (
        "PartitionName=main Nodes=login01,mi210-01,mi300-[01-02] Default=YES MaxTime=INFINITE State=UP"
        in slurm_conf(cluster)
    )


# --- the filters ---------------------------------------------------------------------------------
def test_the_filters_wrap_errors_for_ansible():
    filters = FilterModule().filters()
    assert set(filters) == {"slurm_allocation_argv", "slurm_batch_script", "slurm_config_files", "slurm_granted_job_id",
                            "slurm_node_names", "slurm_step_prefix"}  # fmt: skip
    assert filters["slurm_batch_script"](job()) == TWO_NODES
    with pytest.raises(AnsibleFilterError, match="sbatch_script"):
        filters["slurm_batch_script"](job(name="a|b"))
    assert SQUEUE_FORMAT.count("|") == 7


# --- an allocation for checks, its steps, and scancel's answers ----------------------------------


def test_the_allocation_holds_exactly_the_nodes_whole_with_their_gpus_and_gives_up_in_time():
    argv = salloc_argv({"name": "instinct-health", "nodes": ["mi300x-01", "mi300x-02"], "gpus_per_node": 8,
                        "gpu_type": "mi300x", "wait_seconds": 300, "time_limit": 17, "partition": "gpu",
                        "account": "", "qos": None})  # fmt: skip
    assert argv == ["salloc", "--no-shell", "--job-name=instinct-health", "--nodes=2", "--nodelist=mi300x-01,mi300x-02",
                    "--ntasks-per-node=1", "--exclusive", "--mem=0", "--gres=gpu:mi300x:8", "--immediate=300",
                    "--partition=gpu", "--time=17"]  # fmt: skip
    # CPU nodes: no GRES.
    cpu = salloc_argv({"name": "h", "nodes": ["n1"], "gpus_per_node": 0, "wait_seconds": 5, "time_limit": "1:00:00"})
    assert not any(item.startswith("--gres") for item in cpu) and cpu[-1] == "--time=1:00:00"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"time_limit": ""}, "needs a time_limit"),
        ({"nodes": []}, "non-empty list"),
        ({"nodes": ["n1", "n1"]}, "not distinct"),
        ({"nodes": ["n1 --uid=0"]}, "not distinct Slurm node names"),
        ({"wait_seconds": 0}, "wait_seconds must be at least 1"),
        ({"partition": "gpu --qos=high"}, "not a Slurm name"),
        ({"gpu_type": "mi300x:8"}, "not a GRES type"),
        ({"name": "a|b"}, "separates squeue"),
    ],
)
def test_an_allocation_salloc_could_not_take_is_refused(change, error):
    allocation = {"name": "h", "nodes": ["n1", "n2"], "gpus_per_node": 8, "wait_seconds": 60, "time_limit": 10}
    with pytest.raises(SlurmError, match=error):
        salloc_argv(allocation | change)


def test_the_granted_job_id_is_read_from_a_real_salloc_and_a_refusal_is_named():
    # salloc's lines around a command (ULHPC's docs, tests/fixtures/slurm/SOURCES.md).
    assert parse_salloc_granted(text("salloc_ulhpc-docs_granted-no-command.txt")) == "9824090"
    with pytest.raises(SlurmError, match="granted no allocation: salloc: error: Unable to allocate resources"):
        parse_salloc_granted("salloc: error: Unable to allocate resources: Requested nodes are busy\n")
    with pytest.raises(SlurmError, match="granted no allocation: nothing"):
        parse_salloc_granted("")


def test_a_step_runs_once_on_its_node_with_the_whole_node_and_its_gpus():
    assert step_prefix("9824090", "mi300x-02", 8) == [
        "srun", "--jobid=9824090", "--nodes=1", "--ntasks=1", "--nodelist=mi300x-02", "--whole", "--gres=gpu:8",
        "--kill-on-bad-exit=1", "--"]  # fmt: skip
    assert "--gres=gpu:mi300x:8" in step_prefix("1", "n", "8", "mi300x")
    assert not any(item.startswith("--gres") for item in step_prefix("1", "n", 0))
    with pytest.raises(SlurmError):
        step_prefix("1; reboot", "n", 8)
    with pytest.raises(SlurmError):
        step_prefix("1", "-n1", 8)


def test_scancel_of_a_job_that_had_ended_is_told_from_a_failing_scancel():
    # What scancel prints for an id slurmctld no longer holds (GC3Pie's recording; the sandbox's 21.08
    # printed the same for the job a failed rank had already ended).
    assert scancel_found_nothing(text("scancel_gc3pie_invalid-job-id.txt")) is True
    assert scancel_found_nothing(
        "scancel: error: Kill job error on job id 424906: Job/step already completing or completed"
    )
    assert scancel_found_nothing("") is False
    assert scancel_found_nothing("scancel: error: Kill job error on job id 15: Access/permission denied") is False
    assert (
        scancel_found_nothing(
            text("scancel_gc3pie_invalid-job-id.txt")
            + "scancel: error: slurm_receive_msg: Socket timed out on send/recv operation"
        )
        is False
    )
