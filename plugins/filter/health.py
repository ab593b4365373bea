"""Filters that judge the health playbook's GPU burn-in across the nodes of a play."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.module_utils import health

__metaclass__ = type


def _wrap(func):
    def filter_func(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (KeyError, TypeError, ValueError) as err:
            raise AnsibleFilterError(f"{func.__name__}: {err}") from err

    filter_func.__name__ = func.__name__
    return filter_func


def burnin_table(judgement, style="text"):
    """The judged burn-in as aligned text lines (``text``) or Markdown table lines (``markdown``)."""
    if style == "text":
        return health.format_table(judgement)
    if style == "markdown":
        return health.markdown_table(judgement)
    raise ValueError(f"style is {style!r}, not 'text' or 'markdown'")


class FilterModule:
    """Burn-in filters."""

    def filters(self):
        return {
            "health_burnin_judgement": _wrap(health.judge_burnin),
            "health_device_problems": _wrap(health.device_problems),
            "health_burnin_table": _wrap(burnin_table),
        }
