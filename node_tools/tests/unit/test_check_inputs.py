"""The check of a job's model and dataset before launch (instinct-check-inputs, issue 33).

Two halves. The pure functions (the memory arithmetic around DeepSpeed's estimator, the raw row checks,
the split numbers, the tokenized set's key) are imported from node_tools/src and fed made-up numbers.
The refusals and the tokenized set are then shown on real runs of the installed console script over the
pinned training libraries (the ``train_tools`` venv of scripts/ensure-train-libs.sh: transformers,
safetensors, LLaMA-Factory 0.9.5, DeepSpeed 0.16.9), with the sandbox's own tiny Llama and dataset
(molecule/resources/sandbox/make_assets.py), built once for this module.

One stand-in, and why it is honest: that venv has no torchaudio (no wheel on this machine, and
test_probe relies on its absence), while LLaMA-Factory's data package imports it at the top of its
multimodal plugin, for audio datasets only. The runs here put an empty ``torchaudio`` module on
PYTHONPATH; nothing of it is called for text. A node's training venv has the real one (the pytorch
role installs it, the diagnose role's trainer-import check refuses a venv without it).
"""

import base64
import json
import os
import shutil
import subprocess
import sys

import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from instinct_node_tools import check_inputs
from tests.unit.conftest import ROOT

MAKE_ASSETS = ROOT / "molecule" / "resources" / "sandbox" / "make_assets.py"
MARK = "instinct-check-inputs: "
SEE = "See docs/runbooks/job-inputs.md"
GB = 10**9


# ----------------------------------------------------------------------------------------------------
# Pure functions


def job(**changes):
    base = {
        "model": "/m",
        "dataset_dir": "/d",
        "dataset": "demo",
        "strategy": "deepspeed_zero3",
        "finetuning_type": "full",
        "nodes": 1,
        "ranks_per_node": 8,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 4,
        "gpu_memory_bytes": 192 * GB,
        "host_memory_bytes": 2000 * GB,
    }
    base.update(changes)
    return check_inputs.settings(base)


class Zero3:
    """Records what the memory arithmetic asks DeepSpeed's estimator, and answers with simple figures
    (the real estimator is run on the real runs below)."""

    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        total_gpus = kwargs["num_gpus_per_node"] * kwargs["num_nodes"]
        largest = 4 * kwargs["largest_layer_params"]
        if kwargs["cpu_offload"]:
            gpu = largest if kwargs["cpu_offload_params"] else largest + 2 * kwargs["total_params"] // total_gpus
            cpu = kwargs["total_params"] * 18 // kwargs["num_nodes"]
        else:
            gpu, cpu = largest + 18 * kwargs["total_params"] // total_gpus, 0
        return cpu, gpu, largest


SEVEN_B = {"params": 7 * GB, "largest_layer_params": 500 * 10**6, "trainable": 7 * GB, "lora_all_trainable": 20 * 10**6}


def test_the_header_and_lora_arithmetic_is_the_collections_own_ckptspace():
    """One source: the checkpoint-space check (plugins/module_utils/ckptspace.py) and this one count a
    model's parameters and LoRA's adapter with the same file, linked into the package."""
    link = ROOT / "node_tools" / "src" / "instinct_node_tools" / "ckptspace.py"
    assert link.is_symlink()
    assert link.resolve() == (ROOT / "plugins" / "module_utils" / "ckptspace.py").resolve()


def test_settings_fill_in_the_world_from_any_two_of_its_sizes():
    assert check_inputs.settings({"nodes": 2, "ranks_per_node": 8})["world_size"] == 16
    assert check_inputs.settings({"world_size": 16, "ranks_per_node": 8})["nodes"] == 2
    assert check_inputs.settings({"world_size": 16, "nodes": 4})["ranks_per_node"] == 4


