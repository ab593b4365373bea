"""instinct-fabric-listen and instinct-fabric-connect, the fabric stage's reachability check, run
over the loopback network: every 127.0.0.0/8 address is this machine's, so each "peer" binds one
of its own before it connects, as a node binds its fabric address."""

import json
import subprocess


def listen(node_tools, port, timeout, *peers):
    argv = [str(node_tools.script("instinct-fabric-listen")), "127.0.0.1", str(port), str(timeout), *peers]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_master_sees_every_peer_that_connects_from_its_fabric_address(node_tools, free_port):
    port = free_port()
    master = listen(node_tools, port, 30, "127.0.0.2", "127.0.0.3")
    try:
        for peer in ("127.0.0.2", "127.0.0.3"):
            # The peer keeps trying until the master listens.
            done = node_tools.run("instinct-fabric-connect", peer, "127.0.0.1", port, 20)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == f"{peer} -> 127.0.0.1:{port} ok"
        out, err = master.communicate(timeout=30)
    finally:
        master.kill()
    assert master.returncode == 0, err
    assert json.loads(out) == {"listened": f"127.0.0.1:{port}", "seen": ["127.0.0.2", "127.0.0.3"], "missing": []}


def test_a_peer_that_never_connects_is_named_and_fails_the_master(node_tools, free_port):
    port = free_port()
    master = listen(node_tools, port, 2, "127.0.0.2", "127.0.0.4")
    try:
        assert node_tools.run("instinct-fabric-connect", "127.0.0.2", "127.0.0.1", port, 20).returncode == 0
        out, _err = master.communicate(timeout=30)
    finally:
        master.kill()
    assert master.returncode == 1
    assert json.loads(out)["missing"] == ["127.0.0.4"] and json.loads(out)["seen"] == ["127.0.0.2"]


def test_a_peer_that_cannot_reach_the_master_says_why(node_tools, free_port):
    port = free_port()  # nothing listens there
    done = node_tools.run("instinct-fabric-connect", "127.0.0.2", "127.0.0.1", port, 1)
    assert done.returncode == 1
    assert done.stderr.startswith(f"127.0.0.2 -> 127.0.0.1:{port} failed: ")
    assert "refused" in done.stderr
