"""Verify the training stack on the GPU-less jammy node (molecule/stack)."""

import json

import pytest

VENV = "/opt/instinct/venv"
PY = f"{VENV}/bin/python"
WHEEL_DIR = "/srv/wheels"  # pip's find-links folder of the build machine, mounted read-only


@pytest.fixture(scope="module")
def facts(host):
    return json.loads(host.file("/root/stack-facts.json").content_string)


def as_instinct(host, command):
    return host.run(f"sudo -H -u instinct {command}")


def test_venv_is_owned_by_the_service_user_and_built_from_python_311(host):
    venv = host.file(VENV)
    assert venv.is_directory and venv.user == "instinct" and venv.group == "instinct"
    assert host.file(f"{VENV}/lib/python3.11/site-packages").user == "instinct"
    cfg = host.file(f"{VENV}/pyvenv.cfg").content_string
    assert "home = /opt/site-python/3.11/bin" in cfg
    out = as_instinct(host, f"{PY} -c 'import sys; print(sys.version_info[:2])'")
    assert out.rc == 0 and out.stdout.strip() == "(3, 11)"


def test_pip_config_in_the_venv(host):
    conf = host.file(f"{VENV}/pip.conf")
    assert conf.mode == 0o644 and conf.user == "root"
    assert "cert = /etc/ssl/certs/ca-certificates.crt" in conf.content_string


def test_torch_is_the_cpu_wheel_from_the_local_wheel_folder(host, facts):
    probe = facts["pytorch_probe"]
    assert facts["pytorch_variant"] == "cpu"
    assert probe["version"] == "2.13.0+cpu"
    assert probe["hip"] is None and probe["device_count"] == 0
    assert probe["file"] == f"{VENV}/lib/python3.11/site-packages/torch/__init__.py"
    # Byte for byte the library inside the mounted wheel, so it did not come from an index.
    wheel = host.run(f"ls {WHEEL_DIR}/torch-2.13.0+cpu-cp311-*.whl").stdout.split()[0]
    member = "torch/lib/libtorch_python.so"
    installed = host.run(f"sha256sum {VENV}/lib/python3.11/site-packages/{member}").stdout.split()[0]
    inside = host.run(
        f"python3 -c 'import hashlib, sys, zipfile; "
        f"print(hashlib.sha256(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2])).hexdigest())' {wheel} {member}"
    ).stdout.strip()
    assert installed == inside


def test_torch_survived_the_llama_factory_install(host, facts):
    out = as_instinct(
        host, f"{PY} -c 'import importlib.metadata as m, torch; print(m.version(\"torch\"), torch.__file__)'"
    )
    assert out.rc == 0
    version, path = out.stdout.split()
    assert version == facts["pytorch_probe"]["version"]
    assert path == facts["pytorch_probe"]["file"]
    constraints = host.file(f"{VENV}/constraints-torch.txt").content_string
    assert "torch==2.13.0+cpu" in constraints


def test_missing_companions_are_left_out_not_mismatched(host, facts):
    assert sorted(facts["pytorch_companions_missing"]) == ["torchaudio", "torchvision"]
    assert sorted(facts["llama_factory_left_out"]) == ["torchaudio", "torchvision"]
    for name in ("torchvision", "torchaudio"):
        assert as_instinct(host, f"{PY} -m pip show {name}").rc != 0, f"{name} was installed"
    out = as_instinct(host, f"{PY} -c 'import transformers, peft, trl; print(transformers.__version__)'")
    assert out.rc == 0, out.stderr


def test_llamafactory_cli_answers_with_the_pinned_version(host):
    out = as_instinct(host, f"{VENV}/bin/llamafactory-cli version")
    assert out.rc == 0, out.stderr
    assert "version 0.9.5" in out.stdout


def test_llama_factory_dependencies_follow_the_tested_set(host):
    lock = host.file(f"{VENV}/constraints-llamafactory.txt").content_string
    pinned = dict(line.split("==") for line in lock.splitlines() if "==" in line and not line.startswith("#"))
    out = as_instinct(host, f"{PY} -m pip list --format json")
    installed = {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}
    for name in ("transformers", "peft", "trl", "datasets", "accelerate", "gradio"):
        assert installed[name] == pinned[name], name


def test_deepspeed_built_once_with_cpu_adam_and_shm_comm_and_checked(host, facts):
    report = facts["deepspeed_report"]
    assert report["accelerator"] == "cpu"
    assert report["deepspeed_version"] == "0.16.9"
    # shm_comm: DeepSpeed's CPU communication op, loaded by every rank at start-up (no JIT compile).
    assert {"cpu_adam", "deepspeed_shm_comm"} <= set(report["installed_ops"])
    key = facts["deepspeed_build_key"]
    assert key.startswith("cpu-ops")
    folder = host.file(f"/opt/instinct/wheels/deepspeed/0.16.9/{key}")
    assert folder.is_directory and folder.user == "instinct"
    wheels = host.run(f"ls {folder.path}/*.whl").stdout.split()
    assert len(wheels) == 1 and "deepspeed-0.16.9-" in wheels[0]
    log = host.file(f"/var/log/instinct-finetune/build-deepspeed-0.16.9-{key}.log")
    assert "DS_BUILD_CPU_ADAM=1" in log.content_string and "DS_BUILD_SHM_COMM=1" in log.content_string
    # the installed op is a compiled library of the venv's torch
    out = as_instinct(host, f"{PY} -c 'from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()'")
    assert out.rc == 0, out.stderr


def test_nothing_under_opt_instinct_is_world_writable(host):
    out = host.run("find /opt/instinct -xdev -perm -o+w ! -type l")
    assert out.rc == 0 and out.stdout.strip() == ""
