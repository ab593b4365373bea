"""Filters of the evaluate role: the base model's evaluation, the weights check and the judgement."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import jobspec

__metaclass__ = type


def finetune_base_eval_args(job, node):
    """jobspec.eval_args for the base model the job started from."""
    return jobspec.eval_args(job, node, base=True)


def perplexity_definition(_unused=None):
    """The sentence eval.json and the README give for what the perplexity is."""
    return jobspec.PERPLEXITY_DEFINITION


class FilterModule:
    """Evaluation filters."""

    def filters(self):
        return {
            "finetune_base_eval_args": _wrap(finetune_base_eval_args),
            "base_eval_key": _wrap(jobspec.base_eval_key),
            "weights_problems": _wrap(jobspec.weights_problems),
            "eval_judgement": _wrap(jobspec.eval_judgement),
            "eval_parity": _wrap(jobspec.eval_parity),
            "eval_reference_problems": _wrap(jobspec.eval_reference_problems),
            "perplexity_definition": _wrap(perplexity_definition),
        }
