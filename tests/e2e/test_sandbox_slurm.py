"""Issue 35 on the sandbox: Slurm from the collection's slurm role (slurmctld and accounting on node1,
slurmd and munge on both nodes), and the sandbox's LoRA job launched through it
(finetune_launcher: slurm) the way the fault job of test_sandbox.py is through systemd: node2's rank
killed after the first checkpoint ends the Slurm job and fails the play naming node2, a re-run
resumes from the checkpoint as a new Slurm job, a re-run while that job trains re-attaches without
submitting, watches it to its end, and the job is evaluated; sacct holds both jobs. Then health.yml
runs its all-reduce and burn-in as Slurm jobs. It runs last (the file name), on the converged cluster.

The one test double is the hardware boundary: each node gets the DRM render nodes of its 8 simulated
MI300X (the amdgpu driver would make them), which gres.conf names and slurmd counts.
"""

import json
import re
import time

import pytest
from cluster import (
    JOB_ROOT,
    NODES,
    SANDBOX_BURNIN,
    WATCH_TASK,
    WORKER,
    as_trainer,
    complete_checkpoints,
    debug_messages,
    node,
    run_in_thread,
    sandbox,
    since_last_launch,
    trained_steps,
    training_processes,
    wait_until,
)

SLURM_JOB = "sandbox-slurm"
SLURM_NAME = f"instinct-finetune-{SLURM_JOB}"
# The sandbox job (jobs/sandbox-tiny.yml: ZeRO-3, CPU offload, LoRA) under another name, through Slurm,
# with a checkpoint halfway.
SETTINGS = (
    f"-e finetune_launcher=slurm -e finetune_job_name={SLURM_JOB} -e finetune_max_steps=40"
    " -e finetune_save_steps=20 -e slurm_gpu_type=mi300x"
)
ID_FILE = f"/etc/instinct-finetune/jobs/{SLURM_JOB}/slurm-job-id"
SUBMIT_TASK = "Submit the job to Slurm from the first rank"
EXTRAVARS = {"finetune_collect_dir": str(sandbox.collect_dir()), "finetune_progress_interval": 5}


def make_render_nodes():
    """What the amdgpu driver makes for 8 GPUs: one DRM render node each (char 226, minor 128 up)."""
    for host in NODES:
        node(host, "mkdir", "-p", "/dev/dri")
        for index in range(8):
            path = f"/dev/dri/renderD{128 + index}"
            if node(host, "test", "-e", path, check=False).returncode != 0:
                node(host, "mknod", "-m", "0660", path, "c", "226", str(128 + index))


def run(playbook, extra="", **kwargs):
    return sandbox.run_playbook(playbook, cmdline=sandbox.site_cmdline(f"{SETTINGS} {extra}"), quiet=True, **kwargs)


def accounting(*argv, want=None, fields="JobID,JobName,State,NNodes,AllocTRES", steps=False, timeout=60):
    """sacct's lines (``fields``, split) on node1, the jobs only or with their ``steps``, waited for
    until ``want`` holds: slurmctld hands a job's end to slurmdbd a moment after it ended. A ``want``
    still false at the timeout fails, with the lines."""
    command = ["sacct", "--allusers", "--parsable2", "--noheader", f"--format={fields}",
               *([] if steps else ["--allocations"]), *argv]  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        lines = [line.split("|") for line in node(NODES[0], *command).stdout.splitlines()]
        if want is None or want(lines):
            return lines
        assert time.monotonic() < deadline, (command, lines)
        time.sleep(2)


@pytest.fixture(scope="module")
def slurm(converged):
    """slurm.yml on the converged sandbox, then again: the second run changes nothing."""
    for host in NODES:  # a cluster kept from an earlier run may hold the job already
        node(host, "sh", "-c", f"command -v scancel >/dev/null && scancel --name={SLURM_NAME} || true")
        node(host, "rm", "-rf", f"{JOB_ROOT}/{SLURM_JOB}", f"/etc/instinct-finetune/jobs/{SLURM_JOB}",
             f"/var/log/instinct-finetune/{SLURM_JOB}")  # fmt: skip
    make_render_nodes()
    first = sandbox.run_playbook("slurm.yml", cmdline=sandbox.site_cmdline("-e slurm_gpu_type=mi300x"))
    sandbox.write_report("slurm", first)
    assert first.rc == 0, first.failures
    again = sandbox.run_playbook("slurm.yml", cmdline=sandbox.site_cmdline("-e slurm_gpu_type=mi300x"), quiet=True)
    assert again.rc == 0, again.failures
    assert again.changed_tasks() == [], again.changed_tasks()
    return first


