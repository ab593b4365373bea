"""What the preflight and rocm stages left on each sandbox node: AMD's repositories signed by the
checked key and pinned, the packages at the release's versions, the driver built for the running
kernel, the training account in the GPU groups, ROCm on every login path. This was molecule's rocm
scenario: the sandbox runs the same two roles on the same simulated node, so it is read here."""

import os

import pytest
from cluster import NODES, node


@pytest.fixture(scope="module", params=NODES)
def host(request, converged):
    return request.param


@pytest.fixture(scope="module")
def sim_base(converged):
    # Set by scripts/sandbox.py's cluster_up, which the session's site fixture ran.
    return f"http://{os.environ['SIM_GATEWAY']}:{os.environ['SIM_REPO_PORT']}"


def text(host, path):
    return node(host, "cat", path).stdout


def test_repositories_are_signed_by_the_checked_key_and_none_is_trusted_blindly(host, sim_base):
    for name, uri in (
        ("rocm", f"{sim_base}/rocm/apt/7.0.2"),
        ("amdgpu", f"{sim_base}/amdgpu/30.10.2/ubuntu"),
        ("rocm-graphics", f"{sim_base}/graphics/7.0.2/ubuntu"),
    ):
        content = text(host, f"/etc/apt/sources.list.d/{name}.sources")
        assert f"URIs: {uri}" in content and "Suites: jammy" in content
        assert "Signed-By: /etc/apt/keyrings/rocm.asc" in content
    listing = node(host, "sh", "-c", "grep -rIl 'trusted=yes\\|Trusted: yes' /etc/apt/ || true").stdout.strip()
    assert listing == ""


def test_the_signing_key_is_the_one_the_repository_serves(host, sim_base):
    assert node(host, "stat", "-c", "%a", "/etc/apt/keyrings/rocm.asc").stdout.strip() == "644"
    fetch = f"import urllib.request; print(urllib.request.urlopen('{sim_base}/rocm/rocm.gpg.key').read().decode())"
    served = node(host, "python3", "-c", fetch).stdout
    assert text(host, "/etc/apt/keyrings/rocm.asc").strip() == served.strip()


def test_amds_origin_is_pinned_at_600_and_apt_agrees(host):
    pin = text(host, "/etc/apt/preferences.d/rocm-pin-600")
    assert "Package: *" in pin and "Pin: release o=repo.radeon.com" in pin and "Pin-Priority: 600" in pin
    # AMD's rocminfo wins over Ubuntu universe's rocminfo 5.0.0-1, which sorts higher.
    assert "Installed: 1.0.0.70002-56~22.04" in node(host, "apt-cache", "policy", "rocminfo").stdout


def test_packages_are_at_the_release_versions(host):
    want = {
        "rocm-core": "7.0.2.70002-56~22.04",
        "rocminfo": "1.0.0.70002-56~22.04",
        "hipblaslt": "1.0.0.70002-56~22.04",
        "rccl": "2.26.6.70002-56~22.04",
        "amd-smi-lib": "26.0.2.70002-56~22.04",
        "rocm-hip-sdk": "7.0.2.70002-56~22.04",
        "amdgpu-dkms": "1:6.14.14.30100200-2226257.22.04",
    }
    shown = node(host, "dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\n", *want).stdout
    got = {name: (version, status) for name, version, status in (line.split() for line in shown.splitlines())}
    assert got == {name: (version, "installed") for name, version in want.items()}


def test_the_driver_is_built_for_the_running_kernel(host):
    kernel = node(host, "uname", "-r").stdout.strip()
    assert f", {kernel}, x86_64: installed" in node(host, "dkms", "status", "amdgpu").stdout
    status = node(host, "dpkg-query", "-W", "-f", "${db:Status-Status}", f"linux-headers-{kernel}").stdout
    assert status == "installed"


def test_the_training_account_can_use_the_gpus(host):
    assert set(node(host, "id", "-nG", "instinct").stdout.split()) >= {"render", "video"}
    account = node(host, "getent", "passwd", "instinct").stdout.strip().split(":")
    assert account[5] == "/var/lib/instinct"
    # No login shell (issue 32): nobody logs in as the account that runs remote code; the stages still
    # ran everything as it (sudo runs /bin/sh -c itself).
    assert account[6] == "/usr/sbin/nologin"
    refused = node(host, "su", "-", "instinct", "-c", "true", check=False)
    assert refused.returncode != 0 and "not available" in refused.stdout + refused.stderr
    rules = text(host, "/etc/udev/rules.d/70-instinct-gpu.rules")
    assert 'KERNEL=="kfd", GROUP="render", MODE="0660"' in rules


def test_rocm_is_on_every_login_path_and_the_loader_path(host):
    # A login shell of the account's environment, given by root (the account has none of its own).
    login = node(host, "su", "-s", "/bin/bash", "-", "instinct", "-c", "command -v rocminfo")
    assert login.stdout.strip() == "/opt/rocm/bin/rocminfo"
    assert text(host, "/etc/ld.so.conf.d/rocm.conf").split() == ["/opt/rocm/lib", "/opt/rocm/lib64"]
    assert "/opt/rocm/lib" in node(host, "sh", "-c", "ldconfig -v 2>/dev/null | grep '^/opt/rocm' || true").stdout


def test_the_env_files_are_roots_and_not_world_writable(host):
    for path in ("/etc/instinct-finetune/rocm.env", "/etc/profile.d/rocm.sh"):
        owner, mode = node(host, "stat", "-c", "%U %a", path).stdout.split()
        assert owner == "root" and int(mode, 8) & 0o022 == 0
    assert "ROCM_PATH=/opt/rocm" in text(host, "/etc/instinct-finetune/rocm.env")
