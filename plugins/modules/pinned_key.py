#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation only: the action plugin of the same name (plugins/action/pinned_key.py) does the work
# on the controller; nothing runs on the node.

DOCUMENTATION = r"""
---
module: pinned_key
short_description: The one key of a downloaded signing key whose fingerprint is pinned, every other key refused
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs on the controller (an action plugin) over a signing key a node downloaded (the body of an
    M(ansible.builtin.uri) task with C(return_content)), before it is written into an apt keyring.
  - Every key of a keyring that an apt source names with C(signed-by) may sign for that source, and apt reads
    every armored block of an C(.asc) keyring. So the download is read whole, every armored block and every
    primary key, and refused when it holds any key besides the one of fingerprint O(fingerprint), or not that one.
  - gpg on the controller then imports it into a throwaway GNUPGHOME, which drops what the key's self-signatures
    do not bind (a subkey grafted onto it, a user ID without a valid self-signature), and exports the pinned key
    alone (C(gpg --export <fingerprint>)). That export is checked again (one key, the pinned one) and returned as
    one armored block in RV(key), the same text for the same key whatever gpg's version, for the next task to
    write with M(ansible.builtin.copy).
  - Fails with a message that names the host, O(url), the expected and the found fingerprints, O(hint) and
    O(runbook), before anything is written on the node.
options:
  content:
    description: The downloaded key, ASCII-armored (one or more C(PUBLIC KEY BLOCK)s; text around them is ignored).
    type: str
    required: true
  fingerprint:
    description: The fingerprint of the only key to keep (40 hex digits; spaces and a C(0x) prefix are allowed).
    type: str
    required: true
  url:
    description: Where O(content) was downloaded from, as the messages name it.
    type: str
    required: true
  runbook:
    description: The runbook page the messages name (for example C(docs/runbooks/rocm-repository.md)).
    type: str
    required: true
  hint:
    description: The fix the messages give, naming the variables to check (a sentence).
    type: str
    default: >-
      Check that the key URL points at the repository owner's key (or your mirror's, when it re-signs) and that
      the pinned fingerprint is that key's
  gpg:
    description: The gpg program on the controller.
    type: str
    default: gpg
requirements:
  - GnuPG (C(gpg)) on the controller.
attributes:
  check_mode:
    support: full
    description: Reads its options only and runs gpg in a throwaway home on the controller; the same in check mode.
  diff_mode:
    support: none
    description: Returns no diff; the task that writes RV(key) shows it.
notes:
  - Never C(changed), and nothing runs on the node.
  - Only v4 keys (RFC 4880) are read, as apt's keys are.
seealso:
  - module: instinct.finetune.amd_apt_sources
"""

EXAMPLES = r"""
- name: Download the repository signing key
  ansible.builtin.uri:
    url: https://repo.radeon.com/rocm/rocm.gpg.key
    return_content: true
  check_mode: false
  register: key_download

- name: Keep AMD's key alone from the download, refusing any other key
  instinct.finetune.pinned_key:
    content: "{{ key_download.content }}"
    fingerprint: CA8BB4727A47B4D09B4EE8969386B48A1A693C5C
    url: https://repo.radeon.com/rocm/rocm.gpg.key
    runbook: docs/runbooks/rocm-repository.md
  register: amd_key

- name: Install AMD's key alone
  ansible.builtin.copy:
    content: "{{ amd_key.key }}"
    dest: /etc/apt/keyrings/rocm.asc
    owner: root
    group: root
    mode: "0644"
"""

RETURN = r"""
key:
  description: The pinned key alone, as gpg exported it, in one ASCII-armored block (the text of an C(.asc) keyring).
  returned: success
  type: str
  sample: |
    -----BEGIN PGP PUBLIC KEY BLOCK-----

    mQINBFeg1bsBEADCbGc1...
    =Vx0c
    -----END PGP PUBLIC KEY BLOCK-----
fingerprint:
  description: The pinned fingerprint, upper-case without spaces.
  returned: success
  type: str
  sample: CA8BB4727A47B4D09B4EE8969386B48A1A693C5C
subkeys:
  description: The fingerprints of the subkeys the key kept (those its self-signatures bind).
  returned: success
  type: list
  elements: str
  sample: []
found:
  description: The fingerprints of the primary keys in the download, in order.
  returned: success
  type: list
  elements: str
  sample: [CA8BB4727A47B4D09B4EE8969386B48A1A693C5C]
msg:
  description: What was kept, in words.
  returned: success
  type: str
  sample: the key at https://repo.radeon.com/rocm/rocm.gpg.key holds CA8BB4727A47B4D09B4EE8969386B48A1A693C5C alone
"""
