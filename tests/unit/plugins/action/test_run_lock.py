"""instinct.finetune.run_lock through ansible-playbook on a local node (issue 32): a second run while
one changes the node is refused before it changes anything, naming the run that holds the lock; the
same run renews its lock; a dead run of this controller, a stale lock and an operator's break are
taken over; release removes only the run's own lock; check mode writes nothing and only warns."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.conftest import ROOT, run_local_play

LOCK_PLAY = """\
- name: Take the lock, {what}, release it
  hosts: all
  gather_facts: false
  tasks:
    - name: Take this node's run lock
      instinct.finetune.run_lock:
      register: taken

    - name: Show the lock taken
      ansible.builtin.debug:
        var: taken

    - name: "{what}"
      ansible.builtin.wait_for:
        path: "{release}"
        timeout: 60
      when: {wait}

    - name: Release this node's run lock
      instinct.finetune.run_lock:
        state: released
"""


def play(tmp_path, name, wait=False):
    path = tmp_path / f"{name}.yml"
    what = "Wait until the test lets the run go on" if wait else "Change nothing"
    path.write_text(LOCK_PLAY.format(what=what, release=tmp_path / f"{name}.go", wait=str(wait).lower()))
    return path


def lock_vars(tmp_path, **more):
    return {"instinct_run_lock_path": str(tmp_path / "run" / "run.lock"), **more}


def json_result(proc, task):
    """The node's result of ``task`` in a run with the json callback."""
    report = json.loads(proc.stdout[proc.stdout.find("{") :])
    for entry in report["plays"][0]["tasks"]:
        if entry["task"]["name"] == task:
            return entry["hosts"]["node1"]
    raise AssertionError(f"{task} did not run")


JSON = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}


def write_lock(tmp_path, holder):
    (tmp_path / "run").mkdir(mode=0o700, exist_ok=True)
    (tmp_path / "run" / "run.lock").write_text(json.dumps(holder))


def this_boot():
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def other_run(**more):
    now = time.time()
    return {"id": "ctl-b:4242:99", "controller": "ctl-b", "user": "ana", "pid": 4242, "playbook": "stack.yml",
            "taken": now - 600, "renewed": now - 30, **more}  # fmt: skip


def test_a_second_run_is_refused_while_the_first_holds_the_lock_and_goes_on_once_it_released_it(tmp_path):
    first = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tests.unit.conftest import run_local_play as r; "
         "p = r(sys.argv[1], {'instinct_run_lock_path': sys.argv[2]}); print(p.returncode)",
         str(play(tmp_path, "first", wait=True)), str(tmp_path / "run" / "run.lock")],
        stdout=subprocess.PIPE, text=True, cwd=os.getcwd(),
    )  # fmt: skip
    lock = tmp_path / "run" / "run.lock"
    deadline = time.monotonic() + 60
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    held = json.loads(lock.read_text())
    second = run_local_play(play(tmp_path, "second"), lock_vars(tmp_path), env=JSON)
    assert second.returncode == 2
    refusal = json_result(second, "Take this node's run lock")
    assert refusal["failed"] is True
    message = refusal["msg"]
    assert message.startswith(
        f"node1: another run holds this node's run lock: {held['user']}@{socket.gethostname()} "
        f"(ansible-playbook pid {held['pid']}, first.yml), since "
    ), message
    assert "this one changes nothing here" in message and "-e instinct_run_lock_break=true" in message
    assert message.endswith("See docs/runbooks/run-lock.md")
    # The second run stopped at the lock: it neither waited nor released the first run's lock.
    assert json.loads(lock.read_text())["id"] == held["id"]
    (tmp_path / "first.go").touch()
    assert first.communicate(timeout=120)[0].split()[-1] == "0"
    assert not lock.exists()
    # Once released, the next run takes it.
    third = run_local_play(play(tmp_path, "third"), lock_vars(tmp_path), env=JSON)
    assert third.returncode == 0, third.stdout[-2000:]
    assert json_result(third, "Take this node's run lock")["why"] == "free"


def test_another_controllers_lock_is_refused_until_it_is_stale_or_broken(tmp_path):
    write_lock(tmp_path, other_run())
    refused = run_local_play(play(tmp_path, "refused"), lock_vars(tmp_path), env=JSON)
    assert refused.returncode == 2
    message = json_result(refused, "Take this node's run lock")["msg"]
    assert "ana@ctl-b (ansible-playbook pid 4242, stack.yml)" in message
    stale = run_local_play(play(tmp_path, "stale"), lock_vars(tmp_path, instinct_run_lock_stale_minutes=0),
                           env=JSON)  # fmt: skip
    assert stale.returncode == 2  # 0 minutes: never stale
    write_lock(tmp_path, other_run(renewed=time.time() - 11 * 60))
    stale = run_local_play(play(tmp_path, "stale"), lock_vars(tmp_path, instinct_run_lock_stale_minutes=10), env=JSON)
    assert stale.returncode == 0, stale.stdout[-2000:]
    assert json_result(stale, "Take this node's run lock")["why"].startswith("stale: not renewed for 11 min")
    write_lock(tmp_path, other_run())
    broken = run_local_play(play(tmp_path, "broken"), lock_vars(tmp_path, instinct_run_lock_break=True), env=JSON)
    assert broken.returncode == 0
    assert json_result(broken, "Take this node's run lock")["why"] == "broken by instinct_run_lock_break"


