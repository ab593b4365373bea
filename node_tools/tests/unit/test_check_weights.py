"""The evaluate role's weights check: instinct-check-weights, installed over the training
libraries, reads real safetensors files (written here with safetensors itself, as transformers and
peft write them), and jobspec.weights_problems decides from what it read."""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from ansible_collections.instinct.finetune.plugins.module_utils.jobspec import weights_problems


@pytest.fixture
def read(train_tools):
    """What the installed check reports of an output folder."""

    def report(folder):
        proc = train_tools.run("instinct-check-weights", folder)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    return report


@pytest.fixture
def full(tmp_path):
    """What transformers' save_pretrained leaves after a ZeRO-3 full fine-tune that gathered its weights."""
    save_file({"model.embed_tokens.weight": np.ones((8, 4), np.float32)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "trainer_state.json").write_text("{}")
    return tmp_path


def test_gathered_full_weights_can_be_evaluated(full, read):
    report = read(full)
    assert report["safetensors"]["model.safetensors"] == {"tensors": 1, "empty": [], "error": None}
    assert set(report["files"]) == {"model.safetensors", "config.json", "trainer_state.json"}
    assert weights_problems("full", report) == []


def test_a_zero3_run_that_did_not_gather_leaves_no_model(tmp_path, read):
    # The output of issue 16: global_step*/ shards, latest, zero_to_fp32.py, a config, no weights.
    (tmp_path / "global_step40").mkdir()
    (tmp_path / "latest").write_text("global_step40")
    (tmp_path / "zero_to_fp32.py").write_text("")
    (tmp_path / "config.json").write_text("{}")
    report = read(tmp_path)
    assert report["names"] == ["config.json", "global_step40", "latest", "zero_to_fp32.py"]
    assert weights_problems("full", report) == ["no model*.safetensors (only DeepSpeed's ZeRO shards were saved)"]
    (tmp_path / "global_step40").rmdir()
    for name in ("latest", "zero_to_fp32.py"):
        (tmp_path / name).unlink()
    assert weights_problems("full", read(tmp_path)) == ["no model*.safetensors"]


def test_a_truncated_model_file_is_named_with_safetensors_own_error(full, read):
    data = (full / "model.safetensors").read_bytes()
    (full / "model.safetensors").write_bytes(data[: len(data) // 2])
    (problem,) = weights_problems("full", read(full))
    assert problem.startswith("model.safetensors cannot be read: ")


def test_sharded_full_weights_are_all_checked(full, read):
    (full / "model.safetensors").unlink()
    for shard in (1, 2):
        name = f"model-0000{shard}-of-00002.safetensors"
        save_file({f"layer.{shard}.weight": np.ones((2, 2), np.float16)}, str(full / name))
    (full / "model.safetensors.index.json").write_text("{}")
    assert weights_problems("freeze", read(full)) == []


def test_a_lora_adapter_with_empty_tensors_is_refused(tmp_path, read):
    # peft's save under ZeRO-3 without gathering the shards writes 0-element tensors.
    tensors = {
        "base_model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((0,), np.float32),
        "base_model.model.layers.0.self_attn.q_proj.lora_B.weight": np.ones((4, 8), np.float32),
    }
    save_file(tensors, str(tmp_path / "adapter_model.safetensors"))
    (tmp_path / "adapter_config.json").write_text("{}")
    assert weights_problems("lora", read(tmp_path)) == [
        "adapter_model.safetensors has 1 empty tensors (base_model.model.layers.0.self_attn.q_proj.lora_A.weight)"
    ]
    save_file({k: np.ones((4, 8), np.float32) for k in tensors}, str(tmp_path / "adapter_model.safetensors"))
    assert weights_problems("lora", read(tmp_path)) == []
    (tmp_path / "adapter_config.json").unlink()
    assert weights_problems("lora", read(tmp_path)) == ["adapter_config.json is missing"]


def test_a_lora_output_without_adapter(tmp_path, read):
    (tmp_path / "config.json").write_text("{}")
    assert weights_problems("lora", read(tmp_path)) == [
        "adapter_config.json is missing",
        "adapter_model.safetensors is missing",
    ]
