"""instinct-serve-wheels, the builder's wheel share (issue 32, finding 5): it binds the one address it
is given, serves a file only to a peer that sends the secret the controller made for it this run and
whose list holds the file, counts only complete transfers owed to a peer, and ends when every peer
has every file of its list, at its deadline, or when no peer has asked for a while.

The attack it was open to: any client's GET of a served wheel counted toward the expected transfers,
so one stray fetch ended the server and the real peer's fetch failed (the stack stage then stopped on
every node)."""

import base64
import hashlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from instinct_node_tools.serve_wheels import PlanError, Share, read_plan

TORCH = "torch-2.13.0-cp311-cp311-linux_x86_64.whl"
DS = "deepspeed-0.16.9-cp311-cp311-linux_x86_64.whl"
SECRET2 = "s2-" + "a" * 40
SECRET3 = "s3-" + "b" * 40


def fetch(url, deadline, token=None):
    """GET ``url`` (with the peer's secret when given), retrying while the server is not up yet;
    returns (status, body)."""
    headers = {"Authorization": "Basic " + base64.b64encode(f"peer:{token}".encode()).decode()} if token else {}
    while True:
        try:
            request = urllib.request.Request(url, headers=headers)  # noqa: S310 - a local http URL
            with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - a local http URL
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, b""
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def wheels(tmp_path):
    (tmp_path / TORCH).write_bytes(b"torch" * 1000)
    (tmp_path / DS).write_bytes(b"ds" * 700)
    (tmp_path / "secret.txt").write_text("not shared")
    return tmp_path


class Server:
    """instinct-serve-wheels started with its arguments and the plan on stdin (the role gives a file;
    test_the_plan_file_is_removed_once_read)."""

    def __init__(self, index, wheels, port, plan, *, deadline=60, idle=60, address="127.0.0.1"):  # noqa: PLR0913
        argv = [
            str(index.script("instinct-serve-wheels")), str(wheels), address, str(port), "--plan", "-",
            "--deadline", str(deadline), "--idle", str(idle),
        ]  # fmt: skip
        self.plan = plan
        self.url = f"http://{address}:{port}"
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.process.stdin.write(json.dumps(plan) + "\n")
        self.process.stdin.close()

    def get(self, name, token=None, timeout=30):
        return fetch(f"{self.url}/packages/{name}", time.monotonic() + timeout, token)

    def finish(self, timeout=30):
        try:
            self.process.wait(timeout=timeout)
        finally:
            self.process.kill()
        out, err = self.process.stdout.read(), self.process.stderr.read()
        for entry in self.plan.values():
            assert entry["token"] not in out + err, "a secret reached the server's output"
        return self.process.returncode, out.splitlines(), err

    def running(self):
        return self.process.poll() is None


def test_a_stray_get_does_not_disturb_distribution(wheel_index, wheels, free_port):
    """The reproduced attack: a stray GET of the served wheel, then the real peer's fetch. Before the
    fix the stray GET got the wheel and counted, the server ended, and the peer's fetch was refused."""
    server = Server(wheel_index, wheels, free_port(), {"node2": {"token": SECRET2, "files": [TORCH, DS]}})
    # Strays: no secret, a wrong one, the right one with the wrong scheme; pypiserver's own pages too.
    assert server.get(TORCH) == (401, b"")
    assert server.get(TORCH, token="not-" + SECRET2) == (401, b"")
    bearer = urllib.request.Request(  # noqa: S310 - a local http URL
        f"{server.url}/packages/{TORCH}", headers={"Authorization": f"Bearer {SECRET2}"}
    )
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(bearer, timeout=10)  # noqa: S310 - a local http URL
    assert fetch(f"{server.url}/simple/torch/", time.monotonic() + 5, None) == (401, b"")
    # The peer's secret for what it does not fetch, or for a path out of the folder.
    assert server.get("secret.txt", token=SECRET2) == (404, b"")
    assert server.get(f"../{wheels.name}/{TORCH}", token=SECRET2) == (404, b"")
    time.sleep(1)  # the server would have ended here if a stray had counted
    assert server.running()
    # The real peer still gets every file, and the server ends when it has.
    assert server.get(TORCH, token=SECRET2) == (200, b"torch" * 1000)
    assert server.running()
    assert server.get(DS, token=SECRET2) == (200, b"ds" * 700)
    status, lines, err = server.finish()
    assert status == 0, err
    assert lines[0] == (
        f"serving 2 wheel(s) of {wheels} as a package index on {server.url[7:]} to 1 peer(s) for 2 transfer(s)"
    )
    assert sum(line.startswith("refused GET ") and line.endswith(": no valid secret") for line in lines) == 4
    assert any(line.startswith(f"sent {TORCH} (5000 bytes) to 127.0.0.1 (node2) in ") for line in lines)
    assert any(line.startswith(f"sent {DS} (1400 bytes) to 127.0.0.1 (node2) in ") for line in lines)
    assert lines[-1] == "refused 4 request(s) without a valid secret (not counted)"


