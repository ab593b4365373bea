"""The loaded amdgpu against the one DKMS installed, and Secure Boot, read from real recorded outputs
(tests/fixtures/driver/SOURCES.md, tests/fixtures/secureboot/SOURCES.md)."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.driver import (
    MOK_KEYS,
    STATE_CURRENT,
    STATE_NO_DKMS,
    STATE_NOT_LOADED,
    STATE_REBOOT,
    STATE_STALE,
    describe_loaded,
    driver_problem,
    driver_state,
    installed_for_kernel,
    module_base_version,
    parse_dkms_status,
    parse_mok_test_key,
    parse_sb_efivar,
    parse_sb_state,
    secure_boot_problem,
)
from tests.unit.conftest import FIXTURES

DRIVER = FIXTURES / "driver"
SECUREBOOT = FIXTURES / "secureboot"

MI100 = "dkms-status_rocm633_mi100_one-kernel_installed.txt"
TWO_KERNELS = "dkms-status_rocm711_ubuntu2510_two-kernels_original-modules-exist.txt"
BOOT = 1_700_000_000


def at(mtime, srcversion=None):
    """The installed module file: its modification time and `modinfo -F srcversion`."""
    return {"mtime": mtime, "srcversion": srcversion}


def text(folder, name):
    return (folder / name).read_text()


def loaded_version_file(name):
    """What the module reads of /sys/module/amdgpu/version: the file's text, or "" when `cat` said
    it is missing (the module folder is there, the in-tree driver has no version file)."""
    recorded = text(DRIVER, name)
    return "" if "No such file" in recorded else recorded


def test_dkms_status_lines_of_both_formats_are_read():
    assert parse_dkms_status(text(DRIVER, MI100)) == [
        {
            "module": "amdgpu",
            "version": "6.10.5-2119913.24.04",
            "kernel": "6.8.0-55-generic",
            "arch": "x86_64",
            "state": "installed",
            "note": "",
        }
    ]
    two = parse_dkms_status(text(DRIVER, TWO_KERNELS))
    assert [(e["kernel"], e["state"], e["note"]) for e in two] == [
        ("6.17.0-5-generic", "installed", "(Original modules exist)"),
        ("6.17.0-8-generic", "installed", "(Original modules exist)"),
    ]
    # dkms 2.x separates the module and its version with a comma; an added module has no kernel.
    old = parse_dkms_status(text(DRIVER, "dkms-status_dkms2-format_centos7_added-and-installed_two-versions.txt"))
    assert [(e["version"], e["kernel"], e["state"]) for e in old] == [
        ("18.50-756341.el7", None, "added"),
        ("2.3-14.el7", "5.0.8-1.el7.elrepo.x86_64", "installed"),
    ]
    # Other modules are read too, and left out by the per-kernel lookup.
    mixed = parse_dkms_status(
        text(DRIVER, "dkms-status_dkms2-format_amdgpu-pro-1740_two-kernels_mixed-modules-warning-diff.txt")
    )
    assert {e["module"] for e in mixed} == {"amdgpu", "ndiswrapper", "rtl8812au"}
    assert installed_for_kernel(mixed, "4.13.0-26-generic") == []
    assert installed_for_kernel(mixed, "4.4.0-67-generic") == ["17.40-492261"]


def test_a_stale_added_module_and_another_arch_name_do_not_count_as_installed():
    entries = parse_dkms_status(text(DRIVER, "dkms-status_rocm632_linuxmint_amd64-arch_installed-plus-stale-added.txt"))
    assert installed_for_kernel(entries, "6.8.0-52-generic") == ["6.10.5-2109964.24.04"]
    assert installed_for_kernel(entries, "6.8.0-55-generic") == []


def test_the_module_reports_the_upstream_part_of_the_dkms_version():
    """modinfo of AMD's 6.16.6 DKMS module (ROCm 7.1.1) says version 6.16.6, dmesg 'amdgpu version:
    6.16.6', and dkms lists it as 6.16.6-2255209.24.04: the comparison is on the part before '-'."""
    assert "version:        6.16.6" in text(DRIVER, "modinfo-amdgpu-head3_dkms-6.16.6_ubuntu2510-kernel-6.17.txt")
    assert "amdgpu version: 6.16.6" in text(DRIVER, "dmesg-grep-amdgpu_rocm711_ubuntu2510_version-6.16.6.txt")
    installed = installed_for_kernel(parse_dkms_status(text(DRIVER, TWO_KERNELS)), "6.17.0-8-generic")
    assert [module_base_version(v) for v in installed] == ["6.16.6"]


def test_the_loaded_driver_that_dkms_installed_is_current():
    state = driver_state("6.17.0-8-generic", text(DRIVER, TWO_KERNELS), "6.16.6\n", at(BOOT - 60), BOOT)
    assert state["state"] == STATE_CURRENT
    assert state["installed_version"] == "6.16.6-2255209.24.04"


