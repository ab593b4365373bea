# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Stage a hub model on a node before its job starts: one pinned commit, downloaded with
huggingface_hub into a folder that the job then loads with ``HF_HUB_OFFLINE=1``.

Run in the node's training venv, as the training account, before the job's units start::

    instinct-stage-model --endpoint URL --repo OWNER/NAME --revision COMMIT --dest FOLDER
                         [--allow PATTERN ...] [--workers 8] [--timeout 10] [--progress-interval 10]

The hub token comes from the environment (``HF_TOKEN``) or from ``--token-file FILE`` (a file of the
running account, mode 0600, not a link: the finetune role writes one for the run and removes it, since
a task's environment is on the node's command line, where ``ps`` shows it); never an argument, never
the account's own token file. Proxies come from ``HTTPS_PROXY``/``NO_PROXY`` as huggingface_hub reads
them.

1. The revision must be a commit (40 hex digits): a branch or tag can move while the nodes download,
   and two nodes would train different weights. A branch is refused with the commit it points to
   now, when the hub answers.
2. A folder whose record (``.instinct-snapshot.json``) names the same repository, commit and
   patterns, complete, with every file at its recorded size, is reused as it is: no request at all.
3. Otherwise the hub's metadata of that commit (``HfApi.model_info(files_metadata=True)``, within
   ``--timeout`` seconds) lists the files, their sizes and the LFS files' sha256. An unreachable
   endpoint, a token the hub refuses, a missing repository or revision is refused here, in seconds.
4. The files that the patterns select (by default the config and tokenizer files and the
   safetensors weights; ``*.bin``/``*.pth`` weights only where the commit has no safetensors) are
   downloaded with ``hf_hub_download`` into the folder, ``--workers`` at a time, with one progress
   line every ``--progress-interval`` seconds on stderr. A connection cut mid-file is resumed by
   huggingface_hub with a Range request from the last whole 10 MB chunk it wrote. A run that was
   stopped keeps every file it had finished and verified (the record lists them) and downloads only
   the others again: huggingface_hub 1.33 writes each download to a file of its own process and
   never resumes another process's partial file, so those are removed.
5. Every file is checked against the metadata: the LFS files' sha256 and size, the others' git blob
   id and size. A file that does not match is removed and refused by name. Files already in the
   folder that the record does not vouch for are hashed, and kept when they match.

Prints one line ``instinct-stage-model: {"status": "downloaded" | "reused" | "refused", ...}`` on
stdout. Exit 0 when the folder holds the commit's files, 3 when refused (``problems`` says what,
where and the fix, and names the runbook); anything unforeseen fails with Python's traceback.
"""

import argparse
import errno
import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path, PurePosixPath

import httpx
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    FileMetadataError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import disable_progress_bars, filter_repo_objects

MARK = "instinct-stage-model: "
RUNBOOK = "docs/runbooks/hub-model.md"
RECORD = ".instinct-snapshot.json"
LOCK = ".instinct-snapshot.lock"
COMMIT = re.compile(r"[0-9a-f]{40}")
# What a job loads from a model repository: its config, generation config and safetensors index
# (*.json), its weights, and its tokenizer in any of the forms transformers reads.
DEFAULT_ALLOW = (
    "*.json",
    "*.safetensors",
    "tokenizer*",
    "*.model",
    "*.tiktoken",
    "merges.txt",
    "vocab.txt",
    "*.jinja",
)
# Weights in the pickle formats, only for a commit without safetensors (else they are duplicates).
FALLBACK_WEIGHTS = ("*.bin", "*.pth", "*.pt")
DUPLICATE_INDEXES = ("*.bin.index.json", "*.pth.index.json")


class Refused(Exception):
    """A reason the folder cannot hold the commit's files, worded for the operator."""


def _human(size):
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1000
    return f"{size:.2f} TB"


def _see():
    return f"(see {RUNBOOK})"