def test_it_is_a_package_index_that_pip_reads_with_the_recorded_sha256(wheel_index, wheels, free_port):
    """pypiserver's PEP 503 pages: the peer's secret lists the project with each file's sha256, the
    link pip follows; the listing is not a transfer."""
    server = Server(wheel_index, wheels, free_port(), {"node2": {"token": SECRET2, "files": [TORCH]}})
    status, page = fetch(f"{server.url}/simple/torch/", time.monotonic() + 30, SECRET2)
    digest = hashlib.sha256(b"torch" * 1000).hexdigest()
    assert status == 200 and f'href="/packages/{TORCH}#sha256={digest}"' in page.decode(), page
    time.sleep(1)
    assert server.running()
    assert server.get(TORCH, token=SECRET2)[0] == 200
    status, _lines, err = server.finish()
    assert status == 0, err


def test_each_peer_is_counted_by_its_own_list_and_a_retry_counts_once(wheel_index, wheels, free_port):
    plan = {"node2": {"token": SECRET2, "files": [TORCH]}, "node3": {"token": SECRET3, "files": [TORCH, DS]}}
    server = Server(wheel_index, wheels, free_port(), plan)
    # node2 fetches its wheel three times (retries after a bad checksum, say): one transfer owed to node2,
    # never node3's. node3's secret does not open another peer's list either: it is node3's own list.
    for _attempt in range(3):
        assert server.get(TORCH, token=SECRET2) == (200, b"torch" * 1000)
    assert server.get(DS, token=SECRET2) == (404, b"")
    time.sleep(1)
    assert server.running()
    assert server.get(TORCH, token=SECRET3)[0] == 200
    assert server.running()
    assert server.get(DS, token=SECRET3)[0] == 200
    status, lines, err = server.finish()
    assert status == 0, err
    assert lines[0].endswith("to 2 peer(s) for 3 transfer(s)")


def test_it_binds_only_the_address_it_is_given(wheel_index, wheels, free_port):
    port = free_port()
    server = Server(wheel_index, wheels, port, {"node2": {"token": SECRET2, "files": [TORCH]}})
    assert server.get("secret.txt", token=SECRET2) == (404, b"")  # up, on 127.0.0.1
    # Another address of this machine (127.0.0.2, the loopback network's) is not listened on.
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.2", port), timeout=5):
        pass
    assert server.get(TORCH, token=SECRET2)[0] == 200
    status, _lines, err = server.finish()
    assert status == 0, err


def test_at_the_deadline_it_gives_up_naming_what_was_not_fetched(wheel_index, wheels, free_port):
    plan = {"node2": {"token": SECRET2, "files": [TORCH]}, "node3": {"token": SECRET3, "files": [DS]}}
    server = Server(wheel_index, wheels, free_port(), plan, deadline=3, idle=60)
    # A peer that keeps asking does not keep it alive past its deadline.
    assert server.get(TORCH, token=SECRET2)[0] == 200
    status, lines, _err = server.finish()
    assert status == 3
    assert lines[-1] == (
        "gave up after 3 s (the deadline) with 1 of 2 transfers done; not fetched: node3 "
        f"({DS}). See docs/runbooks/wheel-build-failed.md"
    )


def test_after_an_aborted_play_it_ends_when_no_peer_asks(wheel_index, wheels, free_port):
    """The play that started it was aborted: no peer comes. It ends after the idle time, not the
    hour of its deadline; a stray's requests do not keep it alive."""
    server = Server(wheel_index, wheels, free_port(), {"node2": {"token": SECRET2, "files": [TORCH]}}, idle=2)
    started = time.monotonic()
    for _stray in range(3):
        assert server.get(TORCH)[0] == 401
        time.sleep(0.5)
    status, lines, _err = server.finish()
    assert status == 3
    assert time.monotonic() - started < 20
    assert lines[-1].startswith("gave up: no peer asked for a wheel for 2 s, with 0 of 1 transfers done; not fetched: ")


def test_a_port_in_use_is_refused_with_the_cause(wheel_index, wheels):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        server = Server(wheel_index, wheels, port, {"node2": {"token": SECRET2, "files": [TORCH]}})
        status, lines, _err = server.finish()
    assert status == 4
    assert lines[-1].startswith(f"cannot listen on 127.0.0.1:{port}: ")
    assert "Another run's wheel server still holds the port" in lines[-1]


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ("not json", "the plan is not JSON"),
        ({}, "the plan names no peer"),
        ({"node2": {"token": "short", "files": [TORCH]}}, "peer node2: no secret of at least 24 characters"),
        ({"node2": {"token": SECRET2, "files": []}}, "peer node2: no file to fetch"),
        ({"node2": {"token": SECRET2, "files": ["../etc/passwd"]}}, "peer node2: '../etc/passwd' is not a file name"),
        ({"node2": {"token": SECRET2, "files": ["missing.whl"]}}, "peer node2: missing.whl is not in "),
        (
            {"node2": {"token": SECRET2, "files": [TORCH]}, "node3": {"token": SECRET2, "files": [TORCH]}},
            "peer node3: its secret is another peer's",
        ),
    ],
)
def test_a_bad_plan_is_refused(wheels, plan, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(".", r"\.")):
        read_plan(plan if isinstance(plan, str) else json.dumps(plan), str(wheels))


