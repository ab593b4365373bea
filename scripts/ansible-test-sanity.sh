#!/usr/bin/env bash
# `ansible-test sanity` on this collection, from a bare machine (scripts/test.sh runs it in the lint
# stage). Extra arguments go to ansible-test, e.g. `--test pylint` or `--test validate-modules -v`.
#
# ansible-test only runs from a path ending in ansible_collections/NAMESPACE/NAME, and tests the files
# git lists there. The checkout is this collection's root but sits under no such path, so the files
# git would commit from it (tracked and untracked-but-not-ignored ones: an uncommitted change is
# tested too) are copied into a throwaway tree .../ansible_collections/instinct/finetune, made a git
# repository of its own, and tested there.
#
# No Docker: ansible-test runs on the controller venv's Python 3.11 (--local) and builds one venv per
# sanity test from PyPI, pinned by ansible-test itself. Those venvs are kept in
# ~/.ansible/test/venv/ (ansible-test's own cache), so only the first run pays for them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

bash scripts/bootstrap-venv.sh
ansible_test=$root/.venv/bin/ansible-test

# ansible-test puts pip into each venv it creates with a get-pip.py it downloads from
# ci-files.testing.ansible.com (not PyPI). Its place is taken by scripts/ansible_test_get_pip.py,
# which runs pip from pip's wheel, fetched from PyPI and checked against this hash.
pip_version=24.2
pip_sha256=2cd581cf58ab7fcfca4ce8efa6dcacd0de5bf8d0a3eb9ec927e07405f4d9e2a2
wanted=$("$root/.venv/bin/python" -c '
import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="3.11"))["pip"])')
if [[ $wanted != "$pip_version" ]]; then
  echo "ansible-test now bootstraps pip $wanted: set pip_version and pip_sha256 in $0 to that release's wheel" >&2
  exit 2
fi
cache=$HOME/.ansible/test/cache
wheel=pip-$pip_version-py3-none-any.whl
get_pip=$cache/get_pip_${pip_version//./_}.py
mkdir -p "$cache"
if ! sha256sum --status -c <<<"$pip_sha256  $cache/$wheel" 2>/dev/null; then
  rm -rf "$cache/pip-download"
  "$root/.venv/bin/python" -m pip download --quiet --no-deps --only-binary :all: \
    --dest "$cache/pip-download" "pip==$pip_version"
  sha256sum --quiet -c <<<"$pip_sha256  $cache/pip-download/$wheel"
  mv "$cache/pip-download/$wheel" "$cache/$wheel"
  rm -rf "$cache/pip-download"
fi
# A real get-pip.py already cached there is left alone.
if [[ ! -e $get_pip ]] || grep -q 'instinct.finetune get-pip stand-in' "$get_pip"; then
  sed "s/@WHEEL@/$wheel/" scripts/ansible_test_get_pip.py >"$get_pip.tmp"
  mv "$get_pip.tmp" "$get_pip"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/instinct-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/instinct/finetune
mkdir -p "$dest"

# A tracked file deleted in the working tree is left out, as a commit would leave it out.
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' path; do
    [[ -e $path || -L $path ]] && printf '%s\0' "$path"
  done \
  | tar --null --no-recursion -T - -cf - \
  | tar -xf - -C "$dest"

# ansible-test lists the files to test with git when the collection is a git repository; a
# repository of its own, with everything added, lists exactly the copied files.
git -C "$dest" init --quiet
git -C "$dest" add --all

# The controller environment's variables would point ansible-test at the checkout. `--python 3.11`
# finds python3.11 on PATH: the controller venv's, which holds ansible-core's own requirements.
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS ANSIBLE_ROLES_PATH
export PATH=$root/.venv/bin:$PATH

cd "$dest"
"$ansible_test" sanity --local --python 3.11 --color no "$@"