def test_a_full_fine_tune_is_deepspeeds_estimate_of_every_parameter():
    zero3 = Zero3()
    gpu, host = check_inputs.states_estimate(SEVEN_B, job(), zero3)
    assert zero3.calls == [
        {
            "total_params": 7 * GB,
            "largest_layer_params": 500 * 10**6,
            "num_gpus_per_node": 8,
            "num_nodes": 1,
            "cpu_offload": False,
            "cpu_offload_params": False,
            "zero_init": True,
            "additional_buffer_factor": 1.5,
        }
    ]
    assert (gpu, host) == (2 * GB + 18 * 7 * GB // 8, 0)


def test_lora_adds_the_frozen_16_bit_base_to_the_adapters_estimate():
    """The estimator assumes every parameter trains with Adam: it gets the adapter, and the frozen base
    adds 2 bytes a parameter, over every GPU, or over the nodes' memory when parameters are offloaded."""
    lora = dict(SEVEN_B, trainable=20 * 10**6)
    zero3 = Zero3()
    gpu, host = check_inputs.states_estimate(lora, job(finetuning_type="lora", nodes=2), zero3)
    assert zero3.calls[0]["total_params"] == 20 * 10**6
    assert zero3.calls[0]["largest_layer_params"] == 500 * 10**6  # gathered whole, trained or not
    frozen = 7 * GB - 20 * 10**6
    assert gpu == 2 * GB + 18 * 20 * 10**6 // 16 + 2 * frozen // 16
    assert host == 0
    gpu, host = check_inputs.states_estimate(
        lora, job(finetuning_type="lora", offload_optimizer=True, offload_param=True), zero3
    )
    assert gpu == 2 * GB
    assert host == 20 * 10**6 * 18 + int(frozen * 2 * 1.5)


def test_offloading_parameters_needs_the_optimizer_offloaded_too_as_deepspeeds_estimator_counts_it():
    zero3 = Zero3()
    check_inputs.states_estimate(SEVEN_B, job(offload_param=True), zero3)
    assert (zero3.calls[0]["cpu_offload"], zero3.calls[0]["cpu_offload_params"]) == (False, False)


def test_ddp_keeps_the_whole_model_on_every_gpu():
    zero3 = Zero3()
    assert check_inputs.states_estimate(SEVEN_B, job(strategy="ddp"), zero3) == (16 * 7 * GB, 0)
    lora = dict(SEVEN_B, trainable=10**6)
    assert check_inputs.states_estimate(lora, job(strategy="ddp"), zero3) == (16 * 10**6 + 2 * (7 * GB - 10**6), 0)
    assert zero3.calls == []


def test_cpu_ranks_hold_their_share_in_the_nodes_memory():
    needs = check_inputs.node_needs(SEVEN_B, job(gpu_memory_bytes=None, ranks_per_node=4), Zero3())
    per_rank = 2 * GB + 18 * 7 * GB // 4
    assert needs == {"gpu": None, "host": 4 * per_rank, "per_rank": per_rank}


def test_a_job_that_cannot_fit_is_refused_with_the_settings_that_would():
    problem, _estimate = check_inputs.memory_problem(SEVEN_B, job(gpu_memory_bytes=16 * GB), Zero3(), "/m/7b")
    assert problem.startswith("model: the job cannot fit: /m/7b needs about 17.8 GB per GPU, 0 B of host memory ")
    assert "full fine-tune of 7,000,000,000 parameters (7,000,000,000 trained) under deepspeed_zero3" in problem
    assert "and a GPU has 16.0 GB." in problem
    fixes = problem.split("Settings that would fit: ")[1]
    assert fixes.startswith(
        "finetune_deepspeed_offload_optimizer: true (3.8 GB per GPU, 126.0 GB of host memory per node); "
        "finetune_deepspeed_offload_optimizer: true and finetune_deepspeed_offload_param: true (2.0 GB per GPU"
    )
    assert "finetune_finetuning_type: lora (rank 8, all linear layers: 20,000,000 trained)" in fixes
    assert "2 nodes of 8 ranks (9.9 GB per GPU" in fixes
    assert problem.endswith(SEE)


def test_no_fitting_setting_says_so():
    problem, _estimate = check_inputs.memory_problem(
        SEVEN_B, job(gpu_memory_bytes=10**6, host_memory_bytes=10**6), Zero3(), "/m/7b"
    )
    assert "No offload, LoRA or node count up to 1024 fits: use GPUs with more memory or a smaller model" in problem


def test_ddp_is_pointed_at_zero3_when_it_cannot_fit():
    problem, _estimate = check_inputs.memory_problem(
        SEVEN_B, job(strategy="ddp", gpu_memory_bytes=80 * GB), Zero3(), "/m/7b"
    )
    assert "Settings that would fit: finetune_strategy: deepspeed_zero3 (17.8 GB per GPU" in problem


def test_a_job_that_fits_gives_its_estimate():
    problem, estimate = check_inputs.memory_problem(SEVEN_B, job(nodes=2), Zero3(), "/m/7b")
    assert problem is None
    assert estimate.startswith("9.9 GB per GPU, 0 B of host memory per node (full fine-tune")


TENSORS = {
    "model.embed_tokens.weight": ("BF16", [1000, 64]),
    "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64]),
    "model.layers.0.self_attn.k_proj.weight": ("BF16", [32, 64]),
    "model.layers.0.mlp.down_proj.weight": ("BF16", [64, 172]),
    "model.layers.0.input_layernorm.weight": ("BF16", [64]),
    "lm_head.weight": ("BF16", [1000, 64]),
}


def test_the_summary_counts_parameters_largest_layer_and_loras_adapter_from_the_headers():
    summary = check_inputs.model_summary(TENSORS, 8, "q_proj", "lora")
    assert summary == {
        "params": 64000 + 4096 + 2048 + 11008 + 64 + 64000,
        "largest_layer_params": 64000,
        "trainable": 8 * (64 + 64),
        "lora_all_trainable": 8 * (128 + 96 + 236),
    }


def test_a_lora_target_must_name_a_module_by_the_end_of_its_name():
    assert check_inputs.lora_target_problem(TENSORS, "all", "/m") is None
    assert check_inputs.lora_target_problem(TENSORS, "q_proj,self_attn.k_proj", "/m") is None
    problem = check_inputs.lora_target_problem(TENSORS, "q_proj,attn_qkv", "/m")
    assert problem == (
        "model: finetune_lora_target 'q_proj,attn_qkv' names attn_qkv, which no module of /m is called (its "
        "linear layers: down_proj, embed_tokens, k_proj, lm_head, q_proj); PEFT would stop every rank with "
        "\"Target modules {'attn_qkv'} not found in the base model\". Name modules from that list, or set "
        "finetune_lora_target: all. " + SEE
    )


def test_invalid_json_names_the_line_and_column():
    rows, problem = check_inputs.read_rows('[{"a": 1},\n {"a": 2} {"a": 3}]', "/d/x.json")
    assert rows == []
    assert problem.startswith("dataset: /d/x.json is not valid JSON: Expecting ',' delimiter at line 2 column 11")


def test_a_json_file_of_json_lines_reads_as_the_datasets_library_reads_it():
    rows, problem = check_inputs.read_rows('{"a": 1}\n\n{"a": 2}\n', "/d/x.json")
    assert problem is None
    assert rows == [(1, 1, {"a": 1}), (2, 3, {"a": 2})]


def test_invalid_json_lines_name_the_line_of_how_many():
    lines = [json.dumps({"a": n}) for n in range(10)]
    lines[4] = '{"a": 4'
    lines[7] = "nope"
    rows, problem = check_inputs.read_rows("\n".join(lines), "/d/x.jsonl")
    assert rows == []
    assert problem.startswith(
        "dataset: /d/x.jsonl line 5 of 10 is not valid JSON: Expecting ',' delimiter at column 8; "
        "2 of the 10 lines do not parse (lines 5, 8)."
    )


def test_rows_must_be_objects():
    _rows, problem = check_inputs.read_rows("[1, {}]", "/d/x.json")
    assert problem.startswith("dataset: /d/x.json row 1 is a JSON int, not an object (1 of 2 rows")
    _rows, problem = check_inputs.read_rows('"text"', "/d/x.json")
    assert problem.startswith("dataset: /d/x.json holds a JSON str, not a list of rows")
    _rows, problem = check_inputs.read_rows('{\n  "a": 1\n}\n', "/d/x.json")
    assert problem.startswith("dataset: /d/x.json holds one JSON object over several lines, not a list of rows")


def alpaca(*rows):
    return [(n, None, row) for n, row in enumerate(rows, 1)]


def test_an_entry_with_columns_reads_only_the_columns_it_maps():
    entry = {"file_name": "x.json", "columns": {"prompt": "question", "response": "answer"}}
    assert check_inputs.used_columns(entry) == {"prompt": "question", "response": "answer"}
    assert check_inputs.used_columns({"file_name": "x.json"}) == {
        "prompt": "instruction",
        "query": "input",
        "response": "output",
    }
    problems = check_inputs.column_problems(alpaca({"question": "q", "output": "a"}), entry, "/d/x.json", "demo")
    assert problems == [
        "dataset: /d/x.json has no column 'answer' (mapped to response by the demo entry's columns in "
        "dataset_info.json (finetune_dataset_columns)); its 1 rows have the columns output, question. Map "
        "response to one of them in finetune_dataset_columns, or add the column to the file. " + SEE
    ]


def test_the_default_alpaca_columns_must_exist_too():
    problems = check_inputs.column_problems(alpaca({"instruction": "q", "output": "a"}), {}, "/d/x.json", "demo")
    assert len(problems) == 1
    assert "has no column 'input' (the alpaca format's query column when no columns are mapped)" in problems[0]


def chat(*turns):
    return {"conversations": [{"from": role, "value": "text"} for role in turns]}


SHAREGPT = {"file_name": "x.json", "formatting": "sharegpt"}


def test_a_sharegpt_role_tag_it_does_not_know_names_row_turn_tag_and_the_tags_known():
    rows = alpaca(chat("human", "gpt"), chat("system", "human", "bot"), chat("user", "gpt"))
    problems = check_inputs.role_tag_problems(rows, SHAREGPT, "/d/x.json", "demo")
    assert problems == [
        "dataset: /d/x.json row 2 turn 2 has from: 'bot', a role tag that dataset demo does not know (2 rows in "
        "all: row 2, row 3); the tags it knows, from the sharegpt defaults: human (user), gpt (assistant), "
        "observation (observation), function_call (function), system (system). LLaMA-Factory would skip the row "
        'without an error. Rename the tag in the file, or map it under "tags" in the entry. ' + SEE
    ]


def test_tags_of_the_entry_replace_the_defaults():
    entry = dict(
        SHAREGPT, tags={"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
    )
    rows = [(1, 4, {"conversations": [{"role": "user", "content": "q"}, {"role": "gpt", "content": "a"}]})]
    (problem,) = check_inputs.role_tag_problems(rows, entry, "/d/x.jsonl", "demo")
    assert "row 1 (line 4) turn 2 has role: 'gpt'" in problem
    assert "from the demo entry's tags in dataset_info.json: user (user), assistant (assistant)." in problem


def test_turns_out_of_order_or_unanswered_are_rows_llamafactory_skips():
    rows = alpaca(chat("gpt", "human"), chat("human", "gpt", "human"), {"conversations": "text"})
    problems = check_inputs.role_tag_problems(rows, SHAREGPT, "/d/x.json", "demo")
    assert problems[0].startswith(
        "dataset: /d/x.json has 2 rows whose turns LLaMA-Factory would skip: row 1 turn 1: 'gpt' where 'human' "
        "or 'observation' comes, row 2: 3 turns, which leaves a prompt without an answer."
    )
    assert problems[1].startswith(
        "dataset: /d/x.json has 1 rows that are not sharegpt conversations: row 3: conversations is str"
    )


def test_an_empty_file_is_an_empty_split():
    assert check_inputs.read_rows("  \n", "/d/x.json") == ([], None)
    (problem,) = check_inputs.row_problems([], {}, "/d/x.json", "demo")
    assert problem.startswith("dataset: /d/x.json has no rows: the train split would be empty.")


def test_a_train_split_under_one_global_batch_gives_the_numbers_and_a_batch_that_fits():
    settings = job(ranks_per_node=2, per_device_train_batch_size=4, gradient_accumulation_steps=8)
    (problem,) = check_inputs.split_problems(settings, 40, 36, 4)
    assert problem == (
        "dataset: the train split of demo has 36 rows after tokenizing (40 rows read, 4 held out for validation) "
        "and one global batch takes 64 rows (world size 2 x finetune_per_device_train_batch_size 4 x "
        "finetune_gradient_accumulation_steps 8): an epoch would be one optimizer step, its batch filled by "
        "repeating rows. Add rows, or lower finetune_per_device_train_batch_size x "
        "finetune_gradient_accumulation_steps to at most 18 (e.g. 4 x 4). " + SEE
    )
    (problem,) = check_inputs.split_problems(job(), 5, 5, 0)
    assert "Add rows, or train on 5 or fewer ranks" in problem
    assert check_inputs.split_problems(job(ranks_per_node=1), 8, 8, None) == []


def test_evaluation_without_validation_rows_is_refused_with_the_reason():
    (problem,) = check_inputs.split_problems(job(ranks_per_node=1, do_eval=True), 240, None, 0)
    assert problem.startswith(
        "dataset: evaluation is asked but the validation split of demo has 0 rows (finetune_val_size is 0, so no "
        "row is held out; 240 rows read). Set finetune_val_size (e.g. 0.1)"
    )
    (problem,) = check_inputs.split_problems(job(ranks_per_node=1, do_eval=True, val_size=0.01), 240, 200, 0)
    assert "(finetune_val_size 0.01 held out rows that tokenizing dropped; 240 rows read)" in problem
    assert check_inputs.split_problems(job(ranks_per_node=1), 240, 240, 0) == []


def test_the_key_changes_with_any_input_and_the_change_is_named():
    inputs = {"data": {"cutoff_len": 128, "template": "default"}, "dataset_files": {"x.json": "aa"}}
    same = json.loads(json.dumps(inputs))
    assert check_inputs.inputs_key(inputs) == check_inputs.inputs_key(same)
    changed = {"data": {"cutoff_len": 256, "template": "default"}, "dataset_files": {"x.json": "bb"}}
    assert check_inputs.inputs_key(changed) != check_inputs.inputs_key(inputs)
    assert check_inputs.changed_inputs(inputs, changed) == [
        "data.cutoff_len: 128 -> 256",
        'dataset_files.x.json: "aa" -> "bb"',
    ]


def test_sizes_read_as_short_decimal_figures():
    assert [check_inputs.size(n) for n in (0, 999, 4_300_000, 80 * GB, 2.5e12)] == [
        "0 B",
        "999 B",
        "4.3 MB",
        "80.0 GB",
        "2.5 TB",
    ]


# ----------------------------------------------------------------------------------------------------
# Real runs over the pinned training libraries


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The sandbox's tiny Llama (config, tokenizer, one safetensors file) and its 240-row Alpaca dataset."""
    outdir = tmp_path_factory.mktemp("assets")
    done = subprocess.run(
        [sys.executable, str(MAKE_ASSETS), str(outdir)], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The runs' environment: the torchaudio stand-in (see the module's docstring), and a Hugging Face
    home of their own."""
    root = tmp_path_factory.mktemp("env")
    (root / "stand-ins" / "torchaudio").mkdir(parents=True)
    (root / "stand-ins" / "torchaudio" / "__init__.py").write_text('"""Stand-in: the test venv has no torchaudio."""\n')
    return dict(os.environ, PYTHONPATH=str(root / "stand-ins"), HF_HOME=str(root / "hf"))


def run_check(train_tools, env, specs):
    encoded = [base64.b64encode(json.dumps(s).encode()).decode() for s in specs]
    done = train_tools.run("instinct-check-inputs", *encoded, timeout=600, env=env, cwd=ROOT)
    assert done.returncode in (0, 3), done.stderr[-3000:]
    results = [json.loads(line[len(MARK) :]) for line in done.stdout.splitlines() if line.startswith(MARK)]
    assert len(results) == len(specs), done.stdout[-3000:] + done.stderr[-3000:]
    # Exit 0 only when every spec passed.
    assert done.returncode == (3 if any(r["problems"] for r in results) else 0)
    return results


def spec(assets, tmp, **changes):
    base = {
        "model": assets["model"],
        "dataset_dir": assets["dataset_dir"],
        "dataset": assets["dataset_name"],
        "template": "default",
        "cutoff_len": 128,
        "val_size": 0.1,
        "finetuning_type": "lora",
        "lora_rank": 8,
        "lora_target": "all",
        "strategy": "deepspeed_zero3",
        "nodes": 1,
        "ranks_per_node": 2,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "do_eval": True,
        "gpu_memory_bytes": None,
        "host_memory_bytes": 64 * GB,
        "tokenized_path": str(tmp / "tokenized"),
    }
    base.update(changes)
    return base


def dataset(tmp, name, text, entry=None):
    """A dataset folder holding one file and its dataset_info.json entry."""
    folder = tmp / f"data-{name}"
    folder.mkdir()
    file_name = name
    (folder / file_name).write_text(text)
    info = {"demo": dict({"file_name": file_name, "formatting": "alpaca"}, **(entry or {}))}
    (folder / "dataset_info.json").write_text(json.dumps(info))
    return {"dataset_dir": str(folder), "dataset": "demo"}, str(folder / file_name)


def model_copy(assets, tmp, name, leave_out=()):
    folder = tmp / name
    shutil.copytree(assets["model"], folder, ignore=lambda _d, names: [n for n in names if n in leave_out])
    return str(folder)


def sharded_missing_one(assets, tmp):
    """The tiny model as two shards and an index, the second shard not copied."""
    folder = tmp / "sharded"
    shutil.copytree(assets["model"], folder, ignore=lambda _d, names: ["model.safetensors"])
    weights = load_file(os.path.join(assets["model"], "model.safetensors"))
    names = sorted(weights)
    first, second = names[: len(names) // 2], names[len(names) // 2 :]
    save_file({n: weights[n] for n in first}, folder / "model-00001-of-00002.safetensors", metadata={"format": "pt"})
    weight_map = {n: "model-00001-of-00002.safetensors" for n in first}
    weight_map |= {n: "model-00002-of-00002.safetensors" for n in second}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return str(folder)


def tiny_counts(assets):
    """The tiny model's parameters and largest layer, from its header (what the check reads too)."""
    with safe_open(os.path.join(assets["model"], "model.safetensors"), "np") as handle:
        tensors = {name: ("F32", handle.get_slice(name).get_shape()) for name in handle.keys()}  # noqa: SIM118
    summary = check_inputs.model_summary(tensors, 8, "all", "full")
    return summary["params"], summary["largest_layer_params"]


@pytest.fixture(scope="module")
def refusals(train_tools, env, assets, tmp_path_factory):
    """Every refusal in one run of the check (the libraries load once), by case."""
    tmp = tmp_path_factory.mktemp("refusals")
    rows = [{"instruction": f"q{n}", "input": "", "output": f"a{n}"} for n in range(10000)]
    lines = [json.dumps(row) for row in rows]
    lines[4999] = lines[4999][:-1]  # line 5000 loses its closing brace
    chats = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "hello"}]},
    ]
    three = [{"instruction": f"q{n}", "input": "", "output": f"a{n}"} for n in range(3)]
    cases = {
        "invalid json": dataset(
            tmp,
            "broken.json",
            '[{"instruction": "a", "input": "", "output": "b"},\n  {"instruction": "c" "output": "d"}]',
        ),
        "invalid jsonl": dataset(tmp, "big.jsonl", "\n".join(lines) + "\n"),
        "unknown role tag": dataset(tmp, "chat.json", json.dumps(chats), {"formatting": "sharegpt"}),
        "missing column": dataset(
            tmp, "qa.json", json.dumps(three), {"columns": {"prompt": "question", "response": "output"}}
        ),
        "under one global batch": dataset(tmp, "three.json", json.dumps(three)),
        "empty split": dataset(tmp, "empty.json", "[]"),
    }
    specs = {name: spec(assets, tmp / name.replace(" ", "-"), **fields) for name, (fields, _file) in cases.items()}
    specs["under one global batch"].update(
        val_size=0, do_eval=False, per_device_train_batch_size=4, gradient_accumulation_steps=1
    )
    specs["no config.json"] = spec(assets, tmp / "noconf-job", model=model_copy(assets, tmp, "noconf", ["config.json"]))
    specs["missing shard"] = spec(assets, tmp / "shard", model=sharded_missing_one(assets, tmp))
    specs["lora target"] = spec(assets, tmp / "lora", lora_target="q_proj,attn_qkv")
    specs["cannot fit"] = spec(
        assets, tmp / "fit", finetuning_type="full", ranks_per_node=1, gpu_memory_bytes=10**6, host_memory_bytes=64 * GB
    )
    specs["no validation rows"] = spec(assets, tmp / "noval", val_size=0, do_eval=True)
    (tmp / "foreign" / "tokenized").mkdir(parents=True)
    (tmp / "foreign" / "tokenized" / "precious.txt").write_text("not a tokenized set\n")
    specs["foreign tokenized path"] = spec(assets, tmp / "foreign")
    results = run_check(train_tools, env, list(specs.values()))
    files = {name: file for name, (_fields, file) in cases.items()}
    return dict(zip(specs, results, strict=True)), files, specs


