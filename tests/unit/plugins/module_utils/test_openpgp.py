"""key_fingerprints against GnuPG's own answer for keys GnuPG makes in the test."""

import os
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.openpgp import openpgp_fingerprints
from ansible_collections.instinct.finetune.plugins.module_utils.openpgp import key_fingerprints, keyring_fingerprints


def gpg(home, *args, stdin=None):
    return subprocess.run(
        ["gpg", "--batch", "--homedir", str(home), *args], capture_output=True, text=True, check=True, input=stdin
    ).stdout


@pytest.fixture(scope="module", params=["ed25519", "rsa2048"])
def generated_key(request, tmp_path_factory):
    home = tmp_path_factory.mktemp("gnupg")
    os.chmod(home, 0o700)
    uid = f"instinct test {request.param} <test@instinct.invalid>"
    gpg(home, "--passphrase", "", "--quick-gen-key", uid, request.param, "sign", "never")
    armored = gpg(home, "--armor", "--export", uid)
    colons = gpg(home, "--with-colons", "--fingerprint", uid)
    expected = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    return armored, expected


def test_fingerprint_matches_gnupg(generated_key):
    armored, expected = generated_key
    assert key_fingerprints(armored) == [expected]


def test_every_primary_key_of_a_keyring_is_listed(tmp_path):
    home = tmp_path / "two"
    home.mkdir(mode=0o700)
    for name in ("first", "second"):
        gpg(
            home, "--passphrase", "", "--quick-gen-key", f"{name} <{name}@instinct.invalid>", "ed25519", "sign", "never"
        )
    colons = gpg(home, "--with-colons", "--fingerprint")
    expected = [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")]
    # gpg lists primary and subkey fingerprints; quick-gen-key with "sign" makes no subkeys.
    assert len(expected) == 2
    assert key_fingerprints(gpg(home, "--armor", "--export")) == expected


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>403 Forbidden</body></html>",
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!notbase64!!!\n-----END PGP PUBLIC KEY BLOCK-----\n",
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQ==\n-----END PGP PUBLIC KEY BLOCK-----\n",
        "",
    ],
)
def test_what_is_not_a_key_is_refused(text):
    with pytest.raises(ValueError):
        key_fingerprints(text)
    with pytest.raises(AnsibleFilterError, match="openpgp_fingerprints"):
        openpgp_fingerprints(text)
    assert openpgp_fingerprints(text, "empty") == []


def test_a_truncated_key_is_refused(generated_key):
    armored, _expected = generated_key
    lines = armored.strip().splitlines()
    cut = "\n".join([*lines[:4], lines[-1]])
    with pytest.raises(ValueError):
        key_fingerprints(cut)


def test_a_dearmored_keyring_as_amds_method_writes_it_gives_the_same_fingerprint(generated_key):
    # AMD's install guide: `wget -O - .../rocm.gpg.key | gpg --dearmor | sudo tee /etc/apt/keyrings/rocm.gpg`.
    armored, expected = generated_key
    binary = subprocess.run(["gpg", "--batch", "--dearmor"], input=armored.encode(), capture_output=True, check=True)
    assert keyring_fingerprints(binary.stdout) == [expected]
    assert keyring_fingerprints(armored.encode()) == [expected]
    with pytest.raises(ValueError):
        keyring_fingerprints(binary.stdout[:7])
    with pytest.raises(ValueError):
        keyring_fingerprints(b"not a key")
