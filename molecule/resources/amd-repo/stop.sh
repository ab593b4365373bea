#!/usr/bin/env bash
# Stop the HTTP server serve.sh started for OUTDIR (only that process, by its pid file).
# Usage: stop.sh OUTDIR
set -euo pipefail
if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
PIDF=$1/.server.pid
[[ -f $PIDF ]] || exit 0
pid=$(cat "$PIDF")
if kill -0 "$pid" 2>/dev/null && grep -q 'serve.py' "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
fi
rm -f "$PIDF" "$1/.server.port"
