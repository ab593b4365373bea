# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Read what a fine-tune left in its output folder, without loading it: the weight files, and for
each safetensors file its tensors' shapes as its header gives them (safetensors' own reader).

Run in the training venv on the master node by the evaluate role, before it evaluates; takes the
output folder, prints one JSON document::

    {"files": {"model.safetensors": 123456, ...},
     "safetensors": {"model.safetensors": {"tensors": 290, "empty": [], "error": null}, ...},
     "names": ["checkpoint-40", "config.json", "global_step40", "latest", ...]}

``names`` is every entry of the folder, so that a run which saved only DeepSpeed's ZeRO shards
(``global_step*/``, ``latest``, ``zero_to_fp32.py``) can be told apart from one that saved nothing.

The evaluate role decides from it (plugins/module_utils/jobspec.py: weights_problems) whether the
weights can be evaluated. ``empty`` lists tensors of zero elements: a LoRA adapter saved under
ZeRO-3 without gathering its shards has such tensors.
"""

import json
import math
import os
import sys

from safetensors import safe_open

# Top-level files of an output folder that hold or describe weights.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json")


def read(output_dir):
    files = {}
    tensors = {}
    names = sorted(os.listdir(output_dir))
    for name in names:
        path = os.path.join(output_dir, name)
        if not (os.path.isfile(path) and name.endswith(WEIGHT_SUFFIXES)):
            continue
        files[name] = os.path.getsize(path)
        if name.endswith(".safetensors"):
            entry = {"tensors": 0, "empty": [], "error": None}
            try:
                with safe_open(path, framework="numpy") as handle:
                    for key in handle.keys():  # noqa: SIM118 - safe_open is no mapping
                        entry["tensors"] += 1
                        if math.prod(handle.get_slice(key).get_shape()) == 0:
                            entry["empty"].append(key)
            except Exception as error:  # a truncated or foreign file: safetensors' own words
                entry["error"] = f"{type(error).__name__}: {error}"
            tensors[name] = entry
    return {"files": files, "safetensors": tensors, "names": names}


def main():
    print(json.dumps(read(sys.argv[1])))
    return 0
