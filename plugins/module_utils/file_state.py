# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Whether a set of files and folders on a node is already what a role would write.

A role that installs N files with ansible.builtin.copy or template pays two round trips per file on
every run, changed or not (a stat, then the file module for the attributes). On a no-change run of
a cluster that is most of the time. The file_state module reads the whole set in one round trip
and says whether every entry already has the content (sha1, as Ansible's own stat and copy use),
the type, the owner, the group and the mode the role asks for. When one differs, the role runs its
usual copy and template tasks, with their diff, check mode and handlers, exactly as before; when
none differs, it skips them.

Pure comparison over what was read; `observe` is the only function that touches the filesystem.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import hashlib
import os
import pwd
import stat

STATES = ("file", "directory", "absent")
BLOCK = 1024 * 1024


def _mode(value):
    """A mode as Ansible roles write it ("0644", "644", 0o644 or 420) as an int; None stays None."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text or any(ch not in "01234567" for ch in text) or len(text) > 4:
        raise ValueError(f"mode {value!r} is not an octal mode such as '0644'")
    return int(text, 8)


def expected_entries(files):
    """Check and normalise the role's list: each a dict with path, state, checksum, owner, group, mode."""
    entries = []
    seen = set()
    for index, raw in enumerate(files or []):
        if not isinstance(raw, dict) or not raw.get("path"):
            raise ValueError(f"files[{index}] has no path: {raw!r}")
        path = raw["path"]
        if not os.path.isabs(path):
            raise ValueError(f"files[{index}]: {path!r} is not an absolute path")
        state = raw.get("state") or "file"
        if state not in STATES:
            raise ValueError(f"files[{index}]: state {state!r} is not one of {', '.join(STATES)}")
        checksum = raw.get("checksum")
        if state == "file" and not checksum:
            raise ValueError(f"files[{index}]: {path} is a file without the checksum of what the role writes")
        if state != "file" and checksum:
            raise ValueError(f"files[{index}]: {path} is {'a directory' if state == 'directory' else 'absent'} "
                             "and cannot have a checksum")  # fmt: skip
        if path in seen:
            raise ValueError(f"files[{index}]: {path} is listed twice")
        seen.add(path)
        entries.append(
            {
                "path": path,
                "state": state,
                "checksum": checksum.lower() if checksum else None,
                "owner": raw.get("owner"),
                "group": raw.get("group"),
                "mode": _mode(raw.get("mode")),
            }
        )
    return entries


def difference(entry, seen):  # noqa: PLR0911 - one reason per kind of drift
    """Why ``seen`` (observe's answer for one path) is not ``entry``, or None when it is.

    Only what the role sets is compared: an entry without an owner leaves the owner alone, as the
    copy module does."""
    if entry["state"] == "absent":
        return f"present (a {seen['type']})" if seen.get("exists") else None
    if not seen.get("exists"):
        return "missing"
    if entry["state"] == "directory":
        if seen["type"] != "directory":
            return f"a {seen['type']}, not a directory"
    elif seen["type"] != "file":
        return f"a {seen['type']}, not a file"
    elif seen.get("checksum") != entry["checksum"]:
        return "content differs"
    for key in ("owner", "group"):
        if entry[key] is not None and str(entry[key]) != seen.get(key):
            return f"{key} {seen.get(key)}, not {entry[key]}"
    if entry["mode"] is not None and entry["mode"] != seen.get("mode"):
        return f"mode {seen.get('mode', 0):04o}, not {entry['mode']:04o}"
    return None


def differences(entries, observed):
    """Every entry that differs, as {path, reason}, in the role's order."""
    found = []
    for entry in entries:
        reason = difference(entry, observed.get(entry["path"], {"exists": False}))
        if reason:
            found.append({"path": entry["path"], "reason": reason})
    return found


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def observe(path, want_checksum, follow=False):
    """What is at ``path``. A final symlink is followed with ``follow`` (as the file module follows
    one to a folder) and reported as a link otherwise (as copy replaces one with the file)."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    if stat.S_ISDIR(info.st_mode):
        kind = "directory"
    elif stat.S_ISREG(info.st_mode):
        kind = "file"
    elif stat.S_ISLNK(info.st_mode):
        kind = "link"
    else:
        kind = "special file"
    seen = {
        "exists": True,
        "type": kind,
        "owner": _name(pwd.getpwuid, info.st_uid),
        "group": _name(grp.getgrgid, info.st_gid),
        "mode": stat.S_IMODE(info.st_mode),
    }
    if kind == "file" and want_checksum:
        digest = hashlib.sha1()  # noqa: S324 - Ansible's own stat/copy checksum; integrity, not security
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(BLOCK), b""):
                digest.update(block)
        seen["checksum"] = digest.hexdigest()
    return seen
