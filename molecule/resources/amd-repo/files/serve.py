"""Serve a folder over HTTP: files (python3 -m http.server, except that hidden paths such as .gnupg
or .server.pid are never served), and git's smart protocol for bare repositories in it.

A clone or fetch over git's smart HTTP protocol (the one GitHub speaks; the dumb protocol refuses
``--depth`` and ``--shallow-submodules``) is two requests, ``GET <repo>.git/info/refs?service=
git-upload-pack`` and ``POST <repo>.git/git-upload-pack``; both go to ``git http-backend`` as CGI.
Push is refused. The simulated AMD repositories use only the files; molecule/pytorch_source also
serves the stand-in PyTorch repository (../../pytorch-src) from the same folder and port.
Usage: serve.py PORT ROOT
"""

import functools
import http.server
import os
import re
import subprocess
import sys
import urllib.parse

INFO_REFS = re.compile(r"^/[^.][^?]*\.git/info/refs$")
UPLOAD_PACK = re.compile(r"^/[^.][^?]*\.git/git-upload-pack$")


def _hidden(path):
    return any(part.startswith(".") for part in path.split("/") if part)


class Handler(http.server.SimpleHTTPRequestHandler):
    def send_head(self):
        if _hidden(urllib.parse.unquote(self.path.split("?")[0])):
            self.send_error(404)
            return None
        return super().send_head()

    def do_GET(self):
        path, _sep, query = self.path.partition("?")
        path = urllib.parse.unquote(path)
        if INFO_REFS.match(path) and "service=" in query:
            if urllib.parse.parse_qs(query).get("service") != ["git-upload-pack"]:
                self.send_error(403, "only clone and fetch are served")
                return
            self._backend(path, query)
            return
        super().do_GET()

    def do_POST(self):
        path, _sep, query = self.path.partition("?")
        path = urllib.parse.unquote(path)
        if not UPLOAD_PACK.match(path) or _hidden(path):
            self.send_error(403, "only clone and fetch are served")
            return
        self._backend(path, query)

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _backend(self, path, query):
        body = self._body() if self.command == "POST" else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PROJECT_ROOT": self.directory,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "SERVER_PROTOCOL": self.request_version,
        }
        # protocol v2 is asked for in a header that CGI passes on as GIT_PROTOCOL
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, sep, payload = proc.stdout.partition(b"\r\n\r\n")
        if not sep:
            head, sep, payload = proc.stdout.partition(b"\n\n")
        if not sep:
            self.log_error("git http-backend failed (rc %s): %s", proc.returncode, proc.stderr.decode(errors="replace"))
            self.send_error(500, "git http-backend failed")
            return
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _sep, value = line.partition(":")
            if name.strip().lower() == "status":
                status = int(value.split()[0])
            elif name.strip():
                headers.append((name.strip(), value.strip()))
        if proc.stderr:
            self.log_message("git http-backend: %s", proc.stderr.decode(errors="replace").strip())
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


port, directory = int(sys.argv[1]), sys.argv[2]
http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.test(
    HandlerClass=functools.partial(Handler, directory=directory),
    ServerClass=http.server.ThreadingHTTPServer,
    port=port,
    bind="0.0.0.0",  # noqa: S104 - containers reach it through their network gateway
)
