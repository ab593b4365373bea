#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_index
short_description: Make apt's package index fit to install from
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Refreshes apt's package lists (C(apt-get update)) when they hold no Packages index at all,
    when they are older than O(valid_time), when O(force) is set, or, once, when apt does not know
    one of O(packages).
  - When every one of O(packages) is already installed as asked (RV(missing) is empty), the install
    that follows would read no list and change nothing, so the lists are not refreshed for it (unless
    O(force)); the role skips that install.
  - Ansible's M(ansible.builtin.apt) judges the lists by their age alone, so an image built minutes
    ago or a minimal installation (empty C(/var/lib/apt/lists), recent modification time) passes as
    fresh and every install then fails with C(No package matching). Every role of this collection
    that installs packages calls this module first instead of relying on C(cache_valid_time).
  - The lists are a cache, not configuration; the refresh reports C(changed=false), as the apt
    module does for a refresh alone, and also runs in check mode, so that a check run can judge
    the installs that follow.
  - Fails when apt cannot update (after O(update_attempts) tries; the message keeps apt's E, W and
    Err lines, which name a NO_PUBKEY, BADSIG or 404), or when a package of O(packages) is still
    unknown after a refresh, naming the packages and the runbook.
  - Touches O(stamp_file) after a successful update, as update-notifier-common's hook does, so
    that the next run can tell the lists' age even when every source answered "Hit".
