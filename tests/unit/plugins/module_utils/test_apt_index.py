"""apt_index's readers and decision on real ``apt-cache policy`` outputs (tests/fixtures/apt)."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.apt_index import (
    has_package_lists,
    missing_packages,
    policy_versions,
    refresh_reason,
    unknown_packages,
)
from tests.unit.conftest import FIXTURES


def read(name):
    return (FIXTURES / "apt" / name).read_text()


# What apt-get update leaves in /var/lib/apt/lists on Ubuntu 22.04 (names as apt builds them).
JAMMY_LISTS = [
    "archive.ubuntu.com_ubuntu_dists_jammy_InRelease",
    "archive.ubuntu.com_ubuntu_dists_jammy_main_binary-amd64_Packages.lz4",
    "archive.ubuntu.com_ubuntu_dists_jammy_main_i18n_Translation-en",
    "lock",
    "partial",
]


def test_an_empty_or_lockfile_only_lists_folder_holds_no_index():
    assert has_package_lists([]) is False
    assert has_package_lists(["lock", "partial"]) is False
    assert has_package_lists(["archive.ubuntu.com_ubuntu_dists_jammy_InRelease", "lock"]) is False


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz", ".lz4", ".zst"])
def test_a_packages_index_counts_stored_plain_or_compressed(suffix):
    assert has_package_lists([f"repo.radeon.com_rocm_apt_7.0.2_dists_jammy_main_binary-amd64_Packages{suffix}"])
    assert has_package_lists(JAMMY_LISTS)


def test_two_packages_in_one_policy_output():
    policy = policy_versions(read("xenial-python-python3.txt"))
    assert policy == {
        "python": {
            "installed": None,
            "candidate": "2.7.11-1",
            "versions": {"2.7.11-1": ["http://in.archive.ubuntu.com/ubuntu"]},
        },
        "python3": {
            "installed": "3.5.1-3",
            "candidate": "3.5.1-3",
            "versions": {"3.5.1-3": ["http://in.archive.ubuntu.com/ubuntu"]},
        },
    }


def test_dpkg_status_is_no_source():
    policy = policy_versions(read("xenial-postgresql-upgradable.txt"))["postgresql-9.5"]
    assert policy["installed"] == "9.5.11-0ubuntu0.16.04"
    assert policy["candidate"] == "9.5.13-0ubuntu0.16.04"
    assert policy["versions"]["9.5.11-0ubuntu0.16.04"] == []
    assert len(policy["versions"]) == 4
    apache = policy_versions(read("trusty-apache2-installed.txt"))["apache2"]
    assert apache["versions"]["2.4.7-1ubuntu4.1"] == [
        "http://fi.archive.ubuntu.com/ubuntu/",
        "http://security.ubuntu.com/ubuntu/",
    ]


def test_a_name_without_candidate_or_versions_is_unknown():
    policy = policy_versions(read("trixie-policykit-1-no-candidate.txt"))
    assert policy["policykit-1"] == {"installed": None, "candidate": None, "versions": {}}
    assert unknown_packages(["policykit-1"], policy) == ["policykit-1"]


def test_a_name_apt_never_heard_of_is_unknown():
    assert unknown_packages(["python3-packaging"], policy_versions("")) == ["python3-packaging"]


def test_a_pinned_away_candidate_still_installs_an_offered_version():
    policy = policy_versions(read("datastax-cassandra-pinned.txt"))
    assert policy["cassandra"]["pin"] == "2.1.8"
    assert unknown_packages(["cassandra", "cassandra=2.1.8", "cassandra=2.1.*"], policy) == []
    assert unknown_packages(["cassandra=3.0"], policy) == ["cassandra=3.0"]


def test_installed_candidate_and_exact_versions_are_known():
    policy = policy_versions(read("xenial-python-python3.txt") + read("xenial-postgresql-upgradable.txt"))
    specs = ["python", "python3", "postgresql-9.5=9.5.11-0ubuntu0.16.04", "postgresql-9.5=9.5.2-1"]
    assert unknown_packages(specs, policy) == []
    assert unknown_packages(["python=3.0", "postgresql-9.5=9.6*"], policy) == ["python=3.0", "postgresql-9.5=9.6*"]


def test_a_phased_version_is_read_as_a_version():
    # apt 2.x on Ubuntu marks a version rolled out in phases: "249.11-0ubuntu3.3 1 (phased 0%)".
    policy = policy_versions(read("jammy-libsystemd-dev-phased.txt"))["libsystemd-dev"]
    assert policy["candidate"] == "249.11-0ubuntu3"
    assert policy["versions"] == {
        "249.11-0ubuntu3.3": ["http://azure.archive.ubuntu.com/ubuntu"],
        "249.11-0ubuntu3": ["http://azure.archive.ubuntu.com/ubuntu"],
    }
    assert unknown_packages(["libsystemd-dev=249.11-0ubuntu3.3"], {"libsystemd-dev": policy}) == []


def test_empty_lists_are_never_trusted_however_recent():
    # The image of issue 15: built a minute ago, its lists folder empty.
    assert refresh_reason(False, 60, 3600) == "the package lists are empty"
    assert refresh_reason(False, 0, 3600) == "the package lists are empty"


def test_lists_are_refreshed_when_old_forced_never_updated_or_missing_a_package():
    assert refresh_reason(True, 30, 3600) is None
    assert refresh_reason(True, 7200, 3600) == "the package lists are 7200 s old (more than 3600 s)"
    assert refresh_reason(True, None, 3600) == "the package lists were never updated"
    assert refresh_reason(True, 30, 3600, force=True) == "a package source changed"
    assert refresh_reason(True, 30, 3600, unknown=["ccache"]) == "apt does not know ccache"


def test_missing_packages_reads_what_dpkg_has_installed():
    policy = policy_versions(read("xenial-python-python3.txt"))
    assert missing_packages(["python3", "python3=3.5.1-3", "python3=3.5.*"], policy) == []
    assert missing_packages(["python", "python3=3.5.2-1", "nonexistent"], policy) == [
        "python",
        "python3=3.5.2-1",
        "nonexistent",
    ]


def test_nothing_to_install_needs_no_refresh_unless_a_source_changed():
    assert refresh_reason(False, None, 3600, nothing_to_install=True) is None
    assert refresh_reason(True, 10**6, 3600, nothing_to_install=True) is None
    assert refresh_reason(True, 10, 3600, force=True, nothing_to_install=True) == "a package source changed"
