"""The ROCm a node already has: its release read from the package versions, the refusal to downgrade
it, and the check of a node whose ROCm is used as it is (rocm_manage: verify).

The versions are AMD's, as people posted them (molecule/resources/amd-repo/README.md names each source):
rocm-core 7.1.0.70100-20~22.04 (ROCm/ROCm#5631), amdgpu-dkms 1:6.16.6.30200000-2238411.24.04 (30.20,
ROCm/ROCm#5590), 1:6.14.14.30100100-2212064.24.04 (30.10.1), 1:6.12.12.60404-2202139.24.04 (ROCm 6.4.4's,
ROCm/ROCm#5566); 6.4.4.60404-129~24.04 is the 6.4.4 release's version, printed by `apt show
rocm-hip-sdk` in a public ROCm issue (the form rocm-core shares). The dpkg-query lines around them are
written in the form the role's format string prints.
"""

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.filter.rocm import (
    rocm_downgrade_problem,
    rocm_existing_release,
    rocm_release,
)
from ansible_collections.instinct.finetune.plugins.module_utils import rocm_release as rr
from tests.unit.conftest import ROOT

RELEASES = yaml.safe_load((ROOT / "roles/common/defaults/main.yml").read_text())["instinct_rocm_releases"]

ROCM_710 = "7.1.0.70100-20~22.04"
ROCM_702 = "7.0.2.70002-56~22.04"
DKMS_3020 = "1:6.16.6.30200000-2238411.24.04"
DKMS_30101 = "1:6.14.14.30100100-2212064.24.04"
DKMS_30102 = "1:6.14.14.30100200-2226257.22.04"
DKMS_644 = "1:6.12.12.60404-2202139.24.04"


def dpkg(rocm_core=None, amdgpu=None, status="ii "):
    lines = []
    if rocm_core:
        lines.append(f"rocm-core\t{rocm_core}\t{status}")
    if amdgpu:
        lines.append(f"amdgpu-dkms\t{amdgpu}\t{status}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("version", "release"),
    [(ROCM_710, "7.1.0"), (ROCM_702, "7.0.2"), ("6.4.4.60404-129~24.04", "6.4.4"), ("5.0.0-1", None), ("", None)],
)
def test_rocm_core_names_its_release(version, release):
    assert rr.rocm_core_release(version) == release


@pytest.mark.parametrize(
    ("version", "release"),
    [(DKMS_3020, "30.20"), (DKMS_30101, "30.10.1"), (DKMS_30102, "30.10.2"), (DKMS_644, "6.4.4"), ("6.8.0-1", None)],
)
def test_amdgpu_dkms_names_its_driver_release(version, release):
    assert rr.amdgpu_release(version) == release


def test_the_6_4_driver_orders_below_every_7x_driver_whatever_its_epoch():
    assert rr.release_key(rr.amdgpu_release(DKMS_644)) < rr.release_key("30.10")
    assert rr.release_key("30.10") == rr.release_key("30.10.0")


def test_a_removed_package_with_its_configuration_kept_is_not_installed():
    assert rr.parse_dpkg_query(dpkg(ROCM_710, DKMS_3020, status="rc ")) == {}
    assert rr.parse_dpkg_query(dpkg(ROCM_710, status="iU ")) == {"rocm-core": ROCM_710}


def test_a_newer_rocm_and_driver_are_not_downgraded_and_the_message_gives_both_ways_forward():
    target = rocm_release("7.0.2", RELEASES)
    problem = rocm_downgrade_problem(dpkg(ROCM_710, DKMS_3020), target)
    assert f"ROCm 7.1.0 (rocm-core {ROCM_710}) is installed and amdgpu 30.20 (amdgpu-dkms {DKMS_3020})" in problem
    assert "newer than the pinned ROCm 7.0.2 with amdgpu 30.10.2" in problem
    assert "rocm_manage: verify" in problem
    assert "rocm_version: 7.1.0" in problem
    assert "rocm_allow_downgrade: true" in problem
    assert "Nothing was changed" in problem


