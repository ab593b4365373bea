"""What the provisioning stages left on each sandbox node, read from the node itself: the trust
store and pip's settings (preflight), the venv as the training account's (instinct_python), the
CPU torch byte for byte from the local wheel folder and its companions (pytorch), DeepSpeed's wheel
built once with its CPU ops (deepspeed), LLaMA-Factory on its tested dependency set without
disturbing torch (llama_factory). These were molecule's smoke and stack scenarios: the sandbox runs
the same roles on the same image, so they are read here instead of being installed a second time.
"""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from cluster import LF_SETS, NODES, VENV, as_trainer, mgmt_address, node, served_lines

PY = f"{VENV}/bin/python"
WHEEL_DIR = "/srv/wheels"  # the stand-in for PyTorch's CPU index (scripts/sandbox.py), read-only
CA_FILES = [Path(f) for f in os.environ.get("INSTINCT_CA_CERTIFICATES", "").split(",") if f]


@pytest.fixture(scope="module", params=NODES)
def host(request, converged):
    return request.param


def text(host, path):
    return node(host, "cat", path).stdout


def test_extra_cas_are_in_the_trust_store(host):
    installed = node(host, "ls", "/usr/local/share/ca-certificates/").stdout.split()
    assert sorted(installed) == sorted(f"instinct-{ca.stem}.crt" for ca in CA_FILES)
    bundle = "".join(text(host, "/etc/ssl/certs/ca-certificates.crt").splitlines())
    for ca in CA_FILES:
        copy = f"/usr/local/share/ca-certificates/instinct-{ca.stem}.crt"
        assert node(host, "stat", "-c", "%a", copy).stdout.strip() == "644"
        assert text(host, copy).strip() == ca.read_text().strip()
        # update-ca-certificates ran: the certificate body is in the rebuilt bundle.
        assert "".join(ca.read_text().strip().splitlines()[1:-1]) in bundle


def test_pip_trusts_the_system_bundle_only_when_cas_were_added(host):
    found = node(host, "cat", "/etc/pip.conf", check=False)
    if CA_FILES:
        assert "cert = /etc/ssl/certs/ca-certificates.crt" in found.stdout
    else:
        assert found.returncode != 0
    # Root's, read by the build account (it runs pip) and nobody else, the training account included: it
    # may hold a mirror's password.
    conf = node(host, "stat", "-c", "%a %U %G", f"{VENV}/pip.conf").stdout.split()
    assert conf == ["640", "root", "instinct-build"]
    assert as_trainer(host, "cat", f"{VENV}/pip.conf").returncode != 0
    assert "cert = /etc/ssl/certs/ca-certificates.crt" in text(host, f"{VENV}/pip.conf")


def test_tls_to_pypi_works_through_the_trust_store(host):
    # Python's ssl module uses the system store: this fails when a re-signing proxy's CA is missing.
    out = node(
        host,
        "python3",
        "-c",
        "import urllib.request; print(urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=60).status)",
        check=False,
    )
    assert out.returncode == 0 and out.stdout.strip() == "200", out.stderr


def test_the_venv_and_the_wheels_are_the_build_accounts_and_the_training_account_runs_python_311(host):
    """Issue 32: the build account owns the venv and the wheel store, with no login shell; the training
    account runs the venv's Python 3.11 and can write nothing in either (a .pth file, a wheel)."""
    owners = node(host, "stat", "-c", "%U:%G", VENV, f"{VENV}/lib/python3.11/site-packages").stdout.split()
    assert owners == ["instinct-build:instinct-build", "instinct-build:instinct-build"]
    shell = node(host, "getent", "passwd", "instinct-build").stdout.strip().rsplit(":", 1)[1]
    assert shell == "/usr/sbin/nologin"
    assert "home = /opt/site-python/3.11/bin" in text(host, f"{VENV}/pyvenv.cfg")
    out = as_trainer(host, PY, "-c", "import sys; print(sys.version_info[:2])")
    assert out.returncode == 0 and out.stdout.strip() == "(3, 11)"
    # Every file and folder of both belongs to the build account (or root), none to the training account.
    foreign = node(host, "find", VENV, "/opt/instinct/wheels", "-not", "-user", "instinct-build", "-not", "-user",
                   "root").stdout.split()  # fmt: skip
    assert foreign == [], foreign[:10]
    for target in (f"{VENV}/lib/python3.11/site-packages/planted.pth", "/opt/instinct/wheels/deepspeed/planted.whl"):
        planted = as_trainer(host, "sh", "-c", f"echo import os > {target}")
        assert planted.returncode != 0 and "Permission denied" in planted.stderr, (target, planted.stderr)


