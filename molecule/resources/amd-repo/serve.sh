#!/usr/bin/env bash
# Serve OUTDIR (built by build.sh) over plain HTTP on 0.0.0.0:PORT, in the background
# (python3's http.server; files/serve.py only adds: hidden paths such as .gnupg are not served).
# Usage: serve.sh OUTDIR PORT [DOCKER_NETWORK]
# Idempotent: reuses a server that is still running from OUTDIR/.server.pid on the same port.
# Prints the base URL containers on DOCKER_NETWORK (default: bridge) reach the host at, i.e.
# http://<that network's gateway address>:PORT . Inside a container the same address is the
# container's default route: ip route | awk '/^default/ {print $3; exit}'.
set -euo pipefail
if [[ $# -lt 2 ]]; then
    echo "usage: $0 OUTDIR PORT [DOCKER_NETWORK]" >&2
    exit 2
fi
OUT=$(cd "$1" && pwd)
PORT=$2
NET=${3:-bridge}
[[ -f $OUT/rocm/rocm.gpg.key ]] || { echo "serve.sh: $OUT is not built (run build.sh $OUT)" >&2; exit 1; }
PIDF=$OUT/.server.pid
PORTF=$OUT/.server.port

running() {
    [[ -f $PIDF ]] || return 1
    local pid
    pid=$(cat "$PIDF")
    kill -0 "$pid" 2>/dev/null || return 1
    grep -q 'serve.py' "/proc/$pid/cmdline" 2>/dev/null
}
if running && [[ $(cat "$PORTF" 2>/dev/null) == "$PORT" ]]; then
    :
else
    if running; then
        "$(dirname "${BASH_SOURCE[0]}")/stop.sh" "$OUT"
    fi
    nohup python3 "$(dirname "${BASH_SOURCE[0]}")/files/serve.py" "$PORT" "$OUT" \
        >"$OUT/.server.log" 2>&1 </dev/null &
    echo $! > "$PIDF"
    echo "$PORT" > "$PORTF"
    for _ in $(seq 50); do
        if python3 - "$PORT" <<'PY' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/rocm/rocm.gpg.key", timeout=1).read()
PY
        sleep 0.1
    done
    running || { echo "serve.sh: server did not start, see $OUT/.server.log" >&2; exit 1; }
fi

gw=""
if command -v docker >/dev/null 2>&1; then
    gw=$(docker network inspect "$NET" -f '{{range .IPAM.Config}}{{if .Gateway}}{{.Gateway}} {{end}}{{end}}' 2>/dev/null | awk '{print $1}')
    if [[ -z $gw ]]; then
        # the default bridge often has no IPAM gateway recorded: read its interface
        ifname=$(docker network inspect "$NET" -f '{{index .Options "com.docker.network.bridge.name"}}' 2>/dev/null || true)
        if [[ -z $ifname || $ifname == "<no value>" ]]; then
            id=$(docker network inspect "$NET" -f '{{.Id}}' 2>/dev/null || true)
            [[ -n $id ]] && ifname=br-${id:0:12}
        fi
        [[ -n $ifname ]] && gw=$(ip -4 -o addr show dev "$ifname" 2>/dev/null | awk '{split($4,a,"/"); print a[1]; exit}')
    fi
fi
if [[ -z $gw ]]; then
    echo "serve.sh: could not find the gateway of docker network '$NET'; serving on 0.0.0.0:$PORT" >&2
    echo "http://127.0.0.1:$PORT"
    exit 0
fi
echo "http://$gw:$PORT"
