"""Verify PyTorch's source path on the two simulated nodes: one build per arch set (node1 builds for
gfx942, node3 for gfx90a), for 2.10.0 and again for 2.10.1, and the
stand-in torch that each node's venv ends with. The stand-in records the build it went through
(molecule/resources/pytorch-src); the arch lists come from real rocminfo recordings."""

import json

import pytest
import testinfra

SIM_BASE = "http://172.30.40.1:8768"
# node: its arch set (each node is the builder of its own)
NODES = {
    "instinct-src-node1": "gfx942",
    "instinct-src-node3": "gfx90a",
}
VERSIONS = ("2.10.0", "2.10.1")
VENV = "/opt/instinct/venv"


def wheel_path(version, arch):
    return f"/opt/instinct/wheels/torch/{version}/{arch}/torch-{version}-py3-none-any.whl"


def build_log(version, arch):
    return f"/var/log/instinct-finetune/build/build-torch-{version}-{arch}.log"


@pytest.fixture(scope="module")
def node(host):
    return NODES[host.backend.get_hostname()]


@pytest.fixture(scope="module")
def max_jobs(host):
    """MAX_JOBS by the rule of plugins/module_utils/build.py build_jobs: one per core, at most one
    per 4 GiB of memory, at least one; cores and memory as the container sees them."""
    cores = int(host.check_output("nproc"))
    memtotal_mb = int(host.check_output("awk '/^MemTotal:/ {print $2}' /proc/meminfo")) // 1024
    return max(1, min(cores, memtotal_mb // (4 * 1024)))


def peer(name):
    return testinfra.get_host(f"docker://{name}")


@pytest.mark.parametrize("version", VERSIONS)
def test_each_node_built_for_its_arch_set(host, node, version):
    log = host.file(build_log(version, node))
    assert "[5/5] build record" in log.content_string
    assert log.user == "instinct-build"  # the build account, not the training account (issue 32)


def test_the_upgrade_left_only_the_wheels_the_node_runs(host, node):
    """2.10.1 is installed: the 2.10.0 wheel folder is gone (wheel_build_prune), 2.10.1's holds the
    wheel of this node's arch set and its build record."""
    arch = node
    assert host.file("/opt/instinct/wheels/torch").listdir() == ["2.10.1"]
    assert host.file("/opt/instinct/wheels/torch/2.10.1").listdir() == [arch]
    assert host.file(wheel_path("2.10.1", arch)).exists
    assert host.file(f"/opt/instinct/wheels/torch/2.10.1/{arch}/BUILD-INFO.json").exists


@pytest.mark.parametrize("version", ["2.10.1"])
def test_build_record_has_the_arch_set_and_parallelism(host, node, max_jobs, version):
    arch = node
    info = host.file(f"/opt/instinct/wheels/torch/{version}/{arch}/BUILD-INFO.json")
    record = json.loads(info.content_string)
    env = record["env"]
    assert env["PYTORCH_ROCM_ARCH"] == arch
    assert env["MAX_JOBS"] == str(max_jobs)
    assert env["USE_ROCM"] == "1"
    assert env["USE_CUDA"] == "0"
    assert env["CMAKE_CXX_COMPILER_LAUNCHER"] == "ccache"
    assert env["PYTORCH_BUILD_VERSION"] == version
    # the commit of the clone, which is the tag's (the tree at the tag says its own version)
    src = f"/opt/instinct/build/src/pytorch-{version}"
    assert record["commit"] == host.check_output(f"sudo -u instinct-build git -C {src} rev-parse HEAD")
    assert host.file(f"{src}/version.txt").content_string.strip() == version
    if version == "2.10.1":
        # the side effect pinned v2.10.1's commit: the script checked the clone against it
        script = host.file(f"/opt/instinct/build/build-torch-{version}-{arch}.sh").content_string
        assert f'if [ "$commit" != {record["commit"]} ]; then' in script


@pytest.mark.parametrize("version", VERSIONS)
def test_hipify_ran_before_the_wheel_build(host, node, version):
    marker = host.file(f"/opt/instinct/build/src/pytorch-{version}/build/hipify-stand-in.json")
    assert json.loads(marker.content_string)["PYTORCH_ROCM_ARCH"] == node


@pytest.mark.parametrize("version", ["2.10.1"])
def test_each_arch_set_has_a_wheel_of_its_own(version):
    node1, node3 = (peer(name) for name in NODES)
    gfx942 = node1.check_output(f"sha256sum {wheel_path(version, 'gfx942')}").split()[0]
    gfx90a = node3.check_output(f"sha256sum {wheel_path(version, 'gfx90a')}").split()[0]
    assert gfx942 != gfx90a
    for remote, arch in ((node1, "gfx942"), (node3, "gfx90a")):
        wheel = remote.file(wheel_path(version, arch))
        assert (wheel.user, wheel.group, wheel.mode) == ("instinct-build", "instinct-build", 0o644)


def test_venv_holds_the_stand_in_torch_of_its_arch_set(host, node):
    arch = node
    probe = "import json, torch; print(json.dumps(dict(torch._stand_in_build, file=torch.__file__)))"
    built = json.loads(host.check_output(f"cd / && {VENV}/bin/python -c '{probe}'"))
    assert built["version"] == "2.10.1"
    assert built["source_version"] == "2.10.1"
    assert built["file"].startswith(f"{VENV}/lib/")
    assert built["env"]["PYTORCH_ROCM_ARCH"] == arch
    assert built["env"]["USE_ROCM"] == "1"
    assert built["hipify_ran"] is True
    # v2.10.1 pins the second commit of the submodule: --recurse-submodules checked out the pinned one
    assert built["submodule_revision"] == "stand-in third-party revision 2"
    packages = json.loads(host.check_output(f"{VENV}/bin/python -m pip list --format=json"))
    assert [p["version"] for p in packages if p["name"] == "torch"] == ["2.10.1"]


def test_build_script_sets_the_rocm_build_environment(host, node, max_jobs):
    arch = node
    script = host.file(f"/opt/instinct/build/build-torch-2.10.0-{arch}.sh")
    assert script.mode == 0o755
    lines = script.content_string.splitlines()
    for line in (
        f"export PYTORCH_ROCM_ARCH={arch}",
        "export USE_ROCM=1",
        f"export MAX_JOBS={max_jobs}",
        "export CMAKE_CXX_COMPILER_LAUNCHER=ccache",
        "export PYTORCH_BUILD_VERSION=2.10.0",
        "python tools/amd_build/build_amd.py",
        'python -m pip wheel --no-build-isolation --no-deps --wheel-dir "$WHEEL_BUILD_OUT" .',
    ):
        assert line in lines
    clone = " ".join(lines[next(i for i, x in enumerate(lines) if "git clone" in x) :][:2])
    assert "--depth 1 --branch v2.10.0 --recurse-submodules --shallow-submodules" in clone
    assert f"{SIM_BASE}/git/pytorch.git" in clone
    # converge pins no commit; the side effect pins v2.10.1's, and its script checks it
    assert "refusing to build" not in script.content_string
    rerun = host.file(f"/opt/instinct/build/build-torch-2.10.1-{arch}.sh").content_string
    assert "refusing to build" in rerun


# The ROCm packages of the source build, at the simulated AMD repository's 7.0.2 versions
# (molecule/resources/amd-repo/README.md), on every node of the source path.
ROCM_BUILD_PACKAGES = {
    "rocm-ml-sdk": "7.0.2.70002-56~22.04",
    "rocm-hip-runtime-dev": "7.0.2.70002-56~22.04",
    "miopen-hip-dev": "3.5.0.70002-56~22.04",
    "hipblaslt-dev": "1.0.0.70002-56~22.04",
    "rocsolver-dev": "3.30.1.70002-56~22.04",
    "roctracer-dev": "4.1.70002.70002-56~22.04",
    "rocm-hip-sdk": "7.0.2.70002-56~22.04",
}


@pytest.mark.parametrize("package", sorted(ROCM_BUILD_PACKAGES))
def test_the_source_path_installed_the_rocm_build_packages(host, package):
    assert host.package(package).is_installed
    assert host.package(package).version == ROCM_BUILD_PACKAGES[package]


def test_torch_was_built_against_miopen_and_the_other_loadhip_configs(host, node):
    """The stand-in torch refuses to build without each config LoadHIP.cmake requires; it records
    the versions it found (MIOpen's comes only with rocm-ml-sdk)."""
    probe = "import json, torch; print(json.dumps(torch._stand_in_build['rocm_cmake_packages']))"
    found = json.loads(host.check_output(f'cd / && {VENV}/bin/python -c "{probe}"'))
    assert found["miopen"] == "3.5.0"
    assert found["hipblaslt"] == "1.0.0"
    assert len(found) == 13


def audio_dir(arch):
    return f"/opt/instinct/wheels/torchaudio/2.10.0/{arch}-torch2.10.1"


def test_torchaudio_was_built_once_per_arch_set_against_the_new_torch(host, node):
    """torchaudio 2.10.0 is rebuilt for torch 2.10.1 (its key has the torch version) on each node, and
    the 2.10.0 torch's torchaudio folder is pruned."""
    arch = node
    assert host.file("/opt/instinct/wheels/torchaudio/2.10.0").listdir() == [f"{arch}-torch2.10.1"]
    assert host.file(f"{audio_dir(arch)}/torchaudio-2.10.0-py3-none-any.whl").exists
    record = json.loads(host.file(f"{audio_dir(arch)}/BUILD-INFO.json").content_string)
    assert record["torch"] == "2.10.1"
    assert record["env"]["PYTORCH_ROCM_ARCH"] == arch
    assert record["env"]["PYTORCH_VERSION"] == "2.10.1"
    assert record["env"]["BUILD_VERSION"] == "2.10.0"


def test_venv_torchaudio_loads_beside_its_torch(host, node):
    arch = node
    probe = "import json, torchaudio; print(json.dumps(torchaudio._stand_in_build))"
    built = json.loads(host.check_output(f"cd / && sudo -u instinct {VENV}/bin/python -c '{probe}'"))
    assert built["version"] == "2.10.0"
    assert built["torch_version"] == "2.10.1"
    assert built["torch_build"]["env"]["PYTORCH_ROCM_ARCH"] == arch
    # the trainer's import chain (the stand-in llamafactory of side_effect.yml) works after the
    # refusal test gave node3 its torchaudio back
    host.run_expect([0], f"cd / && sudo -u instinct {VENV}/bin/python -c 'import llamafactory.train.tuner'")
