"""Serve the builder's wheels to the other nodes of its arch set, then end.

Run by the wheel_build role on the node that built the wheels, as a background job
(instinct-serve-wheels DIR ADDRESS PORT EXPECTED TIMEOUT FILE..., from the tools venv): it serves only the named files
of DIR over HTTP on ADDRESS:PORT (the management network) and ends once EXPECTED complete transfers
are done, or after TIMEOUT seconds with exit code 3. Each peer checks the sha256 it was given by the
controller, so the controller moves sha256 sums, never wheels. Standard library only (the tools
venv is the distribution's Python). One line per transfer goes to stdout (the play shows them).
"""

import http.server
import os
import sys
import threading
import time


def main(argv):
    directory, address, port, expected, timeout, *names = argv
    expected, timeout = int(expected), float(timeout)
    allowed = {f"/{name}": os.path.join(directory, name) for name in names}
    done = threading.Event()
    state = {"transfers": 0}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        # do_GET: the name http.server calls.
        def do_GET(self):
            path = allowed.get(self.path)
            if path is None:
                self.send_error(404, "not a wheel of this build")
                return
            start = time.monotonic()
            size = os.path.getsize(path)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(path, "rb") as wheel:
                sent = 0
                while chunk := wheel.read(1 << 20):
                    self.wfile.write(chunk)
                    sent += len(chunk)
            with lock:
                state["transfers"] += 1
                print(
                    f"sent {os.path.basename(path)} ({sent} bytes) to {self.client_address[0]} "
                    f"in {time.monotonic() - start:.1f} s",
                    flush=True,
                )
                if state["transfers"] >= expected:
                    done.set()

        def log_message(self, *_):
            pass  # one line per finished transfer is printed above

    server = http.server.ThreadingHTTPServer((address, int(port)), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"serving {len(names)} wheel(s) of {directory} on {address}:{port} for {expected} transfer(s)", flush=True)
    finished = done.wait(timeout)
    server.shutdown()
    if not finished:
        print(f"gave up after {timeout:.0f} s with {state['transfers']} of {expected} transfers done", flush=True)
        return 3
    return 0


def cli():
    return main(sys.argv[1:])