options:
  packages:
    description:
      - The packages the next install needs, as C(name) or C(name=version) (a trailing C(*) in the
        version matches as apt does). Each one apt does not know triggers one refresh.
    type: list
    elements: str
    default: []
  valid_time:
    description: Lists older than this many seconds are refreshed (the apt module's C(cache_valid_time)).
    type: int
    default: 3600
  force:
    description: Refresh whatever the lists say, for example right after a package source was added.
    type: bool
    default: false
  lock_timeout:
    description: Seconds to wait for another apt or dpkg (unattended-upgrades on a new node) to let go of its lock.
    type: int
    default: 120
  update_attempts:
    description: How often C(apt-get update) is tried before the module fails, 5 s more of pause each time.
    type: int
    default: 3
  lists_dir:
    description: apt's lists folder (C(Dir::State::lists)).
    type: path
    default: /var/lib/apt/lists
  stamp_file:
    description:
      - The file apt's periodic job touches after a successful update; its time, else the lists
        folder's, is the index's age.
    type: path
    default: /var/lib/apt/periodic/update-success-stamp
  runbook:
    description: The runbook page named in a failure.
    type: str
    default: docs/runbooks/apt-index.md
attributes:
  check_mode:
    support: full
    description: Refreshes the lists in check mode too (they are a cache, not configuration) and reports no change.
  diff_mode:
    support: none
    description: Returns no diff; the package lists it refreshes are a cache.
seealso:
  - module: ansible.builtin.apt
"""

EXAMPLES = r"""
- name: Make sure apt knows the packages the build needs
  instinct.finetune.apt_index:
    packages: [build-essential, python3-packaging]

- name: Install them
  ansible.builtin.apt:
    name: [build-essential, python3-packaging]

- name: Read a repository that was just added
  instinct.finetune.apt_index:
    force: "{{ repo_file is changed }}"
"""

RETURN = r"""
refreshed:
  description: Whether C(apt-get update) ran.
  returned: always
  type: bool
reason:
  description: Why the lists were refreshed; empty when they were trusted as they were.
  returned: always
  type: str
  sample: the package lists are empty
unknown:
  description: The packages apt did not know before the refresh (after it, any left make the module fail).
  returned: always
  type: list
  elements: str
missing:
  description:
    - The packages of O(packages) not installed as asked (not at all, or another version than a
      C(name=version) asks for), as dpkg's status says before any install.
    - Empty when the install that follows would change nothing; the roles skip it then.
  returned: always
  type: list
  elements: str
  sample: ["prometheus-node-exporter"]
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.apt_index import (
    has_package_lists,
    missing_packages,
    policy_versions,
    refresh_reason,
    unknown_packages,
    update_errors,
)

# apt-get update is retried with a growing pause, as the apt module does: a mirror that answers
# a moment later, or another apt run finishing, is no failure.
UPDATE_PAUSE_SECONDS = 5


def _lists_state(params):
    try:
        names = os.listdir(params["lists_dir"])
    except OSError:
        names = []
    for path in (params["stamp_file"], params["lists_dir"]):
        try:
            return has_package_lists(names), max(time.time() - os.stat(path).st_mtime, 0)
        except OSError:
            continue
    return has_package_lists(names), None


def _policy(module, specs):
    """apt-cache policy of the specs' names; it reads dpkg's status too, so installed versions show
    even when the lists are empty."""
    if not specs:
        return {}
    apt_cache = module.get_bin_path("apt-cache", required=True)
    names = sorted({spec.partition("=")[0] for spec in specs})
    rc, out, err = module.run_command([apt_cache, "policy", *names])
    if rc != 0:
        module.fail_json(msg=f"apt-cache policy {' '.join(names)} failed: {err.strip() or out.strip()}", rc=rc)
    return policy_versions(out)


def _unknown(module, specs):
    return unknown_packages(specs, _policy(module, specs)) if specs else []


def _update(module):
    apt_get = module.get_bin_path("apt-get", required=True)
    argv = [apt_get, "update", "-q", "-o", f"DPkg::Lock::Timeout={module.params['lock_timeout']}"]
    attempts = max(module.params["update_attempts"], 1)
    for attempt in range(1, attempts + 1):
        rc, out, err = module.run_command(argv, environ_update={"DEBIAN_FRONTEND": "noninteractive"})
        # apt-get update exits 0 with "W:" lines for a source it could not read; "E:" lines mean it failed.
        errors, causes = update_errors(out, err)
        if rc == 0 and not errors:
            break
        if attempt < attempts:
            time.sleep(UPDATE_PAUSE_SECONDS * attempt)
    else:
        said = "; ".join(errors + causes) or err.strip() or out.strip()
        module.fail_json(
            msg=(
                f"apt-get update failed ({attempts} attempts): {said}. Check the sources under /etc/apt and "
                f"the node's access to them. See {module.params['runbook']}"
            ),
            rc=rc,
            stdout=out,
            stderr=err,
        )
    # Without update-notifier-common nothing records a successful update, and an update whose
    # sources all answered "Hit" leaves the lists folder's time as it was: the stamp is the age.
    stamp = module.params["stamp_file"]
    os.makedirs(os.path.dirname(stamp), exist_ok=True)
    with open(stamp, "a", encoding="utf-8"):
        os.utime(stamp, None)


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "valid_time": {"type": "int", "default": 3600},
            "force": {"type": "bool", "default": False},
            "lock_timeout": {"type": "int", "default": 120},
            "update_attempts": {"type": "int", "default": 3},
            "lists_dir": {"type": "path", "default": "/var/lib/apt/lists"},
            "stamp_file": {"type": "path", "default": "/var/lib/apt/periodic/update-success-stamp"},
            "runbook": {"type": "str", "default": "docs/runbooks/apt-index.md"},
        },
        supports_check_mode=True,
    )
    params = module.params
    has_lists, age = _lists_state(params)
    policy = _policy(module, params["packages"])
    missing = missing_packages(params["packages"], policy)
    # Whether apt knows a package only means something once it has lists to look it up in.
    unknown = unknown_packages(params["packages"], policy) if has_lists else list(params["packages"])
    nothing_to_install = bool(params["packages"]) and not missing
    reason = refresh_reason(has_lists, age, params["valid_time"], params["force"], unknown, nothing_to_install)
    if reason:
        _update(module)
        still_unknown = _unknown(module, params["packages"])
        if still_unknown:
            module.fail_json(
                msg=(
                    f"apt does not know {', '.join(still_unknown)} even after refreshing its package lists "
                    f"({reason}): no configured source offers them. Check the name and version, and that the "
                    f"source that provides them is configured and answers. See {params['runbook']}"
                ),
                unknown=still_unknown,
                refreshed=True,
                reason=reason,
            )
    module.exit_json(
        changed=False,
        refreshed=bool(reason),
        reason=reason or "",
        unknown=[] if nothing_to_install else unknown,
        missing=missing,
    )


if __name__ == "__main__":
    main()
