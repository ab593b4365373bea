# shellcheck shell=sh
# Managed by Ansible (instinct.finetune); local changes are overwritten.
export ROCM_PATH=/opt/rocm
case ":$PATH:" in *":/opt/rocm/bin:"*) ;; *) export PATH="$PATH:/opt/rocm/bin" ;; esac
