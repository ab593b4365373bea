"""checkpoint_space through ansible, as the finetune role's space.yml runs it before launch (issue 32):
a model whose header declares a trillion parameters (the header alone, as the module reads no weights)
is refused on this machine's real filesystem with the numbers; a small model written by the safetensors
library fits; a hub model (no folder on the node) is not estimated."""

import json
import struct

import numpy as np
import yaml
from safetensors.numpy import save_file

from tests.unit.conftest import ROOT, run_module


def space(model_dir, output_dir, **options):
    args = {"model_dir": str(model_dir), "output_dir": str(output_dir), "world_size": 2, "local_ranks": 1,
            "master": True, "finetuning_type": "full", **options}  # fmt: skip
    return run_module("checkpoint_space", json.dumps(args))


def test_a_model_too_large_for_the_disk_is_refused_from_its_header_alone(tmp_path):
    model = tmp_path / "huge"
    model.mkdir()
    header = json.dumps({"w.weight": {"dtype": "BF16", "shape": [1_000_000, 1_000_000], "data_offsets": [0, 2]}})
    # The header and two bytes: the module must not read (or need) the declared 2 TB of weights.
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0\0")
    rc, result = space(model, tmp_path / "jobs" / "big" / "output")
    assert rc == 0 and result["changed"] is False, result
    assert result["estimated"] is True and result["params"] == 10**12
    assert result["problem"].startswith("the job's checkpoints need about ")
    assert f"in {tmp_path}/jobs/big/output" in result["problem"] and "1,000,000,000,000 parameters" in result["problem"]


def test_a_small_model_fits_and_a_hub_model_is_not_estimated(tmp_path):
    model = tmp_path / "small"
    model.mkdir()
    save_file({"w.weight": np.zeros((64, 64), dtype=np.float32)}, str(model / "model.safetensors"))
    output = tmp_path / "output"
    output.mkdir()
    (output / "checkpoint-1").mkdir()
    (output / "checkpoint-1" / "optim.pt").write_bytes(b"x" * 1000)
    rc, result = space(model, output, finetuning_type="lora", lora_rank=4, count_existing=True)
    assert rc == 0 and result["problem"] is None, result
    assert (result["params"], result["trainable"], result["reusable_bytes"]) == (4096, 4 * 128, 1000)
    # A fresh start moves the earlier output aside on the same filesystem: it is no room.
    assert space(model, output, finetuning_type="lora", lora_rank=4)[1]["reusable_bytes"] == 0
    rc, hub = space(tmp_path / "meta-llama" / "Llama-3.1-8B", output)
    assert rc == 0 and hub["estimated"] is False and hub["problem"] is None


def test_the_role_checks_the_space_after_writing_the_files_and_before_any_rank_starts():
    tasks = yaml.safe_load((ROOT / "roles" / "finetune" / "tasks" / "main.yml").read_text())[0]["block"]
    names = [task["name"] for task in tasks]
    check = names.index("Check that the job's checkpoints fit on every node")
    assert (
        names.index("Write the job's files on every node")
        < check
        < names.index("Launch one LLaMA-Factory process per node")
    )
    assert "finetune_plan.action == 'launch'" in tasks[check]["when"]
