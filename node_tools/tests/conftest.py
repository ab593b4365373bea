"""The node tools package's own tests: the wheel built as the node_tools action builds it, installed
with pip into throwaway venvs, and its console scripts run from there as a node runs them.

Three installs of one wheel, each made once per test session:

- ``node_tools``: a venv of the controller's Python holding the wheel and its one dependency,
  prometheus_client (the .venv's own copy, linked in: the tests run offline), and nothing else: no
  torch, as on a node's system Python (collector, progress, reachability, gather).
- ``wheel_index``: the same with pypiserver, as a builder's package index venv (wheel share).
- ``train_tools``: a venv of ``$INSTINCT_TRAIN_PYTHON`` (scripts/ensure-train-libs.sh: the roles'
  pinned torch, DeepSpeed, transformers, LLaMA-Factory) that sees that venv's packages through a
  ``.pth`` file and has the wheel installed on top: the training venv of a node (job and weights
  checks, DeepSpeed ops, burn-in, all-reduce, the probe with torch).

Pure functions are tested by importing them from ``node_tools/src`` (put on the path here).
"""

import importlib.metadata
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE_TOOLS = ROOT / "node_tools"
SRC = NODE_TOOLS / "src"
COLLECTIONS = ROOT / ".venv" / "collections"
FIXTURES = ROOT / "tests" / "fixtures"

if not (COLLECTIONS / "ansible_collections" / "instinct" / "finetune").exists():
    raise RuntimeError(f"{COLLECTIONS} lacks instinct/finetune: run `make venv` first")
# ROOT: the collection's own test helpers (tests.unit...); COLLECTIONS: its plugins, as Ansible
# imports them; SRC: the package's modules, for the tests of pure functions.
for _path in (ROOT, COLLECTIONS, SRC):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


class Installed:
    """A venv with the node tools wheel installed; ``run`` starts one of its console scripts."""

    def __init__(self, venv):
        self.venv = venv
        self.python = venv / "bin" / "python"

    def script(self, name):
        path = self.venv / "bin" / name
        assert path.is_file(), f"{name} is not an installed console script of the node tools"
        return path

    def run(self, name, *args, timeout=120, **kwargs):
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run([str(self.script(name)), *map(str, args)], check=False, timeout=timeout, **kwargs)


def _purelib(python):
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def _link_distribution(name, site):
    """Make the installed distribution ``name`` of this Python visible in ``site`` (package and metadata)."""
    dist = importlib.metadata.distribution(name)
    tops = {Path(str(f)).parts[0] for f in dist.files if not str(f).startswith("..")}
    for top in sorted(tops):
        source = Path(dist.locate_file(top))
        if source.exists() and top != "__pycache__":
            (site / top).symlink_to(source)


