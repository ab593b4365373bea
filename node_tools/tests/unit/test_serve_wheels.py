"""instinct-serve-wheels, the builder's wheel share: only the named files, until the expected
transfers are done or the time is up."""

import subprocess
import time
import urllib.error
import urllib.request

import pytest


def fetch(url, deadline):
    """GET ``url``, retrying while the server is not up yet; returns (status, body)."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - a local http URL
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, b""
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def wheels(tmp_path):
    (tmp_path / "torch-2.13.0-cp311-linux_x86_64.whl").write_bytes(b"wheel" * 1000)
    (tmp_path / "secret.txt").write_text("not shared")
    return tmp_path


def test_the_named_wheels_are_served_until_the_expected_transfers_are_done(node_tools, wheels, free_port):
    port = free_port()
    name = "torch-2.13.0-cp311-linux_x86_64.whl"
    argv = [str(node_tools.script("instinct-serve-wheels")), str(wheels), "127.0.0.1", str(port), "1", "60", name]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        assert fetch(f"http://127.0.0.1:{port}/secret.txt", deadline) == (404, b"")
        assert fetch(f"http://127.0.0.1:{port}/{name}", deadline) == (200, b"wheel" * 1000)
        out, err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert server.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == f"serving 1 wheel(s) of {wheels} on 127.0.0.1:{port} for 1 transfer(s)"
    assert lines[1].startswith(f"sent {name} (5000 bytes) to 127.0.0.1 in ")


def test_without_the_expected_transfers_it_gives_up_with_status_3(node_tools, wheels, free_port):
    done = node_tools.run("instinct-serve-wheels", wheels, "127.0.0.1", free_port(), 2, 0.5, "a.whl")
    assert done.returncode == 3
    assert done.stdout.splitlines()[-1] == "gave up after 0 s with 0 of 2 transfers done"
