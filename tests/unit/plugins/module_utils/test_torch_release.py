"""The release map from the node's ROCm to PyTorch's ROCm wheels, on the role's own map
(roles/pytorch/vars/main.yml, pytorch_rocm_wheels), and the check of torch's HIP against /opt/rocm.

The torch.version.hip values are ones real ROCm torch builds print: 7.0.51831-a3e329ad8 (ROCm 7.0
builds; pytorch wheels and AMD's containers), 7.1.52802-26aae437f6 (hipcc of ROCm 7.1.1) and
7.2.53211 (torch 2.13.0+rocm7.2 from download.pytorch.org/whl/rocm7.2), as reported in public
projects' environment notes."""

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils import torch_release as tr
from tests.unit.conftest import ROOT

VARS = yaml.safe_load((ROOT / "roles/pytorch/vars/main.yml").read_text())
BUILDS = VARS["pytorch_rocm_wheels"]
DEFAULTS = yaml.safe_load((ROOT / "roles/pytorch/defaults/main.yml").read_text())
ROCM_DEFAULTS = yaml.safe_load((ROOT / "roles/rocm/defaults/main.yml").read_text())
ROCM_RELEASES = yaml.safe_load((ROOT / "roles/common/defaults/main.yml").read_text())["instinct_rocm_releases"]


@pytest.mark.parametrize(
    ("rocm", "torch", "index", "label"),
    [
        ("7.0.2", "2.10.0", "https://download.pytorch.org/whl/rocm7.0", "rocm7.0"),
        ("7.0.0", "2.10.0", "https://download.pytorch.org/whl/rocm7.0", "rocm7.0"),
        ("7.1.0", "2.10.0", "https://download.pytorch.org/whl/rocm7.1", "rocm7.1"),
        ("7.1.1", "2.11.0", "https://download.pytorch.org/whl/rocm7.1", "rocm7.1"),
        ("7.1", "2.13.0", "https://download.pytorch.org/whl/rocm7.1", "rocm7.1"),
        ("7.2.0", "2.11.0", "https://download.pytorch.org/whl/rocm7.2", "rocm7.2"),
        ("7.2.0", "2.12.0", "https://download.pytorch.org/whl/rocm7.2", "rocm7.2"),
    ],
)
def test_the_rocm_release_gives_the_index_and_label(rocm, torch, index, label):
    wheel = tr.torch_wheel(rocm, torch, BUILDS)
    assert (wheel["index_url"], wheel["local_version"]) == (index, label)
    assert label in wheel["published"]


def test_the_defaults_fit_together():
    """The pytorch role's torch is published for the rocm role's default release, so a default site.yml
    installs the same wheel as before the map (2.10.0+rocm7.0)."""
    wheel = tr.torch_wheel(ROCM_DEFAULTS["rocm_version"], DEFAULTS["pytorch_version"], BUILDS)
    assert wheel["local_version"] == "rocm7.0"
    assert wheel["index_url"] == "https://download.pytorch.org/whl/rocm7.0"
    assert DEFAULTS["pytorch_index_url"] == "" and DEFAULTS["pytorch_local_version"] == ""


def test_every_rocm_release_the_rocm_role_knows_has_a_torch_on_the_map():
    for release in ROCM_RELEASES:
        minor = tr.rocm_minor(release)
        assert any(minor in rocms for rocms in BUILDS.values()), release


@pytest.mark.parametrize(
    ("rocm", "torch", "says"),
    [
        # 2.10 was built for ROCm 7.0 and 7.1 only: a 7.2 node needs 2.11 or later.
        (
            "7.2.0",
            "2.10.0",
            ["no torch 2.10.0 for ROCm 7.2", "whl/rocm7.2 has none", "2.11, 2.12, 2.13", "7.0.x or 7.1.x"],
        ),
        # 2.11 dropped ROCm 7.0.
        (
            "7.0.2",
            "2.11.0",
            ["no torch 2.11.0 for ROCm 7.0", "set pytorch_version to a torch built for ROCm 7.0 (2.10)"],
        ),
        # 2.9 has no ROCm 7 wheel at all (pytorch/pytorch issue #168268).
        ("7.0.2", "2.9.1", ["no torch 2.9.1 for ROCm 7.0", "built for ROCm 6.4"]),
        (
            "7.1.0",
            "2.15.0",
            ["torch 2.15.0 is not in the ROCm wheel map", "add its ROCm indexes to pytorch_rocm_wheels"],
        ),
        ("7.x", "2.10.0", ["rocm_version '7.x' is not MAJOR.MINOR.PATCH"]),
        ("7.0.2", "latest", ["pytorch_version 'latest' is not a torch release"]),
    ],
)
def test_an_unpublished_or_unknown_combination_is_refused_with_the_fix(rocm, torch, says):
    with pytest.raises(ValueError) as err:
        tr.torch_wheel(rocm, torch, BUILDS)
    for words in says:
        assert words in str(err.value)


def test_the_record_comes_before_the_variable_and_a_disagreement_is_noted():
    chosen = tr.choose_wheel("7.1.0", "7.0.2", "2.10.0", BUILDS)
    assert (chosen["rocm_version"], chosen["rocm_version_source"]) == ("7.1.0", "record")
    assert chosen["local_version"] == "rocm7.1" and chosen["problem"] is None
    assert "rocm_version is 7.0.2 but the rocm stage installed ROCm 7.1.0" in chosen["note"]
    assert tr.choose_wheel("7.1.0", "7.1", "2.10.0", BUILDS)["note"] is None


