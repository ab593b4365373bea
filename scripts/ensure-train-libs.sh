#!/usr/bin/env bash
# Put the training libraries the finetune role checks a job with (LLaMA-Factory, transformers,
# accelerate, DeepSpeed, on a CPU torch) into a venv of their own under .cache/train-libs/, and print
# its python. The unit tests run roles/finetune/files/check_job.py with it, so that the rendered
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
venv=.cache/train-libs/$key
if [[ -x $venv/bin/python && -f $venv/.complete ]]; then
  echo "$PWD/$venv/bin/python"
  exit 0
fi

python=${INSTINCT_SITE_PYTHON:+$INSTINCT_SITE_PYTHON/bin/python3.11}
python=${python:-python3.11}
log "building $venv: torch $torch (CPU), DeepSpeed $deepspeed, LLaMA-Factory $llamafactory"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
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
echo "$PWD/$venv/bin/python"