def only(result):
    assert len(result["problems"]) == 1, result["problems"]
    assert result["problems"][0].endswith(SEE)
    return result["problems"][0]


def test_refused_invalid_json(refusals):
    results, files, _specs = refusals
    assert only(results["invalid json"]) == (
        f"dataset: {files['invalid json']} is not valid JSON: Expecting ',' delimiter at line 2 column 23 "
        "(character 73). Fix the file there (a .json dataset is one JSON list of objects; check it with python3 "
        "-m json.tool). " + SEE
    )
    assert results["invalid json"]["tokenized"] is None


def test_refused_invalid_jsonl_at_line_5000_of_10000(refusals):
    results, files, _specs = refusals
    assert only(results["invalid jsonl"]) == (
        f"dataset: {files['invalid jsonl']} line 5000 of 10000 is not valid JSON: Expecting ',' delimiter at "
        "column 56. Fix or remove that line (each line of a JSON Lines file is one JSON object). " + SEE
    )


def test_refused_sharegpt_role_tag_it_does_not_know(refusals):
    results, files, _specs = refusals
    assert only(results["unknown role tag"]) == (
        f"dataset: {files['unknown role tag']} row 2 turn 2 has from: 'bot', a role tag that dataset demo does not "
        "know; the tags it knows, from the sharegpt defaults: human (user), gpt (assistant), observation "
        "(observation), function_call (function), system (system). LLaMA-Factory would skip the row without an "
        'error. Rename the tag in the file, or map it under "tags" in the entry. ' + SEE
    )


