"""The wheel_build role's share step (roles/wheel_build/tasks/share.yml) through ansible-playbook on two
nodes that are both this machine (issue 32, finding 5): the builder's server binds the management
address it is given, each peer fetches with the secret the controller made for it this run, and a stray
client that keeps asking for the same wheels meanwhile is refused, never counted: the peer still gets
every wheel, the server ends when it has them, the plan file holding the secrets is gone, and no secret
reaches the play's output. The server is the node tools' own code (node_tools/src), run from a stand-in
tools folder."""

import grp
import hashlib
import json
import os
import pwd
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from tests.unit.conftest import COLLECTIONS, ROOT, role_step_playbook

WHEELS = {
    "torch-2.13.0-cp311-cp311-linux_x86_64.whl": b"torch" * 20000,
    "deepspeed-0.16.9-py3-none-any.whl": b"ds" * 9000,
}
SHIM = """#!{python}
import sys
sys.path.insert(0, {src!r})
from instinct_node_tools.serve_wheels import cli
sys.exit(cli())
"""


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Stray(threading.Thread):
    """A client with no secret asking the builder's port for the wheels until told to stop."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.answers = []

    def run(self):
        while not self.stop.is_set():
            for name in WHEELS:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/packages/{name}", timeout=5) as answer:
                        self.answers.append(answer.status)
                except urllib.error.HTTPError as error:
                    self.answers.append(error.code)
                except OSError:
                    pass  # not listening (yet, or any more)
            self.stop.wait(0.05)


def run_share(tmp_path, port, *, check=False, server=None, after_build=None):
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    shim = tools / "instinct-serve-wheels"
    shim.write_text(server or SHIM.format(python=sys.executable, src=str(ROOT / "node_tools" / "src")))
    shim.chmod(0o755)
    builder, peer, home = tmp_path / "node1", tmp_path / "node2", tmp_path / "home"
    for folder in (builder, peer, home):
        folder.mkdir()
    for name, content in WHEELS.items():
        (builder / name).write_bytes(content)
    # What the build account's build leaves beside its wheels (locked_build.sh): their sha256.
    (builder / "SHA256SUMS").write_text(
        "".join(f"{hashlib.sha256(content).hexdigest()}  {name}\n" for name, content in sorted(WHEELS.items()))
    )
    if after_build:
        after_build(builder)
    # Extra vars: the step's playbook reads the roles' defaults as vars files, above the inventory.
    common = {
        "ansible_connection": "local",
        "ansible_become": False,  # the step serves as instinct_build_user; here as the test's own user
        "ansible_python_interpreter": sys.executable,
        "instinct_build_user": pwd.getpwuid(os.getuid()).pw_name,
        "instinct_build_group": grp.getgrgid(os.getgid()).gr_name,
        "instinct_build_home": str(home),
        "instinct_tools_dir": str(tools.parent),
        # The index's venv is the test's stand-in folder (its shim runs the checkout's code with this
        # Python, which has pypiserver): the role does not install one.
        "wheel_build_index_manage": False,
        "wheel_build_index_dir": str(tools.parent),
        "instinct_management_address": "127.0.0.1",
        "wheel_build_serve_port": port,
        "wheel_build_serve_timeout": 120,
        "wheel_build_serve_idle_timeout": 60,
        "wheel_build_share_prefix": "",
        "wheel_build_plan_entry": {"builder": "node1", "hosts": ["node1", "node2"]},
    }
    hosts = {"node1": {"wheel_build_out": str(builder)}, "node2": {"wheel_build_out": str(peer)}}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"instinct_nodes": {"hosts": hosts}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(role_step_playbook("wheel_build", "share.yml", "Share the wheels", hosts="instinct_nodes"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")  # fmt: skip
    command = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(command) if command.exists() else "ansible-playbook", "-i", str(inventory), str(playbook), "-v",
         "-e", json.dumps(common), *(["--check"] if check else [])],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return proc, builder, peer, home


def test_the_peer_gets_every_wheel_while_a_stray_client_asks_for_them(tmp_path):
    port = free_port()
    stray = Stray(port)
    stray.start()
    try:
        proc, _builder, peer, home = run_share(tmp_path, port)
    finally:
        stray.stop.set()
        stray.join(10)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for name, content in WHEELS.items():
        assert hashlib.sha256((peer / name).read_bytes()).hexdigest() == hashlib.sha256(content).hexdigest()
    # The peer keeps the builder's record beside its copy.
    assert (peer / "SHA256SUMS").read_text() == (tmp_path / "node1" / "SHA256SUMS").read_text()
    # The stray was answered while the server ran, and only with a refusal.
    assert stray.answers and set(stray.answers) == {401}, stray.answers
    flat = " ".join(out.split())
    serving = f"serving 2 wheel(s) of {tmp_path / 'node1'} as a package index on 127.0.0.1:{port} to 1 peer(s)"
    assert f"{serving} for 2 transfer(s)" in flat
    assert "sent deepspeed-0.16.9-py3-none-any.whl (18000 bytes) to 127.0.0.1 (node2)" in flat
    assert "sent torch-2.13.0-cp311-cp311-linux_x86_64.whl (100000 bytes) to 127.0.0.1 (node2)" in flat
    assert re.search(r"refused \d+ request\(s\) without a valid secret \(not counted\)", flat)
    # The plan file is gone, and no secret (43 letters and digits) reached the output.
    assert list(home.iterdir()) == []
    assert not re.search(r"(?<![A-Za-z0-9])[A-Za-z0-9]{43}(?![A-Za-z0-9])", out)
    # The server ended with the share: nothing listens on the port after the play.
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_check_mode_starts_no_server_and_says_what_would_be_fetched(tmp_path):
    port = free_port()
    proc, _builder, peer, home = run_share(tmp_path, port, check=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    flat = " ".join(proc.stdout.split())
    wanted = "deepspeed-0.16.9-py3-none-any.whl, torch-2.13.0-cp311-cp311-linux_x86_64.whl"
    assert f"node2: check mode; a real run fetches {wanted}" in flat
    assert list(peer.iterdir()) == [] and list(home.iterdir()) == []


def test_a_wheel_put_beside_the_build_is_never_served_and_a_swapped_one_stops_the_share(tmp_path):
    """Issue 32: the builder's folder is trusted only as far as the sha256 recorded when its wheels were
    made. A wheel planted there after the build is not shared; a recorded wheel whose bytes changed
    stops the share on every node, naming it, before any server starts."""
    planted = "deepspeed-0.16.9+evil-py3-none-any.whl"
    proc, _builder, peer, _home = run_share(
        tmp_path, free_port(), after_build=lambda folder: (folder / planted).write_bytes(b"evil")
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert sorted(p.name for p in peer.glob("*.whl")) == sorted(WHEELS)
    flat = " ".join(proc.stdout.split())
    assert "sent deepspeed-0.16.9-py3-none-any.whl" in flat and f"sent {planted}" not in flat

    swapped = tmp_path / "swapped"
    swapped.mkdir()
    name = "deepspeed-0.16.9-py3-none-any.whl"
    proc, _builder, peer, home = run_share(
        swapped, free_port(), after_build=lambda folder: (folder / name).write_bytes(b"not the build")
    )
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert f"the builder's {name} has sha256 {hashlib.sha256(b'not the build').hexdigest()}, not the" in flat
    assert "recorded when it was made: it changed since" in flat
    assert list(peer.iterdir()) == [] and list(home.iterdir()) == []


def test_a_server_that_never_starts_leaves_no_plan_and_the_peer_fails_naming_the_builder(tmp_path):
    """Issue 32 (review): the plan holding the peers' secrets stayed on the builder's disk when the server
    never read it."""
    proc, _builder, peer, home = run_share(tmp_path, free_port(), server="#!/bin/sh\nexit 1\n")
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert "node2: could not fetch from node1" in flat
    assert list(home.iterdir()) == []
    assert list(peer.iterdir()) == []
