"""The pinned_key action (issue 32, finding 3): only the key whose fingerprint is pinned reaches an apt
keyring. The attack, with key pairs GnuPG makes in the test: a download holding AMD's key and a second
key passed the old check (the pinned fingerprint was among those found, and only the first armored block
was read) and became the keyring whole, so apt accepted a signature by the second key. Here such a
download is refused; what is kept is checked the way apt checks a repository's signature (the ``.asc``
keyring dearmored as apt-key does it, then gpgv)."""

import os
import subprocess

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.instinct.finetune.plugins.action import pinned_key
from ansible_collections.instinct.finetune.plugins.module_utils import openpgp
from tests.unit.plugins.action.mock import mock_action

URL = "https://repo.radeon.com/rocm/rocm.gpg.key"
RUNBOOK = "docs/runbooks/rocm-repository.md"
HINT = "Check rocm_repo_key_url and rocm_repo_key_fingerprint"


def gpg(home, *args, data=None):
    return subprocess.run(
        ["gpg", "--batch", "--homedir", str(home), *args], input=data, capture_output=True, check=True
    ).stdout


class Key:
    """A key pair in its own GnuPG home: its fingerprint, its subkeys' and its public key exported."""

    def __init__(self, home, name, usage="sign", subkey=None):
        os.chmod(home, 0o700)
        self.home = home
        gpg(home, "--passphrase", "", "--quick-gen-key", f"{name} <{name}@instinct.invalid>", "ed25519", usage, "never")
        self.fingerprint = self._fingerprints()[0]
        if subkey:
            gpg(home, "--passphrase", "", "--quick-add-key", self.fingerprint, *subkey, "never")
        self.subkeys = self._fingerprints()[1:]
        self.binary = gpg(home, "--export", self.fingerprint)
        self.armored = gpg(home, "--armor", "--export", self.fingerprint).decode()

    def _fingerprints(self):
        colons = gpg(self.home, "--with-colons", "--fingerprint").decode()
        return [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")]

    def sign(self, path, signer=None):
        """A detached signature of ``path`` (as a repository's Release.gpg), by ``signer`` (a subkey's
        fingerprint) or the key."""
        signature = path.with_name(f"{path.name}.{(signer or self.fingerprint)[-8:]}.sig")
        user = f"{signer or self.fingerprint}!"
        gpg(self.home, "--yes", "--local-user", user, "--detach-sign", "-o", str(signature), str(path))
        return signature


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """AMD's key (a signing primary and an encryption subkey, as AMD's has), another key, and an
    attacker's key whose signing subkey is grafted onto AMD's in one case."""
    made = {
        "amd": Key(tmp_path_factory.mktemp("amd"), "amd", subkey=("cv25519", "encr")),
        "other": Key(tmp_path_factory.mktemp("other"), "other"),
        "grafter": Key(tmp_path_factory.mktemp("grafter"), "grafter", usage="cert", subkey=("ed25519", "sign")),
    }
    assert len(made["amd"].subkeys) == 1 and len(made["grafter"].subkeys) == 1
    yield made
    for key in made.values():  # the agents that made and used the secret keys
        subprocess.run(["gpgconf", "--homedir", str(key.home), "--kill", "gpg-agent"], check=False)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    path = tmp_path_factory.mktemp("repo") / "Release"
    path.write_text("Origin: repo.radeon.com\nSuite: jammy\n")
    return path


def apt_accepts(tmp_path, keyring_text, signature, signed):
    """Whether apt would take ``signature`` of ``signed`` with ``keyring_text`` as its ``signed-by``
    ``.asc`` keyring: apt-key dearmors every block of the file and runs gpgv with the result."""
    keyring = tmp_path / "keyring.gpg"
    dearmored = subprocess.run(
        ["gpg", "--batch", "--dearmor"], input=keyring_text.encode(), capture_output=True, check=True
    )
    keyring.write_bytes(dearmored.stdout)
    done = subprocess.run(
        ["gpgv", "--keyring", str(keyring), str(signature), str(signed)], capture_output=True, check=False
    )
    return done.returncode == 0


def run(args, check_mode=False):
    action = mock_action(pinned_key, {"url": URL, "runbook": RUNBOOK, "hint": HINT, **args}, check_mode=check_mode)
    return action.run(task_vars={"inventory_hostname": "node1"})


def refusal(args):
    with pytest.raises(AnsibleActionFail) as caught:
        run(args)
    message = str(caught.value.message)
    assert message.startswith("node1: ") and message.endswith(f"Nothing was installed. {HINT}. See {RUNBOOK}")
    return message


def test_the_attack_a_second_armored_block_is_refused(keys, release, tmp_path):
    amd, other = keys["amd"], keys["other"]
    download = amd.armored + other.armored
    # What the old role wrote as the keyring (the download whole) lets the second key sign for AMD.
    assert apt_accepts(tmp_path, download, other.sign(release), release)
    message = refusal({"content": download, "fingerprint": amd.fingerprint})
    assert f"the key at {URL} holds 1 key(s) beside the expected {amd.fingerprint}: {other.fingerprint}." in message


def test_the_attack_a_second_key_in_the_same_block_is_refused(keys, release, tmp_path):
    amd, other = keys["amd"], keys["other"]
    download = openpgp.armor(amd.binary + other.binary)
    assert apt_accepts(tmp_path, download, other.sign(release), release)
    message = refusal({"content": download, "fingerprint": amd.fingerprint})
    assert f"beside the expected {amd.fingerprint}: {other.fingerprint}" in message
    # Whichever key comes first.
    message = refusal({"content": openpgp.armor(other.binary + amd.binary), "fingerprint": amd.fingerprint})
    assert f"beside the expected {amd.fingerprint}: {other.fingerprint}" in message


def test_the_pinned_key_alone_is_kept_and_signs_while_no_other_key_does(keys, release, tmp_path):
    amd, other = keys["amd"], keys["other"]
    result = run({"content": "Comment: served by a mirror\n" + amd.armored, "fingerprint": amd.fingerprint})
    assert result["changed"] is False and "failed" not in result
    assert result["key"] == openpgp.armor(amd.binary)
    assert (result["fingerprint"], result["subkeys"]) == (amd.fingerprint, amd.subkeys)
    assert result["found"] == [amd.fingerprint]
    assert apt_accepts(tmp_path, result["key"], amd.sign(release), release)
    assert not apt_accepts(tmp_path, result["key"], other.sign(release), release)
    # The same key, pinned with spaces and in lower case, gives the same keyring text: a re-run changes nothing.
    spaced = " ".join(amd.fingerprint[pos : pos + 4] for pos in range(0, 40, 4)).lower()
    assert run({"content": amd.armored, "fingerprint": spaced}, check_mode=True)["key"] == result["key"]


def test_a_subkey_grafted_onto_the_pinned_key_is_dropped(keys, release, tmp_path):
    # One primary key, AMD's, so the download passes the fingerprint check; the grafted signing subkey
    # is bound by the attacker's key, not AMD's, and gpg's import drops it: the keyring holds AMD's
    # packets only.
    amd, grafter = keys["amd"], keys["grafter"]
    download = openpgp.armor(amd.binary + grafter.binary[_subkey_offset(grafter.binary) :])
    assert openpgp.keys(openpgp._dearmor(download)) == [
        {"fingerprint": amd.fingerprint, "subkeys": [*amd.subkeys, *grafter.subkeys]}
    ]
    result = run({"content": download, "fingerprint": amd.fingerprint})
    assert result["subkeys"] == amd.subkeys
    assert result["key"] == openpgp.armor(amd.binary)
    assert not apt_accepts(tmp_path, result["key"], grafter.sign(release, grafter.subkeys[0]), release)


def _end_of(binary, body):
    """Where the packet whose body is ``body`` ends in ``binary`` (the bodies of one key are unique)."""
    return binary.index(body) + len(body)


def _subkey_offset(binary):
    """Where the first subkey packet (with its binding signature after it) starts in ``binary``: where
    the packet before it ends."""
    packets = list(openpgp._packets(binary))
    first = next(index for index, (tag, _body) in enumerate(packets) if tag == 14)
    return _end_of(binary, packets[first - 1][1])


def test_another_key_alone_is_refused_naming_both_fingerprints(keys):
    amd, other = keys["amd"], keys["other"]
    message = refusal({"content": other.armored, "fingerprint": amd.fingerprint})
    assert f"the key at {URL} has fingerprint(s) {other.fingerprint}, not the expected {amd.fingerprint}" in message


@pytest.mark.parametrize("content", ["<html><body>403 Forbidden</body></html>", ""])
def test_what_is_not_a_key_is_refused(keys, content):
    message = refusal({"content": content, "fingerprint": keys["amd"].fingerprint})
    assert f"what {URL} returned is not an OpenPGP public key (" in message


def test_a_short_key_id_pins_nothing(keys):
    message = refusal({"content": keys["amd"].armored, "fingerprint": keys["amd"].fingerprint[-16:]})
    assert "the pinned fingerprint" in message and "40 hex digits" in message


def test_a_pinned_key_whose_self_signature_does_not_verify_is_refused(keys):
    # The last byte of the user ID's self-signature changed: the key packet (and so its fingerprint) is
    # AMD's, but gpg will not import a key none of whose user IDs is bound by a valid self-signature.
    amd = keys["amd"]
    packets = list(openpgp._packets(amd.binary))
    assert [tag for tag, _body in packets[:3]] == [6, 13, 2]
    end = _end_of(amd.binary, packets[2][1])
    broken = bytearray(amd.binary)
    broken[end - 1] ^= 0x01
    message = refusal({"content": openpgp.armor(bytes(broken)), "fingerprint": amd.fingerprint})
    assert f"the key at {URL} is not usable: gpg kept no key {amd.fingerprint}" in message


def test_no_gpg_on_the_controller_is_said_with_the_fix(keys):
    with pytest.raises(AnsibleActionFail) as caught:
        run({"content": keys["amd"].armored, "fingerprint": keys["amd"].fingerprint, "gpg": "/nonexistent/gpg"})
    message = str(caught.value.message)
    assert message.startswith(f"node1: the key at {URL} could not be checked: /nonexistent/gpg is not installed")
    assert "install GnuPG there" in message and message.endswith(f"See {RUNBOOK}")
