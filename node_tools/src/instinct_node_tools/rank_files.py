# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The fine-tune ranks' progress files, as root reads them from folders the training account owns.

Every rank writes ``<jobs>/<job>/metrics/rank<N>.prom`` (the launcher's progress export, as the
training account); the GPU collector runs as root and merges them into node exporter's textfile
folder, which every local user can read. So nothing but what the ranks wrote may get through:

- the folders the pattern's wildcards match and the files are opened one component at a time,
  relative to the folder above, never through a link (``O_NOFOLLOW``): a ``rank0.prom`` or a
  ``metrics`` folder that links to a root-only file or folder is refused, not read;
- every folder must belong to the training account or to root (the jobs' root is root's), and every
  file to the training account, which is the only account the ranks run as: a file of root's in a
  folder the account owns was put there by something else (a rename or a link where the kernel does
  not protect hard links), and is refused. A file must be a regular file with one link (a hard link
  to another account's file is refused), of at most MAX_BYTES; opening it never blocks
  (``O_NONBLOCK``: a FIFO is refused, not waited on);
- what such a file holds is parsed by prometheus_client, and only samples of the progress metrics
  with exactly the progress labels pass, their ``finetune_job`` the job's folder name and their
  ``rank`` the ``N`` of the file's name (one job's files cannot speak for another job or rank).

Everything refused or dropped is a problem line (for the journal), naming the file and why, never
what it holds.
"""

import errno
import fnmatch
import glob
import os
import pwd
import re
import stat

from instinct_node_tools import exposition, progress

# A rank file is a few hundred bytes.
MAX_BYTES = 1 << 20
# A node runs a few ranks of a few jobs; past this many files, the rest are not read (one tick of
# the timer reads at most MAX_FILES * MAX_BYTES).
MAX_FILES = 1024
FILE_NAME = re.compile(r"rank(\d+)\.prom")

_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A folder or file the collector does not read; the message says why."""


class Owners:
    """The accounts whose files may be read: the training account (when the node has it) and root."""

    def __init__(self, account):
        self.account = account
        try:
            self.training_uid = pwd.getpwnam(account).pw_uid
        except KeyError:
            self.training_uid = None
        self.uids = {0} if self.training_uid is None else {0, self.training_uid}

    def check(self, info):
        """A folder: the training account's or root's."""
        if info.st_uid in self.uids:
            return
        raise Refused(f"owned by uid {info.st_uid}{self._name(info.st_uid)}, neither the training account "
                      f"{self.account} ({self._training()}) nor root")  # fmt: skip

    def check_file(self, info):
        """A rank file: the training account's alone."""
        if self.training_uid is not None and info.st_uid == self.training_uid:
            return
        raise Refused(f"owned by uid {info.st_uid}{self._name(info.st_uid)}, not by the training account "
                      f"{self.account} ({self._training()}), which the ranks run as")  # fmt: skip

    @staticmethod
    def _name(uid):
        try:
            return f" ({pwd.getpwuid(uid).pw_name})"
        except KeyError:
            return ""

    def _training(self):
        return f"uid {self.training_uid}" if self.training_uid is not None else "no such account on this node"


def _kind(info):
    if stat.S_ISLNK(info.st_mode):
        return "a link"
    if stat.S_ISDIR(info.st_mode):
        return "a folder"
    if stat.S_ISFIFO(info.st_mode):
        return "a FIFO"
    if stat.S_ISSOCK(info.st_mode):
        return "a socket"
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        return "a device"
    return "not a regular file"


def _link_refused(folder_fd, name):
    try:
        target = os.readlink(name, dir_fd=folder_fd)
    except OSError:
        target = "?"
    return Refused(f"a link (to {target}), not followed")


