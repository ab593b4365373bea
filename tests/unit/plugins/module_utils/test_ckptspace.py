"""The checkpoint space estimate (issue 32): parameter shapes read from safetensors headers written by
the safetensors library itself, LoRA's trainable count against PEFT's published figure for Llama 3 8B,
and the bytes a node needs per strategy."""

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from plugins.module_utils.ckptspace import (
    checkpoint_estimate,
    lora_trainable,
    model_tensors,
    read_header,
    space_problem,
)


def llama3_8b():
    """Meta-Llama-3-8B's tensors by name and shape (its config.json: hidden 4096, intermediate 14336,
    32 layers, 32 heads, 8 key-value heads of 128, vocabulary 128256; bf16)."""
    hidden, inter, kv, vocab = 4096, 14336, 1024, 128256
    tensors = {"model.embed_tokens.weight": ("BF16", [vocab, hidden]), "lm_head.weight": ("BF16", [vocab, hidden]),
               "model.norm.weight": ("BF16", [hidden])}  # fmt: skip
    for layer in range(32):
        prefix = f"model.layers.{layer}."
        tensors.update({
            prefix + "self_attn.q_proj.weight": ("BF16", [hidden, hidden]),
            prefix + "self_attn.k_proj.weight": ("BF16", [kv, hidden]),
            prefix + "self_attn.v_proj.weight": ("BF16", [kv, hidden]),
            prefix + "self_attn.o_proj.weight": ("BF16", [hidden, hidden]),
            prefix + "mlp.gate_proj.weight": ("BF16", [inter, hidden]),
            prefix + "mlp.up_proj.weight": ("BF16", [inter, hidden]),
            prefix + "mlp.down_proj.weight": ("BF16", [hidden, inter]),
            prefix + "input_layernorm.weight": ("BF16", [hidden]),
            prefix + "post_attention_layernorm.weight": ("BF16", [hidden]),
        })  # fmt: skip
    return tensors


def job(**settings):
    return {"finetuning_type": "full", "lora_rank": 8, "lora_target": "all", "strategy": "deepspeed_zero3",
            "world_size": 16, "local_ranks": 8, "master": True, "save_total_limit": 3, **settings}  # fmt: skip


def test_the_headers_the_safetensors_library_writes_are_read_without_the_weights(tmp_path):
    save_file({"a.weight": np.zeros((3, 5), dtype=np.float32), "b": np.zeros((7,), dtype=np.int8)},
              str(tmp_path / "model.safetensors"), metadata={"format": "pt"})  # fmt: skip
    assert read_header(tmp_path / "model.safetensors") == {"a.weight": ("F32", [3, 5]), "b": ("I8", [7])}
    # The index names the shards; every shard's tensors are read.
    save_file({"c": np.zeros((2, 2), dtype=np.float16)}, str(tmp_path / "model-00002.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a.weight": "model.safetensors", "c": "model-00002.safetensors"}})
    )
    assert model_tensors(tmp_path) == {"a.weight": ("F32", [3, 5]), "b": ("I8", [7]), "c": ("F16", [2, 2])}


def test_an_index_naming_a_missing_shard_and_a_file_that_is_no_safetensors_are_named(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}))
    with pytest.raises(ValueError, match=r"names shards that are not there: gone\.safetensors"):
        model_tensors(tmp_path)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(ValueError, match="is not a safetensors header"):
        read_header(bad)
    bad.write_bytes(struct.pack("<Q", 5) + b"nope!")
    with pytest.raises(ValueError, match="not JSON"):
        read_header(bad)


def test_lora_on_every_linear_layer_of_llama_3_8b_trains_what_peft_reports():
    # PEFT's print_trainable_parameters for Llama 3 8B, r=8, all linear layers:
    # "trainable params: 20,971,520 || all params: 8,051,232,768" (the all-params figure adds the adapter).
    tensors = llama3_8b()
    assert lora_trainable(tensors, 8, "all") == 20_971_520
    assert sum(np.prod(shape) for _dtype, shape in tensors.values()) + 20_971_520 == 8_051_232_768
    # q_proj and v_proj only: 8 x (4096 + 4096) + 8 x (1024 + 4096) per layer.
    assert lora_trainable(tensors, 8, "q_proj,v_proj") == 32 * (65_536 + 40_960)


def test_a_full_zero3_fine_tune_of_llama_3_8b_on_two_nodes_of_eight():
    tensors = llama3_8b()
    master = checkpoint_estimate(tensors, job())
    other = checkpoint_estimate(tensors, job(master=False))
    params = 8_030_261_248
    assert master["params"] == other["params"] == master["trainable"] == params
    # Each node's 8 of 16 ranks save their fp32 master weights and Adam moments: 12 bytes x params / 2.
    assert other["per_checkpoint_bytes"] == 12 * params * 8 // 16
    # The master also writes the gathered bf16 weights in each checkpoint and at the end.
    assert master["per_checkpoint_bytes"] == 12 * params * 8 // 16 + 2 * params
    assert master["checkpoints"] == 4  # three kept, one more written before the oldest goes
    assert master["needed_bytes"] == 4 * master["per_checkpoint_bytes"] + 2 * params
    assert 270e9 < master["needed_bytes"] < 275e9


def test_lora_and_ddp_need_far_less_and_only_the_master_saves_ddps_state():
    tensors = llama3_8b()
    lora = checkpoint_estimate(tensors, job(finetuning_type="lora"))
    assert lora["trainable"] == 20_971_520
    assert lora["per_checkpoint_bytes"] == 12 * 20_971_520 * 8 // 16 + 4 * 20_971_520
    ddp = checkpoint_estimate(tensors, job(strategy="ddp", finetuning_type="lora", world_size=2, local_ranks=1))
    assert ddp["per_checkpoint_bytes"] == 8 * 20_971_520 + 4 * 20_971_520
    assert checkpoint_estimate(tensors, job(strategy="ddp", master=False))["needed_bytes"] == 0


def test_a_job_that_does_not_fit_is_refused_with_its_numbers_and_one_that_fits_is_not():
    estimate = checkpoint_estimate(llama3_8b(), job())
    problem = space_problem(estimate, free=200e9, reusable=0, margin_percent=10, output_dir="/data/jobs/x/output")
    assert problem.startswith("the job's checkpoints need about 300.3 GB in /data/jobs/x/output")
    assert "(4 checkpoints of 64.2 GB each, 16.1 GB of final weights, 10% margin; 8,030,261,248 parameters" in problem
    assert problem.endswith("and the filesystem has 200.0 GB free.")
    # Its own checkpoints are rotated out as new ones come: they count as room.
    assert space_problem(estimate, free=200e9, reusable=120e9, margin_percent=10, output_dir="/o") is None
    assert space_problem(estimate, free=301e9, reusable=0, margin_percent=10, output_dir="/o") is None
