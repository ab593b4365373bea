"""instinct-probe, the one probe of a training venv (was three: pytorch's torch probe, diagnose's
venv probe, llama_factory's installed check), installed and run where torch is missing and over the
pinned training libraries."""

import json


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
