#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation only: the action plugin of the same name (plugins/action/node_tools.py) builds the
# wheel on the controller and installs it on the node.

DOCUMENTATION = r"""
---
module: node_tools
short_description: Install the collection's node tools package into a venv on the node, once per version
version_added: 0.2.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Builds the wheel of the collection's C(node_tools/) Python project on the controller with pip and
    setuptools, once per content hash (cached in O(cache_dir)), its version stamped
    C(<version>+<hash>).
  - Reads the marker file C(.instinct-node-tools) in O(venv) on the node; when it names that version
    (and a digest of O(pins)) nothing else runs and nothing changes (one module call per venv on a
    re-run); a changed pin installs again.
  - Otherwise creates the venv when O(python) is given and it is missing, copies the wheel over and
    installs it with pip in hash-checking mode (C(--require-hashes), C(--no-deps)), the wheel's
    sha256 and each of O(pins) with its own, imports the package, then writes the marker.
  - Run it as the account that owns the venv (C(become_user)).
options:
  venv:
    description: The venv to install into.
    type: path
    required: true
  python:
    description: The interpreter that creates O(venv) when it is missing; without it a missing venv fails.
    type: path
  system_site_packages:
    description: Create the venv with C(--system-site-packages) (to use the distribution's prometheus_client).
    type: bool
    default: false
  pins:
    description: Requirements installed beside the wheel, each with its exact version and sha256.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The distribution's name.
        type: str
        required: true
      version:
        description: Its exact version.
        type: str
        required: true
      sha256:
        description: The sha256 of the file pip installs (one hash; a wheel for every platform).
        type: str
        required: true
extends_documentation_fragment:
  - instinct.finetune.node_tools_wheel
attributes:
  check_mode:
    support: full
    description: Reads the marker and reports the change it would make.
  diff_mode:
    support: full
    description: The marker's version before and after.
notes:
  - Needs C(pip) and C(setuptools) on the controller (requirements.txt).
"""

EXAMPLES = r"""
- name: Install the node tools into the root-owned tools venv
  instinct.finetune.node_tools:
    venv: /opt/instinct/tools
    python: /usr/bin/python3
    system_site_packages: true

- name: Install the node tools into the training venv, with prometheus_client pinned by hash
  instinct.finetune.node_tools:
    venv: /opt/instinct/venv
    pins:
      - name: prometheus-client
        version: 0.21.1
        sha256: 594b45c410d6f4f8888940fe80b5cc2521b305a1fafe1c58609ef715a001f301
  become: true
  become_user: instinct
"""

RETURN = r"""
version:
  description: The node tools' stamped version that the venv holds after the task.
  returned: always
  type: str
  sample: 0.2.0+3f1c2a9b8e7d
installed_before:
  description: The version the marker named before the task (null when none).
  returned: always
  type: str
venv:
  description: The venv.
  returned: always
  type: str
"""