def test_refused_column_mapping_to_a_missing_column(refusals):
    results, files, _specs = refusals
    assert only(results["missing column"]) == (
        f"dataset: {files['missing column']} has no column 'question' (mapped to prompt by the demo entry's columns "
        "in dataset_info.json (finetune_dataset_columns)); its 3 rows have the columns input, instruction, output. "
        "Map prompt to one of them in finetune_dataset_columns, or add the column to the file. " + SEE
    )


def test_refused_train_split_smaller_than_one_global_batch(refusals):
    results, _files, _specs = refusals
    result = results["under one global batch"]
    assert only(result) == (
        "dataset: the train split of demo has 3 rows after tokenizing (3 rows read) and one global batch takes 8 "
        "rows (world size 2 x finetune_per_device_train_batch_size 4 x finetune_gradient_accumulation_steps 1): "
        "an epoch would be one optimizer step, its batch filled by repeating rows. Add rows, or lower "
        "finetune_per_device_train_batch_size x finetune_gradient_accumulation_steps to at most 1 (e.g. 1 x 1). " + SEE
    )
    # Tokenized all the same: a smaller batch or more ranks do not change the set, so the next run reuses it.
    assert result["tokenized"] == "written"
    assert result["rows"] == {"read": 3, "train": 3, "validation": 0}


