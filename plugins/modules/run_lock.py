#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: run_lock
short_description: Take or release a node's run lock, so that one playbook run at a time changes it
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Every stage playbook takes the lock of each node at its start and releases it at its end; the
    finetune stage releases it before it watches the job, so that a re-run during a job re-attaches.
  - A lock another run holds is refused, naming that run (controller, user, process, playbook, since
    when), unless it is stale, its run is known to be dead, or the operator breaks it.
  - The run asking is named by the action plugin, on the controller (its host, its ansible-playbook
    process and that process's start time), so every stage of one site.yml is the same run, and a
    stage that takes the lock again only renews it.
  - The lock is the run's own bookkeeping, not a setting of the node, so taking, renewing and
    releasing it never report a change (a second run must show none). In check mode nothing is
    written, and a lock held by another run is a warning, not a failure (a check changes nothing).
  - The file is read and written under C(flock) on its folder, so two runs arriving at once cannot
    both take it. The folder is root's alone (0700), so no other account can hold that C(flock) or put a
    link in its place; a C(flock) held for 30 s fails the task instead of waiting for ever.
options:
  state:
    description: V(held) takes (or renews) the lock; V(released) removes it when this run holds it.
    type: str
    choices: [held, released]
    default: held
  path:
    description:
      - The lock file. Under C(/run) (a tmpfs) by default, so that a reboot, which ends every run on
        the node, also ends its lock.
    type: path
    default: /run/instinct-finetune/run.lock
  stale_minutes:
    description:
      - A lock not renewed for this long is taken over (a run whose controller died). 0 never.
    type: int
    default: 720
  force:
    description: Take the lock whoever holds it (the operator checked that no run is active).
    type: bool
    default: false
  take_over:
    description:
      - The id of a holder the controller found dead (its process is gone); the lock is taken only if
        that run still holds it. Set by the action plugin.
    type: str
    default: ""
  owner:
    description:
      - The run asking (V(id), V(controller), V(user), V(pid), V(playbook)). Set by the action plugin.
    type: dict
    required: true
notes:
  - Use it through its action plugin (the task C(instinct.finetune.run_lock)), which sets O(owner)
    and O(take_over) and reads O(stale_minutes), O(force) and O(path) from the common role's
    C(instinct_run_lock_*) variables when the task does not set them.
seealso:
  - module: instinct.finetune.running_jobs
"""

EXAMPLES = r"""
- name: Take this node's run lock (another run changing the node is refused)
  instinct.finetune.run_lock:

- name: Release this node's run lock
  instinct.finetune.run_lock:
    state: released
"""

RETURN = r"""
held:
  description: Whether this run holds the lock after the task.
  returned: always
  type: bool
holder:
  description: The lock's holder before the task (null when it was free).
  returned: always
  type: dict
  sample: {"id": "ctl:4242:1797000000", "controller": "ctl", "user": "ops", "pid": 4242,
           "playbook": "site.yml", "taken": 1797000000.0, "renewed": 1797000100.0}
refused:
  description: Whether another run holds the lock (the action plugin fails with its message).
  returned: always
  type: bool
busy:
  description: In check mode, whether another run holds the lock (the action plugin warns).
  returned: in check mode
  type: bool
why:
  description: Why the lock was taken (V(free), V(renewed), V(stale ...), ...) or refused (V(held)).
  returned: always
  type: str
"""

import fcntl
import json
import os
import stat
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils import runlock


def read_holder(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return runlock.parse(handle.read(65536))
    except FileNotFoundError:
        return None


def write(path, content):
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(content, sort_keys=True) + "\n")
    os.replace(temporary, path)


# How long a run waits for another run's read-decide-write of the lock (a few milliseconds each).
FLOCK_SECONDS = 30


def open_folder(module, folder):
    """The lock's folder, root's alone (0700): no other account can flock it and hold every run up, nor
    put a link in its place. Made when absent; one that is a link or another account's is refused."""
    if not os.path.lexists(folder):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        module.fail_json(msg=f"{folder} is not a folder of this account's (a link, a file or another "
                             f"account's, uid {info.st_uid}): remove it, and the next run makes it")  # fmt: skip
    if stat.S_IMODE(info.st_mode) & 0o077:
        module.fail_json(msg=f"{folder} is open to other accounts (mode {stat.S_IMODE(info.st_mode):04o}): any of them "
                             f"could hold its flock and every run with it. chmod 700 {folder}, or point "
                             "instinct_run_lock_path at a folder of root's alone")  # fmt: skip
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def take_flock(module, fd, folder):
    deadline = time.monotonic() + FLOCK_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                module.fail_json(msg=f"{folder} stayed locked (flock) for {FLOCK_SECONDS} s: a process other than "
                                     "a playbook run holds it; find it with fuser or lsof and stop it")  # fmt: skip
            time.sleep(0.2)


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
            "path": {"type": "path", "default": "/run/instinct-finetune/run.lock"},
            "stale_minutes": {"type": "int", "default": 720},
            "force": {"type": "bool", "default": False},
            "take_over": {"type": "str", "default": ""},
            "owner": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    owner, path = params["owner"], params["path"]
    missing = [name for name in runlock.FIELDS if name not in owner]
    if missing:
        module.fail_json(msg=f"owner lacks {', '.join(missing)}")
    folder = os.path.dirname(path)
    now = time.time()
    if module.check_mode:
        holder = read_holder(path) if os.path.isdir(folder) else None
        action, why = runlock.decide(
            holder, owner, now, params["stale_minutes"], take_over=params["take_over"], force=params["force"]
        )
        module.exit_json(changed=False, held=False, holder=holder, refused=False, why=why,
                         busy=action == "refuse")  # fmt: skip
    guard = open_folder(module, folder)
    try:
        take_flock(module, guard, folder)
        holder = read_holder(path)
        if params["state"] == "released":
            mine = holder is not None and holder["id"] == owner["id"]
            if mine:
                os.unlink(path)
            why = "released" if mine else ("free" if holder is None else "not this run's")
            module.exit_json(changed=False, held=False, holder=holder, refused=False, why=why)
        action, why = runlock.decide(
            holder, owner, now, params["stale_minutes"], take_over=params["take_over"], force=params["force"]
        )
        if action == "refuse":
            module.exit_json(changed=False, held=False, holder=holder, refused=True, why=why)
        write(path, runlock.record(owner, holder, now))
        module.exit_json(changed=False, held=True, holder=holder, refused=False, why=why)
    finally:
        os.close(guard)


if __name__ == "__main__":
    main()
