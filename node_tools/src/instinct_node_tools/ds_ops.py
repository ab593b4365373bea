"""Load DeepSpeed's required ops the way a training rank does, without compiling any.

ds_report lists an op as installed when its wheel was built with it; a rank then loads the compiled
module, and that load can still fail (built against another torch, a missing HIP library). Run in
the training venv with the ops as DeepSpeed's build switches name them (CPU_ADAM, FUSED_ADAM):
prints a JSON list of problems, one per op, and exits 1 when there is any. An op that was not
pre-built is reported, not loaded: loading it would start a JIT compile on the node.
"""

import json
import sys

from deepspeed.git_version_info import installed_ops
from deepspeed.ops.op_builder.all_ops import ALL_OPS


def main(wanted):
    by_switch = {builder.BUILD_VAR: (name, builder) for name, builder in ALL_OPS.items()}
    problems = []
    for op in wanted:
        if f"DS_BUILD_{op}" not in by_switch:
            problems.append(f"{op}: DeepSpeed has no such op")
            continue
        name, builder = by_switch[f"DS_BUILD_{op}"]
        if not installed_ops.get(name):
            problems.append(f"{op}: not pre-built in this DeepSpeed ({name} is not in installed_ops)")
            continue
        try:
            builder.load(verbose=False)
        except Exception as error:
            problems.append(f"{op}: {type(error).__name__}: {error}")
    print(json.dumps(problems))
    return 1 if problems else 0


def cli():
    return main(sys.argv[1:])
