import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.filter.platform import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils.platform import (
    kernel_packages,
    next_boot_kernel,
    path_ancestors,
    platform_list,
    release_of,
    supported_platform,
)
from tests.unit.conftest import ROOT

PLATFORMS = yaml.safe_load((ROOT / "roles/common/vars/main.yml").read_text())["instinct_supported_platforms"]


@pytest.mark.parametrize(
    ("facts", "tier"),
    [
        (
            {"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22"},
            "primary",
        ),
        (
            {"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24"},
            "secondary",
        ),
        (
            {"distribution": "Debian", "distribution_version": "12.7", "distribution_major_version": "12"},
            "secondary",
        ),
    ],
)
def test_supported_releases_get_their_tier(facts, tier):
    assert supported_platform(facts, PLATFORMS)["tier"] == tier


@pytest.mark.parametrize(
    "facts",
    [
        # Same major version as a supported Ubuntu, but not the LTS release AMD supports.
        {"distribution": "Ubuntu", "distribution_version": "22.10", "distribution_major_version": "22"},
        {"distribution": "Ubuntu", "distribution_version": "20.04", "distribution_major_version": "20"},
        {"distribution": "Debian", "distribution_version": "11.9", "distribution_major_version": "11"},
        {"distribution": "CentOS", "distribution_version": "7.9", "distribution_major_version": "7"},
        {},
    ],
)
def test_unsupported_releases_match_nothing(facts):
    assert supported_platform(facts, PLATFORMS) == {}


def test_release_uses_full_version_on_ubuntu_and_major_elsewhere():
    assert (
        release_of({"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22"})
        == "22.04"
    )
    assert (
        release_of({"distribution": "Debian", "distribution_version": "12.7", "distribution_major_version": "12"})
        == "12"
    )


def test_platform_list_filters_by_tier():
    assert platform_list(PLATFORMS, ["primary"]) == "Ubuntu 22.04 (primary)"
    assert platform_list(PLATFORMS) == ("Ubuntu 22.04 (primary), Ubuntu 24.04 (secondary), Debian 12 (secondary)")


def test_filter_plugin_exposes_both_filters():
    filters = FilterModule().filters()
    assert filters["supported_platform"] is supported_platform
    assert filters["platform_list"] is platform_list


def test_path_ancestors_lists_every_possible_mount_point():
    assert path_ancestors("/opt/instinct/wheels") == ["/", "/opt", "/opt/instinct", "/opt/instinct/wheels"]
    assert path_ancestors("/") == ["/"]


def test_kernel_packages_follow_the_running_kernel_and_the_distribution():
    ubuntu = {"kernel": "6.8.0-45-generic", "distribution": "Ubuntu"}
    assert kernel_packages(ubuntu) == ["linux-headers-6.8.0-45-generic", "linux-modules-extra-6.8.0-45-generic"]
    assert kernel_packages({"kernel": "6.1.0-26-amd64", "distribution": "Debian"}) == ["linux-headers-6.1.0-26-amd64"]
    with pytest.raises(ValueError, match="kernel"):
        kernel_packages({"distribution": "Ubuntu"})


def test_kernel_packages_add_the_kernel_the_node_boots_next():
    """A kernel update waiting for its reboot: /boot/vmlinuz names the new kernel, whose headers DKMS
    needs to build amdgpu for it before the node boots it."""
    ubuntu = {"kernel": "6.8.0-45-generic", "distribution": "Ubuntu"}
    assert kernel_packages(ubuntu, "vmlinuz-6.8.0-49-generic") == [
        "linux-headers-6.8.0-45-generic",
        "linux-modules-extra-6.8.0-45-generic",
        "linux-headers-6.8.0-49-generic",
        "linux-modules-extra-6.8.0-49-generic",
    ]
    # An absolute target, the running kernel itself, no link, or a name that is not a kernel image.
    assert kernel_packages(ubuntu, "/boot/vmlinuz-6.8.0-49-generic")[2] == "linux-headers-6.8.0-49-generic"
    assert kernel_packages(ubuntu, "vmlinuz-6.8.0-45-generic") == kernel_packages(ubuntu)
    assert kernel_packages(ubuntu, "") == kernel_packages(ubuntu)
    assert kernel_packages(ubuntu, "initrd.img-6.8.0-49-generic") == kernel_packages(ubuntu)
    assert next_boot_kernel("vmlinuz-") is None
