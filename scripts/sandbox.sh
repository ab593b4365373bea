#!/usr/bin/env bash
# The main job on the local sandbox cluster (`make sandbox`): controller venv, Docker engine and
# images, then scripts/sandbox.py, which drives every playbook through ansible-runner's Python API:
# two Ubuntu 22.04 node containers turned into simulated 8x MI300X nodes (recorded
# rocminfo/amd-smi/lspci outputs, a local signed repository standing in for AMD's), then
# playbooks/site.yml with jobs/sandbox-tiny.yml, ending in a 2-node fine-tune and its perplexity.
#   scripts/sandbox.sh                 bring the cluster up (or reuse it) and run site.yml
#   scripts/sandbox.sh run finetune.yml   run one playbook against the running cluster
#   scripts/sandbox.sh down            remove the containers and networks
# Extra arguments after `--` go to ansible-playbook (e.g. -- --tags preflight --check --diff).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh

bash scripts/bootstrap-venv.sh
bash scripts/ensure-docker.sh
if [[ ${1:-up} != down ]]; then
  INSTINCT_IMAGE_JAMMY_SYSTEMD=$(molecule/resources/images/build.sh jammy-systemd)
  export INSTINCT_IMAGE_JAMMY_SYSTEMD
fi
exec python scripts/sandbox.py "${@:-up}"