def test_an_upgrade_or_the_same_release_is_not_a_downgrade():
    assert rocm_downgrade_problem(dpkg(ROCM_702, DKMS_30102), rocm_release("7.1.0", RELEASES)) == ""
    assert rocm_downgrade_problem(dpkg(ROCM_710, DKMS_3020), rocm_release("7.1.0", RELEASES)) == ""
    assert rocm_downgrade_problem("", rocm_release("7.0.2", RELEASES)) == ""


def test_the_6_4_epoch_driver_is_upgraded_not_mistaken_for_newer():
    # dpkg orders 1:6.12.12.60404 above 1:6.14.14.30100200's release in nothing but the epoch-free
    # field; the release read from the version is 6.4.4, older than 30.10.2.
    assert rocm_downgrade_problem(dpkg("6.4.4.60404-129~24.04", DKMS_644), rocm_release("7.0.2", RELEASES)) == ""


def test_a_newer_driver_alone_is_a_downgrade_unless_the_role_leaves_the_driver_alone():
    target = rocm_release("7.0.2", RELEASES)
    assert "amdgpu 30.20" in rocm_downgrade_problem(dpkg(ROCM_702, DKMS_3020), target)
    assert rocm_downgrade_problem(dpkg(ROCM_702, DKMS_3020), target, False) == ""


def test_an_installed_release_in_the_map_with_its_driver_is_used_as_it_is():
    found = rocm_existing_release(dpkg(ROCM_710, DKMS_3020), RELEASES)
    assert found["problem"] == ""
    assert found["info"]["version"] == "7.1.0"
    assert found["info"]["amdgpu_folder"] == "30.20"
    assert found["installed"]["amdgpu"] == "30.20"


@pytest.mark.parametrize(
    ("text", "check_driver", "words"),
    [
        ("", True, ["no ROCm is installed", "rocm_manage: install"]),
        (dpkg("6.4.4.60404-129~24.04", DKMS_644), True, ["ROCm 6.4.4 is installed", "to instinct_rocm_releases"]),
        (dpkg(ROCM_710), True, ["amdgpu-dkms is not", "rocm_install_driver: false"]),
        (dpkg(ROCM_710, DKMS_30101), True, ["amdgpu 30.10.1 is installed", "pairs ROCm 7.1.0 with amdgpu 30.20"]),
        ("rocm-core\t5.0.0-1\tii \n", True, ["does not name a ROCm release"]),
    ],
)
def test_what_cannot_be_used_as_it_is_is_refused_with_the_fix(text, check_driver, words):
    found = rocm_existing_release(text, RELEASES, check_driver)
    assert found["info"] is None
    for word in words:
        assert word in found["problem"]


def test_without_the_driver_check_a_release_without_amdgpu_dkms_is_used():
    assert rocm_existing_release(dpkg(ROCM_710), RELEASES, False)["info"]["version"] == "7.1.0"


def test_a_release_the_site_adds_to_the_map_is_accepted():
    releases = dict(RELEASES, **{"6.4.4": {"amdgpu": "6.4.4"}})
    assert rocm_existing_release(dpkg("6.4.4.60404-129~24.04", DKMS_644), releases)["problem"] == ""


@pytest.mark.parametrize("amdgpu", [30.2, None, ""])
def test_a_site_map_with_an_unquoted_or_missing_driver_release_is_refused_naming_the_fix(amdgpu):
    # YAML reads `amdgpu: 30.20` unquoted as 30.2: the folder amdgpu/30.2 does not exist.
    refusal = r'instinct_rocm_releases entry 7.1.0 has amdgpu .*quoted\s+string \(amdgpu: "30.20"\)'
    with pytest.raises(ValueError, match=refusal):
        rr.rocm_release("7.1.0", {"7.1.0": {"amdgpu": amdgpu}})
