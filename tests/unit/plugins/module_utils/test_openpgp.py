"""key_fingerprints against GnuPG's own answer for keys GnuPG makes in the test; every armored block and
every key of a download read, as apt reads them (issue 32)."""

import os
import re
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.openpgp import openpgp_fingerprints
from ansible_collections.instinct.finetune.plugins.module_utils import openpgp
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
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
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
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
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


# --- Every block, every key (issue 32, finding 3) --------------------------------------------------


@pytest.fixture(scope="module")
def two_keys(tmp_path_factory):
    """Two keys GnuPG makes, each exported alone: [(armored, binary, fingerprint)] for "amd" and "other"."""
    made = []
    for name in ("amd", "other"):
        home = tmp_path_factory.mktemp(f"gnupg-{name}")
        os.chmod(home, 0o700)
        uid = f"{name} <{name}@instinct.invalid>"
        gpg(home, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
        binary = subprocess.run(
            ["gpg", "--batch", "--homedir", str(home), "--export", uid], capture_output=True, check=True
        ).stdout
        colons = gpg(home, "--with-colons", "--fingerprint", uid)
        fpr = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
        made.append((gpg(home, "--armor", "--export", uid), binary, fpr))
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    return made


def test_every_armored_block_is_read_not_only_the_first(two_keys):
    # The download of the attack: AMD's key block, then a second block with another key. apt reads both
    # (apt-key's dearmor, like gpg --dearmor, reads every block); the check read only the first.
    (amd, _amd_bin, amd_fpr), (other, _other_bin, other_fpr) = two_keys
    assert key_fingerprints(amd + other) == [amd_fpr, other_fpr]
    assert key_fingerprints("garbage before\n" + other + "\nbetween\n" + amd + "after") == [other_fpr, amd_fpr]
    assert keyring_fingerprints((amd + other).encode()) == [amd_fpr, other_fpr]
    assert openpgp_fingerprints(amd + other) == [amd_fpr, other_fpr]


def test_gpg_dearmors_every_block_as_this_reads_them(two_keys):
    (amd, amd_bin, _amd_fpr), (other, other_bin, _other_fpr) = two_keys
    dearmored = subprocess.run(
        ["gpg", "--batch", "--dearmor"], input=(amd + other).encode(), capture_output=True, check=True
    )
    assert dearmored.stdout == amd_bin + other_bin
    assert openpgp._dearmor(amd + other) == amd_bin + other_bin


def test_every_key_of_one_block_is_listed_with_its_subkeys(two_keys):
    (_amd, amd_bin, amd_fpr), (_other, other_bin, other_fpr) = two_keys
    assert openpgp.keys(amd_bin + other_bin) == [
        {"fingerprint": amd_fpr, "subkeys": []},
        {"fingerprint": other_fpr, "subkeys": []},
    ]
    assert key_fingerprints(openpgp.armor(amd_bin + other_bin)) == [amd_fpr, other_fpr]


def test_armor_is_what_gpg_reads_back_and_the_same_text_for_the_same_key(two_keys):
    (amd, amd_bin, amd_fpr), _other = two_keys
    text = openpgp.armor(amd_bin)
    back = subprocess.run(["gpg", "--batch", "--dearmor"], input=text.encode(), capture_output=True, check=True)
    assert back.stdout == amd_bin
    assert text == openpgp.armor(amd_bin) and key_fingerprints(text) == [amd_fpr]
    # gpg's own armor of the same key, line for line (headers aside).
    assert [line for line in amd.splitlines() if ":" not in line] == text.splitlines()


@pytest.mark.parametrize(
    ("mangle", "error"),
    [
        (lambda t: t.replace("PUBLIC KEY BLOCK", "PRIVATE KEY BLOCK"), "private key block"),
        (lambda t: t.replace("-----END PGP PUBLIC KEY BLOCK-----", ""), "not closed"),
        (lambda t: re.sub(r"(?m)^=\S+$", "=AAAA", t), "checksum"),
        (lambda t: t + "-----BEGIN PGP SIGNATURE-----\n\nAA==\n-----END PGP SIGNATURE-----\n", "signature"),
    ],
)
def test_a_block_that_apt_would_read_otherwise_is_refused(two_keys, mangle, error):
    (amd, _amd_bin, _amd_fpr), _other = two_keys
    with pytest.raises(ValueError, match=error):
        key_fingerprints(mangle(amd))


def test_a_truncated_packet_header_is_a_value_error_not_an_index_error(two_keys):
    (_amd, amd_bin, _amd_fpr), _other = two_keys
    for cut in (amd_bin[:1], amd_bin + amd_bin[:1], amd_bin + b"\xc6\xff\x00"):
        with pytest.raises(ValueError, match="truncated"):
            key_fingerprints(openpgp.armor(cut))
    assert openpgp_fingerprints(openpgp.armor(amd_bin[:1]), "empty") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("CA8B B472 7A47 B4D0 9B4E  E896 9386 B48A 1A69 3C5C", "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C"),
        ("0xca8bb4727a47b4d09b4ee8969386b48a1a693c5c", "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C"),
    ],
)
def test_a_pinned_fingerprint_is_normalized(text, expected):
    assert openpgp.normalize_fingerprint(text) == expected


@pytest.mark.parametrize("text", ["9386B48A1A693C5C", "1A693C5C", "", "CA8BB4727A47B4D09B4EE8969386B48A1A693C5Z"])
def test_a_key_id_or_garbage_pins_nothing(text):
    with pytest.raises(ValueError, match="40 hex digits"):
        openpgp.normalize_fingerprint(text)


def test_pin_problem_says_what_is_wrong():
    amd, other = "A" * 40, "B" * 40
    assert openpgp.pin_problem([amd], amd) == ""
    assert openpgp.pin_problem([amd, amd], amd) == ""
    assert openpgp.pin_problem([other], amd) == f"has fingerprint(s) {other}, not the expected {amd}"
    beside = openpgp.pin_problem([amd, other], amd)
    assert beside.startswith(f"holds 1 key(s) beside the expected {amd}: {other}.")
    assert openpgp.pin_problem([other, amd], amd) == beside
    assert openpgp.pin_problem([], amd) == f"has fingerprint(s) none, not the expected {amd}"


def test_pinned_key_takes_the_pinned_key_alone(two_keys):
    (_amd, amd_bin, amd_fpr), (_other, other_bin, _other_fpr) = two_keys
    assert openpgp.pinned_key(amd_bin, amd_fpr) == {"fingerprint": amd_fpr, "subkeys": []}
    with pytest.raises(ValueError, match="exported"):
        openpgp.pinned_key(amd_bin + other_bin, amd_fpr)
    with pytest.raises(ValueError, match="kept no key"):
        openpgp.pinned_key(b"", amd_fpr)
