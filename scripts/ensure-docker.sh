#!/usr/bin/env bash
# Make sure a Docker engine answers, and that the few host tools the test doubles use are present.
# A running engine is left alone; otherwise Debian/Ubuntu's docker.io is installed when missing and
# dockerd is started in the background (no systemd here).
set -euo pipefail

log() { printf '[docker] %s\n' "$*" >&2; }

apt_install() {
  [[ $(id -u) -eq 0 ]] || { log "missing $* and not root: apt-get install -y $*"; exit 2; }
  log "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  # The package lists may be stale or absent on a fresh machine: refresh once when needed.
  apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$@" >/dev/null; }
}

# apt-ftparchive and gpg build and sign the simulated AMD repository (molecule/resources/amd-repo).
missing=()
command -v apt-ftparchive >/dev/null 2>&1 || missing+=(apt-utils)
command -v gpg >/dev/null 2>&1 || missing+=(gnupg)
[[ ${#missing[@]} -eq 0 ]] || apt_install "${missing[@]}"

if docker info >/dev/null 2>&1; then
  log "engine answers: $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo unknown)"
  exit 0
fi

command -v dockerd >/dev/null 2>&1 || apt_install docker.io

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
