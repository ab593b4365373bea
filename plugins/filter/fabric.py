"""Filters for the fabric stage: the rccl.env settings, the all-reduce gate and RCCL's INFO log."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import rccl_env, rccl_log, rccl_perf, rdma

__metaclass__ = type


class FilterModule:
    """Fabric filters."""

    def filters(self):
        return {
            "rccl_env": _wrap(rccl_env.rccl_env_settings),
            "rccl_tests_table": _wrap(rccl_perf.parse_rccl_tests),
            "fabric_floor": _wrap(rccl_perf.fabric_floor),
            "fabric_rails": _wrap(rccl_perf.rail_rates),
            "fabric_nic_model": _wrap(rccl_perf.nic_model),
            "allreduce_gate_verdict": _wrap(rccl_perf.gate_verdict),
            "rccl_tests_judgement": _wrap(rccl_perf.judge_rccl_tests),
            "rccl_init_log": _wrap(rccl_log.parse_init_log),
            "rccl_net_problems": _wrap(rccl_log.net_problems),
            "rccl_net_summary": _wrap(rccl_log.net_summary),
            "allreduce_layout": _wrap(rccl_perf.allreduce_layout),
            "rccl_tests_argv": _wrap(rccl_perf.rccl_tests_argv),
            "rccl_tests_busbw": _wrap(rccl_perf.measured_busbw),
            "rdma_gid_index_problems": _wrap(rdma.gid_index_problems),
            "rdma_nearest_port_warnings": _wrap(rdma.nearest_port_warnings),
        }
