"""Accept one TCP connection from each expected peer address on ADDRESS:PORT, then print who came.

Run on the master node before any launch: proves each node reaches the rendezvous port over its
fabric interface (the peers bind their fabric address before connecting). Exit 1 on timeout.
Usage: listen.py ADDRESS PORT TIMEOUT PEER...
"""

import json
import socket
import sys
import time

address, port, timeout, expected = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), set(sys.argv[4:])
seen = set()
server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((address, port))
server.listen(len(expected) + 4)
deadline = time.monotonic() + timeout
while not expected <= seen and time.monotonic() < deadline:
    server.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        conn, (peer, _port) = server.accept()
    except TimeoutError:
        break
    seen.add(peer)
    conn.close()
print(json.dumps({"listened": f"{address}:{port}", "seen": sorted(seen), "missing": sorted(expected - seen)}))
sys.exit(0 if expected <= seen else 1)
