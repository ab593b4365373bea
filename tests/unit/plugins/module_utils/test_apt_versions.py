import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.apt import apt_pinned_specs
from ansible_collections.instinct.finetune.plugins.module_utils.apt_versions import madison_versions

# Synthetic lines in the shape apt-cache madison prints (one per version and source, newest first);
# molecule/rocm runs the filter on real madison output. A node that
# upgrades from 6.4 sees the old epoch-1 driver in its dpkg status and the 7.x one in AMD's pool.
MADISON = """\
amdgpu-dkms | 1:6.14.14.30100200-2226257.22.04 | https://repo.radeon.com/amdgpu/30.10.2/ubuntu jammy/main amd64 Packages
amdgpu-dkms | 1:6.12.12.60404-2202139.22.04 | https://repo.radeon.com/amdgpu/6.4.4/ubuntu jammy/main amd64 Packages
  rocminfo | 5.0.0-1 | http://archive.ubuntu.com/ubuntu jammy/universe amd64 Packages
  rocminfo | 1.0.0.70002-56~22.04 | https://repo.radeon.com/rocm/apt/7.0.2 jammy/main amd64 Packages
  rocminfo | 5.0.0-1 | http://archive.ubuntu.com/ubuntu jammy/universe Sources
"""


def test_only_the_wanted_repository_counts():
    assert madison_versions(MADISON, "https://repo.radeon.com/rocm/apt/7.0.2/") == {"rocminfo": "1.0.0.70002-56~22.04"}
    assert madison_versions(MADISON, "https://repo.radeon.com/amdgpu/30.10.2/ubuntu") == {
        "amdgpu-dkms": "1:6.14.14.30100200-2226257.22.04"
    }


def test_specs_pin_every_package():
    assert apt_pinned_specs(["rocminfo"], MADISON, "https://repo.radeon.com/rocm/apt/7.0.2") == [
        "rocminfo=1.0.0.70002-56~22.04"
    ]


def test_a_package_the_repository_lacks_is_named():
    with pytest.raises(AnsibleFilterError, match="not offered by the repository: hipblaslt"):
        apt_pinned_specs(["rocminfo", "hipblaslt"], MADISON, "https://repo.radeon.com/rocm/apt/7.0.2")
