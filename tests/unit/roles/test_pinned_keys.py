"""Exact keys in the roles (issue 32, finding 3): the rocm role's and the monitoring role's own task files,
run by ansible-playbook on a local node against a key served over HTTP, refuse a download that holds
AMD's key and a second key, naming the node, the URL, both fingerprints and the runbook, before they
write anything (the old rocm check passed it: the pinned fingerprint was among those found; the
monitoring role wrote the download unchecked); a repository that does not answer leaves the monitoring role
on its own collector. Runs in check mode, so that nothing of this machine's apt
configuration could change even if a refusal regressed. And every keyring a role writes is the
pinned_key result of the same file, never a download."""

import http.server
import json
import subprocess
import threading
from functools import partial

import pytest
import yaml

from tests.unit.conftest import ROOT, role_step_playbook, run_local_play
from tests.unit.plugins.action.test_pinned_key import Key

KEYRING_MODULES = ("ansible.builtin.copy", "ansible.builtin.get_url", "copy", "get_url")
PINNED = "instinct.finetune.pinned_key"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """AMD's key with a second key after it, and the Release file of AMD's exporter repository, served
    over HTTP on 127.0.0.1: (base URL, AMD's key, the other key)."""
    amd = Key(tmp_path_factory.mktemp("amd"), "amd", subkey=("cv25519", "encr"))
    other = Key(tmp_path_factory.mktemp("other"), "other")
    root = tmp_path_factory.mktemp("www")
    (root / "rocm").mkdir()
    (root / "rocm" / "rocm.gpg.key").write_text(amd.armored + other.armored)
    release = root / "device-metrics-exporter" / "apt" / "1.5.2" / "dists" / "jammy"
    release.mkdir(parents=True)
    (release / "Release").write_text("Origin: repo.radeon.com\n")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", amd, other
    server.shutdown()
    server.server_close()
    for key in (amd, other):  # the agents that made the secret keys
        subprocess.run(["gpgconf", "--homedir", str(key.home), "--kill", "gpg-agent"], check=False)


def run_step(tmp_path, role, task_file, extravars, rc=2):
    """The role's task file on node1 in check mode: [(task name, result)] in the order they ran. ``rc``:
    ansible-playbook's exit status the run must end with (2: the host failed)."""
    play = tmp_path / "play.yml"
    play.write_text(role_step_playbook(role, task_file, f"Run {task_file}"))
    proc = run_local_play(
        play, extravars, check=True, env={"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "no_proxy": "127.0.0.1"}
    )
    assert proc.returncode == rc, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout[proc.stdout.find("{") :])
    return [(task["task"]["name"], task["hosts"]["node1"]) for task in report["plays"][0]["tasks"]]


def the_refusal(ran, task_name):
    """The failed task's message, after checking it was the refusal and the last task that ran."""
    name, result = ran[-1]
    assert name == task_name, ran[-1]
    assert result.get("failed") is True
    assert not any(result.get("changed") for _name, result in ran)
    return result["msg"]


def test_the_rocm_role_refuses_a_download_with_a_second_key(served, tmp_path):
    base, amd, other = served
    url = f"{base}/rocm/rocm.gpg.key"
    ran = run_step(
        tmp_path, "rocm", "repositories.yml",
        {"rocm_repo_base_url": base, "rocm_repo_key_url": url, "rocm_repo_key_fingerprint": amd.fingerprint},
    )  # fmt: skip
    message = the_refusal(ran, "Keep AMD's key alone from the download, refusing any other key")
    assert message.startswith(f"node1: the key at {url} holds 1 key(s) beside the expected {amd.fingerprint}: ")
    assert other.fingerprint in message
    assert "rocm_repo_key_fingerprint" in message and message.endswith("See docs/runbooks/rocm-repository.md")


