"""Filters for the Python training stack (interpreter, requirements, wheel builds, checks)."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import ds_ops, ds_report, pystack

__metaclass__ = type


class FilterModule:
    """Training-stack filters."""

    def filters(self):
        return {
            "python_source": _wrap(pystack.python_source),
            "pip_requirements": _wrap(pystack.pip_requirements),
            "pip_report_pins": _wrap(pystack.pip_report_pins),
            "wheel_build_plan": _wrap(pystack.wheel_build_plan),
            "wheel_transfers": _wrap(pystack.wheel_transfers),
            "wheel_serve_plan": _wrap(pystack.wheel_serve_plan),
            "torch_problems": _wrap(pystack.torch_problems),
            "ds_report": _wrap(ds_report.parse_ds_report),
            "ds_op_problems": _wrap(ds_report.ds_op_problems),
            "ds_build_env": _wrap(ds_report.ds_build_env),
            "deepspeed_ops": _wrap(ds_ops.deepspeed_ops),
        }
