"""Property tests: mangled rocminfo output gives RocminfoError or the right facts, never wrong ones.

The facts the roles act on are the GPU count and the gfx archs (they choose what PyTorch is built
for and what the PCI count is compared with), so those are what a damaged output must never change.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.instinct.finetune.plugins.module_utils.rocminfo import RocminfoError, parse_rocminfo
from tests.unit.conftest import FIXTURES

SAMPLES = {
    name: (FIXTURES / "rocminfo" / name).read_text(encoding="utf-8")
    for name in ("mi300x-8gpu.txt", "mi300a.txt", "mi100-plus-igpu.txt")
}
EXPECTED = {name: parse_rocminfo(text) for name, text in SAMPLES.items()}
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(text):
    try:
        facts = parse_rocminfo(text)
    except RocminfoError as err:
        assert err.reason in {
            "unparsable",
            "driver_not_loaded",
            "kfd_permission",
            "kfd_missing",
            "hsa_failure",
        }
        assert "See docs/runbooks/" in str(err)
        return None
    return facts


def assert_same_or_error(text, name):
    facts = outcome(text)
    if facts is not None:
        assert facts["rocm_gpu_count"] == EXPECTED[name]["rocm_gpu_count"]
        assert facts["rocm_gfx_archs"] == EXPECTED[name]["rocm_gfx_archs"]


@pytest.mark.parametrize("name", sorted(SAMPLES))
@FUZZ
@given(data=st.data())
def test_deleting_a_line(name, data):
    lines = SAMPLES[name].split("\n")
    index = data.draw(st.integers(0, len(lines) - 1))
    assert_same_or_error("\n".join(lines[:index] + lines[index + 1 :]), name)


@pytest.mark.parametrize("name", sorted(SAMPLES))
@FUZZ
@given(data=st.data())
def test_replacing_a_character(name, data):
    text = SAMPLES[name]
    index = data.draw(st.integers(0, len(text) - 1))
    char = data.draw(st.sampled_from("0123456789abcdefxgGCPU:*= \n-+"))
    assert_same_or_error(text[:index] + char + text[index + 1 :], name)


@pytest.mark.parametrize("name", sorted(SAMPLES))
@FUZZ
@given(data=st.data())
def test_cutting_the_output_short(name, data):
    text = SAMPLES[name]
    end = data.draw(st.integers(0, text.rindex("*** Done ***")))
    with pytest.raises(RocminfoError):
        parse_rocminfo(text[:end])


@FUZZ
@given(st.text(max_size=2000))
def test_arbitrary_text_never_yields_gpus(text):
    try:
        facts = parse_rocminfo(text)
    except RocminfoError:
        return
    # Random text can only parse if it carries complete agent blocks, which it cannot here.
    pytest.fail(f"parsed random text into {facts}")
