"""instinct-probe, the one probe of a training venv (was three: pytorch's torch probe, diagnose's
venv probe, llama_factory's installed check), installed and run where torch is missing and over the
pinned training libraries."""

import json
import os


def probe(tools, *args):
    done = tools.run("instinct-probe", *args, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_without_torch_the_probe_reports_the_import_error_as_json(node_tools):
    found = probe(node_tools, "--torch")
    assert set(found) == {"python", "torch"}
    assert found["torch"] == {"error": "ModuleNotFoundError: No module named 'torch'"}
    found = probe(node_tools)
    assert found["deepspeed_error"] == "ModuleNotFoundError: No module named 'deepspeed'"
    assert found["llamafactory_error"] == "ModuleNotFoundError: No module named 'llamafactory'"
    assert found["trainer"] is None  # no LLaMA-Factory: its trainer is not tried
    assert found["companions"] == {"torchvision": None, "torchaudio": None}  # left out is no fault
    assert found["distributions"] == dict.fromkeys(("torch", "torchvision", "torchaudio", "deepspeed", "llamafactory"))


def test_over_the_training_libraries_the_probe_reads_torch_and_its_companions(train_tools, train_python):
    found = probe(train_tools, "--torch")
    torch = found["torch"]
    assert "error" not in torch, torch
    assert torch["version"].startswith("2.") and torch["hip"] is None
    # The CPU torch of the training libraries: no GPU seen, none counted, no arch listed.
    assert (torch["available"], torch["device_count"], torch["arch_list"]) == (False, 0, [])
    found = probe(train_tools)
    assert found["deepspeed_error"] is None and found["llamafactory_error"] is None
    assert found["distributions"]["torch"]["version"] == torch["version"]
    assert found["distributions"]["deepspeed"]["version"]
    assert found["distributions"]["llamafactory"]["version"]


def stand_in_llamafactory(folder, tuner_source):
    """A package named llamafactory whose train.tuner module runs ``tuner_source``: what the probe's
    child Python imports, without LLaMA-Factory's dependencies."""
    train = folder / "llamafactory" / "train"
    train.mkdir(parents=True)
    (folder / "llamafactory" / "__init__.py").write_text("")
    (train / "__init__.py").write_text("")
    (train / "tuner.py").write_text(tuner_source)
    return dict(os.environ, PYTHONPATH=str(folder))


def test_the_probe_tries_the_trainers_import_in_a_child_python(node_tools, tmp_path):
    """LLaMA-Factory imports but its trainer does not (0.9.5's data pipeline imports torchaudio at
    module level): the probe reports the child's exit status and the traceback's tail, which the
    diagnose role judges with module_utils/trainer_import.py."""
    env = stand_in_llamafactory(tmp_path, "import torchaudio\n")
    done = node_tools.run("instinct-probe", env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["llamafactory_error"] is None
    assert found["trainer"]["rc"] == 1
    assert found["trainer"]["output"].rstrip().endswith("ModuleNotFoundError: No module named 'torchaudio'")


def test_a_trainer_that_imports_or_hangs(monkeypatch, tmp_path):
    from instinct_node_tools import probe as node_probe  # noqa: PLC0415 - node_tools/src, put on the path by conftest

    monkeypatch.setenv("PYTHONPATH", stand_in_llamafactory(tmp_path, "import json\n")["PYTHONPATH"])
    assert node_probe.trainer_import() == {"rc": 0, "output": ""}
    (tmp_path / "llamafactory" / "train" / "tuner.py").write_text("import time\ntime.sleep(30)\n")
    assert node_probe.trainer_import(timeout=1) == {
        "rc": None,
        "output": "import llamafactory.train.tuner did not finish in 1 s",
    }