def test_an_older_dkms_driver_still_loaded_after_an_upgrade_needs_a_reboot():
    """The MI300X VF's 6.12.12 (ROCm 6.4) loaded, 7.1.1's 6.16.6 installed since the boot."""
    loaded = loaded_version_file("sys-module-amdgpu-version_mi300x-vf_6.12.12.txt")
    state = driver_state("6.17.0-8-generic", text(DRIVER, TWO_KERNELS), loaded, at(BOOT + 600), BOOT)
    assert state["state"] == STATE_REBOOT
    assert state["loaded_version"] == "6.12.12"
    assert describe_loaded(state) == "amdgpu 6.12.12 loaded"
    # The stop repeats on every run until the node boots: the comparison is made anew each time.
    again = driver_state("6.17.0-8-generic", text(DRIVER, TWO_KERNELS), loaded, at(BOOT + 600), BOOT + 1)
    assert again["state"] == STATE_REBOOT
    # Booted since the install and still the old driver: the initramfs holds it, a reboot alone won't do.
    booted = driver_state("6.17.0-8-generic", text(DRIVER, TWO_KERNELS), loaded, at(BOOT - 600), BOOT)
    assert booted["state"] == STATE_STALE


def test_the_in_tree_driver_of_an_hwe_kernel_answering_rocminfo_is_not_taken_for_the_installed_one():
    """An MI300X node on Ubuntu 24.04's in-tree amdgpu: /sys/module/amdgpu has no version file."""
    loaded = loaded_version_file("sys-module-amdgpu-version_missing_mi300x-intree-ubuntu2404.txt")
    assert loaded == ""
    state = driver_state("6.8.0-55-generic", text(DRIVER, MI100), loaded, at(BOOT + 5), BOOT)
    assert state["state"] == STATE_REBOOT
    assert describe_loaded(state) == "the kernel's in-tree amdgpu loaded (no version file)"


def test_no_driver_loaded_is_a_pending_reboot_after_the_install_and_a_load_failure_before_it():
    """The GA kernel after the install (no amdgpu loaded) waits for the reboot; a driver that was on
    disk at boot and is not loaded failed to load (Secure Boot, a blacklist)."""
    dkms = text(DRIVER, MI100)
    assert driver_state("6.8.0-55-generic", dkms, None, at(BOOT + 5), BOOT)["state"] == STATE_REBOOT
    assert driver_state("6.8.0-55-generic", dkms, None, at(BOOT - 5), BOOT)["state"] == STATE_NOT_LOADED
    # Unknown times: a reboot is the safe answer.
    assert driver_state("6.8.0-55-generic", dkms, None)["state"] == STATE_REBOOT
    assert describe_loaded(driver_state("6.8.0-55-generic", dkms, None)) == "no amdgpu loaded"


def srcversion(name):
    """The srcversion a recording shows (`modinfo` field or the sysfs file's text)."""
    recorded = text(DRIVER, name)
    line = next(line for line in recorded.splitlines() if "srcversion" in line or line.strip().isalnum())
    return line.split()[-1]


def test_two_builds_of_one_upstream_version_are_told_apart_by_their_srcversion():
    """AMD's point releases share the upstream version (30.10.1 and 30.10.2 both load as 6.14.14):
    the sources' checksum tells them apart. The two srcversions are the recorded ones of AMD's 6.16.6
    DKMS module (modinfo) and of an MI300X node's loaded amdgpu (sysfs)."""
    installed = srcversion("modinfo-amdgpu-egrep_dkms-6.16.6_updates-dkms-zst_r9700.txt")
    other = srcversion("sys-module-amdgpu-srcversion_mi300x-intree-ubuntu2404.txt")
    assert installed != other and len(installed) == len(other) == 23
    dkms = text(DRIVER, TWO_KERNELS)
    upgraded = driver_state(
        "6.17.0-8-generic", dkms, {"version": "6.16.6", "srcversion": other}, at(BOOT + 60, installed), BOOT
    )
    assert upgraded["state"] == STATE_REBOOT
    same = {"version": "6.16.6", "srcversion": installed}
    assert driver_state("6.17.0-8-generic", dkms, same, at(BOOT - 60, installed), BOOT)["state"] == STATE_CURRENT
    # Where either checksum is unknown (modinfo failed), the version alone decides.
    assert driver_state("6.17.0-8-generic", dkms, same, at(BOOT - 60), BOOT)["state"] == STATE_CURRENT


def test_nothing_to_compare_without_a_dkms_driver_for_the_running_kernel():
    # Another kernel's module, only an added one, or no dkms output at all.
    assert driver_state("6.8.0-60-generic", text(DRIVER, MI100), "6.10.5")["state"] == STATE_NO_DKMS
    added = text(DRIVER, "dkms-status_dkms2-format_centos7_added-and-installed_two-versions.txt")
    assert driver_state("3.10.0-957.el7.x86_64", added, None)["state"] == STATE_NO_DKMS
    assert driver_state("6.8.0-55-generic", "", None)["state"] == STATE_NO_DKMS


