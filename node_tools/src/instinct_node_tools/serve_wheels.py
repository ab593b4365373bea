"""Serve the builder's wheels to the other nodes of its arch set as a package index, then end.

Run by the wheel_build role on the node that built the wheels, as a background job, from the
package index's own venv (wheel_build_index_dir: these node tools and pypiserver, pinned by sha256):

    instinct-serve-wheels DIR ADDRESS PORT --plan FILE --deadline SECONDS --idle SECONDS

The index is pypiserver's (a maintained PEP 503 index: ``/simple/`` and ``/packages/NAME``, with the
sha256 of each file in its links), served over DIR on ADDRESS:PORT (the management address the
inventory chooses, never every address unless told). The plan (JSON in FILE, which the server removes
once read, or on stdin for ``--plan -``; never on the command line, where ``ps`` shows it) names each
peer with the secret the controller made for it this run and the files it fetches:
``{"node2": {"token": "...", "files": ["torch-....whl"]}}``. A peer sends its secret as HTTP basic
auth's password (any user name): pypiserver's own check refuses a request without a valid one (401,
never counted), and this server answers a valid secret asking for a package outside its peer's list
with 404. It ends with status 0 once every peer has received every file of its list in full; a peer
that fetches again (a retry) gets the file again, counted once. It gives up with status 3 after
``--deadline`` seconds, or after ``--idle`` seconds in which no peer asked for anything and no
transfer ran: a play aborted after starting it leaves it listening only until then. Status 2: a bad
plan, or no pypiserver in this venv; 4: the address and port cannot be bound. Each peer checks the
sha256 the builder recorded when it made the wheels, so the controller moves sha256 sums, never
wheels. One line per transfer goes to stdout (the play shows them); a secret never does.
"""

import argparse
import base64
import hmac
import json
import os
import socket
import socketserver
import sys
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

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

    def peer_of_secret(self, secret):
        """The peer whose secret this is, or None; every secret is compared, in constant time."""
        found = None
        for peer, entry in self.plan.items():
            if hmac.compare_digest(str(secret or "").encode(), entry["token"].encode()):
                found = peer
        return found

    def peer_of(self, header):
        """The peer whose secret ``header`` (the Authorization header's value: basic auth, the secret
        as its password) carries, or None."""
        scheme, _space, encoded = str(header or "").partition(" ")
        if scheme.lower() != "basic" or not encoded:
            return None
        try:
            _user, colon, secret = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except ValueError:  # not base64 (binascii.Error; non-ASCII too), or not UTF-8
            return None
        return self.peer_of_secret(secret) if colon else None

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


class _Counted:
    """A package's body on its way to a peer: the transfer counts once every byte of a full answer
    (200, Content-Length) was handed to the server and the server asked for more."""

    def __init__(self, body, transfer):
        self.body = body
        self.transfer = transfer
        self.sent = 0
        self.exhausted = False

    def __iter__(self):
        for chunk in self.body:
            self.sent += len(chunk)
            yield chunk
        self.exhausted = True

    def close(self):
        if hasattr(self.body, "close"):
            self.body.close()
        self.transfer(self.sent, self.exhausted)


def _refusal(method, path):
    """``(status, headers, body)`` for a request of a valid peer that the index does not serve, else None."""
    # Reading only: pypiserver's upload and remove actions (POST) never reach it, whatever the secret.
    if method not in ("GET", "HEAD"):
        return "405 Method Not Allowed", [("Allow", "GET, HEAD")], b"a read-only index\n"
    # wsgiref hands PATH_INFO over as latin-1; pypiserver's bottle reads it again as UTF-8, dropping what
    # does not decode. Only an ASCII path is judged here as pypiserver will route it.
    if not path.isascii():
        return "400 Bad Request", [], b"not a path of this index\n"
    if not (path.startswith(("/simple/", "/packages/")) or path == "/simple"):
        return "404 Not Found", [], b"only /simple/ and /packages/ are served\n"
    return None