class Hub:
    """The one repository commit this run stages, and how to word what its hub answers."""

    def __init__(self, endpoint, repo, revision, timeout):
        self.endpoint = endpoint
        self.repo = repo
        self.revision = revision
        self.timeout = timeout
        # The token from the environment only: False keeps huggingface_hub off the account's token file.
        self.token = os.environ.get("HF_TOKEN") or False
        self.api = HfApi(endpoint=endpoint, token=self.token)

    @property
    def what(self):
        return f"{self.repo} at revision {self.revision}"

    @property
    def where(self):
        return f"{self.what} on {self.endpoint}"

    def info(self, revision=None):
        """The hub's model info (files with their metadata) of ``revision``, within the timeout."""
        return self.api.model_info(
            self.repo, revision=revision or self.revision, files_metadata=True, timeout=self.timeout
        )

    def head_of(self, revision=None):
        """The commit a branch or tag (the default branch if None) points to now, or why it is unknown."""
        try:
            return self.api.model_info(self.repo, revision=revision, timeout=self.timeout).sha, None
        except (HfHubHTTPError, httpx.HTTPError, OfflineModeIsEnabled, ValueError, KeyError) as error:
            return None, f"{type(error).__name__}: {_first_line(error)}"

    def explain(self, error, file=None):
        """The refusal for an error of huggingface_hub or httpx, or None when it is none of the known ones."""
        subject = f"{file} of {self.what}" if file else self.what
        for cause in _causes(error):
            for kind, word in self.WORDS:
                if isinstance(cause, kind):
                    return word(self, cause, subject)
        return None

    def _offline(self, _error, subject):
        return (
            f"HF_HUB_OFFLINE is set for the staging step and the folder does not hold {subject} from "
            f"{self.endpoint} yet: "
            f"unset it for this step (the job's units set it for the ranks) {_see()}"
        )

    def _gated(self, error, _subject):
        access = "HF_TOKEN has no access to it" if self.token else "it needs a token (HF_TOKEN is not set)"
        return (
            f"{self.endpoint} refuses {self.repo}: the repository is gated and {access} ({_status(error)}): "
            f"accept its terms on the hub with the account of finetune_hf_token, or set finetune_hf_token to a "
            f"token of an account that has accepted them {_see()}"
        )

    def _no_repository(self, error, _subject):
        hidden = (
            "or it is private and HF_TOKEN has no read access to it"
            if self.token
            else "or it is private or gated and no token was given (HF_TOKEN is not set)"
        )
        return (
            f"{self.endpoint} has no repository {self.repo} ({_status(error)}), {hidden}: check "
            f"finetune_model (the hub id, owner/name) and finetune_hf_endpoint, and for a private "
            f"repository set finetune_hf_token to a token that can read it {_see()}"
        )

    def _no_revision(self, error, _subject):
        head, _why = self.head_of()
        now = f"; its default branch is at {head} now" if head else ""
        return (
            f"{self.endpoint} has no revision {self.revision} in {self.repo} ({_status(error)}){now}: "
            f"check finetune_model_revision: a mistyped commit, one of another repository, or one a "
            f"force-push removed; pin it to a commit of the repository's history {_see()}"
        )

    def _no_entry(self, error, subject):
        return (
            f"{self.endpoint} lists {subject} in its metadata but does not serve it ({_status(error)}): "
            f"the hub or mirror is inconsistent; retry later, or stage from the hub itself {_see()}"
        )

    def _unreachable(self, error, subject):
        return (
            f"cannot reach the hub at {self.endpoint} for {subject} ({type(error).__name__}: "
            f"{_first_line(error) or 'no answer'}; {self.timeout:g} s to connect and answer): check "
            f"finetune_hf_endpoint, the node's DNS and route to it, and its proxy (HTTPS_PROXY, NO_PROXY) {_see()}"
        )

    def _http(self, error, subject):
        status = error.response.status_code if error.response is not None else None
        if status == 401 and self.token:
            return (
                f"{self.endpoint} refuses HF_TOKEN for {subject} ({_status(error)}): the token is wrong, expired "
                f"or revoked; set finetune_hf_token to a valid read token for this endpoint {_see()}"
            )
        if status == 401:
            return (
                f"{self.endpoint} wants a token for {subject} ({_status(error)}) and HF_TOKEN is not set: set "
                f"finetune_hf_token to a read token of an account that can read {self.repo} {_see()}"
            )
        if status == 403:
            return (
                f"{self.endpoint} refuses {subject} to {'HF_TOKEN' if self.token else 'an anonymous client'} "
                f"({_status(error)}): give the token read access to {self.repo} (a fine-grained token needs "
                f"it for this repository) and set it as finetune_hf_token {_see()}"
            )
        return (
            f"{self.endpoint} answered {_status(error)} for {subject}: the hub, the mirror or a proxy on the way "
            f"fails; check finetune_hf_endpoint and retry later {_see()}"
        )

    def not_a_hub(self, error, subject=None):
        return (
            f"{self.endpoint} does not answer as a Hugging Face hub for {subject or self.what} "
            f"({type(error).__name__}: {_first_line(error)}): finetune_hf_endpoint must be the hub's base URL "
            f"(https://huggingface.co or a mirror's), not a model page, and a proxy must not answer for it {_see()}"
        )

    # The first of these that an error or one of its causes is, in this order (a gated repository is
    # also a RepositoryNotFoundError, every hub error an HfHubHTTPError).
    WORDS = (
        (OfflineModeIsEnabled, _offline),
        (GatedRepoError, _gated),
        (RepositoryNotFoundError, _no_repository),
        (RevisionNotFoundError, _no_revision),
        (RemoteEntryNotFoundError, _no_entry),
        (HfHubHTTPError, _http),
        (httpx.TransportError, _unreachable),
        (FileMetadataError, not_a_hub),
    )


