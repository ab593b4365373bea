"""Staging a hub model before launch: instinct-stage-model, installed over the training libraries
(their huggingface_hub), run as a node runs it against the stand-in hub of
tests/fixtures/hub/standin_hub.py: the real client, a fake endpoint, never the real hub."""

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from tests.fixtures.hub.standin_hub import COMMIT, StandinHub

REPO = "instinct-test/tiny-model"
PRIVATE = "instinct-test/private-model"
PICKLE = "instinct-test/pickle-model"
TOKEN = "hf_standin_good_token"  # noqa: S105 - the stand-in hub's own test token
WRONG_TOKEN = "hf_not_a_token_of_this_hub"  # noqa: S105
MARK = "instinct-stage-model: "
BIG = "model-00001-of-00002.safetensors"  # over huggingface_hub's 10 MiB download chunk
SMALL = "model-00002-of-00002.safetensors"
STAGED = [
    "config.json",
    BIG,
    SMALL,
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
]
CHUNK = 10 * 1024 * 1024  # huggingface_hub's DOWNLOAD_CHUNK_SIZE: what it writes at a time


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A model repository's files: two safetensors shards, their index, config and tokenizer, and
    what staging leaves out (a pickle duplicate of the weights, the model card)."""
    folder = tmp_path_factory.mktemp("hub-model")
    (folder / BIG).write_bytes(os.urandom(14 * 1024 * 1024 + 123))
    (folder / SMALL).write_bytes(os.urandom(300_000))
    index = {"metadata": {}, "weight_map": {"a.weight": BIG, "b.weight": SMALL}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(os.urandom(4096))
    (folder / "README.md").write_text("# tiny\n")
    return folder


@pytest.fixture(scope="module")
def pickle_model(tmp_path_factory):
    """An older repository: pickle weights, no safetensors."""
    folder = tmp_path_factory.mktemp("hub-pickle-model")
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (folder / "pytorch_model.bin").write_bytes(os.urandom(50_000))
    (folder / "vocab.json").write_text("{}")
    (folder / "merges.txt").write_text("#version: 0.2\n")
    (folder / "tf_model.h5").write_bytes(os.urandom(1000))
    return folder


@pytest.fixture
def hub(model, pickle_model):
    with StandinHub(tokens={TOKEN}) as started:
        started.add_repo(REPO, model)
        started.add_repo(PRIVATE, model, private=True, readers={TOKEN})
        started.add_repo(PICKLE, pickle_model)
        yield started


def _env(tmp_path, token):
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("HF_", "HUGGINGFACE"))}
    env = {k: v for k, v in env.items() if k.lower() not in {"http_proxy", "https_proxy", "all_proxy"}}
    env.update(HF_HOME=str(tmp_path / "hf-home"), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    if token:
        env["HF_TOKEN"] = token
    return env


def _args(endpoint, dest, repo, revision, extra):
    return ["--endpoint", endpoint, "--repo", repo, "--revision", revision, "--dest", dest, *extra]


def _result(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith(MARK)]
    assert len(lines) == 1, stdout
    return json.loads(lines[0][len(MARK) :])


@pytest.fixture
def stage(train_tools, tmp_path):
    """Run the installed tool; returns (exit status, its result line, stderr, seconds)."""

    def run(endpoint, *, repo=REPO, revision=COMMIT, token=None, extra=("--progress-interval", "0.2")):
        dest = tmp_path / "model"
        started = time.monotonic()
        done = train_tools.run(
            "instinct-stage-model", *_args(endpoint, dest, repo, revision, extra), env=_env(tmp_path, token), timeout=60
        )
        return done.returncode, _result(done.stdout), done.stderr, time.monotonic() - started

    return run


def _files_of(record):
    try:
        return json.loads(record.read_text())["files"]
    except (OSError, ValueError):
        return {}


def _same_files(model, dest):
    return all((dest / name).read_bytes() == (model / name).read_bytes() for name in STAGED)


def test_the_pinned_commit_is_downloaded_once_and_a_rerun_reuses_it_without_a_request(hub, model, stage, tmp_path):
    dest = tmp_path / "model"
    status, result, stderr, _seconds = stage(hub.url)
    assert status == 0, (result, stderr)
    assert result["status"] == "downloaded" and result["revision"] == COMMIT and result["path"] == str(dest)
    assert result["files"] == len(STAGED) and result["downloaded_files"] == len(STAGED)
    assert _same_files(model, dest)
    # Safetensors weights only: no pickle duplicate, no model card.
    assert not (dest / "pytorch_model.bin").exists() and not (dest / "README.md").exists()
    assert {name: hub.count(name) for name in STAGED} == dict.fromkeys(STAGED, 1)
    assert hub.count("pytorch_model.bin") == 0
    record = json.loads((dest / ".instinct-snapshot.json").read_text())
    assert record["complete"] and record["repo"] == REPO and record["revision"] == COMMIT
    assert record["endpoint"] == hub.url and sorted(record["files"]) == STAGED
    assert record["files"][BIG]["sha256"] == hub.repos[REPO].files[BIG].sha256
    assert record["files"][BIG]["size"] == (model / BIG).stat().st_size
    assert MARK + "staging " in stderr and MARK + "done: " in stderr

    hub.reset()
    status, result, stderr, _seconds = stage(hub.url)
    assert status == 0 and result["status"] == "reused", (result, stderr)
    assert result["downloaded_files"] == 0 and result["checked"] == "size"
    assert hub.requests == []  # not a single request: the record and the sizes say it is all here
    assert MARK + "reused " in stderr


def test_a_download_cut_mid_file_resumes_with_a_range_request(hub, model, stage, tmp_path):
    hub.cut_once[BIG] = CHUNK + 2 * 1024 * 1024  # one whole chunk written, then the connection ends
    status, result, stderr, _seconds = stage(hub.url)
    assert status == 0 and result["status"] == "downloaded", (result, stderr)
    assert [r for name, r in hub.downloads() if name == BIG] == [None, f"bytes={CHUNK}-"]
    assert [r.status for r in hub.requests if r.file == BIG and r.method == "GET"] == [200, 206]
    assert (tmp_path / "model" / BIG).read_bytes() == (model / BIG).read_bytes()
    assert "Trying to resume download" in stderr


def test_a_stopped_run_keeps_the_files_it_finished(hub, model, stage, train_tools, tmp_path):
    dest = tmp_path / "model"
    hub.stall[SMALL] = 1000  # sends 1000 bytes, then hangs: the run is killed there
    args = _args(hub.url, dest, REPO, COMMIT, ("--workers", "1", "--progress-interval", "0.2"))
    proc = subprocess.Popen(
        [str(train_tools.script("instinct-stage-model")), *args],
        env=_env(tmp_path, None),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    record = dest / ".instinct-snapshot.json"
    try:
        # One worker takes the files in order: config.json, BIG, then SMALL, where it hangs.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (hub.count(SMALL) and len(_files_of(record)) == 2):
            time.sleep(0.05)
        assert hub.count(SMALL) == 1 and sorted(_files_of(record)) == ["config.json", BIG]
        assert not json.loads(record.read_text())["complete"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert list((dest / ".cache").rglob("*.incomplete")), "the killed run left its partial file"

    del hub.stall[SMALL]
    status, result, stderr, _seconds = stage(hub.url)
    assert status == 0 and result["status"] == "downloaded", (result, stderr)
    # The finished files came from the record, not the hub again; the stopped one was downloaded anew.
    assert hub.count("config.json") == 1 and hub.count(BIG) == 1 and hub.count(SMALL) == 2
    assert result["downloaded_files"] == len(STAGED) - 2 and "2 here already by the record" in stderr
    assert "removed 1 partial downloads of a stopped run" in stderr
    assert not list((dest / ".cache").rglob("*.incomplete"))
    assert _same_files(model, dest)


def test_pickle_weights_are_staged_only_where_there_are_no_safetensors(hub, pickle_model, stage, tmp_path):
    status, result, stderr, _seconds = stage(hub.url, repo=PICKLE)
    assert status == 0, (result, stderr)
    staged = sorted(p.name for p in (tmp_path / "model").iterdir() if not p.name.startswith("."))
    assert staged == ["config.json", "merges.txt", "pytorch_model.bin", "vocab.json"]  # no TensorFlow weights
    assert (tmp_path / "model" / "pytorch_model.bin").read_bytes() == (pickle_model / "pytorch_model.bin").read_bytes()


def test_files_already_there_without_a_record_are_hashed_and_kept(hub, model, stage, tmp_path):
    dest = tmp_path / "model"
    dest.mkdir()
    for name in STAGED:
        (dest / name).write_bytes((model / name).read_bytes())
    # One of them is not the hub's file (same size, other bytes): it is replaced.
    (dest / "tokenizer_config.json").write_text("[]")
    status, result, stderr, _seconds = stage(hub.url)
    assert status == 0, (result, stderr)
    assert result["hashed_files"] == len(STAGED) and result["downloaded_files"] == 1
    assert [name for name, _range in hub.downloads()] == ["tokenizer_config.json"]
    assert _same_files(model, dest)


def test_an_unreachable_endpoint_is_refused_in_seconds_naming_it(stage, free_port):
    endpoint = f"http://127.0.0.1:{free_port()}"
    status, result, _stderr, seconds = stage(endpoint)
    assert status == 3 and result["status"] == "refused"
    (problem,) = result["problems"]
    assert problem.startswith(f"cannot reach the hub at {endpoint} for {REPO} at revision {COMMIT}")
    assert "ConnectError" in problem and "finetune_hf_endpoint" in problem and "docs/runbooks/hub-model.md" in problem
    assert result["runbook"] == "docs/runbooks/hub-model.md"
    assert seconds < 10


def test_an_endpoint_that_never_answers_is_refused_within_the_timeout(stage):
    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        status, result, _stderr, seconds = stage(endpoint, extra=("--timeout", "2"))
    assert status == 3
    (problem,) = result["problems"]
    assert problem.startswith(f"cannot reach the hub at {endpoint}") and "ReadTimeout" in problem
    assert "2 s to connect and answer" in problem
    assert seconds < 10


def test_a_wrong_token_is_refused(hub, stage):
    status, result, _stderr, _seconds = stage(hub.url, token=WRONG_TOKEN)
    assert status == 3
    (problem,) = result["problems"]
    assert problem.startswith(f"{hub.url} refuses HF_TOKEN for {REPO} at revision {COMMIT}")
    assert "401 Invalid credentials in Authorization header" in problem
    assert "set finetune_hf_token to a valid read token" in problem
    assert hub.downloads() == []
    assert WRONG_TOKEN not in json.dumps(result)


def test_a_missing_repository_is_refused(hub, stage):
    status, result, _stderr, _seconds = stage(hub.url, repo="instinct-test/no-such-model", token=TOKEN)
    assert status == 3
    (problem,) = result["problems"]
    assert problem.startswith(f"{hub.url} has no repository instinct-test/no-such-model (404 RepoNotFound")
    assert "check finetune_model" in problem and "docs/runbooks/hub-model.md" in problem


def test_a_private_repository_needs_its_token(hub, model, stage, tmp_path):
    status, result, _stderr, _seconds = stage(hub.url, repo=PRIVATE)
    assert status == 3
    (problem,) = result["problems"]
    assert problem.startswith(f"{hub.url} has no repository {PRIVATE} (401 RepoNotFound")
    assert "no token was given (HF_TOKEN is not set)" in problem
    status, result, stderr, _seconds = stage(hub.url, repo=PRIVATE, token=TOKEN)
    assert status == 0 and result["status"] == "downloaded", (result, stderr)
    assert _same_files(model, tmp_path / "model")


def test_the_token_can_come_from_a_file_of_the_account_that_no_one_else_reads(hub, model, train_tools, tmp_path):
    """The finetune role hands the token over in a 0600 file, never in a task's environment (which the
    node's command line shows); a file others can read is refused, and the token is never printed."""
    token_file = tmp_path / "hub-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    args = [*_args(hub.url, tmp_path / "model", PRIVATE, COMMIT, ()), "--token-file", token_file]
    loose = train_tools.run("instinct-stage-model", *args, env=_env(tmp_path, None), timeout=60)
    assert loose.returncode != 0 and "only it reads (0600)" in loose.stderr
    token_file.chmod(0o600)
    done = train_tools.run("instinct-stage-model", *args, env=_env(tmp_path, None), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _result(done.stdout)["status"] == "downloaded" and _same_files(model, tmp_path / "model")
    assert TOKEN not in done.stdout + done.stderr


def test_a_missing_revision_is_refused_with_the_branch_head(hub, stage):
    missing = "1" * 40
    status, result, _stderr, _seconds = stage(hub.url, revision=missing)
    assert status == 3
    (problem,) = result["problems"]
    assert problem.startswith(f"{hub.url} has no revision {missing} in {REPO} (404 RevisionNotFound")
    assert f"its default branch is at {COMMIT} now" in problem and "check finetune_model_revision" in problem


def test_a_branch_is_refused_with_the_commit_it_points_to(hub, stage, free_port):
    status, result, _stderr, _seconds = stage(hub.url, revision="main")
    assert status == 3
    (problem,) = result["problems"]
    assert problem.startswith(f'finetune_model_revision "main" of {REPO} is not a commit')
    assert "Pin finetune_model_revision to a 40-character commit" in problem
    assert f'"main" points to {COMMIT} on {hub.url} now' in problem
    assert hub.downloads() == []
    # Where the hub does not answer, the fix is the same, without the commit.
    endpoint = f"http://127.0.0.1:{free_port()}"
    status, result, _stderr, _seconds = stage(endpoint, revision="v1.0")
    assert status == 3
    assert f'{endpoint} could not tell which commit "v1.0" points to now (ConnectError' in result["problems"][0]


def test_served_bytes_that_do_not_match_the_sha256_are_refused_naming_the_file(hub, model, stage, tmp_path):
    dest = tmp_path / "model"
    hub.corrupt.add(SMALL)
    status, result, stderr, _seconds = stage(hub.url)
    assert status == 3, (result, stderr)
    (problem,) = result["problems"]
    listed = hub.repos[REPO].files[SMALL].sha256
    assert problem.startswith(f"{SMALL} of {REPO} at revision {COMMIT} on {hub.url} does not match the hub's metadata")
    assert f"the hub lists {listed}" in problem and "it was removed" in problem
    assert not (dest / SMALL).exists()
    assert not json.loads((dest / ".instinct-snapshot.json").read_text())["complete"]

    # Served right again: only that file is downloaded again.
    hub.corrupt.clear()
    hub.reset()
    status, result, stderr, _seconds = stage(hub.url)
    assert status == 0 and result["downloaded_files"] == 1, (result, stderr)
    assert [name for name, _range in hub.downloads()] == [SMALL]
    assert _same_files(model, dest)