def test_refused_empty_split(refusals):
    results, files, _specs = refusals
    assert only(results["empty split"]).startswith(
        f"dataset: {files['empty split']} has no rows: the train split would be empty."
    )


def test_refused_model_folder_without_config_json(refusals):
    results, _files, specs = refusals
    model = specs["no config.json"]["model"]
    assert only(results["no config.json"]) == (
        f"model: {model} has no config.json (it holds generation_config.json, model.safetensors, "
        "special_tokens_map.json, tokenizer.json, tokenizer_config.json): transformers cannot tell the "
        f'architecture and every rank would stop with "Unrecognized model in {model}". Copy the model\'s whole '
        "folder, or point finetune_model (finetune_model_src) at the folder that holds config.json. " + SEE
    )
    assert (
        "dataset: not tokenized: the model's config or tokenizer is refused above" in results["no config.json"]["notes"]
    )


def test_refused_index_naming_a_missing_shard(refusals):
    results, _files, specs = refusals
    model = specs["missing shard"]["model"]
    assert only(results["missing shard"]) == (
        f"model: {model}/model.safetensors.index.json names shards that are not there: "
        "model-00002-of-00002.safetensors. Copy the missing shards (or the whole folder) again: transformers loads "
        "every shard the index names. " + SEE
    )


