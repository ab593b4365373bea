"""Filters for the fabric stage: the rccl.env settings and the all-reduce gate."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import rccl_env, rccl_perf, rdma

__metaclass__ = type


class FilterModule:
    """Fabric filters."""

    def filters(self):
        return {
            "rccl_env": _wrap(rccl_env.rccl_env_settings),
            "rccl_tests_table": _wrap(rccl_perf.parse_rccl_tests),
            "allreduce_thresholds": _wrap(rccl_perf.thresholds_for),
            "allreduce_gate_problems": _wrap(rccl_perf.gate_problems),
            "allreduce_layout": _wrap(rccl_perf.allreduce_layout),
            "rccl_tests_argv": _wrap(rccl_perf.rccl_tests_argv),
            "rccl_tests_busbw": _wrap(rccl_perf.measured_busbw),
            "rdma_gid_index_problems": _wrap(rdma.gid_index_problems),
            "rdma_nearest_port_warnings": _wrap(rdma.nearest_port_warnings),
        }
