#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: file_state
short_description: Say in one round trip whether a set of files is already what a role writes
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Reads every listed path on the node and compares its type, content (sha1, the checksum
    Ansible's own M(ansible.builtin.stat) and M(ansible.builtin.copy) use), owner, group and mode
    with what the role would write.
  - A role calls it before a group of M(ansible.builtin.copy), M(ansible.builtin.template) and
    M(ansible.builtin.file) tasks and skips the group when RV(current) is true. Those tasks pay two
    round trips per file on every run, changed or not; this module pays one for the whole group.
    When anything differs the group runs as before, with its diff, check mode and handlers.
  - The controller gives the checksum of what it would write, for example
    C(lookup('ansible.builtin.template', 'x.j2') | hash('sha1')) for a template, or
    the instinct.finetune.checksums lookup for files and folders copied from the controller.
  - Only what an entry names is compared; paths on the node that are not listed are left alone.
  - A folder entry follows a symlink (as M(ansible.builtin.file) with C(state=directory) does); a file
    entry does not (M(ansible.builtin.copy) replaces a link with the file).
  - Never changes anything on the host.
options:
  files:
    description: The files and folders the role's group writes.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path on the node.
        type: path
        required: true
      state:
        description: Whether the path is a regular file or a folder, or must not exist (V(absent)).
        type: str
        choices: [file, directory, absent]
        default: file
      checksum:
        description: The sha1 of the file's content as the role writes it. Required for a file.
        type: str
      owner:
        description: The owner's name; not compared when left out.
        type: str
      group:
        description: The group's name; not compared when left out.
        type: str
      mode:
        description: The octal mode, as the role gives it (V(0644)); not compared when left out.
        type: raw
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: ansible.builtin.stat
  - module: ansible.builtin.copy
"""

EXAMPLES = r"""
- name: Compare the collector's files on the node with what this run installs
  instinct.finetune.file_state:
    files:
      - {path: /opt/collector, state: directory, owner: root, group: root, mode: "0755"}
      - path: /opt/collector/collect.py
        checksum: "{{ lookup('ansible.builtin.file', 'collect.py', rstrip=false) | hash('sha1') }}"
        owner: root
        group: root
        mode: "0755"
      - path: /etc/systemd/system/collector.service
        checksum: "{{ lookup('ansible.builtin.template', 'collector.service.j2') | hash('sha1') }}"
        mode: "0644"
  register: collector_files

- name: Install the collector
  when: not collector_files.current
  block:
    - name: Install the collector's script
      ansible.builtin.copy:
        src: collect.py
        dest: /opt/collector/collect.py
        mode: "0755"
"""

RETURN = r"""
current:
  description: True when every listed path already is what the role writes.
  returned: always
  type: bool
  sample: true
compared:
  description: How many paths were compared.
  returned: always
  type: int
  sample: 17
differs:
  description: Each listed path that is not, with the first reason found, in the order given.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/prometheus/prometheus.yml", "reason": "content differs"},
           {"path": "/opt/collector", "reason": "missing"}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.file_state import (
    differences,
    expected_entries,
    observe,
)

FILE_OPTIONS = {
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "choices": ["file", "directory", "absent"], "default": "file"},
    "checksum": {"type": "str"},
    "owner": {"type": "str"},
    "group": {"type": "str"},
    "mode": {"type": "raw"},
}


def main():
    module = AnsibleModule(
        argument_spec={"files": {"type": "list", "elements": "dict", "required": True, "options": FILE_OPTIONS}},
        supports_check_mode=True,
    )
    try:
        entries = expected_entries(module.params["files"])
    except ValueError as err:
        module.fail_json(msg=f"file_state: {err}")
    # A folder may be a link to one (a scratch disk), as ansible.builtin.file with state=directory accepts.
    observed = {
        entry["path"]: observe(entry["path"], entry["state"] == "file", follow=entry["state"] == "directory")
        for entry in entries
    }
    found = differences(entries, observed)
    module.exit_json(changed=False, current=not found, differs=found, compared=len(entries))


if __name__ == "__main__":
    main()