def _install(venv, base_python, wheel, overlay=None, linked=()):
    """A venv of ``base_python`` (``overlay``: a site folder it also sees), the wheel installed into
    it by pip with ``--no-deps``, prometheus_client and the ``linked`` distributions linked in from
    this Python."""
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(venv)], check=True)
    installed = Installed(venv)
    site = _purelib(installed.python)
    if overlay is not None:
        (site / "instinct-test-overlay.pth").write_text(f"{overlay}\n")
    found = subprocess.run([str(installed.python), "-c", "import prometheus_client"], capture_output=True, check=False)
    if found.returncode != 0:
        _link_distribution("prometheus_client", site)
    for name in linked:
        _link_distribution(name, site)
    pip = [sys.executable, "-m", "pip", "--python", str(installed.python), "install"]
    done = subprocess.run(
        [*pip, "--no-deps", "--no-index", "--quiet", str(wheel)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return installed


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """``(path, version)`` of the wheel, built by the function the node_tools action builds it with."""
    from ansible_collections.instinct.finetune.plugins.module_utils.node_tools import build_wheel  # noqa: PLC0415

    path, version = build_wheel(str(NODE_TOOLS), str(tmp_path_factory.mktemp("node-tools-wheels")))
    return Path(path), version


@pytest.fixture(scope="session")
def node_tools(wheel, tmp_path_factory):
    """The package as a node's system Python has it: the wheel and prometheus_client, no torch."""
    return _install(tmp_path_factory.mktemp("node") / "venv", sys.executable, wheel[0])


@pytest.fixture(scope="session")
def wheel_index(wheel, tmp_path_factory):
    """The builder's package index venv (wheel_build_index_dir): the wheel and pypiserver with what it
    imports (the role pins the same versions by sha256)."""
    linked = ("pypiserver", "packaging", "importlib_resources")
    return _install(tmp_path_factory.mktemp("index") / "venv", sys.executable, wheel[0], linked=linked)


@pytest.fixture(scope="session")
def train_python():
    python = os.environ.get("INSTINCT_TRAIN_PYTHON", "")
    if not (python and Path(python).is_file()):
        pytest.fail(
            "INSTINCT_TRAIN_PYTHON is not set: run these tests through `make unit` (scripts/test.sh), "
            "or export INSTINCT_TRAIN_PYTHON=$(bash scripts/ensure-train-libs.sh)"
        )
    return python


@pytest.fixture(scope="session")
def train_tools(wheel, train_python, tmp_path_factory):
    """The package installed over the pinned training libraries, as in a node's training venv."""
    return _install(tmp_path_factory.mktemp("train") / "venv", train_python, wheel[0], overlay=_purelib(train_python))


@pytest.fixture
def fixtures_dir():
    return FIXTURES


@pytest.fixture
def free_port():
    """A function that returns a TCP port of 127.0.0.1 that nothing listens on (at the time)."""

    def port():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]

    return port


class GpuNode:
    """A node's folders for the installed ``instinct-gpu-collector``, run as its timer runs it, with
    amd-smi and rocm-smi stood in for by scripts that print the real recordings (or fail)."""

    SMI = FIXTURES / "smi"

    def __init__(self, tools, root):
        self.tools = tools
        self.root = root
        self.textfile = root / "textfile"
        self.jobs = root / "jobs"
        for name in ("textfile", "state", "bin", "jobs/a/metrics"):
            (root / name).mkdir(parents=True)

    def tool(self, name, script):
        path = self.root / "bin" / name
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(0o755)
        return path

    def missing(self, name):
        return self.root / "bin" / name

    def recorded_rocm_smi(self):
        """rocm-smi printing the 8x MI300X recordings for the two plain views, failing otherwise."""
        return self.tool(
            "rocm-smi",
            f"if [ $# -eq 0 ]; then cat {self.SMI / 'rocmsmi-concise-8gpu.txt'}; exit 0; fi\n"
            f'if [ "$*" = "-u --showmeminfo vram" ]; then cat {self.SMI / "rocmsmi-use-meminfo-vram-8gpu.txt"}; '
            "exit 0; fi\n"
            'echo "rocm-smi: unrecognized arguments" >&2; exit 2\n',
        )

    def collect(self, rocm_smi, amd_smi, *extra):
        """One tick of the timer; returns (what it logged, instinct_gpu.prom). The training account is
        the one running the tests (which wrote the ranks' files) unless ``extra`` names another."""
        if "--training-user" not in extra:
            extra = (*extra, "--training-user", pwd.getpwuid(os.geteuid()).pw_name)
        done = self.tools.run(
            "instinct-gpu-collector",
            "--textfile-dir", self.textfile,
            "--state-dir", self.root / "state",
            "--expected-gpus", "8",
            "--amd-smi", amd_smi,
            "--rocm-smi", rocm_smi,
            "--timeout", "5",
            "--finetune-glob", self.jobs / "*" / "metrics" / "rank*.prom",
            *extra,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr, (self.textfile / "instinct_gpu.prom").read_text()


@pytest.fixture
def gpu_node(node_tools, tmp_path):
    return GpuNode(node_tools, tmp_path)