def test_torch_is_the_cpu_wheel_from_the_wheel_folder_and_survived_llama_factory(host):
    out = as_trainer(
        host,
        PY,
        "-c",
        "import importlib.metadata as m, json, torch; "
        "print(json.dumps([m.version('torch'), torch.__file__, torch.version.hip, torch.cuda.device_count()]))",
    )
    assert out.returncode == 0, out.stderr
    version, path, hip, devices = json.loads(out.stdout.splitlines()[-1])
    assert (version, hip, devices) == ("2.13.0+cpu", None, 0)
    assert path == f"{VENV}/lib/python3.11/site-packages/torch/__init__.py"
    assert "torch==2.13.0+cpu" in text(host, f"{VENV}/constraints-torch.txt")
    # Byte for byte the library inside the wheel of the folder, so it did not come from an index.
    (wheel,) = node(host, "sh", "-c", f"ls {WHEEL_DIR}/torch-2.13.0+cpu-cp311-*.whl").stdout.split()
    member = "torch/lib/libtorch_python.so"
    installed = node(host, "sha256sum", f"{VENV}/lib/python3.11/site-packages/{member}").stdout.split()[0]
    inside = node(
        host,
        "python3",
        "-c",
        "import hashlib, sys, zipfile; "
        "print(hashlib.sha256(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2])).hexdigest())",
        wheel,
        member,
    ).stdout.strip()
    assert installed == inside


def test_a_companion_the_index_lacks_is_left_out_and_the_other_is_installed(host):
    # The inventory asks for torchvision 0.28.0 and torchaudio 2.11.1; the stand-in index holds only
    # torchaudio. A mismatched torchvision from PyPI would pull another torch.
    assert as_trainer(host, PY, "-m", "pip", "show", "torchvision").returncode != 0, "torchvision was installed"
    shown = as_trainer(host, PY, "-m", "pip", "show", "torchaudio")
    assert shown.returncode == 0 and "Version: 2.11.1+cpu" in shown.stdout
    out = as_trainer(host, PY, "-c", "import transformers, peft, trl, torchaudio")
    assert out.returncode == 0, out.stderr


def test_llama_factory_answers_with_the_pinned_version_on_its_tested_dependencies(host):
    out = as_trainer(host, f"{VENV}/bin/llamafactory-cli", "version")
    assert out.returncode == 0 and "version 0.9.5" in out.stdout, out.stderr
    lock = text(host, f"{VENV}/constraints-llamafactory.txt")
    pinned = dict(line.split("==") for line in lock.splitlines() if "==" in line and not line.startswith("#"))
    listed = as_trainer(host, PY, "-m", "pip", "list", "--format", "json").stdout
    installed = {p["name"].lower(): p["version"] for p in json.loads(listed)}
    for name in ("transformers", "peft", "trl", "datasets", "accelerate", "gradio"):
        assert installed[name] == pinned[name], name


def test_deepspeed_was_built_once_for_both_nodes_with_its_cpu_ops(converged):
    """One node built the wheel (its log names the ops); the other got the same file."""
    folders, sums, logs = {}, {}, {}
    for host in NODES:
        (folder,) = node(host, "sh", "-c", "ls -d /opt/instinct/wheels/deepspeed/0.16.9/cpu-torch*").stdout.split()
        folders[host] = folder
        assert node(host, "stat", "-c", "%U", folder).stdout.strip() == "instinct-build"
        wheels = node(host, "sh", "-c", f"ls {folder}/*.whl").stdout.split()
        assert len(wheels) == 1 and "deepspeed-0.16.9-" in wheels[0]
        sums[host] = node(host, "sha256sum", wheels[0]).stdout.split()[0]
        # The sha256 recorded at the build, kept on every node, pins what pip installed (--require-hashes).
        name = wheels[0].rsplit("/", 1)[1]
        assert node(host, "cat", f"{folder}/SHA256SUMS").stdout == f"{sums[host]}  {name}\n"
        assert node(host, "cat", f"{folder}/install.txt").stdout == f"{wheels[0]} --hash=sha256:{sums[host]}\n"
        key = folder.rsplit("/", 1)[1]
        found = node(host, "cat", f"/var/log/instinct-finetune/build/build-deepspeed-0.16.9-{key}.log", check=False)
        if found.returncode == 0:
            logs[host] = found.stdout
    assert len(set(folders.values())) == 1 and len(set(sums.values())) == 1, (folders, sums)
    assert len(logs) == 1, sorted(logs)  # built once, on one node
    (log,) = logs.values()
    assert "DS_BUILD_CPU_ADAM=1" in log and "DS_BUILD_SHM_COMM=1" in log


