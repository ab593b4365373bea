# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Attributes of the probe modules: they only read, and return facts."""

    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Runs the same way in check mode; it only reads.
  diff_mode:
    support: none
  facts:
    support: full
"""
