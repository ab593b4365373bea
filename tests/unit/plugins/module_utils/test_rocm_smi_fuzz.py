"""Property tests: mangled amd-smi / rocm-smi output gives SmiError or the same GPUs, never others.

What the roles act on is which GPUs exist (count and indices) and how they are linked, so those are
what a damaged output must never change. A flipped digit inside a value is indistinguishable from a
real reading and is not claimed to be caught.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.instinct.finetune.plugins.module_utils.rocm_smi import (
    SmiError,
    parse_amdsmi_static,
    parse_rocm_smi_json,
    parse_rocm_smi_showtopo,
)
from tests.unit.conftest import FIXTURES


def shape(result):
    gpus = result["gpus"] if isinstance(result, dict) else result
    links = result.get("links", []) if isinstance(result, dict) else []
    return [gpu["index"] for gpu in gpus], sorted((link["a"], link["b"], link["link_type"]) for link in links)


CASES = {
    "amdsmi-static-mi300x-8gpu.json": parse_amdsmi_static,
    "rocmsmi-mi100-4gpu-rocm602.json": parse_rocm_smi_json,
    "rocmsmi-showtopo-8gpu-xgmi.txt": parse_rocm_smi_showtopo,
}
TEXT = {name: (FIXTURES / "smi" / name).read_text(encoding="utf-8") for name in CASES}
EXPECTED = {name: shape(parser(TEXT[name])) for name, parser in CASES.items()}
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same_or_error(name, text):
    try:
        result = CASES[name](text)
    except SmiError as err:
        assert "See docs/runbooks/" in str(err)
        return
    assert shape(result) == EXPECTED[name]


def test_the_samples_have_gpus_and_links():
    assert len(EXPECTED["amdsmi-static-mi300x-8gpu.json"][0]) == 8
    assert len(EXPECTED["rocmsmi-mi100-4gpu-rocm602.json"][1]) == 6
    assert len(EXPECTED["rocmsmi-showtopo-8gpu-xgmi.txt"][1]) == 28


@pytest.mark.parametrize("name", sorted(CASES))
@FUZZ
@given(data=st.data())
def test_replacing_a_character(name, data):
    text = TEXT[name]
    index = data.draw(st.integers(0, len(text) - 1))
    char = data.draw(st.sampled_from('0123456789"{}[],:GPUXMIcardx \n-'))
    same_or_error(name, text[:index] + char + text[index + 1 :])


@pytest.mark.parametrize("name", sorted(CASES))
@FUZZ
@given(data=st.data())
def test_deleting_a_line(name, data):
    lines = TEXT[name].split("\n")
    index = data.draw(st.integers(0, len(lines) - 1))
    same_or_error(name, "\n".join(lines[:index] + lines[index + 1 :]))


@pytest.mark.parametrize("name", ["amdsmi-static-mi300x-8gpu.json", "rocmsmi-mi100-4gpu-rocm602.json"])
@FUZZ
@given(data=st.data())
def test_cutting_json_short(name, data):
    text = TEXT[name].rstrip()
    end = data.draw(st.integers(0, len(text) - 1))
    with pytest.raises(SmiError):
        CASES[name](text[:end])


@FUZZ
@given(st.text(max_size=500))
def test_arbitrary_text_is_refused(text):
    for parser in CASES.values():
        with pytest.raises(SmiError):
            parser(text)
