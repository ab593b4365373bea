"""The finetune role's checks of a hub model (issue 33), through ansible-playbook on the local node as
finetune.yml runs roles/finetune/tasks/validate.yml: a hub id must name owner/name and be pinned to a
commit, refused before anything changes, naming the host, the value, the fix and the runbook; and
where such a job's model lives on the nodes (the staged snapshot of that commit)."""

import pytest

from tests.unit.conftest import role_step_playbook, run_local_play

COMMIT = "3b9c1e6f0a7d4c2b8e5f19a0d6c7b4e3f2a1908c"
JOB = {
    "finetune_job_name": "hub",
    "finetune_dataset_name": "d",
    "finetune_max_steps": 10,
    "instinct_venv": "/nonexistent/venv",  # the check-mode prerequisites below are not reached
}


def validate(tmp_path, **extra):
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        role_step_playbook("finetune", "validate.yml", "Validate the job")
        + "    - name: Show where the model is on the node\n"
        + "      ansible.builtin.debug:\n        msg: ON_NODE={{ finetune_model_on_node }}\n"
    )
    # The fabric stage's environment file, which validate.yml reads last (the master's address).
    rccl_env = tmp_path / "rccl.env"
    rccl_env.write_text("MASTER_ADDR=10.0.0.1\nMASTER_PORT=29500\n")
    proc = run_local_play(playbook, {**JOB, "instinct_rccl_env_file": str(rccl_env), **extra})
    return proc, " ".join(proc.stdout.split())


@pytest.mark.parametrize(
    ("model", "revision"),
    [("org/model", ""), ("org/model", "main"), ("org/model", COMMIT[:12]), ("model-without-owner", COMMIT)],
)
def test_a_hub_model_without_a_commit_or_an_owner_is_refused_naming_the_fix(tmp_path, model, revision):
    proc, out = validate(tmp_path, finetune_model=model, finetune_model_revision=revision)
    assert proc.returncode != 0, out[-2000:]
    assert f"node1: finetune_model is the hub id '{model}' and finetune_model_revision is '{revision}'" in out
    assert "a hub model needs its owner/name and the commit to train (40 hex digits)" in out
    assert f"/api/models/{model}/revision/main | jq -r .sha" in out
    assert "See docs/runbooks/hub-model.md" in out
    assert "ON_NODE=" not in out


def test_a_pinned_hub_model_is_read_from_its_staged_snapshot(tmp_path):
    proc, out = validate(tmp_path, finetune_model="org/model", finetune_model_revision=COMMIT)
    assert proc.returncode == 0, out[-3000:]
    assert f"ON_NODE=/var/lib/instinct-finetune/models/hub/org--model--{COMMIT}" in out
    # A path on the nodes stays as it is, and is never taken for a hub id.
    proc, out = validate(tmp_path, finetune_model="/models/tiny", finetune_model_revision="")
    assert "hub id" not in out
