"""The apt_index module through ansible, with stand-in apt-get and apt-cache first on PATH (the
package manager is the boundary): when it refreshes, what it asks apt, and how it fails."""

import os

import pytest

from tests.unit.conftest import FIXTURES, run_module

POLICY = (FIXTURES / "apt" / "xenial-python-python3.txt").read_text()


@pytest.fixture
def apt(tmp_path, monkeypatch):
    """A lists folder, a stamp, and stand-ins that log their argv; ``apt-cache policy`` answers the
    recording once ``apt-get update`` has run (or at once when ``known`` exists)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lists = tmp_path / "lists"
    lists.mkdir()
    log = tmp_path / "calls"
    updated = tmp_path / "updated"
    policy = tmp_path / "policy.txt"
    policy.write_text(POLICY)
    (bin_dir / "apt-get").write_text(
        f"#!/bin/sh\necho \"apt-get $*\" >> '{log}'\n"
        f"[ -f '{tmp_path / 'update-fails'}' ] && {{ echo 'Err:2 http://repo.example/rocm jammy InRelease'; "
        "echo 'W: GPG error: http://repo.example/rocm jammy InRelease: NO_PUBKEY 9386B48A1A693C5C' >&2; "
        "echo 'E: The repository is not signed.' >&2; exit 100; }\n"
        f"touch '{updated}' '{lists}/archive.ubuntu.com_ubuntu_dists_jammy_main_binary-amd64_Packages.lz4'\n"
    )
    (bin_dir / "apt-cache").write_text(
        f"#!/bin/sh\necho \"apt-cache $*\" >> '{log}'\n"
        f"if [ -f '{updated}' ] || [ -f '{tmp_path / 'known'}' ]; then cat '{policy}'; fi\n"
    )
    for tool in ("apt-get", "apt-cache"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def calls():
        return log.read_text().splitlines() if log.exists() else []

    return {"root": tmp_path, "lists": lists, "calls": calls, "args": f"lists_dir={lists} stamp_file={tmp_path}/stamp"}


def test_empty_new_lists_are_refreshed_before_anything_is_looked_up(apt):
    # The freshly built image: an empty lists folder modified a moment ago.
    rc, result = run_module("apt_index", f"{apt['args']} packages=python,python3")
    assert rc == 0, result
    assert result["changed"] is False
    assert (result["refreshed"], result["reason"]) == (True, "the package lists are empty")
    # dpkg's status is asked first (the stand-in knows nothing before the update: nothing installed).
    assert apt["calls"]() == [
        "apt-cache policy python python3",
        "apt-get update -q -o DPkg::Lock::Timeout=120",
        "apt-cache policy python python3",
    ]
    assert result["missing"] == ["python", "python3"]


def test_packages_installed_as_asked_need_no_refresh_however_old_or_empty_the_lists(apt):
    # The recording: python3 3.5.1-3 installed, python not. A re-run of a converged node names
    # only installed packages: its install would change nothing, so apt is not updated for it.
    (apt["root"] / "known").write_text("")
    os.utime(apt["lists"], (0, 0))
    for packages in ("python3", "python3=3.5.1-3", "python3=3.5*"):
        rc, result = run_module("apt_index", f"{apt['args']} packages={packages}")
        assert rc == 0, result
        assert (result["refreshed"], result["missing"], result["unknown"]) == (False, [], []), packages
    assert not any(call.startswith("apt-get") for call in apt["calls"]())

    # One not installed: the lists are judged as before (empty: refreshed).
    _rc, result = run_module("apt_index", f"{apt['args']} packages=python3,python")
    assert result["missing"] == ["python"]
    assert (result["refreshed"], result["reason"]) == (True, "the package lists are empty")

    # A changed source is refreshed whatever is installed.
    _rc, result = run_module("apt_index", f"{apt['args']} packages=python3 force=true")
    assert (result["refreshed"], result["missing"]) == (True, [])


def test_recent_lists_that_know_the_packages_are_trusted(apt):
    (apt["lists"] / "archive.ubuntu.com_ubuntu_dists_jammy_main_binary-amd64_Packages").write_text("")
    (apt["root"] / "known").write_text("")
    rc, result = run_module("apt_index", f"{apt['args']} packages=python3")
    assert rc == 0, result
    assert (result["refreshed"], result["reason"], result["unknown"]) == (False, "", [])
    assert apt["calls"]() == ["apt-cache policy python3"]


def test_a_package_apt_does_not_know_refreshes_once(apt):
    (apt["lists"] / "archive.ubuntu.com_ubuntu_dists_jammy_main_binary-amd64_Packages").write_text("")
    rc, result = run_module("apt_index", f"{apt['args']} packages=python")
    assert rc == 0, result
    assert (result["refreshed"], result["unknown"]) == (True, ["python"])
    assert result["reason"] == "apt does not know python"
    assert [c.split()[1] for c in apt["calls"]()] == ["policy", "update", "policy"]


def test_a_package_no_source_offers_fails_naming_it_and_the_runbook(apt):
    rc, result = run_module("apt_index", f"{apt['args']} packages=python,no-such-package")
    assert rc != 0
    assert result["failed"] is True
    assert result["unknown"] == ["no-such-package"]
    assert "apt does not know no-such-package even after refreshing its package lists" in result["msg"]
    assert "docs/runbooks/apt-index.md" in result["msg"]


def test_a_failing_update_is_retried_then_fails_with_apts_error_and_its_cause(apt):
    (apt["root"] / "update-fails").write_text("")
    rc, result = run_module("apt_index", f"{apt['args']} force=true update_attempts=2")
    assert rc != 0
    assert result["msg"].startswith(
        "apt-get update failed (2 attempts): E: The repository is not signed.; "
        "W: GPG error: http://repo.example/rocm jammy InRelease: NO_PUBKEY 9386B48A1A693C5C; "
        "Err:2 http://repo.example/rocm jammy InRelease."
    )
    assert [c.split()[1] for c in apt["calls"]()] == ["update", "update"]
    assert not (apt["root"] / "stamp").exists()


def test_a_successful_update_stamps_the_lists_age(apt):
    rc, result = run_module("apt_index", apt["args"])
    assert rc == 0 and result["refreshed"] is True
    assert (apt["root"] / "stamp").exists()
    # Now the lists are known to be fresh: nothing to do on the next call.
    rc, result = run_module("apt_index", apt["args"])
    assert (rc, result["refreshed"]) == (0, False)


def test_check_mode_refreshes_too_and_changes_nothing(apt):
    # The lists are a cache: a check run must be able to judge the installs that follow.
    rc, result = run_module("apt_index", f"{apt['args']} packages=python3", extra=["--check"])
    assert rc == 0, result
    assert (result["changed"], result["refreshed"]) == (False, True)
