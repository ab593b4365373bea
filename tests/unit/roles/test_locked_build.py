"""wheel_build's build runner (roles/wheel_build/files/locked_build.sh): two runs that start the same
build at once build once; the second waits for the first and takes its wheel. The build's wheels get
their sha256 recorded when it ends, and a wheel without that record is built again (issue 32)."""

import hashlib
import subprocess
import time

from tests.unit.conftest import ROOT

RUNNER = (ROOT / "roles" / "wheel_build" / "files" / "locked_build.sh").read_text()


def start(out, script, log):
    # As the role starts it: bash -c TEXT NAME ARGS...
    argv = ["/bin/bash", "-c", RUNNER, "locked_build", str(out), "deepspeed-", str(log), str(script), "60"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_run_during_a_build_waits_for_it_and_builds_nothing(tmp_path):
    out = tmp_path / "wheels"
    out.mkdir()
    starts = tmp_path / "starts"
    script = tmp_path / "build.sh"
    # A build that takes a while and writes its wheel only at its end, as pip wheel does.
    script.write_text(
        "#!/bin/sh\n"
        f"echo started >> {starts}\n"
        "sleep 2\n"
        'touch "$WHEEL_BUILD_OUT/deepspeed-0.16.9-cp311-cp311-linux_x86_64.whl"\n'
        "echo built\n"
    )
    script.chmod(0o755)
    first = start(out, script, tmp_path / "first.log")
    # The second run starts once the first build is under way (it holds the lock by then).
    deadline = time.monotonic() + 20
    while not starts.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = start(out, script, tmp_path / "second.log")
    first_out = first.communicate(timeout=30)[0]
    second_out = second.communicate(timeout=30)[0]
    assert (first.returncode, second.returncode) == (0, 0)
    assert starts.read_text().splitlines() == ["started"]
    assert "built" in first_out and (tmp_path / "first.log").read_text() == "built\n"
    assert "was built by a run that held the lock before this one" in second_out
    # The waiting run left the first build's log alone and wrote none of its own.
    assert not (tmp_path / "second.log").exists()
    (wheel,) = out.glob("*.whl")
    assert (out / "SHA256SUMS").read_text() == f"{hashlib.sha256(wheel.read_bytes()).hexdigest()}  {wheel.name}\n"


def test_a_wheel_without_the_record_of_its_build_is_built_again(tmp_path):
    """A wheel in the folder with no SHA256SUMS (an earlier release's store, or one put there) is no
    build: it goes, the build runs, and the record names only what the build made."""
    out = tmp_path / "wheels"
    out.mkdir()
    (out / "deepspeed-0.16.9+planted-py3-none-any.whl").write_bytes(b"planted")
    script = tmp_path / "build.sh"
    script.write_text('#!/bin/sh\nprintf built > "$WHEEL_BUILD_OUT/deepspeed-0.16.9-py3-none-any.whl"\n')
    script.chmod(0o755)
    run = start(out, script, tmp_path / "build.log")
    stdout = run.communicate(timeout=30)[0]
    assert run.returncode == 0, stdout
    assert "has no sha256 recorded at its build; building again" in stdout
    assert sorted(p.name for p in out.glob("*.whl")) == ["deepspeed-0.16.9-py3-none-any.whl"]
    digest = hashlib.sha256(b"built").hexdigest()
    assert (out / "SHA256SUMS").read_text() == f"{digest}  deepspeed-0.16.9-py3-none-any.whl\n"


def test_a_failing_build_fails_the_run_and_lets_the_next_one_build(tmp_path):
    out = tmp_path / "wheels"
    out.mkdir()
    script = tmp_path / "build.sh"
    script.write_text("#!/bin/sh\necho 'error: no compiler' >&2\nexit 3\n")
    script.chmod(0o755)
    failed = start(out, script, tmp_path / "build.log")
    failed.communicate(timeout=30)
    assert failed.returncode == 3
    assert "no compiler" in (tmp_path / "build.log").read_text()
    script.write_text('#!/bin/sh\ntouch "$WHEEL_BUILD_OUT/deepspeed-0.16.9-py3-none-any.whl"\n')
    again = start(out, script, tmp_path / "build.log")
    again.communicate(timeout=30)
    assert again.returncode == 0
    assert [p.name for p in out.glob("*.whl")] == ["deepspeed-0.16.9-py3-none-any.whl"]