def test_the_monitoring_role_refuses_a_download_with_a_second_key_for_amds_exporter(served, tmp_path):
    base, amd, other = served
    url = f"{base}/rocm/rocm.gpg.key"
    keyring = tmp_path / "keyrings" / "instinct-amd-exporter.asc"
    ran = run_step(
        tmp_path, "monitoring", "amd_exporter.yml",
        {"monitoring_amd_exporter_repo_url": f"{base}/device-metrics-exporter/apt/1.5.2",
         "monitoring_amd_exporter_key_url": url, "monitoring_amd_exporter_key_fingerprint": amd.fingerprint,
         "monitoring_amd_exporter_keyring": str(keyring)},
    )  # fmt: skip
    message = the_refusal(ran, "Keep the pinned key alone from the download, refusing any other key")
    assert message.startswith(f"node1: the key at {url} holds 1 key(s) beside the expected {amd.fingerprint}: ")
    assert other.fingerprint in message
    assert "monitoring_amd_exporter_key_fingerprint" in message
    assert message.endswith("See docs/runbooks/monitoring-exporter.md")
    assert not keyring.parent.exists()


def test_the_monitoring_role_falls_back_to_its_collector_when_amds_exporter_repository_does_not_answer(
    served, tmp_path
):
    """monitoring_gpu_exporter: amd with a repository that has no Release for the suite (404 here, as
    for a site without AMD's exporter mirror): the collection's collector serves the GPUs, a warning
    names the node, the URL and the runbook, and no key is fetched nor apt source written (an
    unreachable repository would break every later apt update on the node)."""
    base, amd, _other = served
    repo = f"{base}/device-metrics-exporter/apt/9.9.9"
    keyring = tmp_path / "keyrings" / "instinct-amd-exporter.asc"
    ran = dict(
        run_step(
            tmp_path, "monitoring", "amd_exporter.yml",
            {"monitoring_amd_exporter_repo_url": repo,
             "monitoring_amd_exporter_key_url": f"{base}/rocm/rocm.gpg.key",
             "monitoring_amd_exporter_key_fingerprint": amd.fingerprint,
             "monitoring_amd_exporter_keyring": str(keyring)},
            rc=0,
        )
    )  # fmt: skip
    assert ran["Check that AMD's device metrics exporter repository answers"]["status"] == 404
    assert ran["Record whether AMD's exporter can be installed"]["ansible_facts"] == {
        "monitoring_gpu_exporter_active": "instinct"
    }
    warning = " ".join(ran["Warn that the collection's collector stands in for AMD's exporter"]["msg"].split())
    assert warning.startswith(f"node1: monitoring_gpu_exporter is 'amd', but {repo} does not answer for 'jammy'")
    assert "The collection's GPU collector serves the GPU metrics instead" in warning
    assert warning.endswith("docs/runbooks/monitoring-exporter.md")
    assert ran["Download the key that signs AMD's exporter repository"].get("skipped") is True
    assert not keyring.parent.exists()


def flat_tasks(tasks):
    for task in tasks or []:
        if isinstance(task, dict) and "block" in task:
            yield from flat_tasks(task["block"])
            yield from flat_tasks(task.get("rescue"))
            yield from flat_tasks(task.get("always"))
        elif isinstance(task, dict):
            yield task


def keyring_writes():
    """{task file: (the registers of its pinned_key tasks, [(task name, module, args)] of its tasks that
    write into a keyring)} for every task file of the roles that writes one."""
    found = {}
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        tasks = list(flat_tasks(yaml.safe_load(path.read_text())))
        pinned = {task.get("register") for task in tasks if PINNED in task}
        writes = [
            (task.get("name"), module, task[module])
            for task in tasks
            for module in KEYRING_MODULES
            if isinstance(task.get(module), dict) and "keyring" in str(task[module].get("dest", "")).lower()
        ]
        if writes:
            found[path.relative_to(ROOT).as_posix()] = (pinned, writes)
    return found


def test_every_keyring_a_role_writes_is_the_pinned_key_alone():
    found = keyring_writes()
    # The guard sees the roles that trust an apt repository's key (a new one joins this list).
    assert set(found) == {
        "roles/rocm/tasks/repositories.yml",
        "roles/monitoring/tasks/amd_exporter.yml",
        "roles/instinct_python/tasks/deadsnakes.yml",
    }
    for path, (pinned, writes) in found.items():
        for name, module, args in writes:
            assert module == "ansible.builtin.copy", f"{path}: '{name}' downloads a keyring unchecked"
            assert args.get("content") in {f"{{{{ {register}.key }}}}" for register in pinned}, (
                f"{path}: '{name}' writes a keyring that is not the key {PINNED} kept"
            )
