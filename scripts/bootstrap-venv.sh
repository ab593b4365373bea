#!/usr/bin/env bash
# Create or refresh the controller environment .venv/ (pinned Python tools + pinned collections).
# Re-running is cheap: nothing is reinstalled unless requirements*.txt or requirements.yml changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=${PYTHON:-python3}
venv=.venv
stamp_hash=$(cat requirements-dev.txt constraints-dev.txt requirements.txt requirements.yml \
  scripts/bootstrap-venv.sh scripts/install_collections.py | sha256sum | cut -c1-16)
stamp="$venv/.installed-$stamp_hash"

if [[ -f $stamp ]]; then
  echo "[venv] up to date ($venv)" >&2
  exit 0
fi

"$python" - <<'PY' || { echo "[venv] Python >= 3.11 is required (set PYTHON=...)" >&2; exit 2; }
import sys
sys.exit(sys.version_info < (3, 11))
PY

[[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
echo "[venv] installing pinned controller tools into $venv" >&2
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r requirements-dev.txt -r requirements.txt -c constraints-dev.txt
"$venv/bin/python" scripts/install_collections.py --dest "$venv/collections"
rm -f "$venv"/.installed-*
touch "$stamp"
echo "[venv] ready" >&2