def _causes(error):
    seen = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _first_line(error):
    text = str(error).strip()
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _status(error):
    response = error.response
    if response is None:
        return _first_line(error)
    message = response.headers.get("X-Error-Message") or response.reason_phrase
    code = response.headers.get("X-Error-Code")
    return " ".join(str(part) for part in (response.status_code, code, message) if part)


class Wanted:
    """One file of the commit as the hub's metadata describes it."""

    def __init__(self, sibling):
        self.name = sibling.rfilename
        self.blob_id = sibling.blob_id
        self.lfs_sha256 = sibling.lfs.sha256 if sibling.lfs is not None else None
        self.size = sibling.lfs.size if sibling.lfs is not None else sibling.size

    def entry(self, sha256):
        return {"size": self.size, "sha256": sha256, "blob_id": self.blob_id, "lfs": self.lfs_sha256 is not None}

    def vouched_by(self, entry):
        """Whether a record entry was written for this very file of the hub."""
        return (
            isinstance(entry, dict)
            and entry.get("size") == self.size
            and entry.get("blob_id") == self.blob_id
            and (self.lfs_sha256 is None or entry.get("sha256") == self.lfs_sha256)
        )


def _digest(path):
    """(sha256, git blob sha1) of a file, read once."""
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as handle:
        while chunk := handle.read(8 << 20):
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest()


def _mismatch(path, wanted):
    """None and the file's sha256 when it is the hub's file, else what differs (and None)."""
    size = path.stat().st_size
    if size != wanted.size:
        return f"{size} bytes, the hub lists {wanted.size}", None
    sha256, blob_id = _digest(path)
    if wanted.lfs_sha256 is not None and sha256 != wanted.lfs_sha256:
        return f"sha256 {sha256}, the hub lists {wanted.lfs_sha256}", None
    if wanted.lfs_sha256 is None and blob_id != wanted.blob_id:
        return f"git blob {blob_id}, the hub lists {wanted.blob_id}", None
    return None, sha256


