"""preflight counts the Instinct GPUs on the PCI bus by device id: every Instinct id of the PCI ID
Project's list (a recorded excerpt, tests/fixtures/lspci/SOURCES.md) is counted, under its name."""

import re

import yaml

from tests.unit.conftest import FIXTURES, ROOT

IDS = yaml.safe_load((ROOT / "roles" / "common" / "vars" / "main.yml").read_text())["instinct_pci_ids"]
RECORDED = (FIXTURES / "lspci" / "pci.ids_1002-aqua-vanjaram-instinct.txt").read_text()


def recorded_instinct():
    assert RECORDED.startswith("1002  Advanced Micro Devices, Inc. [AMD/ATI]\n")  # AMD's vendor section
    return dict(re.findall(r"^\t([0-9a-f]{4})  Aqua Vanjaram \[Instinct (.+)\]$", RECORDED, re.M))


def test_every_mi300_and_mi350_series_id_of_the_pci_id_list_is_counted_under_its_name():
    recorded = recorded_instinct()
    assert {"74b5", "75a0", "75a3"} <= set(recorded)  # the MI300X VF (SR-IOV guests), MI350X, MI355X
    assert {device: IDS.get(device) for device in recorded} == recorded


def test_the_ids_are_lower_case_hex_as_lspci_takes_them():
    assert all(re.fullmatch(r"[0-9a-f]{4}", device) for device in IDS)
