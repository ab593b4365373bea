"""Connect from SOURCE (this node's fabric address) to MASTER:PORT, retrying until TIMEOUT.

Usage: connect.py SOURCE MASTER PORT TIMEOUT
"""

import socket
import sys
import time

source, master, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
deadline = time.monotonic() + timeout
error = None
while time.monotonic() < deadline:
    try:
        with socket.create_connection((master, port), timeout=2, source_address=(source, 0)):
            print(f"{source} -> {master}:{port} ok")
            sys.exit(0)
    except OSError as err:
        error = err
        time.sleep(0.5)
print(f"{source} -> {master}:{port} failed: {error}", file=sys.stderr)
sys.exit(1)
