#!/usr/bin/env bash
# Build (or reuse) a local base image for the molecule nodes from a recipe file (<variant>.env).
#
# There is no image registry to pull from, so the root filesystem is made with debootstrap and
# turned into an image with `docker import`. The image tag is a hash of the recipe and of this
# script, so an image is rebuilt only when what it is made from changes. The root filesystem
# tarball is also kept under $INSTINCT_CACHE_DIR, so a new Docker engine (an emptied
# /var/lib/docker) re-imports it in seconds instead of bootstrapping again.
#
# Usage: build.sh <variant>   -> prints the image reference (name:hash) on stdout, logs on stderr
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
variant=${1:?usage: build.sh <variant> (one of: $(cd "$here" && ls ./*.env | sed 's|./||; s|\.env$||' | tr '\n' ' '))}
recipe="$here/$variant.env"
[[ -f $recipe ]] || { echo "build.sh: no recipe $recipe" >&2; exit 2; }

log() { printf '[image %s] %s\n' "$variant" "$*" >&2; }

# shellcheck source=/dev/null
source "$recipe"
: "${IMAGE_NAME:?} ${SUITE:?} ${MIRROR:?} ${COMPONENTS:?} ${KEYRING_FILE:?} ${INCLUDE:?} ${INIT:?}"

hash=$(cat "$recipe" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
image="$IMAGE_NAME:$hash"
cache_dir=${INSTINCT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/instinct-finetune}/images
tarball="$cache_dir/$IMAGE_NAME-$hash.tar.gz"

if docker image inspect "$image" >/dev/null 2>&1; then
  log "reusing $image (recipe unchanged)"
  echo "$image"
  exit 0
fi

import_tarball() {
  local changes=(--change 'ENV container=docker' --change 'ENV LANG=C.UTF-8')
  if [[ $INIT == systemd ]]; then
    changes+=(--change 'CMD ["/sbin/init"]')
  else
    changes+=(--change 'CMD ["sleep", "infinity"]')
  fi
  docker import "${changes[@]}" \
    --message "instinct.finetune test image $variant from $(basename "$recipe") ($hash)" \
    "$tarball" "$image" >/dev/null
  docker tag "$image" "$IMAGE_NAME:latest"
}

if [[ -f $tarball ]]; then
  log "importing cached root filesystem $tarball"
  import_tarball
  echo "$image"
  exit 0
fi

if ! command -v debootstrap >/dev/null || ! command -v curl >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { log "missing debootstrap or curl, and not root: apt-get install -y debootstrap curl"; exit 2; }
  log "installing debootstrap and curl"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap curl >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap curl >/dev/null; }
fi

work=$(mktemp -d /tmp/instinct-image.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
rootfs="$work/rootfs"

archive_unreachable() {
  log "ERROR: the package archive $MIRROR does not answer ($1)."
  log "The test images are bootstrapped from it; check the network or proxy, or set the recipe's MIRROR."
  exit 3
}
curl -fsS -o /dev/null --max-time 60 "$MIRROR/dists/$SUITE/Release" \
  || archive_unreachable "GET $MIRROR/dists/$SUITE/Release failed"

keyring=$KEYRING_FILE
if [[ -n ${KEYRING_DEB:-} ]]; then
  log "fetching the archive keyring ${KEYRING_DEB##*/}"
  curl -fsS --max-time 120 -o "$work/keyring.deb" "$MIRROR/$KEYRING_DEB" \
    || archive_unreachable "GET $MIRROR/$KEYRING_DEB failed"
  echo "$KEYRING_SHA256  $work/keyring.deb" | sha256sum --check --quiet - \
    || { log "ERROR: ${KEYRING_DEB##*/} does not match the pinned SHA256 in $recipe; refusing to trust it"; exit 4; }
  dpkg-deb -x "$work/keyring.deb" "$work/keyring"
  keyring="$work/keyring/$KEYRING_FILE"
fi
[[ -f $keyring ]] || { log "ERROR: archive keyring $keyring not found"; exit 2; }

log "debootstrap $SUITE (minbase) from $MIRROR"
debootstrap --variant=minbase --keyring="$keyring" --include="$INCLUDE" \
  --components="${COMPONENTS// /,}" "$SUITE" "$rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  if grep -qiE 'Failed getting release file|Couldn.t download|Could not resolve|Connection (refused|timed out)' "$work/debootstrap.log"; then
    archive_unreachable "debootstrap could not download from it"
  fi
  log "ERROR: debootstrap failed; full log above"
  exit 1
}

# debootstrap writes only the release pocket of the first component: add the others.
{
  echo "deb $MIRROR $SUITE $COMPONENTS"
  echo "deb $MIRROR $SUITE-updates $COMPONENTS"
  [[ -n ${SECURITY_SUITE:-} ]] && echo "deb ${SECURITY_MIRROR:-$MIRROR} $SECURITY_SUITE $COMPONENTS"
} >"$rootfs/etc/apt/sources.list"

# Keep the image lean and quiet in a container: no docs, no recommends, no daemons started by
# package scripts during tests that do not run an init.
cat >"$rootfs/etc/apt/apt.conf.d/90instinct-container" <<'CONF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Retries "3";
CONF
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

if [[ $INIT == systemd ]]; then
  # Units that cannot work inside a container and only slow the boot or fail it.
  for unit in systemd-udevd.service systemd-udev-trigger.service systemd-modules-load.service \
              sys-kernel-debug.mount sys-kernel-tracing.mount getty.target console-getty.service \
              systemd-remount-fs.service systemd-resolved.service; do
    ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
  done
fi
: >"$rootfs/etc/machine-id"

mkdir -p "$cache_dir"
log "packing root filesystem"
tar -C "$rootfs" --numeric-owner -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
import_tarball
log "built $image"
echo "$image"
