"""The sandbox's generated training inputs: same bytes every run, a Llama state dict that matches its
config, a tokenizer that round-trips the dataset, a valid Alpaca dataset, and no rewrites when nothing
changed."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from tests.unit.conftest import ROOT

SCRIPT = ROOT / "molecule" / "resources" / "sandbox" / "make_assets.py"
FILES = {
    "data/dataset_info.json",
    "data/tiny-instruct.json",
    "model/config.json",
    "model/generation_config.json",
    "model/model.safetensors",
    "model/special_tokens_map.json",
    "model/tokenizer.json",
    "model/tokenizer_config.json",
}


def load_script():
    spec = importlib.util.spec_from_file_location("make_assets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_assets = load_script()


def run_cli(outdir, hash_seed="0"):
    # A fresh process each time, with its own hash seed: the Rust BPE trainer's hash maps are seeded
    # per process, so only separate processes can show that training does not depend on them.
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(outdir)], capture_output=True, text=True, env=env, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def files_in(outdir):
    return {str(p.relative_to(outdir)): p.read_bytes() for p in sorted(outdir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("assets")
    result = run_cli(outdir)
    return outdir, result


def test_two_runs_give_identical_bytes_and_the_printed_hash_names_them(tmp_path):
    first, second = run_cli(tmp_path / "a", "1"), run_cli(tmp_path / "b", "2")
    files_a, files_b = files_in(tmp_path / "a"), files_in(tmp_path / "b")
    assert set(files_a) == FILES
    assert files_a == files_b
    assert first["sha256"] == second["sha256"] == make_assets.content_hash(files_a)
    assert sorted(first["changed"]) == sorted(FILES)
    assert first["model"] == str(tmp_path / "a" / "model")
    assert first["dataset"] == str(tmp_path / "a" / "data" / "tiny-instruct.json")


def test_the_hash_changes_with_any_file():
    files = make_assets.build_assets()
    for path in files:
        altered = dict(files, **{path: files[path] + b" "})
        assert make_assets.content_hash(altered) != make_assets.content_hash(files), path


def test_a_different_seed_gives_different_weights_and_data():
    assert make_assets.build_dataset(1) != make_assets.build_dataset(2)
    config = make_assets.model_config(make_assets.build_tokenizer(make_assets.build_dataset()))
    a, b = make_assets.build_weights(config, 1), make_assets.build_weights(config, 2)
    assert not np.array_equal(a["lm_head.weight"], b["lm_head.weight"])


def test_the_dataset_is_alpaca_with_correct_answers(assets):
    outdir, result = assets
    examples = json.loads((outdir / "data" / "tiny-instruct.json").read_text(encoding="utf-8"))
    assert isinstance(examples, list)
    assert len(examples) == 4 * make_assets.EXAMPLES_PER_TASK == 240
    assert all(list(e) == ["instruction", "input", "output"] for e in examples)
    assert all(isinstance(v, str) for e in examples for v in e.values())
    assert all(e["instruction"] and e["output"] for e in examples)
    assert len({json.dumps(e) for e in examples}) == len(examples), "duplicate records"

    counts = dict.fromkeys(("spell", "add", "reverse", "upper"), 0)
    for e in examples:
        if m := re.fullmatch(r"Spell the number (\d+) in words\.", e["instruction"]):
            counts["spell"] += 1
            assert e["output"] == make_assets.number_words(int(m[1]))
        elif m := re.fullmatch(r"What is (\d+) plus (\d+)\?", e["instruction"]):
            counts["add"] += 1
            assert e["output"] == f"{m[1]} plus {m[2]} is {int(m[1]) + int(m[2])}."
        elif e["instruction"] == "Reverse the letters of the word.":
            counts["reverse"] += 1
            assert e["output"] == e["input"][::-1]
        elif e["instruction"] == "Write the word in capital letters.":
            counts["upper"] += 1
            assert e["output"] == e["input"].upper()
        else:
            pytest.fail(f"unexpected record {e}")
    assert counts == dict.fromkeys(counts, make_assets.EXAMPLES_PER_TASK)
    # Shuffled: the first batch of a run must not be a single task.
    assert len({e["instruction"].split()[0] for e in examples[:8]}) > 1

    info = json.loads((outdir / "data" / "dataset_info.json").read_text(encoding="utf-8"))
    assert result["dataset_name"] in info
    assert info[result["dataset_name"]]["file_name"] == "tiny-instruct.json"


@pytest.mark.parametrize(
    ("n", "words"),
    [(0, "zero"), (7, "seven"), (13, "thirteen"), (20, "twenty"), (37, "thirty-seven"), (99, "ninety-nine")],
)
def test_number_words(n, words):
    assert make_assets.number_words(n) == words


def test_the_tensors_are_a_llama_state_dict_for_the_config(assets):
    outdir, _result = assets
    config = json.loads((outdir / "model" / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is False
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    assert config["head_dim"] == head_dim
    # Written out by hand from transformers' LlamaForCausalLM, not from the script's own table.
    expected = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    expected["lm_head.weight"] = (vocab, hidden)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        expected |= {
            p + "self_attn.q_proj.weight": (hidden, hidden),
            p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.weight": (kv, hidden),
            p + "self_attn.o_proj.weight": (hidden, hidden),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }

    path = str(outdir / "model" / "model.safetensors")
    tensors = load_file(path)
    assert {name: t.shape for name, t in tensors.items()} == expected
    assert all(t.dtype == np.float32 for t in tensors.values())
    with safe_open(path, framework="np") as handle:
        assert handle.metadata() == {"format": "pt"}
    for name, t in tensors.items():
        if name.endswith("norm.weight"):
            assert np.all(t == 1.0), name
        else:
            assert abs(float(t.mean())) < 0.005, name
            assert 0.015 < float(t.std()) < 0.025, name
    # Untied: the head is its own matrix, as tie_word_embeddings false says.
    assert not np.array_equal(tensors["lm_head.weight"], tensors["model.embed_tokens.weight"])


def test_the_tokenizer_has_the_special_tokens_and_round_trips_the_dataset(assets):
    outdir, _result = assets
    model = outdir / "model"
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    tok_config = json.loads((model / "tokenizer_config.json").read_text(encoding="utf-8"))
    special_map = json.loads((model / "special_tokens_map.json").read_text(encoding="utf-8"))

    assert config["vocab_size"] == tokenizer.get_vocab_size(with_added_tokens=True)
    assert 512 <= config["vocab_size"] <= 1024
    ids = {t: tokenizer.token_to_id(t) for t in ("<pad>", "<s>", "</s>", "<unk>")}
    assert ids == {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (0, 1, 2)
    generation = json.loads((model / "generation_config.json").read_text(encoding="utf-8"))
    assert generation == {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    expected_special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    assert special_map == expected_special
    assert {k: tok_config[k] for k in expected_special} == expected_special
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok_config["model_max_length"] == config["max_position_embeddings"] == 512
    # Special tokens must stay whole when they appear in text, not be split into bytes.
    assert tokenizer.encode("</s>", add_special_tokens=False).ids == [2]

    examples = json.loads((outdir / "data" / "tiny-instruct.json").read_text(encoding="utf-8"))
    total_chars = total_tokens = 0
    for e in examples:
        text = make_assets.example_text(e)
        encoding = tokenizer.encode(text)
        assert encoding.ids[0] == ids["<s>"]
        assert ids["<unk>"] not in encoding.ids
        assert max(encoding.ids) < config["vocab_size"]
        assert tokenizer.decode(encoding.ids, skip_special_tokens=True) == text
        total_chars += len(text)
        total_tokens += len(encoding.ids) - 1
    # Trained merges, not bare bytes: the dataset's words encode in far fewer tokens than characters.
    assert total_tokens < 0.5 * total_chars
    # Byte-level: text the training never saw still encodes without <unk> and comes back whole.
    unseen = "### Antwort: Größe ≥ 3 ✓\n"
    assert tokenizer.decode(tokenizer.encode(unseen).ids, skip_special_tokens=True) == unseen


def test_a_second_run_rewrites_nothing_and_repairs_only_what_differs(tmp_path):
    files = make_assets.build_assets()
    assert sorted(make_assets.write_assets(tmp_path, files)) == sorted(FILES)
    # An old mtime, so that a rewrite shows even on a file system with coarse timestamps.
    for path in tmp_path.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}

    result = run_cli(tmp_path)
    assert result["changed"] == []
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == before

    config = tmp_path / "model" / "config.json"
    config.write_text("{}", encoding="utf-8")
    os.utime(config, ns=(1_000_000_000, 1_000_000_000))
    assert run_cli(tmp_path)["changed"] == ["model/config.json"]
    assert config.read_bytes() == files["model/config.json"]
    after = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    assert {p for p in before if after[p] != before[p]} == {config}
    assert set(files_in(tmp_path)) == FILES, "temporary files left behind"


def test_the_cli_wants_exactly_one_outdir(capsys):
    assert make_assets.main([]) == 2
    assert "usage" in capsys.readouterr().err