def test_refused_lora_target_matching_no_module(refusals):
    results, _files, specs = refusals
    assert only(results["lora target"]) == (
        f"model: finetune_lora_target 'q_proj,attn_qkv' names attn_qkv, which no module of "
        f"{specs['lora target']['model']} "
        "is called (its linear layers: down_proj, embed_tokens, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, "
        "v_proj); PEFT would stop every rank with \"Target modules {'attn_qkv'} not found in the base model\". Name "
        "modules from that list, or set finetune_lora_target: all. " + SEE
    )


def test_refused_job_that_cannot_fit_by_deepspeeds_estimator(refusals, assets):
    results, _files, specs = refusals
    problem = only(results["cannot fit"])
    params, largest = tiny_counts(assets)
    # DeepSpeed 0.16.9's estimate_zero3_model_states_mem_needs without offload on one GPU: 4 bytes a
    # parameter of the largest layer and 18 a parameter of the model on the GPU; the largest layer
    # (x 1.5) in the host's memory.
    gpu, host = 4 * largest + 18 * params, int(largest * 4 * 1.5)
    assert problem.startswith(
        f"model: the job cannot fit: {specs['cannot fit']['model']} needs about {check_inputs.size(gpu)} per GPU, "
        f"{check_inputs.size(host)} of host memory per node (full fine-tune of {params:,} parameters ({params:,} "
        "trained) under deepspeed_zero3, 1 node(s) x 1 ranks, no offload; DeepSpeed 0.16.9's "
        "estimate_zero3_model_states_mem_needs, activations come on top), and a GPU has 1.0 MB. Settings that "
        "would fit: finetune_deepspeed_offload_optimizer: true ("
    )
    assert "finetune_finetuning_type: lora (rank 8, all linear layers: " in problem
    assert " nodes of 1 ranks (" in problem
    assert (results["cannot fit"]["memory"]["gpu_bytes"], results["cannot fit"]["memory"]["host_bytes"]) == (gpu, host)


