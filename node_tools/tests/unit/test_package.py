"""The package itself: the wheel the node_tools action builds (stamped with the content hash, the
linked module_utils parsers copied in), installed by pip with every console script of
pyproject.toml."""

import subprocess
import tomllib
import zipfile
from pathlib import Path

from ansible_collections.instinct.finetune.plugins.module_utils.node_tools import build_wheel, stamped_version

ROOT = Path(__file__).resolve().parents[3]
NODE_TOOLS = ROOT / "node_tools"
LINKED = ("_probe.py", "rocm_smi.py", "gpu_metrics.py", "ckptspace.py")


def entry_points():
    with (NODE_TOOLS / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["project"]["scripts"]


def test_the_wheel_is_stamped_with_the_content_hash_and_built_once_per_hash(wheel, tmp_path):
    path, version = wheel
    assert version == stamped_version(str(NODE_TOOLS))
    base, _plus, digest = version.partition("+")
    assert base and len(digest) == 12 and int(digest, 16) >= 0
    assert path.name == f"instinct_node_tools-{version}-py3-none-any.whl"
    # A second build of unchanged sources finds the first one in the cache folder.
    cache = path.parent.parent
    assert build_wheel(str(NODE_TOOLS), str(cache)) == (str(path), version)


def test_the_linked_parsers_travel_in_the_wheel_as_files_of_the_collection(wheel):
    path, version = wheel
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        for name in LINKED:
            assert (NODE_TOOLS / "src" / "instinct_node_tools" / name).is_symlink()
            content = archive.read(f"instinct_node_tools/{name}")
            assert content == (ROOT / "plugins" / "module_utils" / name).read_bytes()
        init = archive.read("instinct_node_tools/__init__.py").decode()
    assert f'__version__ = "{version}"' in init
    assert not any("tests/" in name or name.endswith(".pyc") for name in names)


def test_pip_installs_every_console_script_and_each_one_imports(node_tools, wheel):
    version = subprocess.run(
        [str(node_tools.python), "-c", "import importlib.metadata as m; print(m.version('instinct-node-tools'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert version == wheel[1]
    scripts = entry_points()
    assert len(scripts) == 15
    for name, target in scripts.items():
        script = node_tools.script(name).read_text()
        module, _colon, function = target.partition(":")
        assert f"from {module} import {function}" in script, script
    # What a node's system Python runs loads without the training libraries (burnin imports torch
    # only when it runs); the rest loads over them.
    system = {"gpu_collector", "progress", "reach", "gather", "serve_wheels", "probe", "burnin", "exposition"}
    imports(node_tools, sorted(system))


def test_every_module_imports_over_the_training_libraries(train_tools):
    modules = sorted(p.stem for p in (NODE_TOOLS / "src" / "instinct_node_tools").glob("*.py") if p.stem != "__init__")
    assert {"launch", "cpu_compat", "check_job", "allreduce", "ds_ops"} <= set(modules)
    imports(train_tools, modules)


def imports(tools, modules):
    code = "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module('instinct_node_tools.' + name)"
    done = subprocess.run(
        [str(tools.python), "-c", code, *modules], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
