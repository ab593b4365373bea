# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: checksums
short_description: The file_state entries of files or a folder that a role copies from the controller
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - For each term, a file or folder on the controller (found as M(ansible.builtin.copy) finds its
    O(ansible.builtin.copy#module:src), in the role's C(files/) first), returns the entries
    M(instinct.finetune.file_state) compares, with the sha1 of every file's bytes.
  - Where each term lands follows M(ansible.builtin.copy). A file lands at O(dest), or inside it when
    O(dest) ends with C(/). A folder given with a trailing C(/) has its content copied into O(dest);
    without one, the folder itself lands inside O(dest).
  - A folder becomes its destination (compared as a folder only, since copy creates it as a file's
    parent and leaves it alone after), every folder under it (with O(owner), O(group) and
    O(directory_mode), which M(ansible.builtin.copy) sets on them on every run) and every file under
    it (with O(owner), O(group) and O(mode)).
  - Symlinks in the folder are followed, as copy's default C(local_follow) does; a link that leads
    back into the tree, or nowhere, is refused.
  - Reads on the controller only; binary files are fine.
options:
  _terms:
    description: Files or folders on the controller, relative to the role's C(files/) or absolute.
    required: true
  dest:
    description:
      - Where the terms land on the node, as the O(ansible.builtin.copy#module:dest) of a copy task.
      - A string, not a path, so that a trailing C(/) (a folder to copy into) is kept.
    type: str
    required: true
  owner:
    description: The owner of the files on the node.
    type: str
  group:
    description: The group of the files on the node.
    type: str
  mode:
    description: The mode of the files on the node.
    type: str
  directory_mode:
    description: The mode of the folders under a copied folder (copy's O(ansible.builtin.copy#module:directory_mode)).
    type: str
seealso:
  - module: instinct.finetune.file_state
"""

EXAMPLES = r"""
- name: Compare the model copied from the controller with the node's copy
  instinct.finetune.file_state:
    files: "{{ query('instinct.finetune.checksums', model_dir, dest='/opt/models/tiny', owner='root', mode='0644') }}"
  register: model_files
"""

RETURN = r"""
_raw:
  description: The entries, in a stable order (folders before what they hold).
  type: list
  elements: dict
  sample: [{"path": "/opt/models/tiny", "state": "directory"},
           {"path": "/opt/models/tiny/config.json", "state": "file",
            "checksum": "0a4d55a8d778e5022fab701977c5d840bbc486d0", "owner": "root", "group": null, "mode": "0644"}]
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

# The function the copy action itself compares a source file with (sha1 of its bytes).
from ansible.utils.hashing import checksum as _sha1


def landing(term, source, dest):
    """Where ``copy src=term dest=dest`` puts ``source`` (``term`` as the task gives it, ``source``
    where it was found): the rules of ansible.builtin.copy for trailing slashes."""
    if os.path.isdir(source) and term.endswith("/"):
        return dest.rstrip("/") or "/"
    if dest.endswith("/"):
        return os.path.join(dest, os.path.basename(source.rstrip("/")))
    if os.path.isdir(source):
        return os.path.join(dest, os.path.basename(source.rstrip("/")))
    return dest


def tree_entries(source, dest, *, owner=None, group=None, mode=None, directory_mode=None):  # noqa: PLR0913
    """file_state entries for ``source`` (a file or folder on the controller) landing at ``dest``."""
    file_entry = {"state": "file", "owner": owner, "group": group, "mode": mode}
    folder_entry = {"state": "directory", "owner": owner, "group": group, "mode": directory_mode}
    if os.path.isfile(source):
        return [dict(file_entry, path=dest, checksum=_sha1(source))]
    entries = [{"path": dest, "state": "directory"}]
    for top, folders, files in os.walk(source, followlinks=True):
        here = os.path.realpath(top)
        folders.sort()
        for name in folders:
            real = os.path.realpath(os.path.join(top, name))
            if here == real or here.startswith(real + os.sep):
                raise ValueError(f"{os.path.join(top, name)} links back into the folder that holds it")
        relative = os.path.relpath(top, source)
        target = dest if relative == "." else os.path.join(dest, relative)
        entries.extend(dict(folder_entry, path=os.path.join(target, name)) for name in folders)
        for name in sorted(files):
            path = os.path.join(top, name)
            if not os.path.exists(path):
                raise ValueError(f"{path} is a link that leads nowhere")
            entries.append(dict(file_entry, path=os.path.join(target, name), checksum=_sha1(path)))
    return entries


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        dest = self.get_option("dest")
        if len(terms) > 1 and not dest.endswith("/"):
            raise AnsibleLookupError(f"checksums: {len(terms)} terms need a dest folder ending with /, not {dest}")
        entries = []
        for term in map(str, terms):
            found = term if os.path.isabs(term) else self.find_file_in_search_path(variables, "files", term)
            if not found or not os.path.exists(found):
                raise AnsibleLookupError(f"checksums: {term} is not a file or folder on the controller")
            options = {key: self.get_option(key) for key in ("owner", "group", "mode", "directory_mode")}
            try:
                entries.extend(tree_entries(found, landing(term, found, dest), **options))
            except (OSError, ValueError) as err:
                raise AnsibleLookupError(f"checksums: {err}") from err
        return entries
