# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Where a model copied from the controller is stored on the nodes: by its name and its content
(issue 32). Two model folders of the same name from different sources (a base model and a fine-tune of
it, both ``.../llama-3-8b``) were copied to the same ``models/llama-3-8b`` on the nodes, the second over
the first, under a job training or resumable on it, and the base-model evaluation cache keyed by that
path mixed them up. Now each gets ``models/<name>-<digest>``, the digest being the SHA-256 of the
folder's files (relative paths and contents, links followed as the copy follows them).

Hashing every byte on every run would read a large model twice per run (the copy already reads it
once). The digest is therefore cached on the controller under a key made of the folder's listing
(relative paths, sizes, modification and change times, inodes): a folder that did not change is not read again, and one
that was only touched (new times, same bytes) is read once and keeps its name.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os

CHUNK = 1 << 20
DIGEST_CHARS = 16


def listing(folder):
    """[(relative path, size, mtime_ns, ctime_ns, inode)] of every file under ``folder`` (links followed,
    as ansible.builtin.copy follows them), sorted. The change time and inode catch a rewrite that kept
    the modification time (touch -r, rsync --inplace -t)."""
    entries = []
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            info = os.stat(path)
            entries.append(
                (os.path.relpath(path, folder), info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
            )
    return sorted(entries)


def content_digest(folder, entries):
    """SHA-256 over each file's relative path and content, in ``entries``' order."""
    digest = hashlib.sha256()
    for relative, *_times in entries:
        digest.update(relative.encode("utf-8") + b"\0")
        file_digest = hashlib.sha256()
        with open(os.path.join(folder, relative), "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK), b""):
                file_digest.update(chunk)
        digest.update(file_digest.digest())
    return digest.hexdigest()


def store_name(folder, cache_dir):
    """``<folder name>-<first DIGEST_CHARS of the content digest>``, the digest read from ``cache_dir``
    when the folder's listing is unchanged since it was computed. A ValueError names an empty or
    missing folder."""
    folder = os.path.abspath(folder.rstrip("/") or "/")
    if not os.path.isdir(folder):
        raise ValueError(f"{folder} is not a folder")
    entries = listing(folder)
    if not entries:
        raise ValueError(f"{folder} holds no file")
    key = hashlib.sha256(json.dumps([folder, entries]).encode("utf-8")).hexdigest()
    cached = os.path.join(cache_dir, key)
    try:
        with open(cached, encoding="ascii") as handle:
            digest = handle.read().strip()
    except OSError:
        digest = ""
    if len(digest) != 64:
        digest = content_digest(folder, entries)
        try:
            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
            temporary = f"{cached}.{os.getpid()}"
            with open(temporary, "w", encoding="ascii") as handle:
                handle.write(digest + "\n")
            os.replace(temporary, cached)
        except OSError:
            pass  # a cache that cannot be written costs a read next time, nothing more
    return f"{os.path.basename(folder)}-{digest[:DIGEST_CHARS]}"
