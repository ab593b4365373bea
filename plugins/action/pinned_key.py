# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.pinned_key: from a downloaded signing key, the one key
whose fingerprint is pinned, as the text of an ``.asc`` keyring; every other key refused.

The download is read whole (every armored block, every primary key, module_utils/openpgp.py); a
download holding any key beside the pinned one is refused. gpg itself then takes the key apart: it is
imported into a throwaway GNUPGHOME, where gpg drops what its self-signatures do not bind (a subkey
grafted onto the pinned key, a user ID without a valid self-signature), and ``gpg --export <pin>``
gives the key alone. Its packets are checked once more (one key, the pinned one) and armored in
Python, so the same key gives the same keyring text whatever gpg's version. Nothing touches the node:
the task after it writes RV(key) with ansible.builtin.copy.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.instinct.finetune.plugins.module_utils import openpgp

GPG_TIMEOUT = 60
DEFAULT_HINT = (
    "Check that the key URL points at the repository owner's key (or your mirror's, when it re-signs) and "
    "that the pinned fingerprint is that key's"
)


class GpgError(Exception):
    """gpg on the controller is missing or failed."""


def gpg_export(gpg, data, fingerprint):
    """Import ``data`` into a throwaway GNUPGHOME with ``gpg`` and return ``gpg --export fingerprint``
    (binary). No agent or dirmngr is started; the home is removed afterwards."""
    home = tempfile.mkdtemp(prefix="instinct-key-")
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPG")}
    env.update(GNUPGHOME=home, LC_ALL="C")
    base = [gpg, "--batch", "--no-tty", "--no-autostart", "--homedir", home]
    try:
        # gpg --import exits 2 when it skipped a part it could not verify; what it kept is judged after.
        _gpg(base, ["--import"], data, env, accept=(0, 2))
        return _gpg(base, ["--export", fingerprint], b"", env)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _gpg(base, command, data, env, accept=(0,)):
    try:
        done = subprocess.run(
            [*base, *command], input=data, capture_output=True, env=env, timeout=GPG_TIMEOUT, check=False
        )
    except FileNotFoundError:
        raise GpgError(f"{base[0]} is not installed on the controller (install GnuPG there: the gpg package)") from None
    except (OSError, subprocess.TimeoutExpired) as error:
        raise GpgError(f"{base[0]} could not run on the controller: {error}") from None
    if done.returncode not in accept:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GpgError(f"{base[0]} {' '.join(command)} failed (rc {done.returncode}): {' | '.join(said[-3:])}")
    return done.stdout


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("content", "fingerprint", "url", "runbook", "hint", "gpg"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "content": {"type": "str", "required": True},
                "fingerprint": {"type": "str", "required": True},
                "url": {"type": "str", "required": True},
                "runbook": {"type": "str", "required": True},
                "hint": {"type": "str", "default": DEFAULT_HINT},
                "gpg": {"type": "str", "default": "gpg"},
            }
        )
        host = (task_vars or {}).get("inventory_hostname", "?")
        url, hint, runbook = args["url"], args["hint"].rstrip(". "), args["runbook"]

        def refused(what):
            return AnsibleActionFail(f"{host}: {what}. Nothing was installed. {hint}. See {runbook}")

        try:
            expected = openpgp.normalize_fingerprint(args["fingerprint"])
        except ValueError as error:
            raise refused(f"the pinned fingerprint {error}") from None
        try:
            found = openpgp.key_fingerprints(args["content"])
        except ValueError as error:
            raise refused(f"what {url} returned is not an OpenPGP public key ({error})") from None
        problem = openpgp.pin_problem(found, expected)
        if problem:
            raise refused(f"the key at {url} {problem}")
        try:
            exported = gpg_export(args["gpg"], args["content"].encode("utf-8"), expected)
            key = openpgp.pinned_key(exported, expected)
        except GpgError as error:
            raise AnsibleActionFail(
                f"{host}: the key at {url} could not be checked: {error}. Nothing was installed. See {runbook}"
            ) from None
        except ValueError as error:
            raise refused(f"the key at {url} is not usable: {error}") from None
        # A key read from a download, for the next task to write: no change on any node.
        result.update(
            changed=False,
            key=openpgp.armor(exported),
            fingerprint=expected,
            subkeys=key["subkeys"],
            found=found,
            msg=f"the key at {url} holds {expected} alone",
        )
        return result
