import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.pci import parse_lspci_paths
from tests.unit.conftest import FIXTURES


def test_recorded_mi300x_node_has_eight_gpus_on_eight_root_ports():
    text = (FIXTURES / "lspci" / "mi300x-8gpu-d-1002-74a1-PP.txt").read_text()
    devices = parse_lspci_paths(text)
    assert [d["bdf"] for d in devices] == [
        "05:00.0", "2b:00.0", "5b:00.0", "65:00.0", "7d:00.0", "a5:00.0", "d5:00.0", "e7:00.0",
    ]  # fmt: skip
    assert len({d["root_port"] for d in devices}) == 8
    assert {d["class"] for d in devices} == {"Processing accelerators"}
    assert all(d["name"].endswith("Aqua Vanjaram [Instinct MI300X]") for d in devices)
    assert devices[0]["path"] == ["00:01.1", "01:00.0", "02:00.0", "03:00.0", "04:00.0", "05:00.0"]


def test_no_device_is_an_empty_list():
    assert parse_lspci_paths("") == []


@pytest.mark.parametrize("text", ["lspci: command not found", "05:00.0", "zz:00.0 Class: Name"])
def test_other_text_is_refused(text):
    with pytest.raises(ValueError, match="not an lspci"):
        parse_lspci_paths(text)
