#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: checkpoint_space
short_description: Check that a fine-tune job's checkpoints will fit on a node before it is launched
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Estimates the bytes the job's checkpoints and final weights take on this node, from the parameter
    shapes in the model's safetensors headers (never the weights), the fine-tuning type, the strategy,
    the world size, the ranks on this node and how many checkpoints are kept.
  - Compares the estimate, plus O(margin_percent), with the free space of the filesystem that holds
    O(output_dir), counting what the job's own checkpoints already take (they are rotated out).
  - Never fails the task itself; RV(problem) holds the refusal for the role to report. A model without
    safetensors files gives no estimate (RV(estimated) false).
  - Never changes anything on the host.
options:
  model_dir:
    description: The model folder on the node.
    type: path
    required: true
  output_dir:
    description: The job's output folder on the node (its checkpoints and final weights).
    type: path
    required: true
  finetuning_type:
    description: LLaMA-Factory's finetuning_type.
    type: str
    choices: [lora, full, freeze]
    default: lora
  lora_rank:
    description: LoRA's rank.
    type: int
    default: 8
  lora_target:
    description: LoRA's target modules, comma-separated, or C(all) for every linear layer.
    type: str
    default: all
  strategy:
    description: The distributed strategy.
    type: str
    choices: [deepspeed_zero3, fsdp, ddp]
    default: deepspeed_zero3
  world_size:
    description: Ranks of the whole job.
    type: int
    required: true
  local_ranks:
    description: Ranks on this node.
    type: int
    required: true
  master:
    description: Whether this node holds rank 0 (it writes the gathered weights).
    type: bool
    default: false
  save_total_limit:
    description: Checkpoints the Trainer keeps.
    type: int
    default: 3
  margin_percent:
    description: Room asked beyond the estimate, in percent of it.
    type: int
    default: 10
  count_existing:
    description:
      - Count what O(output_dir) already holds as room (a resumed job's own checkpoints, rotated out as new
        ones come). False for a fresh start, whose earlier output is moved aside on the same filesystem.
    type: bool
    default: false
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.finetune_job_status
"""

EXAMPLES = r"""
- name: Check that the job's checkpoints fit on every node
  instinct.finetune.checkpoint_space:
    model_dir: /var/lib/instinct-finetune/models/llama-3-8b-0123456789abcdef
    output_dir: /var/lib/instinct-finetune/jobs/sft-8b/output
    finetuning_type: full
    world_size: 16
    local_ranks: 8
    master: "{{ inventory_hostname == groups['instinct_nodes'][0] }}"
  register: space

- name: Refuse the job when they do not
  ansible.builtin.fail:
    msg: "{{ space.problem }}"
  when: space.problem is not none
"""

RETURN = r"""
estimated:
  description: Whether the model had safetensors headers to estimate from.
  returned: always
  type: bool
params:
  description: Parameters of the model.
  returned: when estimated
  type: int
  sample: 8030261248
trainable:
  description: Parameters the job trains.
  returned: when estimated
  type: int
  sample: 20971520
needed_bytes:
  description: The estimate, without the margin.
  returned: when estimated
  type: int
per_checkpoint_bytes:
  description: One checkpoint on this node.
  returned: when estimated
  type: int
checkpoints:
  description: Checkpoints a node holds at most (those kept and the one being written).
  returned: when estimated
  type: int
  sample: 4
final_weights_bytes:
  description: The final weights this node writes (the master's; 0 on the others).
  returned: when estimated
  type: int
free_bytes:
  description: Free bytes on the filesystem of the output folder.
  returned: always
  type: int
reusable_bytes:
  description: Bytes the job's output folder already holds, counted as room (0 unless O(count_existing)).
  returned: always
  type: int
problem:
  description: The refusal, naming the numbers; null when the checkpoints fit or nothing was estimated.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.ckptspace import (
    checkpoint_estimate,
    free_bytes,
    model_tensors,
    space_problem,
    tree_bytes,
)

# What the estimate reads of the job (ckptspace.checkpoint_estimate).
JOB_KEYS = ("finetuning_type", "lora_rank", "lora_target", "strategy", "world_size", "local_ranks", "master",
            "save_total_limit")  # fmt: skip


def main():
    module = AnsibleModule(
        argument_spec={
            "model_dir": {"type": "path", "required": True},
            "output_dir": {"type": "path", "required": True},
            "finetuning_type": {"type": "str", "choices": ["lora", "full", "freeze"], "default": "lora"},
            "lora_rank": {"type": "int", "default": 8},
            "lora_target": {"type": "str", "default": "all"},
            "strategy": {"type": "str", "choices": ["deepspeed_zero3", "fsdp", "ddp"], "default": "deepspeed_zero3"},
            "world_size": {"type": "int", "required": True},
            "local_ranks": {"type": "int", "required": True},
            "master": {"type": "bool", "default": False},
            "save_total_limit": {"type": "int", "default": 3},
            "margin_percent": {"type": "int", "default": 10},
            "count_existing": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    free = free_bytes(params["output_dir"])
    reusable = tree_bytes(params["output_dir"]) if params["count_existing"] else 0
    try:
        tensors = model_tensors(params["model_dir"]) if os.path.isdir(params["model_dir"]) else {}
    except (OSError, ValueError) as error:
        module.fail_json(msg="cannot read the model's safetensors headers: %s" % error)
    if not tensors:
        module.exit_json(changed=False, estimated=False, free_bytes=free, reusable_bytes=reusable, problem=None)
    job = {key: params[key] for key in JOB_KEYS}
    estimate = checkpoint_estimate(tensors, job)
    problem = space_problem(estimate, free, reusable, params["margin_percent"], params["output_dir"])
    module.exit_json(
        changed=False, estimated=True, free_bytes=free, reusable_bytes=reusable,
        problem=problem, **estimate,
    )  # fmt: skip


if __name__ == "__main__":
    main()
