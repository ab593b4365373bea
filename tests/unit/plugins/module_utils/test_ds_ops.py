"""The DeepSpeed build environment per strategy: which ops a node pre-builds (DS_BUILD_*) and which
ds_report must show installed, from the job's strategy, offload and DeepSpeed settings (what
DeepSpeed v0.16.9, accelerate and transformers load on each path)."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.ds_ops import DsOpsError, deepspeed_ops, job_ops

GPU_FLOOR = {"DS_BUILD_OPS": "0", "DS_BUILD_CPU_ADAM": "1", "DS_BUILD_FUSED_ADAM": "1"}
CPU_FLOOR = {"DS_BUILD_OPS": "0", "DS_BUILD_CPU_ADAM": "1", "DS_BUILD_SHM_COMM": "1"}


@pytest.mark.parametrize(
    ("strategy", "offload", "extra"),
    [
        ("deepspeed_zero3", True, {}),  # ZeRO-3, optimizer offloaded: accelerate's DeepSpeedCPUAdam
        ("deepspeed_zero3", False, {}),  # ZeRO-3 on the GPU: the Trainer's torch AdamW, no op
        ("deepspeed_zero3", False, {"zero_optimization": {"stage": 2}}),  # ZeRO-2 loads no op itself
        ("ddp", False, {}),  # no DeepSpeed at all
        ("fsdp", True, {}),  # no DeepSpeed at all; the offload switch is DeepSpeed's only
    ],
)
def test_a_gpu_node_builds_cpu_adam_and_fused_adam_alone_for_every_strategy(strategy, offload, extra):
    plan = deepspeed_ops("rocm", strategy, offload, extra)
    assert plan["env"] == GPU_FLOOR
    assert plan["ops"] == ["CPU_ADAM", "FUSED_ADAM"]
    # None of the HIP ops that broke whole-wheel builds (DS_BUILD_OPS=1) is switched on.
    assert not {"DS_BUILD_TRANSFORMER", "DS_BUILD_QUANTIZER", "DS_BUILD_RANDOM_LTD"} & set(plan["env"])


@pytest.mark.parametrize("strategy", ["deepspeed_zero3", "ddp"])
def test_a_cpu_node_keeps_shm_comm_which_every_deepspeed_cpu_rank_loads(strategy):
    plan = deepspeed_ops("cpu", strategy, True)
    assert plan["env"] == CPU_FLOOR
    assert plan["ops"] == ["CPU_ADAM", "SHM_COMM"]
    assert "comm" in plan["reasons"]["SHM_COMM"]


def test_what_each_strategy_loads_beyond_the_floor():
    assert set(job_ops("deepspeed_zero3", "rocm", offload_optimizer=True)) == {"CPU_ADAM"}
    assert job_ops("deepspeed_zero3", "rocm", offload_optimizer=False) == {}
    assert job_ops("ddp", "rocm", offload_optimizer=True) == {}
    assert job_ops("fsdp", "rocm", deepspeed_extra={"zero_optimization": {"zero_quantized_weights": True}}) == {}


def test_nvme_offload_adds_async_io():
    extra = {"zero_optimization": {"offload_param": {"device": "nvme", "nvme_path": "/local_nvme"}}}
    plan = deepspeed_ops("rocm", "deepspeed_zero3", True, extra)
    assert plan["ops"] == ["AIO", "CPU_ADAM", "FUSED_ADAM"]
    assert plan["env"]["DS_BUILD_AIO"] == "1"


def test_zero_plus_plus_quantization_adds_the_quantizer():
    extra = {"zero_optimization": {"stage": 3, "zero_quantized_gradients": "true"}}
    assert "QUANTIZER" in deepspeed_ops("rocm", "deepspeed_zero3", False, extra)["ops"]


def test_the_settings_merged_over_the_offload_switch_decide_where_the_optimizer_runs():
    # finetune_deepspeed_extra is merged over the switch's {"device": "cpu"}: "none" turns it off.
    off = {"zero_optimization": {"offload_optimizer": {"device": "none"}}}
    assert job_ops("deepspeed_zero3", "rocm", True, off) == {}
    on = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
    assert set(job_ops("deepspeed_zero3", "rocm", False, on)) == {"CPU_ADAM"}


@pytest.mark.parametrize(
    ("optimizer", "offload", "op"),
    [
        ({"type": "Lamb"}, False, "FUSED_LAMB"),
        ({"type": "Lion"}, False, "FUSED_LION"),
        ({"type": "Lion"}, True, "CPU_LION"),
        ({"type": "Adagrad"}, True, "CPU_ADAGRAD"),
    ],
)
def test_an_optimizer_block_of_the_deepspeed_settings_adds_its_op(optimizer, offload, op):
    plan = deepspeed_ops("rocm", "deepspeed_zero3", offload, {"optimizer": optimizer})
    assert op in plan["ops"]
    assert plan["env"][f"DS_BUILD_{op}"] == "1"


def test_a_cpu_node_gets_only_ops_deepspeeds_cpu_accelerator_has_builders_for():
    extra = {
        "optimizer": {"type": "Lamb"},
        "zero_optimization": {"zero_quantized_weights": True, "offload_param": {"device": "nvme"}},
    }
    # FUSED_LAMB and QUANTIZER have no builder in op_builder/cpu: instinct-ds-ops would find no such op.
    assert deepspeed_ops("cpu", "deepspeed_zero3", True, extra)["ops"] == ["AIO", "CPU_ADAM", "SHM_COMM"]


def test_torch_adam_in_the_deepspeed_settings_loads_no_op():
    extra = {"optimizer": {"type": "AdamW", "params": {"torch_adam": True}}}
    assert job_ops("deepspeed_zero3", "rocm", False, extra) == {}


def test_extra_ops_are_added_and_a_list_builds_exactly_what_it_names():
    assert deepspeed_ops("rocm", extra_ops=["CPU_ADAGRAD"])["ops"] == ["CPU_ADAGRAD", "CPU_ADAM", "FUSED_ADAM"]
    plan = deepspeed_ops("rocm", build_ops=["FUSED_ADAM"])
    assert plan == {
        "env": {"DS_BUILD_OPS": "0", "DS_BUILD_FUSED_ADAM": "1"},
        "ops": ["FUSED_ADAM"],
        "reasons": {"FUSED_ADAM": "listed in deepspeed_build_ops"},
    }


def test_all_builds_every_op_but_the_skipped_and_still_requires_the_jobs():
    plan = deepspeed_ops("rocm", "deepspeed_zero3", True, build_ops="all", skip_ops=["SPARSE_ATTN", "GDS"])
    assert plan["env"] == {"DS_BUILD_OPS": "1", "DS_BUILD_SPARSE_ATTN": "0", "DS_BUILD_GDS": "0"}
    assert plan["ops"] == ["CPU_ADAM", "FUSED_ADAM"]


def test_skipping_an_op_the_node_needs_is_refused_naming_it_and_the_runbook():
    with pytest.raises(DsOpsError, match=r"\['FUSED_ADAM'\].*deepspeed-ops.md"):
        deepspeed_ops("rocm", build_ops="all", skip_ops=["FUSED_ADAM"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device": "cuda"}, "device 'cuda'"),
        ({"device": "rocm", "strategy": "zero2"}, "strategy 'zero2'"),
        ({"device": "rocm", "build_ops": "some"}, "deepspeed_build_ops is 'some'"),
        ({"device": "rocm", "extra_ops": ["cpu_adam"]}, r"deepspeed_extra_ops holds \['cpu_adam'\]"),
        ({"device": "rocm", "deepspeed_extra": ["stage", 2]}, "not a mapping"),
    ],
)
def test_bad_settings_are_refused_naming_the_value_and_the_runbook(kwargs, message):
    with pytest.raises(DsOpsError, match=message) as raised:
        deepspeed_ops(**kwargs)
    assert "docs/runbooks/deepspeed-ops.md" in str(raised.value)
