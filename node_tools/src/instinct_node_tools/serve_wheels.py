"""Serve the builder's wheels to the other nodes of its arch set, then end.

Run by the wheel_build role on the node that built the wheels, as a background job:

    instinct-serve-wheels DIR ADDRESS PORT --plan FILE --deadline SECONDS --idle SECONDS

The plan (JSON in FILE, which the server removes once read, or on stdin for ``--plan -``; never on
the command line, where ``ps`` shows it) names each peer with the secret the controller made for it
this run and the files it fetches: ``{"node2": {"token": "...", "files": ["torch-....whl"]}}``. The
server binds ADDRESS:PORT (the
management address the inventory chooses, never every address unless told) and answers a GET of
``/NAME`` only with the header ``Authorization: Bearer TOKEN`` of a peer whose list holds NAME:
a request without a valid secret gets 403, a valid secret asking for a file not in its list 404,
and neither counts. It ends with status 0 once every peer has received every file of its list in
full; a peer that fetches again (a retry) gets the file again, counted once. It gives up with
status 3 after ``--deadline`` seconds, or after ``--idle`` seconds in which no peer asked for
anything and no transfer ran: a play aborted after starting it leaves it listening only until
then. Status 2: a bad plan; 4: the address and port cannot be bound. Each peer checks the sha256
the controller gave it, so the controller moves sha256 sums, never wheels. Standard library only
(the tools venv is the distribution's Python). One line per transfer goes to stdout (the play shows
them); a secret never does.
"""

import argparse
import hmac
import http.server
import json
import os
import socket
import sys
import threading
import time

RUNBOOK = "docs/runbooks/wheel-build-failed.md"
# Requests without a valid secret are logged up to this many lines, then only counted.
REFUSED_LINES = 10
# A secret shorter than this is refused in the plan: the controller makes 43 characters.
MIN_TOKEN = 24


class PlanError(ValueError):
    """A plan the server cannot serve."""


def read_plan(text, directory):
    """The plan from its JSON text: ``{peer: {"token", "files"}}``, checked against ``directory``."""
    try:
        plan = json.loads(text)
    except ValueError as err:
        raise PlanError(f"the plan is not JSON: {err}") from err
    if not isinstance(plan, dict) or not plan:
        raise PlanError("the plan names no peer")
    tokens = set()
    for peer, entry in plan.items():
        token = entry.get("token") if isinstance(entry, dict) else None
        files = entry.get("files") if isinstance(entry, dict) else None
        if not isinstance(token, str) or len(token) < MIN_TOKEN:
            raise PlanError(f"peer {peer}: no secret of at least {MIN_TOKEN} characters")
        if token in tokens:
            raise PlanError(f"peer {peer}: its secret is another peer's")
        tokens.add(token)
        if not isinstance(files, list) or not files:
            raise PlanError(f"peer {peer}: no file to fetch")
        for name in files:
            if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
                raise PlanError(f"peer {peer}: {name!r} is not a file name of {directory}")
            if not os.path.isfile(os.path.join(directory, name)):
                raise PlanError(f"peer {peer}: {name} is not in {directory}")
    return {str(peer): {"token": entry["token"], "files": list(entry["files"])} for peer, entry in plan.items()}


