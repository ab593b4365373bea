"""The amd_apt_sources module through ansible, on an apt folder laid out the way AMD's install guide for
Ubuntu leaves it (rocm.list, amdgpu.list, /etc/apt/keyrings/rocm.gpg as `gpg --dearmor` writes it), with a
key GnuPG makes for the test."""

import json
import os
import subprocess

from tests.unit.conftest import run_module

BASE = "https://repo.radeon.com"


def make_key(tmp_path):
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    uid = "instinct test <test@instinct.invalid>"

    def gpg(*args):
        return subprocess.run(["gpg", "--batch", "--homedir", str(home), *args], capture_output=True, check=True).stdout

    gpg("--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
    colons = gpg("--with-colons", "--fingerprint", uid).decode()
    fpr = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    return gpg("--export", uid), fpr


def armored(home):
    """The key in ``home``, armored by gpg (one block)."""
    return subprocess.run(
        ["gpg", "--batch", "--homedir", str(home), "--armor", "--export"], capture_output=True, check=True, text=True
    ).stdout


def test_a_node_set_up_amds_way_gets_its_keyring_used_and_its_files_replaced(tmp_path):
    binary, fpr = make_key(tmp_path)
    keyring = tmp_path / "keyrings" / "rocm.gpg"
    keyring.parent.mkdir()
    keyring.write_bytes(binary)
    lists = tmp_path / "apt" / "sources.list.d"
    lists.mkdir(parents=True)
    (lists / "amdgpu.list").write_text(f"deb [arch=amd64 signed-by={keyring}] {BASE}/amdgpu/30.20/ubuntu jammy main\n")
    (lists / "rocm.list").write_text(f"deb [arch=amd64 signed-by={keyring}] {BASE}/rocm/apt/7.1 jammy main\n")
    (lists / "other.list").write_text("deb http://archive.ubuntu.com/ubuntu jammy main\n")
    args = {
        "uris": [f"{BASE}/rocm/apt/7.1", f"{BASE}/amdgpu/30.20/ubuntu"],
        "base_url": BASE,
        "fingerprint": fpr,
        "keyring": "/etc/apt/keyrings/rocm.asc",
        "own_files": [str(lists / "rocm.sources")],
        "apt_dir": str(tmp_path / "apt"),
    }
    rc, result = run_module("amd_apt_sources", json.dumps(args), ["--check"])
    assert rc == 0, result
    assert result["changed"] is False
    assert result["keyring"] == str(keyring) and result["adopted"] is True
    assert result["replace"] == [str(lists / "amdgpu.list"), str(lists / "rocm.list")]
    assert result["keyrings"] == {str(keyring): [fpr]}
    assert result["problem"] is None

    # The same node where the keyring holds another key: the role's own keyring is named instead.
    rc, result = run_module("amd_apt_sources", json.dumps(dict(args, fingerprint="0" * 40)))
    assert rc == 0, result
    assert result["keyring"] == "/etc/apt/keyrings/rocm.asc" and result["adopted"] is False
    assert os.path.exists(lists / "rocm.list")  # read-only


def test_an_armored_keyring_with_a_second_block_is_not_adopted(tmp_path):
    # Issue 32: an .asc keyring holding AMD's key block and then another key's block was read as AMD's
    # key alone (only the first block), so the role named it and apt trusted the second key too.
    _binary, fpr = make_key(tmp_path)
    (tmp_path / "other").mkdir()
    _other_binary, other_fpr = make_key(tmp_path / "other")
    amds, others = (armored(tmp_path / "gnupg"), armored(tmp_path / "other" / "gnupg"))
    for home in (tmp_path / "gnupg", tmp_path / "other" / "gnupg"):  # the agents that made the keys
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    keyring = tmp_path / "keyrings" / "rocm.asc"
    keyring.parent.mkdir()
    keyring.write_text(amds + others)
    lists = tmp_path / "apt" / "sources.list.d"
    lists.mkdir(parents=True)
    (lists / "rocm.list").write_text(f"deb [arch=amd64 signed-by={keyring}] {BASE}/rocm/apt/7.1 jammy main\n")
    args = {
        "uris": [f"{BASE}/rocm/apt/7.1"],
        "base_url": BASE,
        "fingerprint": fpr,
        "keyring": "/etc/apt/keyrings/rocm-role.asc",
        "own_files": [],
        "apt_dir": str(tmp_path / "apt"),
    }
    rc, result = run_module("amd_apt_sources", json.dumps(args), ["--check"])
    assert rc == 0, result
    assert result["keyrings"] == {str(keyring): [fpr, other_fpr]}
    assert result["adopted"] is False and result["keyring"] == "/etc/apt/keyrings/rocm-role.asc"
    # The same keyring with AMD's block alone is adopted.
    keyring.write_text(amds)
    rc, result = run_module("amd_apt_sources", json.dumps(args), ["--check"])
    assert rc == 0, result
    assert result["adopted"] is True and result["keyring"] == str(keyring)
