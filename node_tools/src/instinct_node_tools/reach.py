# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The fabric stage's reachability check: the master listens, every other node connects to it.

Run before any launch: proves each node reaches the rendezvous port over its fabric interface (the
peers bind their fabric address before connecting).
"""

import argparse
import json
import socket
import sys
import time


def listen(address, port, timeout, expected):
    """Accept one TCP connection from each expected peer address; returns (seen, missing)."""
    expected = set(expected)
    seen = set()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(len(expected) + 4)
    deadline = time.monotonic() + timeout
    try:
        while not expected <= seen and time.monotonic() < deadline:
            server.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, (peer, _port) = server.accept()
            except TimeoutError:
                break
            seen.add(peer)
            conn.close()
    finally:
        server.close()
    return sorted(seen), sorted(expected - seen)


def connect(source, master, port, timeout):
    """Connect from ``source`` to ``master:port`` until it answers; returns None or the last error."""
    deadline = time.monotonic() + timeout
    error = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((master, port), timeout=2, source_address=(source, 0)):
                return None
        except OSError as err:
            error = err
            time.sleep(0.5)
    return error or TimeoutError(f"no answer in {timeout} s")


def listen_cli(argv=None):
    parser = argparse.ArgumentParser(prog="instinct-fabric-listen", description=listen.__doc__)
    parser.add_argument("address")
    parser.add_argument("port", type=int)
    parser.add_argument("timeout", type=float)
    parser.add_argument("peers", nargs="*")
    args = parser.parse_args(argv)
    seen, missing = listen(args.address, args.port, args.timeout, args.peers)
    print(json.dumps({"listened": f"{args.address}:{args.port}", "seen": seen, "missing": missing}))
    return 0 if not missing else 1


def connect_cli(argv=None):
    parser = argparse.ArgumentParser(prog="instinct-fabric-connect", description=connect.__doc__)
    parser.add_argument("source")
    parser.add_argument("master")
    parser.add_argument("port", type=int)
    parser.add_argument("timeout", type=float)
    args = parser.parse_args(argv)
    error = connect(args.source, args.master, args.port, args.timeout)
    if error is None:
        print(f"{args.source} -> {args.master}:{args.port} ok")
        return 0
    print(f"{args.source} -> {args.master}:{args.port} failed: {error}", file=sys.stderr)
    return 1
