"""Make the sandbox's training inputs locally: a tiny instruction dataset, a tokenizer and a tiny Llama.

The sandbox cannot reach the Hugging Face hub, so it cannot download a model or a data set. This script
builds both from nothing on the controller, which has no torch: numpy and safetensors write the weights,
the `tokenizers` library trains the tokenizer. Everything is seeded, so every run gives the same bytes,
and the content hash it prints identifies one set of inputs in a training record.

The dataset is synthetic and strongly patterned (number spelling, sums, reversed and capitalised words)
so that even a randomly initialised model with 200k parameters shows its loss falling within ~30
optimizer steps; that is the signal the sandbox checks for, not model quality.

Usage: python make_assets.py OUTDIR

Writes OUTDIR/model/ (config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, special_tokens_map.json) and OUTDIR/data/ (tiny-instruct.json,
dataset_info.json), then prints one JSON line with the paths, the content hash and the files it changed.
A file whose content is already right is left alone, so a second run changes nothing, mtimes included.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save as save_safetensors
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 1234
EXAMPLES_PER_TASK = 60
DATASET_NAME = "tiny_instruct"
DATASET_FILE = "tiny-instruct.json"
MAX_LENGTH = 512
VOCAB_SIZE = 1024

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
# The trainer gives special tokens the first ids in this order: pad=0, bos=1, eos=2, unk=3.
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]

HIDDEN_SIZE = 64
INTERMEDIATE_SIZE = 172
NUM_LAYERS = 2
NUM_HEADS = 4
NUM_KV_HEADS = 2
INIT_STD = 0.02
ROPE_THETA = 10000.0

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
WORDS = [
    "apple", "river", "stone", "cloud", "green", "table", "music", "light", "water", "house",
    "bread", "chair", "dream", "earth", "flame", "grape", "heart", "island", "jelly", "kite",
    "lemon", "mountain", "night", "ocean", "pencil", "queen", "robot", "sugar", "tiger", "umbrella",
    "violet", "window", "yellow", "zebra", "garden", "planet", "forest", "silver", "winter", "summer",
    "candle", "rocket", "button", "market", "orange", "purple", "spring", "basket", "mirror", "ladder",
    "bottle", "castle", "dragon", "engine", "finger", "guitar", "hammer", "jacket", "kitten", "monkey",
    "needle", "parrot", "rabbit", "tomato",
]  # fmt: skip


def number_words(n: int) -> str:
    """English words for 0 <= n <= 99, hyphenated as in "thirty-seven"."""
    if n < 10:
        return ONES[n]
    if n < 20:
        return TEENS[n - 10]
    tens, ones = divmod(n, 10)
    return TENS[tens] if ones == 0 else f"{TENS[tens]}-{ONES[ones]}"


def build_dataset(seed: int = SEED, per_task: int = EXAMPLES_PER_TASK) -> list[dict[str, str]]:
    """Alpaca records: four tasks with per_task examples each, shuffled so that any batch mixes tasks."""
    # Not for security: a seeded generator is the point, it makes the dataset reproducible.
    rng = random.Random(seed)  # noqa: S311
    examples = []
    for n in rng.sample(range(100), per_task):
        examples.append({"instruction": f"Spell the number {n} in words.", "input": "", "output": number_words(n)})
    pairs = rng.sample([(a, b) for a in range(1, 51) for b in range(1, 51)], per_task)
    for a, b in pairs:
        examples.append({"instruction": f"What is {a} plus {b}?", "input": "", "output": f"{a} plus {b} is {a + b}."})
    # The two word tasks put the word in "input" so that both Alpaca prompt shapes occur in training.
    for word in rng.sample(WORDS, per_task):
        examples.append({"instruction": "Reverse the letters of the word.", "input": word, "output": word[::-1]})
    for word in rng.sample(WORDS, per_task):
        examples.append({"instruction": "Write the word in capital letters.", "input": word, "output": word.upper()})
    rng.shuffle(examples)
    return examples


def example_text(example: dict[str, str]) -> str:
    return "\n".join(part for part in (example["instruction"], example["input"], example["output"]) if part)


def build_tokenizer(examples: list[dict[str, str]], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Byte-level BPE trained on the dataset: any text encodes (no unknown bytes), and round-trips."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        # All 256 byte symbols, not only those seen, so that prompt templates with other characters encode.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([example_text(e) for e in examples], trainer=trainer)
    # Llama tokenizers prepend <s>; tokenizer_config.json says the same (add_bos_token) for transformers.
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1", special_tokens=[(BOS, bos_id)]
    )
    return tokenizer


def tokenizer_files(tokenizer: Tokenizer) -> dict[str, bytes]:
    # "PreTrainedTokenizerFast" makes transformers load tokenizer.json as it is; the llama class would
    # rebuild a SentencePiece-style pipeline around our byte-level vocabulary.
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": BOS,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "model_max_length": MAX_LENGTH,
        "pad_token": PAD,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNK,
    }
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK}
    return {
        "tokenizer.json": (tokenizer.to_str(pretty=True) + "\n").encode(),
        "tokenizer_config.json": json_bytes(config),
        "special_tokens_map.json": json_bytes(special),
    }


def model_config(tokenizer: Tokenizer) -> dict:
    ids = {name: tokenizer.token_to_id(token) for name, token in (("bos", BOS), ("eos", EOS), ("pad", PAD))}
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["bos"],
        "dtype": "float32",
        "eos_token_id": ids["eos"],
        "head_dim": HIDDEN_SIZE // NUM_HEADS,
        "hidden_act": "silu",
        "hidden_size": HIDDEN_SIZE,
        "initializer_range": INIT_STD,
        "intermediate_size": INTERMEDIATE_SIZE,
        "max_position_embeddings": MAX_LENGTH,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": NUM_HEADS,
        "num_hidden_layers": NUM_LAYERS,
        "num_key_value_heads": NUM_KV_HEADS,
        "pad_token_id": ids["pad"],
        "rms_norm_eps": 1e-6,
        # transformers 5 reads rope_parameters and dtype; rope_theta and torch_dtype serve older readers.
        "rope_parameters": {"rope_theta": ROPE_THETA, "rope_type": "default"},
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        # Counted with the added special tokens: an id the embedding lacks would fail at the first batch.
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
    }


def generation_config(config: dict) -> dict:
    return {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")}


def parameter_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """The state dict of transformers' LlamaForCausalLM for this config: names and (out, in) shapes."""
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = config["head_dim"]
    q_dim, kv_dim = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{i}"
        shapes |= {
            f"{prefix}.input_layernorm.weight": (hidden,),
            f"{prefix}.self_attn.q_proj.weight": (q_dim, hidden),
            f"{prefix}.self_attn.k_proj.weight": (kv_dim, hidden),
            f"{prefix}.self_attn.v_proj.weight": (kv_dim, hidden),
            f"{prefix}.self_attn.o_proj.weight": (hidden, q_dim),
            f"{prefix}.post_attention_layernorm.weight": (hidden,),
            f"{prefix}.mlp.gate_proj.weight": (inter, hidden),
            f"{prefix}.mlp.up_proj.weight": (inter, hidden),
            f"{prefix}.mlp.down_proj.weight": (hidden, inter),
        }
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def build_weights(config: dict, seed: int = SEED) -> dict[str, np.ndarray]:
    """Random weights as LlamaForCausalLM._init_weights makes them: normal(0, std) matrices, RMSNorm ones."""
    rng = np.random.default_rng(seed)
    weights = {}
    # One generator drawn in the fixed order of parameter_shapes: the same config gives the same bytes.
    for name, shape in parameter_shapes(config).items():
        if name.endswith("norm.weight"):
            weights[name] = np.ones(shape, dtype=np.float32)
        else:
            weights[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(config["initializer_range"])
    return weights


def json_bytes(obj, sort_keys: bool = True) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n").encode()


def build_assets(seed: int = SEED) -> dict[str, bytes]:
    """Every output file, by its path relative to OUTDIR."""
    examples = build_dataset(seed)
    tokenizer = build_tokenizer(examples)
    config = model_config(tokenizer)
    files = {
        # The transformers convention for safetensors checkpoints; its loader checks this key.
        "model/model.safetensors": save_safetensors(build_weights(config, seed), metadata={"format": "pt"}),
        "model/config.json": json_bytes(config),
        "model/generation_config.json": json_bytes(generation_config(config)),
        # LLaMA-Factory finds local datasets through dataset_info.json in its dataset_dir.
        "data/dataset_info.json": json_bytes({DATASET_NAME: {"file_name": DATASET_FILE, "formatting": "alpaca"}}),
        # Records keep the Alpaca key order (instruction, input, output) for a human reading the file.
        f"data/{DATASET_FILE}": json_bytes(examples, sort_keys=False),
    }
    files |= {f"model/{name}": content for name, content in tokenizer_files(tokenizer).items()}
    return dict(sorted(files.items()))


def content_hash(files: dict[str, bytes]) -> str:
    """sha256 over the sorted (path, file sha256) pairs: one value that names this set of inputs."""
    manifest = "".join(f"{path}\t{hashlib.sha256(data).hexdigest()}\n" for path, data in sorted(files.items()))
    return hashlib.sha256(manifest.encode()).hexdigest()


def write_assets(outdir: Path, files: dict[str, bytes]) -> list[str]:
    """Write the files that are missing or differ; return their relative paths."""
    changed = []
    for relpath, data in files.items():
        path = outdir / relpath
        if path.is_file() and path.read_bytes() == data:
            continue  # untouched, so its mtime still tells when the inputs last changed
        path.parent.mkdir(parents=True, exist_ok=True)
        # Rename into place so that an interrupted run never leaves a truncated checkpoint behind.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        changed.append(relpath)
    return changed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: make_assets.py OUTDIR", file=sys.stderr)
        return 2
    outdir = Path(args[0]).resolve()
    files = build_assets()
    changed = write_assets(outdir, files)
    result = {
        "changed": changed,
        "dataset": str(outdir / "data" / DATASET_FILE),
        "dataset_dir": str(outdir / "data"),
        "dataset_name": DATASET_NAME,
        "model": str(outdir / "model"),
        "sha256": content_hash(files),
    }
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
