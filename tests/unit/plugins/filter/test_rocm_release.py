import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.rocm import rocm_release, rocm_release_problem
from tests.unit.conftest import ROOT

RELEASES = yaml.safe_load((ROOT / "roles/common/defaults/main.yml").read_text())["instinct_rocm_releases"]


@pytest.mark.parametrize(
    ("version", "folder", "amdgpu"),
    [
        ("7.0.2", "7.0.2", "30.10.2"),  # a patch release keeps its full number
        ("7.0.0", "7.0", "30.10"),  # AMD drops the trailing .0
        ("7.0", "7.0", "30.10"),
        ("7.1", "7.1", "30.20"),
        ("7.1.0", "7.1", "30.20"),
        ("7.2.0", "7.2", "30.30"),
    ],
)
def test_release_map_gives_the_folders(version, folder, amdgpu):
    info = rocm_release(version, RELEASES)
    assert info["repo_folder"] == folder
    assert info["amdgpu_folder"] == amdgpu
    assert rocm_release_problem(version, RELEASES) == ""


@pytest.mark.parametrize(
    ("version", "problem"),
    [
        ("7.x", "is not MAJOR.MINOR.PATCH"),
        ("latest", "is not MAJOR.MINOR.PATCH"),
        ("7.0.2.1", "is not MAJOR.MINOR.PATCH"),
        ("6.4.1", "is not in the supported release map (known: 7.0.0"),
        ("7.9.1", "add it to instinct_rocm_releases"),
    ],
)
def test_bad_versions_are_explained(version, problem):
    assert problem in rocm_release_problem(version, RELEASES)
    with pytest.raises(AnsibleFilterError, match=problem.split(" (")[0]):
        rocm_release(version, RELEASES)
