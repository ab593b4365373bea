# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """The options of the actions that build the node tools' wheel on the controller."""

    DOCUMENTATION = r"""
options:
  source:
    description: The node tools project folder; by default the one in this collection.
    type: path
  cache_dir:
    description: Where the controller keeps built wheels (one folder per stamped version).
    type: path
    default: ~/.cache/instinct-finetune/node-tools
"""