def test_without_a_record_the_variable_decides():
    chosen = tr.choose_wheel(None, "7.2.0", "2.12.0", BUILDS)
    assert chosen["rocm_version_source"] == "rocm_version"
    assert chosen["index_url"] == "https://download.pytorch.org/whl/rocm7.2"
    assert chosen["published"] == ["rocm7.1", "rocm7.2"]


def test_without_record_or_variable_no_wheel_is_guessed():
    chosen = tr.choose_wheel(None, "", "2.10.0", BUILDS)
    assert chosen["rocm_version"] is None and chosen["local_version"] == ""
    assert "no ROCm release is known for this node" in chosen["problem"]
    assert "playbooks/provision.yml" in chosen["problem"]


def test_a_refused_combination_is_a_problem_not_a_wheel():
    chosen = tr.choose_wheel("7.2.0", "", "2.10.0", BUILDS)
    assert chosen["local_version"] == "" and chosen["index_url"] == ""
    assert "no torch 2.10.0 for ROCm 7.2" in chosen["problem"]


def test_overrides_win_and_a_label_set_by_hand_is_not_checked():
    mirror = "https://mirror.example/torch/rocm7.2"
    chosen = tr.choose_wheel("7.2.0", "", "2.10.0", BUILDS, {"local_version": "rocm7.2", "index_url": mirror})
    assert (chosen["index_url"], chosen["local_version"], chosen["problem"]) == (mirror, "rocm7.2", None)
    # A mirror of the same index: the label is still derived and checked.
    chosen = tr.choose_wheel("7.0.2", "", "2.10.0", BUILDS, {"index_url": mirror})
    assert (chosen["index_url"], chosen["local_version"]) == (mirror, "rocm7.0")
    assert "no torch" in tr.choose_wheel("7.2.0", "", "2.10.0", BUILDS, {"index_url": mirror})["problem"]
    # none: the find-links folders only.
    chosen = tr.choose_wheel("7.0.2", "", "2.10.0", BUILDS, {"index_url": "none"})
    assert (chosen["index_url"], chosen["local_version"]) == ("", "rocm7.0")
    # A label alone takes the index of the node's release.
    chosen = tr.choose_wheel(None, "7.1.1", "2.10.0", BUILDS, {"local_version": "rocm7.1"})
    assert chosen["index_url"] == "https://download.pytorch.org/whl/rocm7.1"
    chosen = tr.choose_wheel(None, "", "2.10.0", BUILDS, {"local_version": "rocm7.1"})
    assert (chosen["index_url"], chosen["problem"]) == ("", None)


def test_a_malformed_record_or_variable_is_a_problem():
    assert "is not MAJOR.MINOR.PATCH" in tr.choose_wheel("garbage", "", "2.10.0", BUILDS)["problem"]
    assert "is not MAJOR.MINOR.PATCH" in tr.choose_wheel(None, "7", "2.10.0", BUILDS)["problem"]


@pytest.mark.parametrize(
    ("hip", "rocm"),
    [
        ("7.0.51831-a3e329ad8", "7.0.2"),
        ("7.0.51831-a3e329ad8", "7.0.0"),
        ("7.1.52802-26aae437f6", "7.1.1"),
        ("7.2.53211", "7.2.0"),
    ],
)
def test_a_torch_built_for_the_same_rocm_minor_passes(hip, rocm):
    assert tr.hip_problem(hip, rocm, "2.10.0+rocm7.0") == ""


def test_a_torch_built_for_another_rocm_is_refused_with_the_index_and_the_release_to_set():
    problem = tr.hip_problem("7.0.51831-a3e329ad8", "7.1.0", "2.10.0+rocm7.0")
    assert "torch 2.10.0+rocm7.0 was built for ROCm 7.0 (torch.version.hip 7.0.51831-a3e329ad8)" in problem
    assert "/opt/rocm is ROCm 7.1.0" in problem
    assert "https://download.pytorch.org/whl/rocm7.1" in problem
    assert "set rocm_version to a 7.0.x release" in problem
    newer = tr.hip_problem("7.2.53211", "7.0.2", "2.13.0+rocm7.2")
    assert "built for ROCm 7.2" in newer and "whl/rocm7.0" in newer


@pytest.mark.parametrize("hip", [None, "", "unknown"])
def test_no_hip_is_not_this_checks_to_judge(hip):
    """A CPU or CUDA torch has no torch.version.hip: the role's torch_problems check says that."""
    assert tr.hip_problem(hip, "7.1.0") == ""


def test_no_known_rocm_skips_the_hip_check():
    assert tr.hip_problem("7.0.51831-a3e329ad8", "") == ""


@pytest.mark.parametrize(
    ("text", "minor"), [("2.10.0", "2.10"), ("2.10.0+rocm7.0", "2.10"), ("2.14.0a0+rocm7.2", "2.14"), ("2.9", "2.9")]
)
def test_torch_minor(text, minor):
    assert tr.torch_minor(text) == minor
