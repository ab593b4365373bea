"""The pci_devices module through ansible, with a stand-in lspci first on PATH (the PCI bus is the
boundary) that answers the real recording of an 8x MI300X node for 1002:74a1 and nothing for the
other ids: one module run lists every id, in order, and a failing lspci is named."""

import json
import os

import pytest

from tests.unit.conftest import FIXTURES, run_module

RECORDED = FIXTURES / "lspci" / "mi300x-8gpu-d-1002-74a1-PP.txt"


@pytest.fixture
def lspci(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    (bin_dir / "lspci").write_text(
        f"#!/bin/sh\necho \"$*\" >> '{log}'\n"
        f"[ -f '{tmp_path / 'broken'}' ] && {{ echo 'pcilib: Cannot open /proc/bus/pci' >&2; exit 1; }}\n"
        f"[ \"$*\" = '-d 1002:74a1 -PP' ] && cat '{RECORDED}'\nexit 0\n"
    )
    (bin_dir / "lspci").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return {"root": tmp_path, "calls": lambda: log.read_text().splitlines()}


def test_every_id_is_asked_in_one_run_and_the_gpus_come_with_their_paths(lspci):
    rc, result = run_module("pci_devices", json.dumps({"device_ids": ["74a0", "74a1", "74b5"]}))
    assert rc == 0, result
    assert lspci["calls"]() == ["-d 1002:74a0 -PP", "-d 1002:74a1 -PP", "-d 1002:74b5 -PP"]
    devices = result["devices"]
    assert len(devices) == 8  # the recording's eight MI300X
    assert {d["device_id"] for d in devices} == {"74a1"}
    assert all(d["bdf"] == d["path"][-1] and d["root_port"] == d["path"][0] for d in devices)
    assert len({d["root_port"] for d in devices}) == 8  # one root port per GPU on that node
    assert result["outputs"]["74a0"] == "" and result["outputs"]["74a1"] == RECORDED.read_text()
    assert result["changed"] is False


def test_a_failing_lspci_is_named_with_its_message(lspci):
    (lspci["root"] / "broken").write_text("")
    rc, result = run_module("pci_devices", json.dumps({"device_ids": ["74a1"]}), ["--check"])
    assert rc != 0
    assert "-d 1002:74a1 -PP failed (rc 1): pcilib: Cannot open /proc/bus/pci" in result["msg"]