def test_slurm_from_the_role_has_every_node_idle_with_its_gpus_and_accounts_a_job(slurm):
    """Controller and accounting on node1, slurmd and munge on both, one munge key; sinfo shows both
    nodes IDLE with gpu:mi300x:8; a two-node srun gets a GPU on each node and sacct records it."""
    sinfo = node(NODES[0], "sinfo", "--Node", "--noheader", "--format=%N|%P|%T|%G").stdout.split()
    assert sorted(sinfo) == [f"{host}|main*|idle|gpu:mi300x:8" for host in NODES], sinfo
    for host in NODES:
        for unit in ("munge", "slurmd"):
            assert node(host, "systemctl", "is-active", unit, check=False).stdout.strip() == "active", (host, unit)
    for unit in ("slurmctld", "slurmdbd", "mariadb"):
        assert node(NODES[0], "systemctl", "is-active", unit, check=False).stdout.strip() == "active", unit
        assert node(NODES[1], "systemctl", "is-active", unit, check=False).stdout.strip() != "active", unit
    keys = {host: node(host, "stat", "-c", "%U %a %s", "/etc/munge/munge.key").stdout.split() for host in NODES}
    sums = {node(host, "sha256sum", "/etc/munge/munge.key").stdout.split()[0] for host in NODES}
    assert len(sums) == 1 and all(k[:2] == ["munge", "400"] and int(k[2]) >= 1024 for k in keys.values()), keys
    # Accounting's secrets: slurm's and root's only; MariaDB on the loopback address only.
    modes = node(NODES[0], "stat", "-c", "%U %a", "/etc/slurm/slurmdbd.conf",
                 "/etc/slurm/.instinct-slurmdbd-password").stdout.split("\n")  # fmt: skip
    assert modes[:2] == ["slurm 600", "root 600"], modes
    mariadb = node(NODES[0], "ss", "-Hltn", "sport = :3306").stdout.split()
    assert mariadb[3] == "127.0.0.1:3306", mariadb
    ran = node(NODES[0], "srun", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:1", "--job-name=verify",
               "/bin/sh", "-c", 'echo "$(hostname -s) $ROCR_VISIBLE_DEVICES"')  # fmt: skip
    assert sorted(ran.stdout.splitlines()) == [f"{host} 0" for host in NODES], ran
    record = accounting("--name=verify", want=lambda lines: any(line[2] == "COMPLETED" for line in lines))
    assert any(line[2:4] == ["COMPLETED", "2"] and "gres/gpu=2" in line[4] for line in record), record


def killed_after_the_first_checkpoint():
    """The job through sbatch and srun, watched by finetune.yml; node2's worker killed once every node
    has checkpoint 20: srun ends the step on both nodes, the play fails naming node2."""
    outcome = {}
    thread = run_in_thread("finetune.yml", SETTINGS, outcome)
    wait_until(lambda: all(complete_checkpoints(h, SLURM_JOB) for h in NODES), thread, "a checkpoint on every node")
    first_id = node(NODES[0], "cat", ID_FILE).stdout.strip()
    running = node(NODES[0], "squeue", "--noheader", f"--name={SLURM_NAME}", "--format=%i|%T|%N").stdout.split()
    assert [line.rsplit("|", 1)[0] for line in running] == [f"{first_id}|RUNNING"], running
    assert node(NODES[0], "scontrol", "show", "hostnames", running[0].rsplit("|", 1)[1]).stdout.split() == NODES
    assert node(NODES[1], "cat", ID_FILE).stdout.strip() == first_id
    node(NODES[1], "pkill", "-9", "-f", WORKER)
    thread.join(timeout=600)
    failed = outcome["result"]
    assert failed.rc != 0
    assert NODES[1] in failed.failed_hosts()
    messages = " ".join(str(f["msg"]) for f in failed.failures)
    assert f"The first rank to die was on {NODES[1]}" in messages, messages
    assert "docs/runbooks/rank-failed.md" in messages
    assert failed.ran(SUBMIT_TASK) == [NODES[0]]
    assert failed.ran(WATCH_TASK) == [NODES[0]]
    # Slurm's job ended on both nodes: nothing of it queued or running, no rank left.
    assert node(NODES[0], "squeue", "--noheader", f"--name={SLURM_NAME}").stdout.strip() == ""
    assert training_processes(NODES[0]) == [] and training_processes(NODES[1]) == []
    ended = accounting(f"--jobs={first_id}", want=lambda lines: lines and lines[0][2] != "RUNNING")
    assert ended[0][2] in ("FAILED", "CANCELLED") or ended[0][2].startswith("CANCELLED"), ended
    return first_id


