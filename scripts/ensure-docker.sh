#!/usr/bin/env bash
# Make sure a Docker engine answers. A running engine is left alone; otherwise Debian/Ubuntu's
# docker.io is installed when missing and dockerd is started in the background (no systemd here).
set -euo pipefail

log() { printf '[docker] %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
  log "engine answers: $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo unknown)"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  [[ $(id -u) -eq 0 ]] || { log "dockerd is missing and we are not root: install docker.io"; exit 2; }
  log "installing docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi

log_file=${DOCKERD_LOG:-/var/log/instinct-dockerd.log}
log "starting dockerd in the background (log: $log_file)"
nohup dockerd >"$log_file" 2>&1 &

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    log "engine answers after start"
    exit 0
  fi
  sleep 1
done
log "ERROR: dockerd did not answer within 60 s; last lines of $log_file:"
tail -n 20 "$log_file" >&2
exit 1