@pytest.mark.parametrize(
    ("name", "state"),
    [
        ("mokutil-sb-state_enabled_sosreport-1574.txt", "enabled"),
        ("mokutil-sb-state_enabled_ubuntu2204_salt-66955.txt", "enabled"),
        ("mokutil-sb-state_disabled_setup-mode_system76-firmware-open-388.txt", "disabled"),
        ("mokutil-sb-state_efi-variables-not-supported_rt-kernel.txt", "unsupported"),
        ("mokutil-sb-state_not-supported_oracle-cloud-vm.txt", "unsupported"),
    ],
)
def test_mokutil_sb_state(name, state):
    assert parse_sb_state(text(SECUREBOOT, name)) == state


def hexdump_bytes(name):
    """The bytes a `hexdump -C` recording shows (offset column and ASCII column dropped)."""
    data = []
    for line in text(SECUREBOOT, name).splitlines():
        fields = line.split("|", 1)[0].split()[1:]
        data.extend(int(field, 16) for field in fields)
    return bytes(data)


def test_the_secure_boot_efi_variable_without_mokutil():
    assert parse_sb_efivar(hexdump_bytes("hexdump-C-efivars-SecureBoot_enabled_ubuntu2204_salt-66955.txt")) == "enabled"
    assert (
        parse_sb_efivar(hexdump_bytes("hexdump-C-efivars-SecureBoot_disabled_as-posted_mokutil-45.txt")) == "disabled"
    )
    # efivarfs shows 4 attribute bytes first; the data alone (efi/vars/.../data) is too short to judge.
    assert (
        parse_sb_efivar(hexdump_bytes("hexdump-C-efi-vars-SecureBoot-data_enabled_ubuntu2204_salt-66955.txt"))
        == "unknown"
    )
    assert parse_sb_efivar(None) == "unsupported"


def test_shim_without_validation_and_a_key_waiting_for_its_confirmation():
    """No public recording of either exists (tests/fixtures/secureboot/SOURCES.md): the lines are
    mokutil's own messages (lcp/mokutil, src/mokutil.c), the first after a recorded enabled state."""
    enabled = text(SECUREBOOT, "mokutil-sb-state_enabled_ubuntu2204_salt-66955.txt")
    assert parse_sb_state(enabled + "SecureBoot validation is disabled in shim\n") == "disabled"
    pending = parse_mok_test_key("/var/lib/shim-signed/mok/MOK.der is already in the enrollment request\n")
    assert pending == "pending"
    problem = secure_boot_problem("enabled", MOK_KEYS[0], pending)
    assert "imported but its enrollment is not confirmed" in problem and "MokManager" in problem


def test_mok_enrollment_and_what_stops_a_dkms_module_under_secure_boot():
    enrolled = parse_mok_test_key(text(SECUREBOOT, "mokutil-test-key_already-enrolled_shim-signed-MOK-der.txt"))
    assert enrolled is True
    assert parse_mok_test_key("") is None
    assert secure_boot_problem("enabled", MOK_KEYS[0], enrolled) is None
    assert secure_boot_problem("disabled", None, None) is None
    assert secure_boot_problem("unsupported", None, None) is None
    no_key = secure_boot_problem("enabled", None, None)
    assert "no key for dkms" in no_key and "update-secureboot-policy --new-key" in no_key and "MokManager" in no_key
    assert "dkms generate_mok" in no_key
    not_enrolled = secure_boot_problem("enabled", "/var/lib/dkms/mok.pub", False)
    assert "(/var/lib/dkms/mok.pub) is not enrolled" in not_enrolled
    assert "mokutil --import /var/lib/dkms/mok.pub" in not_enrolled


def test_what_stops_a_node_and_which_page_it_names():
    dkms = text(DRIVER, TWO_KERNELS)
    vf = loaded_version_file("sys-module-amdgpu-version_mi300x-vf_6.12.12.txt")

    def problem(loaded, mtime, after_reboot=False, kernel="6.17.0-8-generic"):
        state = dict(driver_state(kernel, dkms, loaded, at(mtime), BOOT), kernel=kernel)
        return driver_problem(state, after_reboot)

    assert problem("6.16.6", BOOT - 60) is None
    message, page = problem(vf, BOOT + 60)
    assert message.startswith("reboot required: amdgpu 6.12.12 loaded, and DKMS installed amdgpu 6.16.6-2255209.24.04")
    assert page == "reboot-required.md"
    # Rebooted by the play and still the old driver, or booted since the install: no reboot mends it.
    for message, page in (problem(vf, BOOT + 60, after_reboot=True), problem(vf, BOOT - 60)):
        assert "update-initramfs -u -k 6.17.0-8-generic" in message and page == "reboot-required.md"
    message, page = problem(None, BOOT - 60)
    assert "failed to load" in message and page == "driver-not-loaded.md"
    # The play rebooted into a kernel DKMS built nothing for (its headers were missing).
    message, page = problem(None, BOOT - 60, after_reboot=True, kernel="6.17.0-9-generic")
    assert "linux-headers-6.17.0-9-generic" in message and page == "kernel-headers.md"
    assert problem(None, BOOT - 60, kernel="6.17.0-9-generic") is None