class Share:
    """What the server owes each peer, and when it is done, out of time or idle (thread-safe)."""

    def __init__(self, plan, deadline, idle, clock=time.monotonic):
        self.plan = plan
        self.clock = clock
        self.start = clock()
        self.deadline = float(deadline)
        self.idle = float(idle)
        self.owed = {(peer, name) for peer, entry in plan.items() for name in entry["files"]}
        self.total = len(self.owed)
        self.active = 0
        self.last_activity = self.start
        self.refused = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def peer_of(self, header):
        """The peer whose secret ``header`` (the Authorization header's value) carries, or None."""
        scheme, _space, token = str(header or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        found = None
        # Every secret is compared, in constant time, whichever matches.
        for peer, entry in self.plan.items():
            if hmac.compare_digest(token.strip().encode(), entry["token"].encode()):
                found = peer
        return found

    def may_fetch(self, peer, name):
        return peer is not None and name in self.plan[peer]["files"]

    def begin(self):
        with self.lock:
            self.active += 1
            self.last_activity = self.clock()

    def end(self, peer, name, complete):
        """A transfer ended; only a complete one of a file the peer is owed counts."""
        with self.lock:
            self.active -= 1
            self.last_activity = self.clock()
            if complete:
                self.owed.discard((peer, name))
                if not self.owed:
                    self.done.set()

    def refuse(self):
        with self.lock:
            self.refused += 1
            return self.refused

    def verdict(self):
        """None while serving; else ``(status, line)`` to end with."""
        with self.lock:
            if not self.owed:
                return 0, None
            now = self.clock()
            waiting = sorted(f"{peer} ({name})" for peer, name in self.owed)
            done = self.total - len(self.owed)
            if now - self.start >= self.deadline:
                return 3, (
                    f"gave up after {self.deadline:.0f} s (the deadline) with {done} of {self.total} transfers done; "
                    f"not fetched: {', '.join(waiting)}"
                )
            if self.active == 0 and now - self.last_activity >= self.idle:
                return 3, (
                    f"gave up: no peer asked for a wheel for {self.idle:.0f} s, with {done} of {self.total} transfers "
                    f"done; not fetched: {', '.join(waiting)}"
                )
            return None


def handler_for(share, directory):
    class Handler(http.server.BaseHTTPRequestHandler):
        # A client that connects and says nothing is dropped after this many seconds.
        timeout = 60

        # do_GET: the name http.server calls.
        def do_GET(self):
            peer = share.peer_of(self.headers.get("Authorization"))
            name = self.path.lstrip("/")
            if peer is None:
                count = share.refuse()
                if count <= REFUSED_LINES:
                    print(f"refused GET {self.path[:200]!r} from {self.client_address[0]}: no valid secret", flush=True)
                self.send_error(403, "a peer of this share only")
                return
            if not share.may_fetch(peer, name):
                self.send_error(404, "not a wheel this peer fetches")
                return
            path = os.path.join(directory, name)
            share.begin()
            sent, complete = 0, False
            start = time.monotonic()
            try:
                size = os.path.getsize(path)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                with open(path, "rb") as wheel:
                    while chunk := wheel.read(1 << 20):
                        self.wfile.write(chunk)
                        sent += len(chunk)
                self.wfile.flush()
                complete = sent == size
                # Said before it counts: the last transfer ends the server.
                took = time.monotonic() - start
                print(f"sent {name} ({sent} bytes) to {self.client_address[0]} ({peer}) in {took:.1f} s", flush=True)
            except OSError as err:
                client = self.client_address[0]
                print(f"transfer of {name} to {client} ({peer}) broke after {sent} bytes: {err}", flush=True)
            finally:
                share.end(peer, name, complete)

        def log_message(self, *_):
            pass  # one line per finished transfer is printed above

    return Handler


def _server_class(address):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    class Server(http.server.ThreadingHTTPServer):
        address_family = family
        daemon_threads = True

    return Server


def parse(argv):
    parser = argparse.ArgumentParser(prog="instinct-serve-wheels", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("directory")
    parser.add_argument("address")
    parser.add_argument("port", type=int)
    parser.add_argument("--plan", required=True, help="the plan's JSON file, removed once read; - for stdin")
    parser.add_argument("--deadline", type=float, required=True, help="seconds before giving up in any case")
    parser.add_argument("--idle", type=float, required=True, help="seconds without a peer's request before giving up")
    return parser.parse_args(argv)


def _plan_text(source):
    """The plan's text from ``source`` (a file, removed once read: it holds the secrets; - for stdin)."""
    if source == "-":
        return sys.stdin.read()
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise PlanError(f"the plan {source} cannot be read: {err}") from err
    try:
        os.unlink(source)
    except OSError as err:
        raise PlanError(f"the plan {source} cannot be removed after reading (it holds the secrets): {err}") from err
    return text


def main(argv):
    args = parse(argv)
    try:
        plan = read_plan(_plan_text(args.plan), args.directory)
    except PlanError as err:
        print(f"cannot serve: {err}. See {RUNBOOK}", flush=True)
        return 2
    share = Share(plan, args.deadline, args.idle)
    address = args.address.strip("[]")
    try:
        server = _server_class(address)((address, args.port), handler_for(share, args.directory))
    except OSError as err:
        print(
            f"cannot listen on {args.address}:{args.port}: {err}. Another run's wheel server still holds the port "
            f"(it ends by itself at its deadline or when idle) or another service does; or the address is not this "
            f"node's (wheel_build_serve_address). See {RUNBOOK}",
            flush=True,
        )
        return 4
    threading.Thread(target=server.serve_forever, daemon=True).start()
    files = sorted({name for entry in plan.values() for name in entry["files"]})
    print(
        f"serving {len(files)} wheel(s) of {args.directory} on {args.address}:{args.port} to {len(plan)} peer(s) "
        f"for {share.total} transfer(s)",
        flush=True,
    )
    while (verdict := share.verdict()) is None:
        share.done.wait(0.5)
    server.shutdown()
    server.server_close()
    status, line = verdict
    if share.refused:
        print(f"refused {share.refused} request(s) without a valid secret (not counted)", flush=True)
    if line:
        print(f"{line}. See {RUNBOOK}", flush=True)
    return status


def cli():
    return main(sys.argv[1:])