def test_a_job_through_slurm_killed_resumed_as_a_new_job_re_attached_and_evaluated(slurm):
    first_id = killed_after_the_first_checkpoint()
    saved = {h: complete_checkpoints(h, SLURM_JOB) for h in NODES}
    # The resume, launched without waiting: a new Slurm job from the checkpoint every node has.
    launched = run("finetune.yml", "-e finetune_wait=false", extravars=EXTRAVARS)
    assert launched.rc == 0, launched.failures
    assert launched.ran(SUBMIT_TASK) == [NODES[0]]
    second_id = node(NODES[0], "cat", ID_FILE).stdout.strip()
    assert second_id != first_id and node(NODES[1], "cat", ID_FILE).stdout.strip() == second_id
    past = max(saved[NODES[0]])
    wait_until(lambda: trained_steps(NODES[0], SLURM_JOB) > past and training_processes(NODES[1]) != [], None,
               "a step of the resumed Slurm job", timeout=300)  # fmt: skip
    # Held until the re-run watches, so that the re-run finds it training (the 20 steps left take less
    # than finetune.yml's stages before its watch).
    node(NODES[1], "pkill", "-STOP", "-f", WORKER)
    released = []

    def release_at_the_watch(event):
        data = event.get("event_data") or {}
        if event.get("event") == "playbook_on_task_start" and data.get("task") == WATCH_TASK and not released:
            node(NODES[1], "pkill", "-CONT", "-f", WORKER)
            released.append(time.monotonic())

    try:
        attached = run("finetune.yml", extravars=EXTRAVARS, on_event=release_at_the_watch)
    finally:
        node(NODES[1], "pkill", "-CONT", "-f", WORKER, check=False)
    sandbox.write_report("slurm-reattach", attached)
    assert attached.rc == 0, attached.failures
    assert released, "the re-run never watched the job"
    assert f"job {SLURM_JOB}: attach (running on every node)" in " ".join(str(d["msg"]) for d in attached.debug)
    assert attached.ran(SUBMIT_TASK) == []
    assert node(NODES[0], "cat", ID_FILE).stdout.strip() == second_id
    # sacct: the killed job and the resumed one, which ran to its end on both nodes.
    jobs = accounting(f"--name={SLURM_NAME}", want=lambda lines: any(line[2] == "COMPLETED" for line in lines))
    jobs = [line for line in jobs if int(line[0]) >= int(first_id)]  # a kept cluster has older ones
    assert [line[0] for line in jobs] == [first_id, second_id], jobs
    assert jobs[1][2:4] == ["COMPLETED", "2"], jobs
    # Each node's rank.sh marked its launch with the Slurm job and the checkpoint it resumed; the
    # Trainer restored that step and went on to the last.
    for rank, host in enumerate(NODES):
        log = since_last_launch(node(host, "cat", f"/var/log/instinct-finetune/{SLURM_JOB}/train.log").stdout)
        launch = rf"^ of rank {rank} \(Slurm job {second_id}\) at \S+ resume_from_checkpoint=\S*/checkpoint-(\d+) ===="
        marker = re.search(launch, log)
        assert marker and int(marker.group(1)) == past, log[:2000]
    master = since_last_launch(node(NODES[0], "cat", f"/var/log/instinct-finetune/{SLURM_JOB}/train.log").stdout)
    restored = re.search(rf"Resuming training from checkpoint with epoch \d+ and global step {past}\b", master)
    assert restored, master[:3000]
    state = json.loads(node(NODES[0], "cat", f"{JOB_ROOT}/{SLURM_JOB}/output/trainer_state.json").stdout)
    assert state["global_step"] == 40
    # Evaluated as the systemd launcher's jobs are.
    evaluated = run("evaluate.yml", extravars=EXTRAVARS)
    assert evaluated.rc == 0, evaluated.failures
    scores = json.loads(node(NODES[0], "cat", f"{JOB_ROOT}/{SLURM_JOB}/output/eval.json").stdout)
    assert scores["perplexity"] < scores["base_perplexity"], scores