class Progress:
    """Files and bytes done, printed as one line every ``interval`` seconds (huggingface_hub's own
    bars are off: the downloads report to this through their ``tqdm_class``)."""

    def __init__(self, files, total_bytes, interval, out):
        self.files = files
        self.total_bytes = total_bytes
        self.interval = interval
        self.out = out
        self.done_files = 0
        self.done_bytes = 0
        self.partial = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._last = (time.monotonic(), 0)

    def file_bar(self, name):
        progress = self

        class Bar:
            """What huggingface_hub calls on its tqdm_class (HTTP: update; Xet: update, update_transfer,
            set_postfix_str); only the bytes written count."""

            def __init__(self, *args, **kwargs):
                self.n = 0
                self.total = kwargs.get("total")
                self.update(kwargs.get("initial") or 0)

            def update(self, n=1):
                n = int(n or 0)
                self.n += n
                with progress.lock:
                    progress.partial[name] = progress.partial.get(name, 0) + n

            def update_transfer(self, n=1):
                pass

            def set_postfix_str(self, *args, **kwargs):
                pass

            set_transfer_postfix_str = set_description = set_description_str = refresh = set_postfix_str

            def close(self):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        return Bar

    def finished(self, name, size):
        with self.lock:
            self.partial.pop(name, None)
            self.done_files += 1
            self.done_bytes += size

    def line(self):
        with self.lock:
            done = self.done_bytes + sum(self.partial.values())
            files = self.done_files
        now = time.monotonic()
        then, before = self._last
        self._last = (now, done)
        rate = (done - before) / (now - then) if now > then else 0
        share = 100 * done / self.total_bytes if self.total_bytes else 100
        return (
            f"{files}/{self.files} files, {_human(done)} of {_human(self.total_bytes)} ({share:.1f}%), {_human(rate)}/s"
        )

    def say(self, text):
        print(MARK + text, file=self.out, flush=True)

    def _run(self):
        while not self._stop.wait(self.interval):
            self.say("progress " + self.line())

    def __enter__(self):
        self._last = (time.monotonic(), self.done_bytes)
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


