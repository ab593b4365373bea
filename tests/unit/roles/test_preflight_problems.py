"""Every problem in one run, and a way forward (issue 31): playbooks/preflight.yml, then the fine-tune's
ranks and the fabric stage's master check, then playbooks/summary.yml, through ansible-playbook on nodes
that are all this machine (local connection), each given its own floors in the inventory.

Without instinct_exclude_failed_nodes one table holds every problem of every node and the run stops on
every node; with it the nodes with a problem are failed, the later plays (any_errors_fatal, as the
stage playbooks) run on the rest with the ranks, world and master of the nodes that remain, and the
summary names the node left out. A check that cannot run and a node that never answers land in the
same table, and the record each node keeps is what diagnose's preflight check reads. lspci is a
stand-in (listing nothing, or failing); nothing on this machine is changed but the files under the
test's temporary folder."""

import json
import sys

import jmespath
import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils import diagnose
from instinct_node_tools import gather
from tests.unit.conftest import ROOT, role_step_playbook, run_local_play

RULES = yaml.safe_load((ROOT / "roles" / "diagnose" / "files" / "rules.yml").read_text())

JSON_OUTPUT = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}
RANKS = f"""\
- name: Lay out the fine-tune's ranks on the nodes that go on
  hosts: instinct_nodes
  gather_facts: false
  any_errors_fatal: true
  vars_files:
    - {ROOT}/roles/common/defaults/main.yml
    - {ROOT}/roles/finetune/defaults/main.yml
    - {ROOT}/roles/finetune/vars/main.yml
  tasks:
    - name: Show the ranks and the master
      ansible.builtin.debug:
        msg: "{{{{ {{'ranks': finetune_ranks, 'rank': finetune_node_rank | int, 'master': instinct_master_host}} }}}}"
"""


def playbook(tmp_path):
    fabric = role_step_playbook("fabric", "validate.yml", "Check the fabric settings", hosts="instinct_nodes")
    text = "\n".join([
        f"- name: Run preflight\n  ansible.builtin.import_playbook: {ROOT}/playbooks/preflight.yml\n",
        fabric,
        RANKS,
        f"- name: Summarise\n  ansible.builtin.import_playbook: {ROOT}/playbooks/summary.yml\n",
    ])  # fmt: skip
    path = tmp_path / "play.yml"
    path.write_text(text)
    return path


def inventory(tmp_path, nodes):
    """nodes: {name: host vars}; every node is this machine, with floors it meets unless its vars say."""
    common = {
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        # What needs hardware or root: off, or pointed into the test's folder.
        "preflight_require_gpus": False,
        "preflight_report_nics": False,
        "preflight_check_kernel_headers": False,
        "preflight_check_secure_boot": False,
        "preflight_disk_paths": ["/"],
        "preflight_min_free_disk_gb": 0,
        "preflight_min_memory_gb": 0,
        "preflight_apt_proxy_file": f"{tmp_path}/apt/{{{{ inventory_hostname }}}}.conf",
        "instinct_preflight_record": f"{tmp_path}/facts/{{{{ inventory_hostname }}}}.fact",
        "finetune_collect_dir": f"{tmp_path}/artifacts",
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"instinct_nodes": {"hosts": nodes, "vars": common}}))
    return path


def stand_in_lspci(tmp_path, fails=False):
    """lspci listing no device, or failing as a broken pciutils would."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    script = "echo 'lspci: Cannot open /sys/bus/pci/devices' >&2; exit 1" if fails else "exit 0"
    (folder / "lspci").write_text(f"#!/bin/sh\n{script}\n")
    (folder / "lspci").chmod(0o755)
    return folder


def play(tmp_path, nodes, extravars=None, check=False, lspci_fails=False):
    # The local nodes share this machine: their run lock is the test's (one run, so it is only renewed).
    extravars = {"instinct_run_lock_path": str(tmp_path / "run.lock"), **(extravars or {})}
    proc = run_local_play(
        playbook(tmp_path), extravars, check=check, bin_dir=stand_in_lspci(tmp_path, lspci_fails),
        env=JSON_OUTPUT, inventory=inventory(tmp_path, nodes),
    )  # fmt: skip
    return proc, json_output(proc)


def json_output(proc):
    """The json callback's document, after the lines the report actions print through the display."""
    start = 0 if proc.stdout.startswith("{\n") else proc.stdout.find("\n{\n") + 1
    assert start > 0 or proc.stdout.startswith("{"), f"rc {proc.returncode}: {proc.stdout[-3000:]}{proc.stderr[-2000:]}"
    return json.loads(proc.stdout[start:])


