#!/usr/bin/env bash
# Put Prometheus's promtool at .cache/promtool/promtool (for the alert-rule unit tests) and print its path.
# It comes from the distribution's `prometheus` package (Debian or Ubuntu apt archive): the .deb is
# downloaded (not installed) and only usr/bin/promtool is kept, so no service is added to the machine.
# Re-running is cheap: a promtool already there that answers --version is kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dest_dir=.cache/promtool
dest=$dest_dir/promtool
package=${PROMTOOL_PACKAGE:-prometheus}

if [[ -x $dest ]] && "$dest" --version >/dev/null 2>&1; then
  echo "$PWD/$dest"
  exit 0
fi

for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || {
    echo "[promtool] $tool not found: this script needs a Debian or Ubuntu machine (or set PROMTOOL=/path/to/promtool)" >&2
    exit 2
  }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"  # apt-get download runs as _apt when it can

download() { (cd "$tmp" && apt-get download "$package" >&2); }

if ! download; then
  echo "[promtool] apt-get download $package failed; refreshing the package lists and trying again" >&2
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update >&2
  else
    sudo apt-get update >&2
  fi
  download || {
    echo "[promtool] could not download the $package package from the apt archives" >&2
    exit 1
  }
fi

debs=("$tmp"/"$package"_*.deb)
[[ -f ${debs[0]} ]] || { echo "[promtool] apt-get download left no $package .deb in $tmp" >&2; exit 1; }
dpkg-deb -x "${debs[0]}" "$tmp/root"
[[ -x $tmp/root/usr/bin/promtool ]] || {
  echo "[promtool] ${debs[0]##*/} has no usr/bin/promtool" >&2
  exit 1
}

mkdir -p "$dest_dir"
install -m 0755 "$tmp/root/usr/bin/promtool" "$dest.new"
mv -f "$dest.new" "$dest"
"$dest" --version >&2
echo "$PWD/$dest"
