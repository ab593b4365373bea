"""The rocm role refuses bad input before it changes anything: the whole role, through its real entry
(`roles: instinct.finetune.rocm`, as playbooks/provision.yml runs it), by ansible-playbook on local
nodes whose inventory sets the input. Once molecule/rocm_negative's instinct-neg-badversion,
instinct-neg-unknownversion and instinct-neg-badtype, a container each; the names and messages are
theirs.

The role's entry is the real one: Ansible prepends each role's argument spec check (meta/
argument_specs.yml, entry main) as its first task, so the wrong type is refused by the same
validate_argument_spec task a real run gets, not by a copy of the spec. The role's one dependency,
the common role, has defaults and an argument spec but no tasks (checked first, below), so nothing
but the two argument spec checks runs before the role's own validate step."""

import json

import pytest
import yaml

from tests.unit.conftest import ROOT, run_local_play

CASES = {
    "instinct-neg-badversion": {"rocm_version": "7.x"},
    "instinct-neg-unknownversion": {"rocm_version": "7.9.1"},
    "instinct-neg-badtype": {"rocm_expected_gpus": "four"},
    # Good input, to show that the refusals above come from the input: it passes both checks.
    "instinct-good-input": {"rocm_version": "7.0.2", "rocm_expected_gpus": 8},
}

PLAYBOOK = """\
- name: Install ROCm and the amdgpu driver, then verify the GPUs
  hosts: all
  gather_facts: false
  roles:
    - role: instinct.finetune.rocm
"""

COMMON_SPEC = "instinct.finetune.common : Validating arguments against arg spec 'main'"
ROCM_SPEC = "instinct.finetune.rocm : Validating arguments against arg spec 'main'"
VALIDATE = "instinct.finetune.rocm : Validate the ROCm settings before changing anything"
RELEASE_CHECK = "instinct.finetune.rocm : Check the ROCm release against the release map"
RESOLVE = "instinct.finetune.rocm : Resolve the ROCm release and its amdgpu driver"
FINGERPRINT_CHECK = "instinct.finetune.rocm : Check the key fingerprint setting"
SUITE_CHECK = "instinct.finetune.rocm : Check that AMD publishes ROCm for this release"


def test_the_role_entry_runs_no_task_of_another_role_before_its_own():
    # What makes running the real entry on this machine safe and the task lists below exact: were the
    # rocm role to gain a dependency with tasks (the node tools install, say), it would run here first.
    meta = yaml.safe_load((ROOT / "roles/rocm/meta/main.yml").read_text())
    assert meta["dependencies"] == [{"role": "instinct.finetune.common"}]
    assert not (ROOT / "roles/common/tasks").exists()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run of the role on every case's node: {host: [(task name, result) in the order they ran]}
    and the recap. The nodes' release is one AMD publishes no repository for: should a check under
    test let its input through, the release check after it stops the node before the role reaches
    this machine's apt sources (and the test fails on the missing message)."""
    tmp = tmp_path_factory.mktemp("rocm-bad-input")
    (tmp / "play.yml").write_text(PLAYBOOK)
    (tmp / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": CASES}}))
    facts = {"ansible_facts": {"distribution": "Ubuntu", "distribution_release": "no-such-release"}}
    json_report = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    proc = run_local_play(tmp / "play.yml", facts, inventory=tmp / "inventory.yml", env=json_report)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]  # 2: some hosts failed
    report = json.loads(proc.stdout[proc.stdout.find("{") :])
    ran = {host: [] for host in CASES}
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                ran[host].append((task["task"]["name"], result))
    return ran, report["stats"]


def names(tasks):
    return [name.split(" - ")[0] for name, _result in tasks]


def refusal(ran, host):
    """The failed task's result, after checking that it was the node's last and that nothing before it
    changed anything."""
    tasks = ran[host]
    *before, (_name, last) = tasks
    assert last.get("failed"), tasks
    assert not any(result.get("failed") or result.get("changed") for _name, result in before), tasks
    return last


def test_a_malformed_rocm_version_is_refused_naming_the_host_value_and_runbook_before_any_change(run):
    ran, stats = run
    msg = refusal(ran, "instinct-neg-badversion")["msg"]
    assert "instinct-neg-badversion: rocm_version '7.x' is not MAJOR.MINOR.PATCH" in msg, msg
    assert "Nothing was changed. See docs/runbooks/rocm-repository.md" in msg, msg
    assert names(ran["instinct-neg-badversion"]) == [COMMON_SPEC, ROCM_SPEC, VALIDATE, RELEASE_CHECK]
    assert stats["instinct-neg-badversion"]["changed"] == 0


def test_an_unknown_rocm_version_is_refused_listing_the_supported_releases_before_any_change(run):
    ran, stats = run
    msg = refusal(ran, "instinct-neg-unknownversion")["msg"]
    assert "instinct-neg-unknownversion: rocm_version 7.9.1 is not in the supported release map" in msg, msg
    known = msg.split("(known: ", 1)[1].split(")", 1)[0].split(", ")
    assert "7.0.2" in known and "7.9.1" not in known, msg
    assert "add it to instinct_rocm_releases" in msg and "See docs/runbooks/rocm-repository.md" in msg, msg
    assert names(ran["instinct-neg-unknownversion"]) == [COMMON_SPEC, ROCM_SPEC, VALIDATE, RELEASE_CHECK]
    assert stats["instinct-neg-unknownversion"]["changed"] == 0


def test_a_wrong_type_is_refused_by_the_roles_argument_spec_as_its_first_task(run):
    ran, stats = run
    result = refusal(ran, "instinct-neg-badtype")
    assert result["action"] == "ansible.builtin.validate_argument_spec"
    assert result["validate_args_context"]["name"] == "rocm"
    assert result["validate_args_context"]["argument_spec_name"] == "main"
    assert "rocm_expected_gpus" in result["msg"] and "four" in result["msg"], result["msg"]
    assert "argument 'rocm_expected_gpus' is of type str and we were unable to convert to int" in result["msg"]
    # common's check passes; the rocm role's own tasks never start.
    assert names(ran["instinct-neg-badtype"]) == [COMMON_SPEC, ROCM_SPEC]
    assert stats["instinct-neg-badtype"]["changed"] == 0


def test_good_input_passes_both_checks_and_stops_only_where_this_machine_is_no_supported_node(run):
    ran, _stats = run
    msg = refusal(ran, "instinct-good-input")["msg"]
    assert "instinct-good-input: AMD publishes no ROCm repository for Ubuntu no-such-release" in msg, msg
    expected = [COMMON_SPEC, ROCM_SPEC, VALIDATE, RELEASE_CHECK, RESOLVE, FINGERPRINT_CHECK, SUITE_CHECK]
    assert names(ran["instinct-good-input"]) == expected