def results(out, task):
    """{host: result} of every run of the task of that name (the last one where several plays ran it)."""
    found = {}
    for each in out["plays"]:
        for entry in each["tasks"]:
            if entry["task"]["name"].split(" : ", 1)[-1] == task:  # a role's tasks are named "ROLE : NAME"
                found.update(entry["hosts"])
    return found


def only(found):
    """The one host's result of a run_once task."""
    assert len(found) == 1, found
    return next(iter(found.values()))


def ran(out, task):
    return sorted(host for host, result in results(out, task).items() if not result.get("skipped"))


def records(tmp_path):
    return {path.stem: json.loads(path.read_text()) for path in sorted((tmp_path / "facts").glob("*.fact"))}


NODE2_FLOORS = {"preflight_min_memory_gb": 100000, "preflight_min_free_disk_gb": 100000}


def test_one_table_of_every_problem_and_every_node_stops(tmp_path):
    """node1's OS is refused (only the primary tier accepted) and node2 lacks memory and disk: three rows of
    one table, each node failed with its own problems, and no later play ran."""
    proc, out = play(tmp_path, {"node1": {"preflight_accepted_os_tiers": ["primary"]}, "node2": NODE2_FLOORS})
    assert proc.returncode != 0
    report = only(results(out, "Print every problem of every node in one table"))
    assert report["msg"][0] == "preflight: 3 problem(s) on 2 of 2 node(s): node1, node2; every node stops"
    assert [row[:2] for row in report["rows"]] == [["node1", "operating system"], ["node2", "disk /"],
                                                   ["node2", "memory"]]  # fmt: skip
    assert report["rows"][2][2].endswith("below preflight_min_memory_gb=100000")
    assert report["rows"][0][4] == "docs/runbooks/unsupported-os.md"
    stopped = results(out, "Stop every node, since a node failed preflight")
    assert stopped["node1"]["failed"] and stopped["node2"]["failed"]
    assert "docs/runbooks/oom-fragmentation.md" in stopped["node2"]["msg"] and "100000" in stopped["node2"]["msg"]
    assert "Every node stops" in stopped["node1"]["msg"]
    # Nothing after the table: no host tuning, no fabric, no ranks, no summary.
    assert ran(out, "Read the host tuning") == [] and ran(out, "Show the ranks and the master") == []
    assert [p["play"]["name"] for p in out["plays"]] == ["Check every node before anything is installed"]
    # Each node keeps its own problems, which diagnose's preflight check reads from the node.
    assert [p["check"] for p in records(tmp_path)["node2"]["problems"]] == ["disk /", "memory"]
    raw = {"preflight": gather.section_preflight({"preflight_record": str(tmp_path / "facts" / "node2.fact")})}
    (finding,) = diagnose.findings(diagnose.node_facts(raw, {}, {}), RULES, jmespath.search)
    assert finding["id"] == "preflight-problems" and finding["runbook"] == "preflight.md"
    assert finding["detail"].startswith("disk /: ") and "; memory: " in finding["detail"]


def test_one_failing_node_stops_the_other_which_fails_nothing_itself(tmp_path):
    """The stage playbooks' rule: node2 fails, node1 stops with it (any_errors_fatal on the stop task)."""
    proc, out = play(tmp_path, {"node1": {}, "node2": {"preflight_min_memory_gb": 100000}})
    assert proc.returncode != 0
    assert out["stats"]["node2"]["failures"] == 1 and out["stats"]["node1"]["failures"] == 0
    assert ran(out, "Stop every node, since a node failed preflight") == ["node2"]
    assert ran(out, "Read the host tuning") == [] and ran(out, "Show the ranks and the master") == []
    assert records(tmp_path)["node1"] == {"problems": []}