def test_the_other_nodes_fetched_the_wheel_from_the_builder_and_the_controller_never_held_it(converged):
    """Node to node: the site fixture left node2 without DeepSpeed's wheel; node1 (the builder) served
    it over the management network and node2 checked its sha256. No wheel file appeared on the
    controller during the run (its whole filesystem is searched, the containers' layers aside)."""
    builder, peers = NODES[0], NODES[1:]
    (folder,) = node(builder, "sh", "-c", "ls -d /opt/instinct/wheels/deepspeed/0.16.9/cpu-torch*").stdout.split()
    (wheel,) = node(builder, "sh", "-c", f"ls {folder}/*.whl").stdout.split()
    want = node(builder, "sha256sum", wheel).stdout.split()[0]
    for peer in peers:
        assert node(peer, "sha256sum", wheel).stdout.split()[0] == want
        assert node(peer, "stat", "-c", "%U %a", wheel).stdout.split() == ["instinct-build", "644"]
    assert converged.ran("Fetch the wheels from the arch set's builder and check their sha256") == sorted(peers)
    served = served_lines(converged, builder)
    for peer in peers:
        to_peer = f" to {mgmt_address(peer)} "
        sent = [line for line in served if line.startswith(f"sent {Path(wheel).name} (") and to_peer in line]
        assert len(sent) == 1, served
    # No wheel a node builds or downloads (DeepSpeed's, LLaMA-Factory's dependency set) appeared on the
    # controller: no wheel file made since the run began has the content of one in the builder's wheel
    # folder. By content, not name: make test's unit tests, in the lane beside this one, build wheels of
    # their own (the node tools, stand-ins named like DeepSpeed's) in their temporary folders.
    on_builder = node(builder, "sh", "-c", "find /opt/instinct/wheels -name '*.whl' -exec sha256sum {} +").stdout
    node_wheels = {line.split()[0]: line.split()[1] for line in on_builder.splitlines()}
    assert want in node_wheels and len(node_wheels) > 1, on_builder
    found = subprocess.run(
        ["find", "/", "-xdev", "(", "-path", "/var/lib/docker", "-o", "-path", "/proc", ")", "-prune", "-o",
         "-newer", str(converged.started_marker), "-name", "*.whl", "-type", "f", "-print"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    held = {
        str(path): node_wheels[digest]
        for path in map(Path, found.stdout.split())
        if (digest := hashlib.sha256(path.read_bytes()).hexdigest()) in node_wheels
    }
    assert held == {}, held


def test_llama_factorys_dependency_set_was_fetched_once_and_served_node_to_node(converged):
    """The site fixture removed LLaMA-Factory, two of its dependencies and every copy of the set:
    node1 alone asked the index for the set, served it, the others checked each wheel's sha256 and
    every node installed from its own copy."""
    builder, peers = NODES[0], NODES[1:]
    assert converged.ran("Fetch or build every wheel of the set") == [builder]
    (folder,) = node(builder, "sh", "-c", f"ls -d {LF_SETS}/*/").stdout.split()
    listing = node(builder, "sh", "-c", f"cd {folder} && sha256sum *.whl").stdout
    # The sums were recorded when the set was downloaded, by the build account, and every node keeps
    # the builder's record and installs from a list pinned to it (pip --require-hashes).
    record = node(builder, "cat", f"{folder}/SHA256SUMS").stdout
    assert record == listing, (record, listing)
    assert node(builder, "stat", "-c", "%U", f"{folder}/SHA256SUMS").stdout.strip() == "instinct-build"
    wheels = [line.split()[1] for line in listing.splitlines()]
    assert any(w.startswith("fire-") for w in wheels) and any(w.startswith("termcolor-") for w in wheels), wheels
    pinned = sorted(
        f"{folder.rstrip('/')}/{name} --hash=sha256:{digest}" for digest, name in map(str.split, record.splitlines())
    )
    served = served_lines(converged, builder)
    for host in NODES:
        assert sorted(node(host, "cat", f"{folder}/install.txt").stdout.splitlines()) == pinned
    for peer in peers:
        assert node(peer, "sh", "-c", f"cd {folder} && sha256sum *.whl").stdout == listing
        assert node(peer, "cat", f"{folder}/SHA256SUMS").stdout == record
        to_peer = f" to {mgmt_address(peer)} "
        for wheel in wheels:
            assert [line for line in served if line.startswith(f"sent {wheel} (") and to_peer in line]
    # Every node installed the removed dependencies again, at the version of the set's wheel (the
    # install step runs with --no-index: the copy was all it could install from).
    (fire,) = [w for w in wheels if w.startswith("fire-")]
    for host in NODES:
        out = as_trainer(host, PY, "-c", "import importlib.metadata as m; print(m.version('fire'))")
        assert out.returncode == 0, out.stderr
        assert fire.startswith(f"fire-{out.stdout.strip()}-"), (fire, out.stdout)


def test_deepspeeds_cpu_ops_load_without_a_compile(host):
    # shm_comm: DeepSpeed's CPU communication op, loaded by every rank at start-up (no JIT compile).
    out = as_trainer(
        host,
        PY,
        "-c",
        "import json; from deepspeed.git_version_info import installed_ops; "
        "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); "
        "print(json.dumps(installed_ops))",
    )
    assert out.returncode == 0, out.stderr
    ops = json.loads(out.stdout.splitlines()[-1])
    assert ops["cpu_adam"] and ops["deepspeed_shm_comm"], ops


def test_nothing_under_opt_instinct_is_world_writable(host):
    out = node(host, "find", "/opt/instinct", "-xdev", "-perm", "-o+w", "!", "-type", "l")
    assert out.stdout.strip() == ""
