# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Run one process of a LLaMA-Factory training under torchrun, exporting its progress.

torchrun starts this module (``torchrun -m instinct_node_tools.launch``) once per local rank, in
place of LLaMA-Factory's own launcher (which does nothing but call ``run_exp()``); the only
difference is the progress callback that LLaMA-Factory's ``run_exp(callbacks=...)`` accepts. The
arguments are LLaMA-Factory's: the training YAML, then
``key=value`` overrides such as ``resume_from_checkpoint=...``.

Environment: INSTINCT_FINETUNE_JOB (the job name), INSTINCT_FINETUNE_METRICS_DIR (where
``rank<N>.prom`` goes; unset = no export), INSTINCT_FINETUNE_CPU_COMPAT=1 on CPU ranks (see
:mod:`cpu_compat`), and torchrun's RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK.
"""

import os
import sys
import time

from transformers import TrainerCallback

from instinct_node_tools.progress import Progress

# Writing a few hundred bytes per optimizer step costs nothing, but steps of tiny models come
# faster than anyone scrapes: between logging steps, write at most this often.
_MIN_WRITE_INTERVAL = 1.0


class ProgressExport(TrainerCallback):
    """Keeps ``rank<N>.prom`` current from the Trainer's events (every rank calls them)."""

    def __init__(self, path, progress):
        self.path = path
        self.progress = progress
        self._written = 0.0

    def _write(self, force=False):
        now = time.monotonic()
        if force or now - self._written >= _MIN_WRITE_INTERVAL:
            try:
                self.progress.write(self.path)
            except OSError as error:
                # Monitoring must never stop a training run.
                print(f"instinct.finetune: cannot write {self.path}: {error}", file=sys.stderr)
            self._written = now

    def on_train_begin(self, args, state, control, **kwargs):
        self.progress.begin(state.global_step, state.max_steps, state.num_input_tokens_seen)
        self._write(force=True)

    def on_step_end(self, args, state, control, **kwargs):
        self.progress.step(state.global_step, state.epoch, state.num_input_tokens_seen)
        self._write(force=state.global_step >= state.max_steps)

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.progress.log(logs or {})
        self._write(force=True)

    def on_train_end(self, args, state, control, **kwargs):
        self.progress.end()
        self._write(force=True)


def _callbacks():
    folder = os.environ.get("INSTINCT_FINETUNE_METRICS_DIR")
    if not folder:
        return []
    rank = os.environ.get("RANK", "0")
    labels = {
        "finetune_job": os.environ.get("INSTINCT_FINETUNE_JOB", ""),
        "rank": rank,
        "local_rank": os.environ.get("LOCAL_RANK", "0"),
        "node_rank": os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")),
    }
    progress = Progress(labels, world_size=int(os.environ.get("WORLD_SIZE", "1")))
    return [ProgressExport(os.path.join(folder, f"rank{rank}.prom"), progress)]


def main():
    if os.environ.get("INSTINCT_FINETUNE_CPU_COMPAT") == "1":
        # Before LLaMA-Factory loads anything: CPU ranks resume from checkpoints tagged cpu:N.
        from instinct_node_tools import cpu_compat  # noqa: PLC0415 - torch only on CPU ranks

        cpu_compat.register()
    from llamafactory.train.tuner import run_exp  # noqa: PLC0415 - after the CPU fix

    run_exp(callbacks=_callbacks())


if __name__ == "__main__":
    main()
