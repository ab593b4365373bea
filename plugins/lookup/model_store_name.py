# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: model_store_name
author: instinct.finetune maintainers (@instinct-finetune)
version_added: 0.1.0
short_description: The name a model folder of the controller gets on the nodes, from its name and content
description:
  - Returns C(<folder name>-<digest>), the digest being the first 16 hex digits of the SHA-256 of the
    folder's files (relative paths and contents, links followed as M(ansible.builtin.copy) follows them).
  - Two model folders of the same name with different content get different names, so neither is copied
    over the other on the nodes.
  - The digest is cached on the controller under a key of the folder's listing (paths, sizes, modification
    times), so an unchanged folder is not read again, and a touched one is read once and keeps its name.
options:
  _terms:
    description: The model folder on the controller.
    required: true
    type: list
    elements: path
  cache_dir:
    description: Where the digests are cached on the controller.
    type: path
    default: ~/.cache/instinct-finetune/model-digests
"""

EXAMPLES = r"""
- name: Name the model's folder on the nodes
  ansible.builtin.debug:
    msg: "{{ lookup('instinct.finetune.model_store_name', '/srv/models/llama-3-8b') }}"
"""

RETURN = r"""
_raw:
  description: One name per folder given, for example C(llama-3-8b-3f2a9c0d1e4b5a6f).
  type: list
  elements: str
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.instinct.finetune.plugins.module_utils import modelstore


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        cache_dir = os.path.expanduser(self.get_option("cache_dir"))
        names = []
        for term in terms:
            try:
                names.append(modelstore.store_name(str(term), cache_dir))
            except (OSError, ValueError) as error:
                raise AnsibleLookupError(f"cannot name the model folder {term}: {error}") from None
        return names
