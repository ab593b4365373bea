"""The node tools wheel as the controller builds it (plugins/module_utils/node_tools.py)."""

import shutil
import zipfile
from pathlib import Path

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils import node_tools

ROOT = Path(__file__).resolve().parents[4]
PROJECT = ROOT / "node_tools"


@pytest.fixture
def project(tmp_path):
    """A copy of the node tools project, links resolved (as a collection tarball may hold them)."""
    copy = tmp_path / "node_tools"
    shutil.copytree(PROJECT, copy, symlinks=False, ignore=shutil.ignore_patterns("tests", "__pycache__", "build"))
    return copy


def test_the_digest_covers_every_source_file_and_only_those(project):
    before = node_tools.digest(project)
    (project / "src" / "instinct_node_tools" / "__pycache__").mkdir(exist_ok=True)
    (project / "src" / "instinct_node_tools" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (project / "README.notes").write_text("not part of the wheel")
    assert node_tools.digest(project) == before
    collector = project / "src" / "instinct_node_tools" / "gpu_collector.py"
    collector.write_text(collector.read_text() + "\n# changed\n")
    assert node_tools.digest(project) != before


def test_a_changed_parser_of_module_utils_changes_the_version_through_the_link():
    files = node_tools.source_files(PROJECT)
    for parser in ("_probe.py", "rocm_smi.py", "gpu_metrics.py"):
        link = PROJECT / "src" / "instinct_node_tools" / parser
        assert f"src/instinct_node_tools/{parser}" in files
        # One source: the package's copy is the module_utils file itself.
        assert link.is_symlink() and link.resolve() == (ROOT / "plugins" / "module_utils" / parser).resolve()


def test_the_stamped_version_is_a_local_version_of_the_package_version(project):
    version = node_tools.stamped_version(project)
    base, plus, stamp = version.partition("+")
    assert plus == "+"
    assert base == node_tools.base_version((project / "src" / "instinct_node_tools" / "__init__.py").read_text())
    assert stamp == node_tools.digest(project)[:12]


def test_the_wheel_is_built_once_per_version_and_holds_the_parsers_and_entry_points(project, tmp_path):
    cache = tmp_path / "cache"
    wheel, version = node_tools.build_wheel(str(project), str(cache))
    again, same = node_tools.build_wheel(str(project), str(cache))
    assert (again, same) == (wheel, version)
    assert Path(wheel).name == f"instinct_node_tools-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert {"instinct_node_tools/rocm_smi.py", "instinct_node_tools/gpu_collector.py"} <= names
        init = archive.read("instinct_node_tools/__init__.py").decode()
        assert f'__version__ = "{version}"' in init
        entry_points = archive.read(f"instinct_node_tools-{version}.dist-info/entry_points.txt").decode()
    assert "instinct-gpu-collector = instinct_node_tools.gpu_collector:main" in entry_points
    assert "instinct-probe = instinct_node_tools.probe:main" in entry_points


def test_requirements_name_every_file_with_its_hash():
    text = node_tools.requirements(
        "/remote/tmp/instinct_node_tools-0.2.0+abc-py3-none-any.whl",
        "a" * 64,
        [{"name": "prometheus-client", "version": "0.21.1", "sha256": "b" * 64}],
    )
    assert text.splitlines() == [
        f"/remote/tmp/instinct_node_tools-0.2.0+abc-py3-none-any.whl --hash=sha256:{'a' * 64}",
        f"prometheus-client==0.21.1 --hash=sha256:{'b' * 64}",
    ]


def test_a_project_without_a_version_line_is_refused():
    with pytest.raises(ValueError, match="__version__"):
        node_tools.base_version("VERSION = '1'\n")


def test_the_marker_changes_with_a_pin_so_that_a_pin_bump_installs_again():
    """Review of issue 32's index venv: its marker named the node tools' version only, so a new pin (a
    pypiserver security release) was never installed on a venv that had the old one."""
    pins = [{"name": "pypiserver", "version": "2.3.2", "sha256": "67" * 32},
            {"name": "packaging", "version": "24.2", "sha256": "09" * 32}]  # fmt: skip
    assert node_tools.stamp("0.2.0+abc", []) == "0.2.0+abc"
    stamped = node_tools.stamp("0.2.0+abc", pins)
    assert stamped.startswith("0.2.0+abc pins:") and stamped == node_tools.stamp("0.2.0+abc", pins[::-1])
    bumped = [dict(pins[0], version="2.3.3", sha256="68" * 32), pins[1]]
    assert node_tools.stamp("0.2.0+abc", bumped) != stamped
