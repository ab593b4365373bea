# shellcheck shell=bash
# Environment for running the tools from a checkout; sourced by scripts/test.sh and scripts/sandbox.sh.
_instinct_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$_instinct_root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$_instinct_root/ansible.cfg"
# Absolute, because molecule runs ansible-playbook from its own ephemeral directory.
export ANSIBLE_COLLECTIONS_PATH="$_instinct_root/.venv/collections"
export ANSIBLE_ROLES_PATH="$_instinct_root/roles"
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}
export PY_COLORS=${PY_COLORS:-0}
# Extra CAs of this machine (a TLS-inspecting proxy's, say), handed to the nodes through
# preflight_ca_certificates. Set INSTINCT_CA_CERTIFICATES yourself to override; empty to skip.
if [[ -z ${INSTINCT_CA_CERTIFICATES+set} ]]; then
  INSTINCT_CA_CERTIFICATES=$(find /usr/local/share/ca-certificates -name '*.crt' -type f 2>/dev/null | sort | paste -sd, -)
fi
export INSTINCT_CA_CERTIFICATES
# The sandbox and the pytorch_source scenario build their venv from a real CPython >= 3.11 of this
# machine (Ubuntu 22.04's own python3.11 is a release candidate) and take the CPU torch from pip's
# find-links folder; both are mounted read-only into the test nodes.
if [[ -z ${INSTINCT_SITE_PYTHON+set} ]]; then
  INSTINCT_SITE_PYTHON=$(python3 -c 'import sys; print(sys.base_prefix if sys.version_info[:2] == (3, 11) else "")')
fi
if [[ -z ${INSTINCT_WHEELS+set} ]]; then
  INSTINCT_WHEELS=$(pip config get global.find-links 2>/dev/null || true)
  INSTINCT_WHEELS=${INSTINCT_WHEELS:-/opt/wheels}
fi
export INSTINCT_SITE_PYTHON INSTINCT_WHEELS
unset _instinct_root