class Folder:
    """The destination folder: its lock, its record, its files."""

    def __init__(self, path):
        self.path = path
        self.record_path = path / RECORD
        self._lock_handle = None
        self._record_lock = threading.Lock()

    def lock(self, say):
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock_handle = (self.path / LOCK).open("a")
        except OSError as error:
            raise Refused(
                f"cannot write the model folder {self.path} as {_account()} ({error.strerror}): it must be the "
                f"training account's (the finetune role makes it so) {_see()}"
            ) from error
        try:
            fcntl.flock(self._lock_handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for the other instinct-stage-model that stages into {self.path}")
            fcntl.flock(self._lock_handle, fcntl.LOCK_EX)

    def file(self, name):
        parts = PurePosixPath(name).parts
        if not parts or name.startswith("/") or ".." in parts:
            raise Refused(f"the hub lists a file outside the repository folder: {name!r} {_see()}")
        return self.path / name

    def read_record(self):
        try:
            record = json.loads(self.record_path.read_text())
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else {}

    def write_record(self, record):
        with self._record_lock:
            partial = self.record_path.with_name(RECORD + ".tmp")
            partial.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
            os.replace(partial, self.record_path)

    def remove_partial_downloads(self):
        """(count, bytes) of huggingface_hub's partial files of a run that was stopped, removed: it never
        resumes them, they only take space (this run holds the folder's lock, so none is being written)."""
        removed = []
        download = self.path / ".cache" / "huggingface" / "download"
        for partial in download.rglob("*.incomplete") if download.is_dir() else ():
            removed.append(partial.stat().st_size)
            partial.unlink()
        return len(removed), sum(removed)


def _account():
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def select(names, allow):
    """The files of the commit to stage: those the patterns allow; with the default patterns, the
    pickle weights too where the commit has no safetensors weights."""
    chosen = list(filter_repo_objects(names, allow_patterns=list(allow)))
    if allow == DEFAULT_ALLOW:
        if any(name.endswith(".safetensors") for name in chosen):
            duplicates = set(filter_repo_objects(chosen, allow_patterns=list(DUPLICATE_INDEXES)))
            chosen = [name for name in chosen if name not in duplicates]
        else:
            chosen += [n for n in filter_repo_objects(names, allow_patterns=list(FALLBACK_WEIGHTS)) if n not in chosen]
    return sorted(set(chosen))


def _reusable(folder, record):
    """Whether every file of a complete record is in the folder at its recorded size."""
    if not record.get("complete") or not record["files"]:
        return False
    for name, entry in record["files"].items():
        path = folder.file(name)
        if not path.is_file() or path.stat().st_size != entry.get("size"):
            return False
    return True


def _refuse_branch(hub):
    head, why = hub.head_of(hub.revision)
    now = (
        f'"{hub.revision}" points to {head} on {hub.endpoint} now'
        if head
        else f'{hub.endpoint} could not tell which commit "{hub.revision}" points to now ({why})'
    )
    return Refused(
        f'finetune_model_revision "{hub.revision}" of {hub.repo} is not a commit: a branch or tag can move while '
        f"the nodes download, and two nodes would train different weights. Pin finetune_model_revision to a "
        f"40-character commit; {now} {_see()}"
    )


def _metadata(hub):
    """The hub's files of the commit, by name: refused in seconds when the hub cannot give them."""
    try:
        info = hub.info()
    except HFValidationError as error:
        raise Refused(
            f"{hub.repo!r} is not a hub repository id ({_first_line(error)}): finetune_model is owner/name {_see()}"
        ) from error
    except (HfHubHTTPError, httpx.HTTPError, OfflineModeIsEnabled, FileMetadataError) as error:
        message = hub.explain(error)
        if message is None:
            raise
        raise Refused(message) from error
    except (ValueError, KeyError, TypeError) as error:  # an answer that is not a hub's JSON
        raise Refused(hub.not_a_hub(error)) from error
    if info.sha != hub.revision:
        raise Refused(
            f"{hub.endpoint} answers commit {info.sha} for revision {hub.revision} of {hub.repo}: it does not serve "
            f"the pinned commit; check finetune_hf_endpoint (a mirror that rewrites revisions?) {_see()}"
        )
    return {sibling.rfilename: Wanted(sibling) for sibling in info.siblings or []}


def _checkable(hub, folder, wanted, names):
    """Refused unless the hub's metadata can check every file to stage, each inside the folder."""
    for name in names:
        folder.file(name)
        item = wanted[name]
        if item.size is None or (item.lfs_sha256 is None and item.blob_id is None):
            raise Refused(
                f"{hub.endpoint} gives no size or hash for {name} of {hub.what}, so the download could not be "
                f"checked: stage from a hub that lists its files' metadata {_see()}"
            )


class Stager:
    """One run: the hub's commit into the folder."""

    def __init__(self, args, out):
        self.hub = Hub(args.endpoint.rstrip("/"), args.repo, args.revision, args.timeout)
        self.allow = tuple(args.allow) if args.allow else DEFAULT_ALLOW
        self.folder = Folder(Path(args.dest).absolute())
        self.workers = max(1, args.workers)
        self.interval = args.progress_interval
        self.out = out
        self.started = time.monotonic()
        self.progress = Progress(0, 0, self.interval, out)
        self.wanted = {}
        self.record = {}
        self.counts = {"downloaded_files": 0, "downloaded_bytes": 0, "hashed_files": 0}

    def say(self, text):
        self.progress.say(text)

    def result(self, status, names, checked):
        sizes = [self.record["files"][name]["size"] for name in names]
        return {
            "status": status,
            "repo": self.hub.repo,
            "revision": self.hub.revision,
            "endpoint": self.hub.endpoint,
            "path": str(self.folder.path),
            "files": len(sizes),
            "bytes": sum(sizes),
            **self.counts,
            "checked": checked,
            "seconds": round(time.monotonic() - self.started, 3),
        }

    def run(self):
        hub = self.hub
        if not re.match(r"https?://[^/]", hub.endpoint):
            raise Refused(
                f"finetune_hf_endpoint {hub.endpoint!r} is not an http(s) URL: give the hub's base URL, "
                f"https://huggingface.co or a mirror's {_see()}"
            )
        if not COMMIT.fullmatch(hub.revision):
            raise _refuse_branch(hub)
        self.folder.lock(self.say)
        self.record = self.folder.read_record()
        if self.same_snapshot(self.record) and _reusable(self.folder, self.record):
            names = sorted(self.record["files"])
            result = self.result("reused", names, "size")
            self.say(f"reused {hub.where} in {self.folder.path}: {len(names)} files, {_human(result['bytes'])}")
            return result

        self.wanted = _metadata(hub)
        names = select(list(self.wanted), self.allow)
        if not names:
            raise Refused(
                f"none of the {len(self.wanted)} files of {hub.where} matches the patterns {list(self.allow)}: is it "
                f"a model repository with config.json and weights? {_see()}"
            )
        _checkable(hub, self.folder, self.wanted, names)
        trusted, others = self.plan(names)
        self.download(names, trusted, others)
        self.record["complete"] = True
        self.folder.write_record(self.record)
        status = "downloaded" if self.counts["downloaded_files"] else "reused"
        result = self.result(status, names, "sha256" if others else "size")
        self.say(
            f"done: {len(names)} files, {_human(result['bytes'])} in {result['seconds']:g} s; "
            f"{self.counts['downloaded_files']} downloaded ({_human(self.counts['downloaded_bytes'])}), "
            f"{self.counts['hashed_files']} found here and hashed"
        )
        return result

    def same_snapshot(self, record):
        hub = self.hub
        return (
            record.get("repo") == hub.repo
            and record.get("revision") == hub.revision
            and record.get("allow") == list(self.allow)
        )

    def plan(self, names):
        """(files the record vouches for, files to hash or download); a fresh record is written."""
        folder, old = self.folder, self.record
        vouched = old["files"] if self.same_snapshot(old) else {}
        # A record of another commit (or other patterns): its files that this commit does not have go.
        if old and not vouched:
            for name in set(old["files"]) - set(names):
                path = folder.file(name)
                if path.is_file():
                    path.unlink()
        trusted = [
            name
            for name in names
            if name in vouched
            and self.wanted[name].vouched_by(vouched[name])
            and folder.file(name).is_file()
            and folder.file(name).stat().st_size == self.wanted[name].size
        ]
        self.record = {
            "repo": self.hub.repo,
            "revision": self.hub.revision,
            "endpoint": self.hub.endpoint,
            "allow": list(self.allow),
            "complete": False,
            "files": {name: vouched[name] for name in trusted},
        }
        folder.write_record(self.record)
        others = [name for name in names if name not in trusted]
        missing = sum(self.wanted[name].size for name in others if not folder.file(name).is_file())
        free = shutil.disk_usage(folder.path).free
        if missing > free:
            raise Refused(
                f"{folder.path} has {_human(free)} free and {self.hub.where} needs {_human(missing)} more: free "
                f"space there or stage the model on a larger filesystem {_see()}"
            )
        return trusted, others

    def download(self, names, trusted, others):
        removed, removed_bytes = self.folder.remove_partial_downloads()
        total = sum(self.wanted[name].size for name in names)
        self.progress = Progress(len(names), total, self.interval, self.out)
        for name in trusted:
            self.progress.finished(name, self.wanted[name].size)
        self.say(
            f"staging {self.hub.where} into {self.folder.path}: {len(names)} files, {_human(total)}; "
            f"{len(trusted)} here already by the record, {len(others)} to hash or download"
            + (f"; removed {removed} partial downloads of a stopped run ({_human(removed_bytes)})" if removed else "")
        )
        problems = []
        with self.progress, ThreadPoolExecutor(self.workers, thread_name_prefix="download") as pool:
            futures = [pool.submit(self.fetch, name) for name in others]
            for future in as_completed(futures):
                try:
                    name, sha256 = future.result()
                except Refused as refusal:
                    problems.append(str(refusal))
                    for pending in futures:
                        pending.cancel()
                    continue
                self.progress.finished(name, self.wanted[name].size)
                self.record["files"][name] = self.wanted[name].entry(sha256)
                self.folder.write_record(self.record)
        if problems:
            raise Refused("\n".join(dict.fromkeys(problems)))

    def fetch(self, name):
        """(name, sha256) of one file in the folder, checked against the hub's metadata; in a worker thread."""
        hub, item, path = self.hub, self.wanted[name], self.folder.file(name)
        if path.is_file():
            difference, sha256 = _mismatch(path, item)
            self.count("hashed_files", 1)
            if difference is None:
                return name, sha256
            path.unlink()
        try:
            hf_hub_download(
                hub.repo,
                name,
                revision=hub.revision,
                local_dir=self.folder.path,
                endpoint=hub.endpoint,
                token=hub.token,
                etag_timeout=hub.timeout,
                tqdm_class=self.progress.file_bar(name),
            )
        except (HfHubHTTPError, httpx.HTTPError, OfflineModeIsEnabled, FileMetadataError, OSError) as error:
            message = hub.explain(error, name)
            if message is None and isinstance(error, OSError) and error.errno == errno.ENOSPC:
                message = f"{self.folder.path} is full while writing {name} ({error.strerror}): free space {_see()}"
            if message is None:
                raise
            raise Refused(message) from error
        difference, sha256 = _mismatch(path, item)
        if difference is not None:
            path.unlink()
            raise Refused(
                f"{name} of {hub.where} does not match the hub's metadata ({difference}): it was removed; a re-run "
                f"downloads it again, and if it fails again the endpoint or a proxy serves other bytes than the "
                f"hub lists {_see()}"
            )
        self.count("downloaded_files", 1)
        self.count("downloaded_bytes", item.size)
        return name, sha256

    def count(self, key, amount):
        with self.progress.lock:
            self.counts[key] += amount


def parse(argv):
    parser = argparse.ArgumentParser(
        prog="instinct-stage-model", description="Stage a hub model at a pinned commit into a folder."
    )
    parser.add_argument("--endpoint", required=True, help="the hub's base URL (finetune_hf_endpoint)")
    parser.add_argument("--repo", required=True, help="the repository id, owner/name (finetune_model)")
    parser.add_argument("--revision", required=True, help="the commit, 40 hex digits (finetune_model_revision)")
    parser.add_argument("--dest", required=True, help="the folder the job loads the model from")
    parser.add_argument(
        "--allow", action="append", metavar="PATTERN", help=f"files to stage (default: {' '.join(DEFAULT_ALLOW)})"
    )
    parser.add_argument("--workers", type=int, default=8, help="files downloaded at a time")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds for the hub to connect and answer")
    parser.add_argument("--progress-interval", type=float, default=10.0, help="seconds between progress lines")
    parser.add_argument("--token-file", help="a file of this account (0600, not a link) holding the hub token")
    return parser.parse_args(argv)


def read_token_file(path):
    """The token in ``path``, which must be this account's regular file that no one else can read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid() or info.st_mode & 0o077 or not (info.st_mode & 0o170000 == 0o100000):
            raise SystemExit(f"instinct-stage-model: {path} must be a file of this account that only it reads (0600)")
        return handle.read(4096).strip()


def main(argv):
    args = parse(argv[1:])
    if args.token_file:
        # Into this process's environment only, where huggingface_hub and the checks below read it.
        os.environ["HF_TOKEN"] = read_token_file(args.token_file)
    disable_progress_bars()
    try:
        result = Stager(args, sys.stderr).run()
    except Refused as refusal:
        result = {
            "status": "refused",
            "repo": args.repo,
            "revision": args.revision,
            "endpoint": args.endpoint.rstrip("/"),
            "path": str(Path(args.dest).absolute()),
            "problems": str(refusal).split("\n"),
            "runbook": RUNBOOK,
        }
    print(MARK + json.dumps(result), flush=True)
    return 3 if result["status"] == "refused" else 0


def cli():
    return main(sys.argv)
