"""Filters that turn probed hardware facts into build settings."""

from __future__ import absolute_import, division, print_function

from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.module_utils import build

__metaclass__ = type


def _wrap(func):
    def filter_func(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ValueError as err:
            raise AnsibleFilterError(f"{func.__name__}: {err}") from err

    filter_func.__name__ = func.__name__
    return filter_func


class FilterModule:
    """Build-setting filters."""

    def filters(self):
        return {
            "pytorch_rocm_arch": _wrap(build.pytorch_rocm_arch),
            "build_jobs": _wrap(build.build_jobs),
            "ds_wheel_key": _wrap(build.ds_wheel_key),
        }