def share_app(share, index):
    """The WSGI app in front of pypiserver's ``index``: refuses and counts strays, keeps each peer to
    its list, and counts finished transfers toward the share."""

    def refuse(environ, start_response, status, why):
        start_response(status, [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Basic realm="wheels"')])
        return [f"{why}\n".encode()]

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        client = environ.get("REMOTE_ADDR", "?")
        peer = share.peer_of(environ.get("HTTP_AUTHORIZATION"))
        if peer is None:
            count = share.refuse()
            if count <= REFUSED_LINES:
                method = environ.get("REQUEST_METHOD")
                print(f"refused {method} {path[:200]!r} from {client}: no valid secret", flush=True)
            return refuse(environ, start_response, "401 Unauthorized", "a peer of this share only")
        refused = _refusal(environ.get("REQUEST_METHOD"), path)
        if refused:
            status, headers, why = refused
            start_response(status, [("Content-Type", "text/plain"), *headers])
            return [why]
        if not path.startswith("/packages/"):
            # The index's pages (/simple/): pypiserver answers them, and checks the secret again.
            return index(environ, start_response)
        # PATH_INFO is decoded already (a torch's "+" arrives as "+", sent as %2B).
        name = path[len("/packages/") :]
        if not share.may_fetch(peer, name):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not a package this peer fetches\n"]
        answer = {}

        def started(status, headers, exc_info=None):
            answer["status"], answer["length"] = status, dict(headers).get("Content-Length")
            return start_response(status, headers, exc_info)

        share.begin()
        start = time.monotonic()
        try:
            body = index(environ, started)
        except Exception:
            share.end(peer, name, complete=False)
            raise

        def transfer(sent, exhausted):
            full = str(answer.get("status", "")).startswith("200") and str(sent) == str(answer.get("length"))
            complete = exhausted and full and environ.get("REQUEST_METHOD") == "GET"
            took = time.monotonic() - start
            if complete:
                # Said before it counts: the last transfer ends the server.
                print(f"sent {name} ({sent} bytes) to {client} ({peer}) in {took:.1f} s", flush=True)
            elif str(answer.get("status", "")).startswith("200") and environ.get("REQUEST_METHOD") == "GET":
                print(f"transfer of {name} to {client} ({peer}) broke after {sent} bytes", flush=True)
            share.end(peer, name, complete)

        return _Counted(body, transfer)

    return app


class _Quiet(WSGIRequestHandler):
    # A client that connects and says nothing is dropped after this many seconds.
    timeout = 60

    def log_message(self, *_):
        pass  # one line per finished transfer is printed by the app


def _server_class(address):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True

    return Server


def index_app(share, directory):
    """pypiserver's index over ``directory``: listing and downloads need a peer's secret; no upload, no
    fallback to PyPI (a name it lacks is a 404, never a redirect elsewhere)."""
    import pypiserver  # noqa: PLC0415 - in the index's venv only (wheel_build_index_dir)

    return pypiserver.app(
        roots=[directory],
        # Listing and downloads need a peer's secret; upload and remove are refused before pypiserver
        # (share_app passes GET and HEAD only), and authenticated here too in case one got through.
        authenticate=["download", "list", "update", "remove"],
        auther=lambda _user, secret: share.peer_of_secret(secret) is not None,
        disable_fallback=True,
    )


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
    try:
        index = index_app(share, args.directory)
    except ImportError as err:
        print(
            f"cannot serve: pypiserver cannot be imported by {sys.executable} ({err}): run instinct-serve-wheels from "
            f"the package index's venv (wheel_build_index_dir), which the wheel_build role installs. See {RUNBOOK}",
            flush=True,
        )
        return 2
    address = args.address.strip("[]")
    try:
        server = _server_class(address)((address, args.port), _Quiet)
    except OSError as err:
        print(
            f"cannot listen on {args.address}:{args.port}: {err}. Another run's wheel server still holds the port "
            f"(it ends by itself at its deadline or when idle) or another service does; or the address is not this "
            f"node's (wheel_build_serve_address). See {RUNBOOK}",
            flush=True,
        )
        return 4
    server.set_app(share_app(share, index))
    files = sorted({name for entry in plan.values() for name in entry["files"]})
    # Said before the first request is answered (the socket listens already; a peer that connects now
    # waits in its backlog), so that the log reads in order: what is served, then each request.
    print(
        f"serving {len(files)} wheel(s) of {args.directory} as a package index on {args.address}:{args.port} to "
        f"{len(plan)} peer(s) for {share.total} transfer(s)",
        flush=True,
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
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