def test_with_exclusion_the_rest_go_on_with_their_own_ranks_and_the_summary_names_the_node_left_out(tmp_path):
    nodes = {"node1": {}, "node2": NODE2_FLOORS, "node3": {}}
    proc, out = play(tmp_path, nodes, {"instinct_exclude_failed_nodes": True})
    # Ansible's own verdict on a run with a failed host; the run itself went to its end.
    assert proc.returncode == 2
    left = results(out, "Leave this node out of the run, since it failed preflight")
    assert left["node2"]["failed"] and "which goes on with node1, node3" in left["node2"]["msg"]
    assert not left["node1"].get("failed") and not left["node3"].get("failed")
    # preflight's changes after the table, the fabric stage, the ranks: only on the nodes that go on.
    assert ran(out, "Read the host tuning") == ["node1", "node3"]
    assert ran(out, "Require the master node to be in the play") == ["node1", "node3"]
    shown = results(out, "Show the ranks and the master")
    assert {host: result["msg"] for host, result in shown.items()} == {
        "node1": {"ranks": ["node1", "node3"], "rank": 0, "master": "node1"},
        "node3": {"ranks": ["node1", "node3"], "rank": 1, "master": "node1"},
    }
    summary = only(results(out, "Print one row per node and write summary.md in the collect folder"))
    assert summary["left_out"] == {"node2": "failed preflight: disk /, memory"}
    assert summary["node_warnings"][0].startswith("node2 was left out of this run (failed preflight: disk /, memory;")
    assert "| failed preflight: disk /, memory |" in (tmp_path / "artifacts" / "summary.md").read_text()


def test_with_exclusion_of_the_first_node_the_next_one_is_the_master(tmp_path):
    _proc, out = play(tmp_path, {"node1": NODE2_FLOORS, "node2": {}}, {"instinct_exclude_failed_nodes": True})
    shown = results(out, "Show the ranks and the master")
    assert list(shown) == ["node2"]
    assert shown["node2"]["msg"] == {"ranks": ["node2"], "rank": 0, "master": "node2"}


def test_a_check_that_cannot_run_and_a_node_that_left_the_play_are_rows_of_the_table(tmp_path):
    """lspci fails on node1 and node2 (their later checks are skipped: no disk row despite node1's floor);
    node3's settings fail the role's argument check, before any check (as an unreachable node would
    leave the play; the local connection cannot be made unreachable here): three rows. Check mode
    writes no record on the nodes."""
    nodes = {
        "node1": {"preflight_min_free_disk_gb": 100000},
        "node2": {},
        "node3": {"preflight_min_memory_gb": "plenty"},
    }
    _proc, out = play(tmp_path, nodes, check=True, lspci_fails=True)
    report = only(results(out, "Print every problem of every node in one table"))
    rows = report["rows"]
    assert [row[:2] for row in rows] == [
        ["node1", "could not run: List the Instinct devices on the PCI bus with their bridge paths"],
        ["node2", "could not run: List the Instinct devices on the PCI bus with their bridge paths"],
        ["node3", "preflight did not finish"],
    ]
    assert "Cannot open /sys/bus/pci/devices" in rows[0][2] and rows[0][4] == "docs/runbooks/preflight.md"
    assert out["stats"]["node1"]["rescued"] == 1 and out["stats"]["node3"]["failures"] == 1
    assert ran(out, "Stop every node, since a node failed preflight") == ["node1", "node2"]
    assert records(tmp_path) == {}


@pytest.mark.parametrize("explicit", [True, False], ids=["explicit-master-left-out", "default-master"])
def test_the_fabric_stage_refuses_a_master_that_was_left_out(tmp_path, explicit):
    """A play before it failed node1 (as preflight does with exclusion): an explicit instinct_master_host
    naming it is refused with why; unset, the master is node2."""
    text = "\n".join([
        "- name: Fail node1 as preflight would\n  hosts: instinct_nodes\n  gather_facts: false\n  tasks:\n"
        "    - name: Fail node1\n      ansible.builtin.fail:\n        msg: left out\n"
        "      when: inventory_hostname == 'node1'\n",
        role_step_playbook("fabric", "validate.yml", "Check the fabric settings", hosts="instinct_nodes"),
    ])  # fmt: skip
    (tmp_path / "play.yml").write_text(text)
    extravars = {"instinct_master_host": "node1"} if explicit else {}
    proc = run_local_play(tmp_path / "play.yml", extravars, env=JSON_OUTPUT,
                          inventory=inventory(tmp_path, {"node1": {}, "node2": {}}))  # fmt: skip
    out = json_output(proc)
    check = results(out, "Require the master node to be in the play")
    assert list(check) == ["node2"]
    if explicit:
        assert check["node2"]["failed"]
        assert "'node1' is not a host of this play (node2), since it was left out" in check["node2"]["msg"]
    else:
        assert not check["node2"].get("failed")
