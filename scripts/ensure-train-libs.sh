#!/usr/bin/env bash
# Put the training libraries the finetune role checks a job with (LLaMA-Factory, transformers,
# accelerate, DeepSpeed, on a CPU torch) into a venv of their own, and print its python. The venv
# lives in the user's cache (INSTINCT_CACHE_DIR, default ~/.cache/instinct-finetune/train-libs/), not
# in the checkout: it is 1.5 GB and about two minutes of pip, and every clean clone on the same
# machine (CI's included) would otherwise build the same one again. The unit tests run roles/finetune/files/check_job.py with it, so that the rendered
# files of every strategy are fed to the real parsers at the versions the roles pin.
# The versions come from the roles' defaults and LLaMA-Factory's constraints file, so the venv is
# rebuilt when a pin changes (its folder is named by their hash). Re-running is cheap otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[train-libs] %s\n' "$*" >&2; }

default_of() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "roles/$2/defaults/main.yml"; }
deepspeed=$(default_of deepspeed_version deepspeed)
llamafactory=$(default_of llama_factory_version llama_factory)
constraints=roles/llama_factory/files/constraints-llamafactory-$llamafactory.txt
# The CPU torch the sandbox trains with (pip's find-links folder holds it on this kind of machine).
torch=${TRAIN_LIBS_TORCH:-2.13.0}
[[ -n $deepspeed && -n $llamafactory && -f $constraints ]] || {
  log "cannot read the pinned versions (deepspeed '$deepspeed', llamafactory '$llamafactory', $constraints)"
  exit 2
}

key=$( { echo "$torch $deepspeed $llamafactory"; cat "$constraints" "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-12)
cache=${INSTINCT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/instinct-finetune}/train-libs
venv=$cache/$key
if [[ -x $venv/bin/python && -f $venv/.complete ]]; then
  echo "$venv/bin/python"
  exit 0
fi
# Two checkouts testing at once build it once: the second waits for the first.
mkdir -p "$cache"
exec 9>"$cache/.lock-$key"
flock 9
if [[ -x $venv/bin/python && -f $venv/.complete ]]; then
  echo "$venv/bin/python"
  exit 0
fi

python=${INSTINCT_SITE_PYTHON:+$INSTINCT_SITE_PYTHON/bin/python3.11}
python=${python:-python3.11}
log "building $venv: torch $torch (CPU), DeepSpeed $deepspeed, LLaMA-Factory $llamafactory"
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "torch==$torch"
# What LLaMA-Factory's argument parser imports, at the versions its nodes get (not its web UI,
# media and serving dependencies, which the parser does not load).
"${pip[@]}" -c "$constraints" transformers accelerate peft trl datasets omegaconf \
  hjson ninja py-cpuinfo psutil msgpack pydantic packaging numpy
# DeepSpeed's sdist imports torch to build; its ops are built at first use (none are needed here).
DS_BUILD_OPS=0 "${pip[@]}" --no-build-isolation -c "$constraints" "deepspeed==$deepspeed"
"${pip[@]}" --no-deps "llamafactory==$llamafactory"
"$venv/bin/python" -c 'import deepspeed, transformers, llamafactory.hparams.parser' >&2
touch "$venv/.complete"
echo "$venv/bin/python"
