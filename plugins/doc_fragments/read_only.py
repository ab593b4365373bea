# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Attributes of the modules that only read: the probes (which add FACTS) and the job reader."""

    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Runs the same way in check mode; it only reads.
  diff_mode:
    support: none
    description: Returns no diff; it changes nothing.
"""

    FACTS = r"""
attributes:
  facts:
    support: full
    description: Returns its results under C(ansible_facts), so that they become host facts.
"""
