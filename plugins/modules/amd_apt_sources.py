#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: amd_apt_sources
short_description: Find the apt sources and keyring a node already has for AMD's repositories
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Reads the node's apt sources (C(sources.list), C(sources.list.d/*.list) one-line files and C(*.sources)
    deb822 files) and says how the rocm role writes its own files for O(uris) beside them without apt's
    C(Conflicting values set for option Signed-By), which makes apt read no source at all.
  - AMD's documented method (C(amdgpu-install), or the ROCm install guide for Ubuntu) writes
    C(/etc/apt/sources.list.d/rocm.list) and C(amdgpu.list) with C(signed-by=/etc/apt/keyrings/rocm.gpg).
    A keyring that such entries name and that holds the key of fingerprint O(fingerprint) and no other key
    (binary, as C(gpg --dearmor) writes it, or armored, every block read) is returned as RV(keyring), for
    the role's files to name too.
  - Files in C(sources.list.d) whose every entry is one of AMD's repositories under O(base_url) (any release)
    are returned in RV(replace), for the role's files to take their place (one release per repository).
  - Any other entry for one of O(uris) with another Signed-By is returned in RV(conflicts), with RV(problem)
    saying which file and how to fix it.
  - Never changes anything on the host.
options:
  uris:
    description: The repository URIs the role writes (its enabled repositories for the release).
    type: list
    elements: str
    required: true
  base_url:
    description: Base URL of AMD's repositories; entries under its C(rocm/apt/), C(amdgpu/) and C(graphics/) are AMD's.
    type: str
    required: true
  fingerprint:
    description: Fingerprint (40 hex digits) the key in an existing keyring must have for it to be used.
    type: str
    required: true
  keyring:
    description: The keyring path the role names when the node has no AMD keyring to use.
    type: path
    required: true
  own_files:
    description: The role's own source files, never reported as replaced or conflicting.
    type: list
    elements: path
    default: []
  apt_dir:
    description: apt's configuration folder (C(Dir::Etc)).
    type: path
    default: /etc/apt
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.apt_index
"""

EXAMPLES = r"""
- name: Read the sources AMD's own method may have written
  instinct.finetune.amd_apt_sources:
    uris: [https://repo.radeon.com/rocm/apt/7.0.2, https://repo.radeon.com/amdgpu/30.10.2/ubuntu]
    base_url: https://repo.radeon.com
    fingerprint: CA8BB4727A47B4D09B4EE8969386B48A1A693C5C
    keyring: /etc/apt/keyrings/rocm.asc
    own_files: [/etc/apt/sources.list.d/rocm.sources, /etc/apt/sources.list.d/amdgpu.sources]
  register: amd_sources
"""

RETURN = r"""
keyring:
  description: The Signed-By the role's files name, AMD's keyring when adopted, else O(keyring).
  returned: always
  type: str
  sample: /etc/apt/keyrings/rocm.gpg
adopted:
  description: Whether RV(keyring) is an existing keyring of the node rather than O(keyring).
  returned: always
  type: bool
  sample: true
replace:
  description: Files of AMD's repositories alone that the role's files take the place of.
  returned: always
  type: list
  elements: str
  sample: [/etc/apt/sources.list.d/amdgpu.list, /etc/apt/sources.list.d/rocm.list]
conflicts:
  description:
    - Entries of other files for one of O(uris) with another Signed-By (C(file), C(uri), C(suite), C(signed_by)).
  returned: always
  type: list
  elements: dict
  sample: []
keyrings:
  description: The keyrings AMD's entries name, each with the fingerprints read from it (empty when unreadable).
  returned: always
  type: dict
  sample: {/etc/apt/keyrings/rocm.gpg: [CA8BB4727A47B4D09B4EE8969386B48A1A693C5C]}
entries:
  description: Every source entry read (C(file), C(type), C(uri), C(suite), C(signed_by)).
  returned: always
  type: list
  elements: dict
  sample: []
problem:
  description: The conflicts in words with the fix; null when there are none.
  returned: always
  type: str
  sample: null
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils import apt_sources
from ansible_collections.instinct.finetune.plugins.module_utils.openpgp import keyring_fingerprints

MAX_KEYRING_BYTES = 1 << 20


def read_sources(apt_dir):
    paths = [os.path.join(apt_dir, "sources.list")]
    for pattern in ("*.list", "*.sources"):
        paths += sorted(glob.glob(os.path.join(apt_dir, "sources.list.d", pattern)))
    files = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                files[path] = handle.read()
        except OSError:
            continue
    return files


def read_keyring(path):
    try:
        with open(path, "rb") as handle:
            return keyring_fingerprints(handle.read(MAX_KEYRING_BYTES))
    except (OSError, ValueError):
        return []


def main():
    module = AnsibleModule(
        argument_spec={
            "uris": {"type": "list", "elements": "str", "required": True},
            "base_url": {"type": "str", "required": True},
            "fingerprint": {"type": "str", "required": True},
            "keyring": {"type": "path", "required": True},
            "own_files": {"type": "list", "elements": "path", "default": []},
            "apt_dir": {"type": "path", "default": "/etc/apt"},
        },
        supports_check_mode=True,
    )
    params = module.params
    entries = apt_sources.parse_files(read_sources(params["apt_dir"]))
    own = params["own_files"]
    candidates = apt_sources.keyring_candidates(entries, params["base_url"], own, params["keyring"])
    keyrings = {path: read_keyring(path) for path in candidates}
    decided = apt_sources.plan(entries, params, keyrings)
    problem = apt_sources.conflict_problem(decided["conflicts"], decided["keyring"])
    module.exit_json(changed=False, entries=entries, keyrings=keyrings, problem=problem or None, **decided)


if __name__ == "__main__":
    main()
