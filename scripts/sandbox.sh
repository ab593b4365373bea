#!/usr/bin/env bash
# The main job on the local sandbox cluster (`make sandbox`): controller venv, Docker engine and
# images, two Ubuntu 22.04 node containers, then playbooks/site.yml against inventories/sandbox.
#   scripts/sandbox.sh            bring the cluster up (or reuse it) and run site.yml
#   scripts/sandbox.sh down       remove the containers and networks
# Extra arguments after `--` go to ansible-playbook (e.g. -- --tags preflight --check --diff).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh

action=${1:-up}
[[ $action == -- ]] && action=up || shift || true
[[ ${1:-} == -- ]] && shift

bash scripts/bootstrap-venv.sh
bash scripts/ensure-docker.sh
inventory=inventories/sandbox

if [[ $action == down ]]; then
  ansible-playbook -i "$inventory" molecule/resources/sandbox/down.yml
  exit 0
fi

INSTINCT_IMAGE_JAMMY_SYSTEMD=$(molecule/resources/images/build.sh jammy-systemd)
export INSTINCT_IMAGE_JAMMY_SYSTEMD
ansible-playbook -i "$inventory" molecule/resources/sandbox/up.yml
start=$SECONDS
ansible-playbook -i "$inventory" playbooks/site.yml "$@"
echo "site.yml on the sandbox cluster took $((SECONDS - start)) s"