def test_refused_validation_split_of_zero_rows_with_evaluation_asked(refusals):
    results, _files, _specs = refusals
    assert only(results["no validation rows"]) == (
        "dataset: evaluation is asked but the validation split of tiny_instruct has 0 rows (finetune_val_size is 0, "
        "so no row is held out; 240 rows read). Set finetune_val_size (e.g. 0.1) so that the split holds rows, or "
        "take the evaluation settings (do_eval, eval_strategy, eval_steps) out of finetune_extra_args. " + SEE
    )


@pytest.fixture(scope="module")
def tokenized(train_tools, env, assets, tmp_path_factory):
    """A job that passes, run three times in two processes: written, then reused, then made again for a
    changed cutoff_len."""
    tmp = tmp_path_factory.mktemp("tokenized")
    (first,) = run_check(train_tools, env, [spec(assets, tmp)])
    key_file = json.loads((tmp / "tokenized" / check_inputs.KEY_FILE).read_text())
    again, recut = run_check(train_tools, env, [spec(assets, tmp), spec(assets, tmp, cutoff_len=256)])
    return tmp, first, key_file, again, recut


def test_a_passing_job_is_tokenized_into_its_tokenized_path_once(tokenized, assets):
    tmp, first, key_file, _again, _recut = tokenized
    assert first["problems"] == []
    assert first["tokenized"] == "written"
    assert first["tokenized_path"] == str(tmp / "tokenized")
    assert len(first["key"]) == 16 and int(first["key"], 16) >= 0
    # The sandbox's 240 rows, val_size 0.1 held out by LLaMA-Factory's own split.
    assert first["rows"] == {"read": 240, "train": 216, "validation": 24}
    # LLaMA-Factory's saved set, and beside it what it was made from.
    assert sorted(p.name for p in (tmp / "tokenized").iterdir()) == [
        "dataset_dict.json",
        check_inputs.KEY_FILE,
        "train",
        "validation",
    ]
    assert key_file["key"] == first["key"]
    assert key_file["rows_read"] == 240
    assert key_file["inputs"]["data"]["cutoff_len"] == 128
    assert key_file["inputs"]["versions"]["llamafactory"] == "0.9.5"
    assert sorted(key_file["inputs"]["tokenizer_files"]) == [
        "config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    # Nothing else is left behind: the check's scratch folder and partial sets are gone.
    assert sorted(p.name for p in tmp.iterdir()) == ["tokenized", "tokenized.lock"]
    assert first["checked"][:3] == [
        "model: config.json accepted by transformers 5.5.4 (LlamaConfig)",
        "model: tokenizer loaded by LLaMA-Factory (TokenizersBackend)",
        f"model: 1 safetensors file(s), 21 tensors, {tiny_counts(assets)[0]:,} parameters (headers read with "
        "safetensors 0.8.0)",
    ]


def test_a_second_run_with_the_same_inputs_reuses_the_set(tokenized):
    _tmp, first, _key_file, again, _recut = tokenized
    assert again["problems"] == []
    assert again["tokenized"] == "reused"
    assert again["key"] == first["key"]
    assert again["rows"] == first["rows"]


def test_a_changed_cutoff_tokenizes_again_and_says_why(tokenized):
    tmp, first, _key_file, _again, recut = tokenized
    assert recut["problems"] == []
    assert recut["tokenized"] == "written"
    assert recut["key"] != first["key"]
    assert recut["tokenized_reason"] == ["data.cutoff_len: 128 -> 256"]
    assert json.loads((tmp / "tokenized" / check_inputs.KEY_FILE).read_text())["key"] == recut["key"]


def test_refused_tokenized_path_holding_other_files_which_stay(refusals):
    results, _files, specs = refusals
    target = specs["foreign tokenized path"]["tokenized_path"]
    assert only(results["foreign tokenized path"]) == (
        f"dataset: tokenized_path {target} holds files this check did not write (no instinct-inputs.json): it "
        "replaces an outdated set there, so it leaves a folder it does not know alone. Move the folder aside, or "
        "give the job a tokenized path of its own. " + SEE
    )
    assert os.listdir(target) == ["precious.txt"]
