import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.source_build import (
    LOADHIP_PACKAGES,
    release_pins,
    release_suffix,
    source_build_packages,
)

# Synthetic lines in apt-cache madison's shape (name | version | source ... Packages); the versions
# are AMD's 7.0.2 pool versions (jammy) as molecule/resources/amd-repo/README.md lists them.
MADISON = """\
rocm-ml-sdk | 7.1.0.70100-20~22.04 | https://repo.radeon.com/rocm/apt/7.1 jammy/main amd64 Packages
rocm-ml-sdk | 7.0.2.70002-56~22.04 | https://repo.radeon.com/rocm/apt/7.0.2 jammy/main amd64 Packages
miopen-hip-dev | 3.5.0.70002-56~22.04 | https://repo.radeon.com/rocm/apt/7.0.2 jammy/main amd64 Packages
miopen-hip-dev | 3.5.0.70002-56~22.04 | https://repo.radeon.com/rocm/apt/7.0.2 jammy/main Sources
"""


def test_the_source_build_package_list():
    """What a 2.10 ROCm build must find: MIOpen through rocm-ml-sdk, the HIP runtime's dev files
    (7.1.0's rocm-hip-sdk lost them), and each -dev package LoadHIP.cmake finds, once."""
    packages = source_build_packages()
    assert packages[:2] == ["rocm-ml-sdk", "rocm-hip-runtime-dev"]
    for name in (
        "miopen-hip-dev",
        "rocblas-dev",
        "hipblas-dev",
        "hipblaslt-dev",
        "rocrand-dev",
        "hiprand-dev",
        "hipfft-dev",
        "hipsparse-dev",
        "rocprim-dev",
        "hipcub-dev",
        "rocthrust-dev",
        "hipsolver-dev",
        "rocsolver-dev",
        "rccl-dev",
        "hipsparselt-dev",
        "roctracer-dev",
    ):
        assert name in packages
    assert len(packages) == len(set(packages))
    # hip-dev, comgr and hsa-rocr-dev come with rocm-hip-runtime-dev at the same release
    assert not {"hip-dev", "comgr", "hsa-rocr-dev"} & set(packages)
    assert "rocm-hip-sdk" not in packages  # it comes with rocm-ml-sdk


def test_every_required_loadhip_component_is_mapped():
    required = {name for name, (_deb, req) in LOADHIP_PACKAGES.items() if req}
    assert {"miopen", "hipblaslt", "hsa-runtime64", "hiprtc", "amd_comgr", "rocsolver"} <= required
    assert LOADHIP_PACKAGES["miopen"] == ("miopen-hip-dev", True)


def test_site_additions_come_last_and_once():
    packages = source_build_packages(["rocwmma-dev", "miopen-hip-dev"])
    assert packages[-1] == "rocwmma-dev"
    assert packages.count("miopen-hip-dev") == 1


def test_a_bad_addition_is_refused():
    with pytest.raises(ValueError, match="non-empty string"):
        source_build_packages([""])


def test_release_suffix_of_rocm_core():
    assert release_suffix("7.0.2.70002-56~22.04") == ".70002-56~22.04"
    assert release_suffix("7.1.0.70100-20~24.04\n") == ".70100-20~24.04"
    with pytest.raises(ValueError, match="rocm-core version ''"):
        release_suffix("")


def test_pins_follow_the_installed_release_not_the_newest():
    assert release_pins(["rocm-ml-sdk", "miopen-hip-dev"], MADISON, "7.0.2.70002-56~22.04") == [
        "rocm-ml-sdk=7.0.2.70002-56~22.04",
        "miopen-hip-dev=3.5.0.70002-56~22.04",
    ]


def test_a_package_the_release_lacks_is_named():
    with pytest.raises(ValueError, match="offer no miopen-hip-dev of the installed ROCm release"):
        release_pins(["rocm-ml-sdk", "miopen-hip-dev"], MADISON, "7.1.0.70100-20~22.04")
