#!/usr/bin/env bash
# Put Prometheus's promtool at .cache/promtool/promtool (for the alert-rule unit tests) and print its path.
# It comes from the distribution's `prometheus` package (Debian or Ubuntu apt archive): the .deb is
# downloaded (not installed) and only usr/bin/promtool is kept, so no service is added to the machine.
# Re-running is cheap: a promtool already there that answers --version is kept.
# The same for Alertmanager's amtool (its receivers' check): PROMTOOL_TOOL=amtool, from the
# prometheus-alertmanager package, at .cache/amtool/amtool.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tool=${PROMTOOL_TOOL:-promtool}
case $tool in
  promtool) default_package=prometheus ;;
  amtool) default_package=prometheus-alertmanager ;;
  *) echo "[promtool] PROMTOOL_TOOL is promtool or amtool, not $tool" >&2; exit 2 ;;
esac
dest_dir=.cache/$tool
dest=$dest_dir/$tool
package=${PROMTOOL_PACKAGE:-$default_package}

if [[ -x $dest ]] && "$dest" --version >/dev/null 2>&1; then
  echo "$PWD/$dest"
  exit 0
fi

for needed in apt-get dpkg-deb; do
  command -v "$needed" >/dev/null || {
    echo "[promtool] $needed not found: this script needs a Debian or Ubuntu machine (or set PROMTOOL=/path/to/promtool)" >&2
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
[[ -x $tmp/root/usr/bin/$tool ]] || {
  echo "[promtool] ${debs[0]##*/} has no usr/bin/$tool" >&2
  exit 1
}

mkdir -p "$dest_dir"
install -m 0755 "$tmp/root/usr/bin/$tool" "$dest.new"
mv -f "$dest.new" "$dest"
"$dest" --version >&2
echo "$PWD/$dest"