def test_health_runs_its_all_reduce_and_burn_in_as_steps_of_one_slurm_allocation(slurm):
    """health.yml with the Slurm launcher (it follows finetune_launcher): one allocation of both nodes,
    whole, made by the training account; the all-reduce and the burn-in as its steps on every node, each
    with the node's 8 GPUs as GRES; the allocation released at the end (scancel). An allocation an
    interrupted run left on the nodes is released first, and the fine-tune's kept Slurm id, made to name
    another job, does not hold the checks back."""
    extravars = {**SANDBOX_BURNIN, "health_allreduce_sizes_mb": [1], "health_burnin_seconds": 2}
    # What a health.yml cut off after its salloc leaves: an allocation holding both nodes whole, which
    # the new one's exclusive salloc could not get past; the run releases it first.
    left = as_trainer(NODES[0], "salloc", "--no-shell", "--job-name=instinct-health", "--nodes=2", "--exclusive",
                      "--time=10", check=True)  # fmt: skip
    left_id = re.search(r"Granted job allocation (\d+)", left.stderr).group(1)
    # The fine-tune's id file now names that allocation, as a kept id names another job once Slurm
    # numbers its jobs again (state lost): it is not the fine-tune, which ended; health.yml's guard
    # does not hold back for it.
    kept = {host: node(host, "cat", ID_FILE).stdout for host in NODES}
    for host in NODES:
        node(host, "sh", "-c", f'echo {left_id} > "$0"', ID_FILE)
    try:
        checked = run("health.yml", extravars=extravars)
    finally:
        for host in NODES:
            node(host, "sh", "-c", 'printf %s "$1" > "$0"', ID_FILE, kept[host])
    assert checked.rc == 0, checked.failures
    assert (NODES[0], "Release what an interrupted health check left allocated on these nodes") in (
        checked.changed_tasks())  # fmt: skip
    assert accounting(f"--jobs={left_id}", want=lambda lines: lines and lines[0][2].startswith("CANCELLED"))
    said = " ".join(str(m) for m in debug_messages(checked, "Say which Slurm job runs the checks").values())
    job_id = re.search(r"run as steps of Slurm job (\d+) \(instinct-health", said).group(1)
    assert sorted(debug_messages(checked, "Show the all-reduce figures")) == NODES
    assert checked.ran("Release the checks' Slurm allocation") == [NODES[0]]
    steps = ("instinct-allreduce", "instinct-burnin")

    # The release ended something: the module read the allocation in squeue before cancelling it.
    assert (NODES[0], "Release the checks' Slurm allocation") in checked.changed_tasks()

    def ended(lines):
        return len(lines) >= 5 and lines[0][2].startswith("CANCELLED") and all(
            line[2] == "COMPLETED" for line in lines if line[1] in steps)  # fmt: skip

    rows = accounting(f"--jobs={job_id}", want=ended, fields="JobID,JobName,State,NodeList,User,AllocTRES", steps=True)
    allocation = rows[0]
    assert allocation[1] == "instinct-health" and allocation[4] == "instinct", rows
    assert node(NODES[0], "scontrol", "show", "hostnames", allocation[3]).stdout.split() == NODES, rows
    # One all-reduce and one burn-in step on each node, with the node's GPUs.
    ran = sorted((step[1], step[3]) for step in rows[1:] if step[1] in steps)
    assert ran == sorted((name, host) for name in steps for host in NODES), rows
    assert all("gres/gpu=8" in step[5] for step in rows[1:] if step[1] in steps), rows
