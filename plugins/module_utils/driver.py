# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The amdgpu kernel driver a node runs against the one DKMS installed, and whether Secure Boot lets
a DKMS module load: pure functions over the text of ``dkms status``, ``/sys/module/amdgpu/version``,
``mokutil`` and the SecureBoot EFI variable, so that recorded outputs stand for a node in the tests.

Why a comparison and not a flag: a package change is seen by one run only. When ``amdgpu-dkms``
changes and the node is not rebooted, the next run sees no package change and would verify the old
driver (an HWE kernel's in-tree amdgpu answers rocminfo) as if it were the new one. What is loaded
and what is installed are both on the node, on every run.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

# dkms 3.x: "amdgpu/6.14.14-2226257.22.04, 6.8.0-45-generic, x86_64: installed"
# dkms 2.x: "amdgpu, 5.11.14-1234, 5.11.0-37-generic, x86_64: installed"
# either, not built for any kernel yet: "amdgpu/6.8.5-2009582.24.04: added"
# A trailing note is kept: "(WARNING! Diff between built and installed module!)".
_DKMS_LINE = re.compile(
    r"^(?P<module>[^/,:\s]+)(?:/|,\s*)(?P<version>[^,:\s]+)"
    r"(?:,\s*(?P<kernel>[^,:\s]+)(?:,\s*(?P<arch>[^,:\s]+))?)?"
    r":\s*(?P<state>[A-Za-z]+)\s*(?P<note>.*)$"
)

STATE_CURRENT = "current"
STATE_REBOOT = "reboot-required"
STATE_NOT_LOADED = "not-loaded"
STATE_STALE = "stale"
STATE_NO_DKMS = "no-dkms"


def parse_dkms_status(text):
    """Every line of ``dkms status`` as ``{module, version, kernel, arch, state, note}`` (kernel and
    arch None for a module only added); lines that are not module lines (warnings) are skipped."""
    entries = []
    for raw in (text or "").splitlines():
        match = _DKMS_LINE.match(raw.strip())
        if not match:
            continue
        entry = match.groupdict()
        entry["note"] = entry["note"].strip()
        entries.append(entry)
    return entries


def module_base_version(version):
    """The driver's own version in a DKMS module version: ``6.14.14-2226257.22.04`` -> ``6.14.14``,
    the form the module itself reports in ``/sys/module/amdgpu/version`` (``MODULE_VERSION``)."""
    return str(version or "").strip().split("-", 1)[0]


def installed_for_kernel(entries, kernel, module="amdgpu"):
    """The DKMS versions of ``module`` installed for ``kernel`` (state ``installed``), newest last."""
    versions = [
        entry["version"]
        for entry in entries
        if entry["module"] == module and entry["kernel"] == kernel and entry["state"] == "installed"
    ]
    return sorted(set(versions), key=_version_key)


def _version_key(version):
    # (is a number, value) pairs: a number and a word at the same place compare without a TypeError.
    return [(1, int(part), "") if part.isdigit() else (0, 0, part) for part in re.split(r"[.\-]", version)]


def driver_state(kernel, dkms_text, loaded, installed_file=None, boot_time=None):
    """Whether the node runs the amdgpu that DKMS installed for its running ``kernel``.

    ``loaded``: None when no amdgpu is loaded (no ``/sys/module/amdgpu``), else the text of its
    ``version`` file (empty when the file is absent: the kernel's in-tree amdgpu has no
    MODULE_VERSION, AMD's DKMS module has one), or ``{"version": text, "srcversion": text}`` with the
    module's ``srcversion`` too. ``installed_file``: ``{"mtime": seconds, "srcversion": text}`` of the
    module file DKMS installed for the kernel (``modinfo -F srcversion``), either may be None.
    ``boot_time``: ``btime`` of ``/proc/stat``. The module file's time against the boot tells a driver
    installed since the node booted, which only a reboot loads, from one that was there at boot.

    The version names the upstream driver only: AMD's point releases can share it (30.10.1 and 30.10.2
    are both 6.14.14). Where both srcversions are known (a checksum of the module's sources), they must
    agree too.

    Returns ``{state, loaded, loaded_version, installed_version, installed_since_boot}``, state one of
    ``current`` (the loaded driver is the installed one); ``reboot-required`` (another driver, or none,
    runs and the installed one came after the boot, or when is unknown); ``stale`` (the node booted
    after the install and still runs another driver: the initramfs holds the old one, or the new one
    failed to load and the in-tree one took over; a reboot alone does not help); ``not-loaded``
    (installed before this boot, no amdgpu loaded: it failed to load); ``no-dkms`` (no amdgpu installed
    for this kernel: nothing to compare).
    """
    installed = installed_for_kernel(parse_dkms_status(dkms_text), kernel)
    if not isinstance(loaded, dict):
        loaded = None if loaded is None else {"version": loaded}
    loaded_version = ((loaded or {}).get("version") or "").strip() or None
    loaded_src = ((loaded or {}).get("srcversion") or "").strip() or None
    installed_src = ((installed_file or {}).get("srcversion") or "").strip() or None
    mtime = (installed_file or {}).get("mtime")
    since_boot = None if mtime is None or boot_time is None else mtime > boot_time
    result = {
        "loaded": loaded is not None,
        "loaded_version": loaded_version,
        "installed_version": installed[-1] if installed else None,
        "installed_since_boot": since_boot,
    }
    same_version = bool(installed) and loaded_version == module_base_version(installed[-1])
    same_source = not (loaded_src and installed_src) or loaded_src == installed_src
    if not installed:
        result["state"] = STATE_NO_DKMS
    elif loaded is not None and same_version and same_source:
        result["state"] = STATE_CURRENT
    elif since_boot is False:
        result["state"] = STATE_NOT_LOADED if loaded is None else STATE_STALE
    else:
        result["state"] = STATE_REBOOT
    return result


def describe_loaded(state):
    """The loaded driver in words, for messages."""
    if not state["loaded"]:
        return "no amdgpu loaded"
    if state["loaded_version"]:
        return f"amdgpu {state['loaded_version']} loaded"
    return "the kernel's in-tree amdgpu loaded (no version file)"


def driver_problem(state, after_reboot=False):
    """What stops a node, from ``driver_state``'s result with ``kernel`` added, as ``(message, runbook)``:
    None when nothing does. ``after_reboot``: the play has just rebooted the node, so a driver still
    owed, or a booted kernel without a DKMS build, will not come right by rebooting again."""
    kernel, installed = state.get("kernel"), state.get("installed_version")
    running = describe_loaded(state)
    if state["state"] == STATE_REBOOT and not after_reboot:
        return (
            f"reboot required: {running}, and DKMS installed amdgpu {installed} for kernel {kernel}. The node runs "
            "the old driver until it is rebooted",
            "reboot-required.md",
        )
    if state["state"] in (STATE_REBOOT, STATE_STALE):
        return (
            f"{running} although DKMS installed amdgpu {installed} for kernel {kernel} and the node booted since: "
            f"the initramfs holds the old driver (run `update-initramfs -u -k {kernel}` and reboot), or the new "
            "one failed to load and another took over (`dmesg | grep -i amdgpu`)",
            "reboot-required.md",
        )
    if state["state"] == STATE_NOT_LOADED:
        return (
            f"DKMS installed amdgpu {installed} for kernel {kernel} before this boot and no amdgpu is loaded: the "
            "module failed to load (`dmesg | grep -i amdgpu`, `modprobe amdgpu`; Secure Boot refuses an unsigned "
            "or unenrolled module)",
            "driver-not-loaded.md",
        )
    if state["state"] == STATE_NO_DKMS and after_reboot:
        return (
            f"the node booted kernel {kernel}, for which DKMS built no amdgpu: install linux-headers-{kernel} and "
            "run `dkms autoinstall`, then reboot",
            "kernel-headers.md",
        )
    return None


# ------------------------------------------------------------------------------------ Secure Boot

SB_ENABLED = "enabled"
SB_DISABLED = "disabled"
SB_UNSUPPORTED = "unsupported"
SB_UNKNOWN = "unknown"


def parse_sb_state(text):
    """``mokutil --sb-state``'s answer as enabled, disabled, unsupported (no EFI, or firmware without
    Secure Boot) or unknown."""
    lowered = (text or "").lower()
    # "SecureBoot enabled" then "SecureBoot validation is disabled in shim" (mokutil --disable-validation):
    # shim tells the kernel Secure Boot is off, and unsigned modules load.
    if "validation is disabled" in lowered:
        return SB_DISABLED
    if "secureboot enabled" in lowered:
        return SB_ENABLED
    if "secureboot disabled" in lowered:
        return SB_DISABLED
    if "not supported" in lowered or "doesn't support" in lowered or "does not support" in lowered:
        return SB_UNSUPPORTED
    return SB_UNKNOWN


def parse_sb_efivar(data):
    """The SecureBoot EFI variable's bytes (4 attribute bytes, then one value byte) as a state;
    None (no variable: legacy BIOS or EFI variables not visible) is ``unsupported``."""
    if data is None:
        return SB_UNSUPPORTED
    if len(data) < 5:
        return SB_UNKNOWN
    return SB_ENABLED if data[4] == 1 else SB_DISABLED


MOK_PENDING = "pending"


def parse_mok_test_key(text):
    """``mokutil --test-key CERT``: True when the key is enrolled, ``"pending"`` when it was imported
    and waits for its confirmation at the next boot, False when not enrolled, None otherwise."""
    lowered = (text or "").lower()
    if "is already enrolled" in lowered:
        return True
    if "already in the enrollment request" in lowered:
        return MOK_PENDING
    if "is not enrolled" in lowered:
        return False
    return None


# The key dkms signs modules with: Ubuntu's dkms uses shim-signed's machine owner key, Debian's dkms 3
# its own (both named in the dkms README and seen on nodes, tests/fixtures/secureboot/SOURCES.md).
MOK_KEYS = ("/var/lib/shim-signed/mok/MOK.der", "/var/lib/dkms/mok.pub")


def secure_boot_problem(sb_state, key_path, key_enrolled):
    """Why a DKMS module would not load under Secure Boot, or None when it would (or Secure Boot is off).

    ``key_path``: the key dkms signs modules with that exists on the node (None when none does);
    ``key_enrolled``: ``mokutil --test-key``'s answer for it. Under Secure Boot the kernel loads a DKMS
    module only when that key is enrolled in shim's MOK list, which takes a reboot and a confirmation at
    the node's console.
    """
    if sb_state != SB_ENABLED or (key_path and key_enrolled is True):
        return None
    if key_path and key_enrolled == MOK_PENDING:
        return (
            f"Secure Boot is enabled and the key dkms signs modules with ({key_path}) was imported but its "
            "enrollment is not confirmed: reboot the node and confirm it at the console (MokManager: Enroll MOK)"
        )
    if not key_path:
        return (
            "Secure Boot is enabled and this node has no key for dkms to sign modules with "
            f"({' or '.join(MOK_KEYS)}): the amdgpu module DKMS builds would be unsigned and the kernel refuses "
            "it. Either disable Secure Boot in the firmware, or create and enroll the key: on Ubuntu "
            f"`update-secureboot-policy --new-key && mokutil --import {MOK_KEYS[0]}`, on Debian "
            f"`dkms generate_mok && mokutil --import {MOK_KEYS[1]}`; then reboot and confirm the enrollment at "
            "the console (MokManager)"
        )
    enrollment = "not enrolled" if key_enrolled is False else "of unknown enrollment (mokutil --test-key did not say)"
    return (
        f"Secure Boot is enabled and the key dkms signs modules with ({key_path}) is {enrollment}: the kernel "
        f"refuses the amdgpu module. Enroll it: `mokutil --import {key_path}`, reboot and confirm at the console "
        "(MokManager), or disable Secure Boot in the firmware"
    )