def test_the_installed_script_refuses_a_bad_plan_with_status_2(wheel_index, wheels, free_port):
    done = wheel_index.run(
        "instinct-serve-wheels", wheels, "127.0.0.1", free_port(), "--plan", "-", "--deadline", 5, "--idle", 5,
        input="{}",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout.strip() == "cannot serve: the plan names no peer. See docs/runbooks/wheel-build-failed.md"


def test_the_plan_file_is_removed_once_read(wheel_index, wheels, tmp_path, free_port):
    """The role writes the plan (it holds the secrets) to a file only the service user reads; the
    server removes it before it listens."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"node2": {"token": SECRET2, "files": [TORCH]}}))
    port = free_port()
    argv = [
        str(wheel_index.script("instinct-serve-wheels")), str(wheels), "127.0.0.1", str(port),
        "--plan", str(plan), "--deadline", "30", "--idle", "30",
    ]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert fetch(f"http://127.0.0.1:{port}/packages/{TORCH}", time.monotonic() + 30, SECRET2)[0] == 200
        assert not plan.exists()
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
    missing = wheel_index.run(
        "instinct-serve-wheels", wheels, "127.0.0.1", free_port(), "--plan", plan, "--deadline", 5, "--idle", 5
    )
    assert missing.returncode == 2
    assert missing.stdout.startswith(f"cannot serve: the plan {plan} cannot be read: ")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_idle_time_runs_only_while_no_transfer_runs():
    clock = Clock()
    share = Share({"n2": {"token": SECRET2, "files": [TORCH]}}, deadline=3600, idle=60, clock=clock)
    share.begin()
    clock.now += 600  # a slow transfer of a big wheel: not idle
    assert share.verdict() is None
    share.end("n2", TORCH, complete=False)  # it broke: still owed
    clock.now += 59
    assert share.verdict() is None
    clock.now += 1
    assert share.verdict()[0] == 3
    basic = base64.b64encode(f"any-user:{SECRET2}".encode()).decode()
    assert share.peer_of(f"Basic {basic}") == "n2"
    assert share.peer_of(f"basic {basic}") == "n2"
    assert share.peer_of(f"Bearer {SECRET2}") is None
    assert share.peer_of("Basic " + base64.b64encode(SECRET2.encode()).decode()) is None  # no user:secret
    assert share.peer_of("Basic not-base64!") is None
    assert share.peer_of(SECRET2) is None
    assert share.peer_of(None) is None


def raw_request(url, method="GET", token=None, body=None, headers=None):
    """(status, body) of one request, whatever its method; the peer's secret as basic auth."""
    headers = dict(headers or {})
    if token:
        headers["Authorization"] = "Basic " + base64.b64encode(f"peer:{token}".encode()).decode()
    request = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310 - a local URL
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - a local http URL
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_a_peer_cannot_upload_or_remove_through_the_index(wheel_index, wheels, free_port):
    """Review of issue 32's index: with its own valid secret, a peer posted pypiserver's upload and
    remove actions and changed the builder's wheel folder. The index is read-only: anything but GET and
    HEAD is refused before pypiserver, and only /simple/ and /packages/ are served."""
    server = Server(wheel_index, wheels, free_port(), {"node2": {"token": SECRET2, "files": [TORCH]}})
    assert server.get("secret.txt", token=SECRET2) == (404, b"")  # up
    boundary = "x" * 16
    upload = (
        f'--{boundary}\r\nContent-Disposition: form-data; name=":action"\r\n\r\nfile_upload\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="content"; filename="evil-9.9-py3-none-any.whl"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\nevil\r\n--{boundary}--\r\n"
    ).encode()
    form = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    assert raw_request(f"{server.url}/", "POST", SECRET2, upload, form)[0] == 405
    remove = b":action=remove_pkg&name=torch&version=2.13.0"
    plain = {"Content-Type": "application/x-www-form-urlencoded"}
    assert raw_request(f"{server.url}/", "POST", SECRET2, remove, plain)[0] == 405
    assert not (wheels / "evil-9.9-py3-none-any.whl").exists() and (wheels / TORCH).exists()
    # A path pypiserver's router would read otherwise (latin-1 in, UTF-8 with the byte dropped there).
    assert raw_request(f"{server.url}/pack%FFages/{TORCH}", token=SECRET2)[0] == 400
    assert raw_request(f"{server.url}/", token=SECRET2)[0] == 404
    # A header that is not base64 at all is a stray, not an error.
    assert raw_request(f"{server.url}/packages/{TORCH}", headers={"Authorization": "Basic é"})[0] == 401
    time.sleep(1)
    assert server.running()
    assert server.get(TORCH, token=SECRET2) == (200, b"torch" * 1000)
    status, _lines, err = server.finish()
    assert status == 0, err
    assert "Traceback" not in err
