"""Property tests: a mangled `ibv_devinfo` output gives IbvDevinfoError or the same devices and ports,
never a port that looks readier than it was.

What the verbs check acts on is which ports exist and, for each, its state, link layer and rate, so
those are what a damaged output must never change: a value may only become unknown. A flipped digit
inside a value that carries no check of its own (a GUID, a firmware version, a GID) is
indistinguishable from a real reading and is not claimed to be caught.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.instinct.finetune.plugins.module_utils.rdma import IbvDevinfoError, parse_ibv_devinfo
from tests.unit.conftest import FIXTURES

SAMPLES = {path.name: path.read_text(encoding="utf-8") for path in sorted((FIXTURES / "rdma").glob("ibv_devinfo*"))}
EXPECTED = {name: parse_ibv_devinfo(text) for name, text in SAMPLES.items()}
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CHECKED = ("state", "link_layer", "rate_gbps", "width", "speed", "active_mtu")


def outcome(text):
    try:
        return parse_ibv_devinfo(text)
    except IbvDevinfoError as err:
        assert "See docs/runbooks/fabric-bandwidth.md" in str(err)
        return None


def assert_same_or_unknown(devices, expected):
    """Device by device and port by port (a renamed device is a flipped character in a value): every
    checked fact as it was, or unknown."""
    assert len(devices) <= len(expected)
    for device, original in zip(devices, expected, strict=False):
        assert [p["port"] for p in device["ports"]] == [p["port"] for p in original["ports"]]
        for port, before in zip(device["ports"], original["ports"], strict=True):
            for key in CHECKED:
                assert port[key] in (before[key], "", None), (key, port, before)


@pytest.mark.parametrize("name", sorted(SAMPLES))
@FUZZ
@given(data=st.data())
def test_deleting_a_line(name, data):
    lines = SAMPLES[name].split("\n")
    index = data.draw(st.integers(0, len(lines) - 1))
    devices = outcome("\n".join(lines[:index] + lines[index + 1 :]))
    if devices is not None:
        assert len(devices) == len(EXPECTED[name])
        assert_same_or_unknown(devices, EXPECTED[name])


@pytest.mark.parametrize("name", sorted(SAMPLES))
@FUZZ
@given(data=st.data())
def test_replacing_a_character(name, data):
    text = SAMPLES[name]
    index = data.draw(st.integers(0, len(text) - 1))
    char = data.draw(st.sampled_from("0123456789abcdefxX:()_ \t\n-.PORT_ACTIVEDWNhcaid"))
    devices = outcome(text[:index] + char + text[index + 1 :])
    if devices is not None:
        assert len(devices) == len(EXPECTED[name])
        assert_same_or_unknown(devices, EXPECTED[name])


@pytest.mark.parametrize("name", sorted(SAMPLES))
@FUZZ
@given(data=st.data())
def test_cutting_the_output_short(name, data):
    text = SAMPLES[name]
    end = data.draw(st.integers(0, len(text)))
    devices = outcome(text[:end])
    if devices is not None:
        # The devices before the cut as they were; the last one at most with a value unknown.
        whole = max(len(devices) - 1, 0)
        assert devices[:whole] == EXPECTED[name][:whole]
        assert_same_or_unknown(devices, EXPECTED[name])


@FUZZ
@given(st.text(max_size=2000))
def test_arbitrary_text_never_yields_a_port(text):
    assert outcome(text) in (None, [])