def test_a_dead_run_of_this_controller_is_taken_over_at_once(tmp_path):
    # A process of this controller that has ended: its pid is free (or another process's).
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    here = {"id": f"{socket.gethostname()}:{gone}:123", "controller": socket.gethostname(), "pid": int(gone)}
    # Another machine of the same host name (a cloned VM, a CI container): its run is not judged from here.
    write_lock(tmp_path, other_run(**here, boot="another-boot"))
    refused = run_local_play(play(tmp_path, "refused"), lock_vars(tmp_path), env=JSON)
    assert refused.returncode == 2, refused.stdout[-2000:]
    write_lock(tmp_path, other_run(**here, boot=this_boot()))
    taken = run_local_play(play(tmp_path, "taken"), lock_vars(tmp_path), env=JSON)
    assert taken.returncode == 0, taken.stdout[-2000:]
    assert json_result(taken, "Take this node's run lock")["why"] == "its run is no longer running on its controller"


def test_a_lock_folder_other_accounts_can_open_or_a_link_in_its_place_is_refused(tmp_path):
    """Review of issue 32: with the folder open to every account, any of them could hold its flock, and
    every run's first task waited for ever as root."""
    (tmp_path / "run").mkdir(mode=0o755)
    (tmp_path / "run").chmod(0o755)
    opened = run_local_play(play(tmp_path, "opened"), lock_vars(tmp_path), env=JSON)
    assert opened.returncode == 2
    message = json_result(opened, "Take this node's run lock")["msg"]
    assert "is open to other accounts (mode 0755)" in message and "chmod 700" in message
    (tmp_path / "run").rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    linked = run_local_play(play(tmp_path, "linked"), lock_vars(tmp_path), env=JSON)
    assert linked.returncode == 2
    assert "is not a folder of this account's (a link" in json_result(linked, "Take this node's run lock")["msg"]
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_release_leaves_another_runs_lock_and_check_mode_writes_nothing_and_warns(tmp_path):
    release = tmp_path / "release.yml"
    release.write_text(
        "- name: Release\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Release this node's run lock\n      instinct.finetune.run_lock:\n        state: released\n"
    )
    write_lock(tmp_path, other_run())
    before = (tmp_path / "run" / "run.lock").read_text()
    kept = run_local_play(release, lock_vars(tmp_path), env=JSON)
    assert kept.returncode == 0
    assert json_result(kept, "Release this node's run lock")["why"] == "not this run's"
    assert (tmp_path / "run" / "run.lock").read_text() == before
    checked = run_local_play(play(tmp_path, "checked"), lock_vars(tmp_path), check=True, env=JSON)
    assert checked.returncode == 0, checked.stdout[-2000:]
    result = json_result(checked, "Take this node's run lock")
    assert result["changed"] is False and result["held"] is False
    assert "ana@ctl-b" in result["warnings"][0] and "this check changes nothing" in result["warnings"][0]
    assert (tmp_path / "run" / "run.lock").read_text() == before
    # On a node without the lock's folder, check mode creates nothing.
    fresh = tmp_path / "fresh"
    assert run_local_play(play(tmp_path, "fresh"), {"instinct_run_lock_path": str(fresh / "run.lock")},
                          check=True).returncode == 0  # fmt: skip
    assert not fresh.exists()


STAGES = ("preflight", "provision", "stack", "fabric", "monitoring", "finetune", "evaluate")


def test_every_stage_takes_the_lock_first_and_site_yml_keeps_it_to_its_summary():
    """Each stage playbook takes the lock before its role and releases it after, unless site.yml runs it
    (instinct_run_lock_keep: no gap between two stages for another run), whose summary releases it; the
    finetune stage releases it before the watch (tests/unit/roles/test_finetune_job_safety.py)."""
    import yaml  # noqa: PLC0415 - only here

    playbooks = ROOT / "playbooks"
    for name in (*STAGES, "health"):
        (play,) = yaml.safe_load((playbooks / f"{name}.yml").read_text())
        (take,) = play["pre_tasks"]
        assert take["instinct.finetune.run_lock"] is None, name  # state: held, the default
        (release,) = play["post_tasks"]
        assert release["instinct.finetune.run_lock"] == {"state": "released"}, name
        if name != "health":  # not a stage of site.yml: always released
            assert release["when"].startswith("not instinct_run_lock_keep"), name
    site = yaml.safe_load((playbooks / "site.yml").read_text())
    imported = {entry["ansible.builtin.import_playbook"].removesuffix(".yml"): entry for entry in site}
    assert all(imported[name].get("vars") == {"instinct_run_lock_keep": True} for name in STAGES), site
    assert list(imported)[-1] == "summary" and "vars" not in imported["summary"]
    (summary,) = yaml.safe_load((playbooks / "summary.yml").read_text())
    assert summary["tasks"][-1]["instinct.finetune.run_lock"] == {"state": "released"}
    assert "when" not in summary["tasks"][-1]
