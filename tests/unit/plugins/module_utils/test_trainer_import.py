import pathlib

from ansible_collections.instinct.finetune.plugins.module_utils.trainer_import import (
    import_problem,
    torch_install_method,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "trainer_import"


def recording(name):
    return (FIXTURES / name).read_text()


def test_a_working_import_is_no_problem():
    assert import_problem(0, "") is None


def test_missing_torchaudio_names_host_module_fix_and_runbook():
    problem = import_problem(1, recording("anynode-22-no-torchaudio.txt"), "node1", "2.10.0", "source")
    assert problem["kind"] == "missing-companion"
    assert problem["module"] == "torchaudio"
    message = problem["message"]
    assert message.startswith("node1: torch 2.10.0 has no torchaudio")
    assert "builds torchaudio from its tag" in message
    assert "docs/runbooks/trainer-import.md" in message


def test_the_wheel_path_fix_names_the_torch_source():
    problem = import_problem(1, recording("anynode-22-no-torchaudio.txt"), "node1", "2.10.0+rocm7.0", "wheel")
    assert "pytorch_index_url" in problem["message"]


def test_the_path_is_read_from_the_torch_version_when_not_given():
    """An index build has a local label; the source build sets PYTORCH_BUILD_VERSION without one."""
    assert torch_install_method("2.10.0+rocm7.0") == "wheel"
    assert torch_install_method("2.10.0") == "source"
    wheel = import_problem(1, recording("anynode-22-no-torchaudio.txt"), "n", "2.10.0+rocm7.0")
    source = import_problem(1, recording("anynode-22-no-torchaudio.txt"), "n", "2.10.0")
    assert "pytorch_index_url" in wheel["message"]
    assert "builds torchaudio from its tag" in source["message"]


def test_a_companion_built_for_another_torch():
    problem = import_problem(1, recording("hallo-98-torchvision-nms.txt"), "node2", "2.10.0")
    assert problem["kind"] == "companion-mismatch"
    assert problem["module"] == "torchvision"
    assert "operator torchvision::nms does not exist" in problem["message"]


def test_another_missing_module_points_at_the_llama_factory_install():
    problem = import_problem(1, "ModuleNotFoundError: No module named 'peft.tuners'\n", "node3")
    assert problem == {
        "kind": "missing-module",
        "module": "peft",
        "message": problem["message"],
    }
    assert "llama_factory role installs its requirements" in problem["message"]


def test_anything_else_keeps_the_last_lines():
    problem = import_problem(139, "", "node4")
    assert problem["kind"] == "other"
    assert "exits 139: no output" in problem["message"]
