"""instinct-ds-ops, the DeepSpeed op loader, installed over the pinned training libraries, where
DeepSpeed comes from PyPI without pre-built ops: an op that was not pre-built is reported and not
compiled, and a name DeepSpeed does not know is named."""

import json


def test_an_op_that_was_not_pre_built_is_reported_without_a_compile_and_an_unknown_one_is_named(train_tools):
    proc = train_tools.run("instinct-ds-ops", "CPU_ADAM", "NO_SUCH_OP", timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [
        "CPU_ADAM: not pre-built in this DeepSpeed (cpu_adam is not in installed_ops)",
        "NO_SUCH_OP: DeepSpeed has no such op",
    ]