def open_folder(folder_fd, name, owners):
    """A descriptor of the folder ``name`` in ``folder_fd``, never through a link; None when ``name``
    is not a folder (a file beside the job folders is not one of them: skipped, as glob does)."""
    try:
        info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Refused(f"cannot read it: {error.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise _link_refused(folder_fd, name)
    if not stat.S_ISDIR(info.st_mode):
        return None
    try:
        # O_NOFOLLOW again: a folder swapped for a link after the stat is refused here.
        fd = os.open(name, _OPEN | os.O_DIRECTORY, dir_fd=folder_fd)
    except OSError as error:
        raise Refused(f"cannot open it: {error.strerror}") from None
    try:
        owners.check(os.fstat(fd))
    except Refused:
        os.close(fd)
        raise
    return fd


def read_file(folder_fd, name, owners):
    """The text of the file ``name`` in ``folder_fd``, read as root may read a file another account
    placed: not through a link, a regular file with one link, owned by the training account, at most
    MAX_BYTES; bytes that are not UTF-8 replaced (the parser then refuses their lines)."""
    try:
        fd = os.open(name, _OPEN | os.O_NONBLOCK, dir_fd=folder_fd)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _link_refused(folder_fd, name) from None
        raise Refused(f"cannot open it: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{_kind(info)}, not a regular file")
        owners.check_file(info)
        if info.st_nlink != 1:
            raise Refused(f"{info.st_nlink} hard links: it may be another file than the rank's")
        if info.st_size > MAX_BYTES:
            raise Refused(f"{info.st_size} bytes, more than a rank file's {MAX_BYTES}")
        chunks = []
        size = 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            raise Refused(f"grew past a rank file's {MAX_BYTES} bytes while read")
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _split(pattern):
    """``(base, parts)``: the folder of ``pattern`` before its first wildcard (root's own setting,
    opened as it is) and the components after it, the last one the files' names."""
    absolute = pattern.startswith(os.sep)
    parts = [part for part in pattern.split(os.sep) if part]
    first = next((n for n, part in enumerate(parts) if glob.has_magic(part)), len(parts) - 1)
    first = min(first, len(parts) - 1)
    base = os.sep.join(parts[:first])
    base = (os.sep + base) if absolute else (base or os.curdir)
    return base, parts[first:]


def _names(folder_fd, part):
    if not glob.has_magic(part):
        return [part]
    # As glob matches: a wildcard does not match a name that starts with a dot, unless the pattern does.
    hidden = part.startswith(".")
    return sorted(
        name
        for name in os.listdir(folder_fd)
        if fnmatch.fnmatchcase(name, part) and (hidden or not name.startswith("."))
    )


class _Reader:
    """One reading of the pattern's files: what was read, and what was refused."""

    def __init__(self, owners):
        self.owners = owners
        self.files = []
        self.problems = []

    def walk(self, folder_fd, folder, parts):
        try:
            names = _names(folder_fd, parts[0])
        except OSError as error:
            self.problems.append(f"{folder}: cannot list it: {error.strerror}")
            return
        for name in names:
            path = os.path.join(folder, name)
            if len(parts) > 1:
                self.enter(folder_fd, name, path, parts[1:])
            else:
                self.read(folder_fd, name, path)

    def enter(self, folder_fd, name, path, parts):
        try:
            child = open_folder(folder_fd, name, self.owners)
        except Refused as why:
            self.problems.append(f"{path}: {why}")
            return
        if child is not None:
            try:
                self.walk(child, path, parts)
            finally:
                os.close(child)

    def read(self, folder_fd, name, path):
        if len(self.files) >= MAX_FILES:
            self.problems.append(f"{path}: not read: more than {MAX_FILES} rank files on the node")
            return
        try:
            self.files.append((path, read_file(folder_fd, name, self.owners)))
        except FileNotFoundError:
            pass  # gone between the listing and the open: a rank's file being replaced
        except Refused as why:
            self.problems.append(f"{path}: {why}")


def read(pattern, owners):
    """``(files, problems)``: ``[(path, text)]`` of the files ``pattern`` (a glob) matches, and one
    line for each folder or file refused (see the module's docstring)."""
    reader = _Reader(owners)
    base, parts = _split(pattern)
    try:
        base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return reader.files, reader.problems  # no job has run on this node yet
    try:
        reader.walk(base_fd, base, parts)
    finally:
        os.close(base_fd)
    return reader.files, reader.problems


def expected_labels(path):
    """The label values a rank file's samples must carry, from where it is:
    ``<jobs>/<job>/metrics/rank<N>.prom`` speaks for rank N of the job <job> only. None when the
    file's name is no rank's."""
    found = FILE_NAME.fullmatch(os.path.basename(path))
    if found is None:
        return None
    job = os.path.basename(os.path.dirname(os.path.dirname(path)))
    return {"finetune_job": job, "rank": found.group(1)}


def collect(pattern, account):
    """``(samples, problems)``: the progress samples of every rank file ``pattern`` matches, read
    as the module's docstring says, merged (each series once), and one line per file refused or
    sample dropped."""
    owners = Owners(account)
    files, problems = read(pattern, owners)
    groups = []
    for path, text in files:
        expect = expected_labels(path)
        if expect is None:
            problems.append(f"{path}: not read: not a rank file's name (rank<N>.prom)")
            continue
        kept, dropped = exposition.sift(text, progress.METRICS, progress.LABELS, expect)
        problems.extend(f"{path}: {why}" for why in dropped)
        groups.append(kept)
    return exposition.combine(groups), problems
