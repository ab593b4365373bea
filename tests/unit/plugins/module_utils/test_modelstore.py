"""Models stored on the nodes by name and content (plugins/module_utils/modelstore.py and the lookup
instinct.finetune.model_store_name, issue 32): two folders of the same name with different content
get different names (before, the second was copied over the first); the same content keeps its name
whatever its folder's times; the digest is read from the controller's cache while the folder's listing
is unchanged."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils import modelstore
from tests.unit.conftest import COLLECTIONS, ROOT


def model(folder, weights=b"w" * 1000):
    (folder / "tokenizer").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    (folder / "tokenizer" / "vocab.json").write_text("{}\n")
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_two_folders_of_one_name_with_other_content_get_other_names(tmp_path):
    cache = tmp_path / "cache"
    base = modelstore.store_name(str(model(tmp_path / "a" / "llama-3-8b")), str(cache))
    # A fine-tune of it: the same name, the same file sizes, other weights.
    tuned = modelstore.store_name(str(model(tmp_path / "b" / "llama-3-8b", weights=b"v" * 1000)), str(cache))
    assert base.startswith("llama-3-8b-") and tuned.startswith("llama-3-8b-")
    assert base != tuned and len(base) == len("llama-3-8b-") + 16
    # The same bytes elsewhere, or touched: the same name.
    copy = model(tmp_path / "c" / "llama-3-8b")
    os.utime(copy / "model.safetensors", (1, 1))
    assert modelstore.store_name(str(copy) + "/", str(cache)) == base


def test_an_unchanged_folder_is_read_from_the_cache_and_a_touched_one_is_read_again(tmp_path, monkeypatch):
    folder = model(tmp_path / "tiny")
    cache = tmp_path / "cache"
    reads = []
    real = modelstore.content_digest
    monkeypatch.setattr(modelstore, "content_digest", lambda *args: reads.append(1) or real(*args))
    first = modelstore.store_name(str(folder), str(cache))
    assert modelstore.store_name(str(folder), str(cache)) == first and len(reads) == 1
    os.utime(folder / "config.json", (2, 2))
    assert modelstore.store_name(str(folder), str(cache)) == first and len(reads) == 2
    assert oct(cache.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_a_missing_or_empty_folder_is_named_in_the_error(tmp_path, kind):
    folder = tmp_path / "m"
    if kind == "empty":
        folder.mkdir()
    with pytest.raises(ValueError, match=f"{folder} (is not a folder|holds no file)"):
        modelstore.store_name(str(folder), str(tmp_path / "cache"))


def test_the_lookup_gives_the_name_through_ansible(tmp_path):
    folder = model(tmp_path / "tiny")
    cache = tmp_path / "cache"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")  # fmt: skip
    expression = f"{{{{ lookup('instinct.finetune.model_store_name', '{folder}', cache_dir='{cache}') }}}}"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "ansible.builtin.debug", "-a",
         f"msg={expression}"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    shown = json.loads(done.stdout[done.stdout.find("{") :])["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert shown == modelstore.store_name(str(folder), str(cache))


def test_weights_rewritten_with_their_old_time_get_a_new_name(tmp_path):
    """rsync --inplace -t or touch -r keep the modification time: the change time and inode in the
    cache's key still tell (review of issue 32)."""
    folder = model(tmp_path / "tiny")
    cache = str(tmp_path / "cache")
    first = modelstore.store_name(str(folder), cache)
    weights = folder / "model.safetensors"
    kept = weights.stat().st_mtime_ns
    weights.write_bytes(b"v" * 1000)
    os.utime(weights, ns=(kept, kept))
    assert modelstore.store_name(str(folder), cache) != first
