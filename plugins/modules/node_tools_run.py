#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation only: the action plugin of the same name (plugins/action/node_tools_run.py) does the work.

DOCUMENTATION = r"""
---
module: node_tools_run
short_description: Run one of the node tools from their wheel on the node, installing nothing
version_added: 0.2.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - For read-only work on a node that must be left as it is (the diagnose role). The wheel that
    M(instinct.finetune.node_tools) installs elsewhere is built on the controller (once per content
    hash), copied into the task's temporary folder on the node and run from there with
    C(python -m) (a pure-Python wheel is a zip archive Python imports from); the folder is removed
    when the tool ends.
  - Returns the tool's exit code and output as M(ansible.builtin.command) does; never changed.
options:
  module:
    description: The tool's module, C(instinct_node_tools.NAME) (for example C(instinct_node_tools.gather)).
    type: str
    required: true
  argv:
    description: The tool's arguments.
    type: list
    elements: str
    default: []
  python:
    description: The node's interpreter that runs it (the tool must need only the standard library).
    type: path
    default: /usr/bin/python3
extends_documentation_fragment:
  - instinct.finetune.node_tools_wheel
attributes:
  check_mode:
    support: full
    description: Runs in check mode too (the tools it is for only read).
  diff_mode:
    support: none
    description: Returns no diff.
seealso:
  - module: instinct.finetune.node_tools
"""

EXAMPLES = r"""
- name: Read the node's state for the diagnosis, installing nothing
  instinct.finetune.node_tools_run:
    module: instinct_node_tools.gather
    argv: ['{"service_user": "instinct"}', driver, gpus]
  register: gathered
"""

RETURN = r"""
rc:
  description: The tool's exit code.
  returned: always
  type: int
stdout:
  description: What the tool printed.
  returned: always
  type: str
stderr:
  description: What the tool printed on standard error.
  returned: always
  type: str
version:
  description: The node tools' stamped version that ran.
  returned: always
  type: str
"""
