#!/usr/bin/env bash
# The main job on the local sandbox cluster (`make sandbox`): controller venv, Docker engine and
# images, two Ubuntu 22.04 node containers turned into simulated 8x MI300X nodes (recorded
# rocminfo/amd-smi/lspci outputs, and a local signed repository standing in for AMD's), then
# playbooks/site.yml against inventories/sandbox.
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
state=${INSTINCT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/instinct-finetune}/sandbox
mkdir -p "$state"
export SIM_REPO_DIR=$state/amd-repo SIM_REPO_PORT=${SANDBOX_REPO_PORT:-8764} SIM_GATEWAY=172.29.10.1
export SIM_VARS_FILE=$state/sim-repo.yml

if [[ $action == down ]]; then
  ansible-playbook -i "$inventory" molecule/resources/sandbox/down.yml
  ansible-playbook -i "$inventory" molecule/resources/sim-node/repo-down.yml
  exit 0
fi

INSTINCT_IMAGE_JAMMY_SYSTEMD=$(molecule/resources/images/build.sh jammy-systemd)
export INSTINCT_IMAGE_JAMMY_SYSTEMD
ansible-playbook -i "$inventory" molecule/resources/sandbox/up.yml
ansible-playbook -i "$inventory" molecule/resources/sim-node/repo-up.yml
ansible-playbook -i "$inventory" molecule/resources/sim-node/node-prepare.yml \
  -e "sim_repo_base_url=http://$SIM_GATEWAY:$SIM_REPO_PORT"
ansible-playbook -i "$inventory" molecule/resources/site-python/prepare.yml
start=$SECONDS
# The simulated repository's URL and key fingerprint replace AMD's for this run only.
ansible-playbook -i "$inventory" playbooks/site.yml -e "@$SIM_VARS_FILE" "$@"
echo "site.yml on the sandbox cluster took $((SECONDS - start)) s"
