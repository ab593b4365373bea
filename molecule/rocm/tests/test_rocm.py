"""Verify preflight + rocm on the simulated 8x MI300X node."""

import json

import pytest

SIM_BASE = "http://172.30.10.1:8765"


@pytest.fixture(scope="module")
def facts(host):
    return json.loads(host.file("/root/rocm-facts.json").content_string)


def test_probe_facts_come_from_the_recorded_mi300x_node(facts):
    assert facts["rocm_gfx_archs"] == ["gfx942"]
    assert facts["rocm_gpu_count"] == 8
    assert facts["preflight_pci_gpu_count"] == 8
    assert len(facts["rocm_smi_gpus"]) == 8
    # 196592 MiB per GPU in amd-smi static, as bytes.
    assert {gpu["vram_total_bytes"] for gpu in facts["rocm_smi_gpus"]} == {196592 * 1024 * 1024}


@pytest.mark.parametrize(
    ("name", "uri"),
    [
        ("rocm", f"{SIM_BASE}/rocm/apt/7.0.2"),
        ("amdgpu", f"{SIM_BASE}/amdgpu/30.10.2/ubuntu"),
        ("rocm-graphics", f"{SIM_BASE}/graphics/7.0.2/ubuntu"),
    ],
)
def test_repositories_are_signed_by_the_checked_key(host, name, uri):
    sources = host.file(f"/etc/apt/sources.list.d/{name}.sources")
    assert sources.exists
    content = sources.content_string
    assert f"URIs: {uri}" in content
    assert "Suites: jammy" in content
    assert "Signed-By: /etc/apt/keyrings/rocm.asc" in content


def test_no_repository_is_trusted_blindly(host):
    listing = host.run("grep -rIl 'trusted=yes\\|Trusted: yes' /etc/apt/ || true").stdout.strip()
    assert listing == ""


def test_signing_key_is_the_pinned_one(host):
    key = host.file("/etc/apt/keyrings/rocm.asc")
    assert key.mode == 0o644
    fetch = f"import urllib.request; print(urllib.request.urlopen('{SIM_BASE}/rocm/rocm.gpg.key').read().decode())"
    served = host.check_output(f'python3 -c "{fetch}"')
    assert key.content_string.strip() == served.strip()


def test_amd_origin_is_pinned_at_600(host):
    pin = host.file("/etc/apt/preferences.d/rocm-pin-600").content_string
    assert "Package: *" in pin
    assert "Pin: release o=repo.radeon.com" in pin
    assert "Pin-Priority: 600" in pin
    # apt agrees: AMD's rocminfo wins over Ubuntu universe's rocminfo 5.0.0-1, which sorts higher.
    policy = host.check_output("apt-cache policy rocminfo")
    assert "Installed: 1.0.0.70002-56~22.04" in policy


@pytest.mark.parametrize(
    ("package", "version"),
    [
        ("rocm-core", "7.0.2.70002-56~22.04"),
        ("rocminfo", "1.0.0.70002-56~22.04"),
        ("hipblaslt", "1.0.0.70002-56~22.04"),
        ("rccl", "2.26.6.70002-56~22.04"),
        ("amd-smi-lib", "26.0.2.70002-56~22.04"),
        ("rocm-hip-sdk", "7.0.2.70002-56~22.04"),
        ("amdgpu-dkms", "1:6.14.14.30100200-2226257.22.04"),
    ],
)
def test_packages_are_at_the_release_versions(host, package, version):
    pkg = host.package(package)
    assert pkg.is_installed
    assert pkg.version == version


def test_driver_is_built_for_the_running_kernel(host):
    kernel = host.check_output("uname -r")
    status = host.check_output("dkms status amdgpu")
    assert f", {kernel}, x86_64: installed" in status
    assert host.package(f"linux-headers-{kernel}").is_installed


def test_service_user_can_use_the_gpus(host):
    user = host.user("instinct")
    assert "render" in user.groups
    assert "video" in user.groups
    assert user.home == "/var/lib/instinct"
    rules = host.file("/etc/udev/rules.d/70-instinct-gpu.rules").content_string
    assert 'KERNEL=="kfd", GROUP="render", MODE="0660"' in rules


def test_rocm_is_on_every_login_path(host):
    found = host.check_output("su - instinct -c 'command -v rocminfo'")
    assert found == "/opt/rocm/bin/rocminfo"
    assert host.file("/etc/ld.so.conf.d/rocm.conf").content_string.split() == ["/opt/rocm/lib", "/opt/rocm/lib64"]
    assert "/opt/rocm/lib" in host.check_output("ldconfig -v 2>/dev/null | grep '^/opt/rocm' || true")


def test_env_files_are_not_world_writable(host):
    for path in ("/etc/instinct-finetune/rocm.env", "/etc/profile.d/rocm.sh"):
        f = host.file(path)
        assert f.user == "root"
        assert f.mode & 0o022 == 0
    assert "ROCM_PATH=/opt/rocm" in host.file("/etc/instinct-finetune/rocm.env").content_string
