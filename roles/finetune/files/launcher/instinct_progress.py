# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""A fine-tune rank's progress in the Prometheus text format (pure; no torch, no transformers).

Every rank of a job writes its own file, ``rank<N>.prom``, in the job's metrics folder; the
monitoring role's GPU collector merges those files into node exporter's textfile folder, so one
dashboard shows the GPUs and the training side by side. The file is replaced atomically (written
beside it, then renamed), so a reader never sees half of it.

transformers counts input tokens job-wide (it gathers every rank's count), so a rank's tokens/s is
its share: the job's rate divided by the world size.
"""

import math
import os
import re
import sys
import tempfile
import time

# name: (type, help). The dashboard and the alert rules may only use names listed here.
METRICS = {
    "instinct_finetune_running": ("gauge", "1 while the rank trains, 0 once its training loop ended."),
    "instinct_finetune_step": ("gauge", "Optimizer steps done (global step)."),
    "instinct_finetune_total_steps": ("gauge", "Optimizer steps the job will take."),
    "instinct_finetune_epoch": ("gauge", "Epochs done, fractional."),
    "instinct_finetune_loss": ("gauge", "Training loss of the last logging step (mean over ranks)."),
    "instinct_finetune_eval_loss": ("gauge", "Loss on the held-out split at the last evaluation."),
    "instinct_finetune_learning_rate": ("gauge", "Learning rate of the last logging step."),
    "instinct_finetune_input_tokens_total": ("counter", "Input tokens the job has trained on (all ranks)."),
    "instinct_finetune_tokens_per_second": (
        "gauge",
        "This rank's share of the job's input tokens per second since the previous step.",
    ),
    "instinct_finetune_world_size": ("gauge", "Ranks in the job."),
    "instinct_finetune_last_step_timestamp_seconds": (
        "gauge",
        "Unix time of the rank's last optimizer step (of the training start before the first).",
    ),
}

_LABELS = ("finetune_job", "rank", "local_rank", "node_rank")


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


class Progress:
    """What one rank knows about its training, updated from the Trainer's state and logs."""

    def __init__(self, labels, world_size, clock=time.time):
        """``labels``: finetune_job, rank, local_rank and node_rank of the rank."""
        missing = set(_LABELS) - set(labels)
        if missing:
            raise ValueError(f"progress labels missing: {sorted(missing)}")
        self.labels = dict(labels)
        self.clock = clock
        self.values = {"instinct_finetune_world_size": world_size, "instinct_finetune_running": 0}
        self._tokens_mark = None

    def begin(self, global_step, max_steps, tokens_seen):
        now = self.clock()
        self.values.update(
            {
                "instinct_finetune_running": 1,
                "instinct_finetune_step": global_step,
                "instinct_finetune_total_steps": max_steps,
                "instinct_finetune_last_step_timestamp_seconds": now,
            }
        )
        self._tokens_mark = (tokens_seen, now)
        if tokens_seen:
            self.values["instinct_finetune_input_tokens_total"] = tokens_seen

    def step(self, global_step, epoch, tokens_seen):
        now = self.clock()
        self.values["instinct_finetune_step"] = global_step
        self.values["instinct_finetune_last_step_timestamp_seconds"] = now
        if epoch is not None:
            self.values["instinct_finetune_epoch"] = epoch
        if tokens_seen:
            self.values["instinct_finetune_input_tokens_total"] = tokens_seen
            if self._tokens_mark is not None and now > self._tokens_mark[1]:
                rate = (tokens_seen - self._tokens_mark[0]) / (now - self._tokens_mark[1])
                ranks = max(1, int(self.values["instinct_finetune_world_size"]))
                self.values["instinct_finetune_tokens_per_second"] = rate / ranks
            self._tokens_mark = (tokens_seen, now)

    def log(self, logs):
        for key, name in (
            ("loss", "instinct_finetune_loss"),
            ("eval_loss", "instinct_finetune_eval_loss"),
            ("learning_rate", "instinct_finetune_learning_rate"),
        ):
            value = logs.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.values[name] = value

    def end(self):
        self.values["instinct_finetune_running"] = 0

    def render(self):
        return render(self.labels, self.values)


def render(labels, values):
    """The Prometheus text exposition of one rank's values, in :data:`METRICS` order."""
    label_text = ",".join(f'{key}="{_escape(labels[key])}"' for key in _LABELS)
    lines = []
    for name, (kind, text) in METRICS.items():
        if name not in values or values[name] is None:
            continue
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name}{{{label_text}}} {_number(values[name])}"]
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never a mix."""
    folder = os.path.dirname(path) or "."
    handle, tmp = tempfile.mkstemp(prefix=".rank", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def rank_files(folder):
    return sorted(
        os.path.join(folder, name) for name in os.listdir(folder) if name.startswith("rank") and name.endswith(".prom")
    )


def mark_stopped(folder):
    """Set ``instinct_finetune_running`` to 0 in every rank file of ``folder``.

    The unit runs this after the rank's processes ended however they ended (a rank killed or stopped
    never reaches on_train_end), so a job that is over never looks like a stalled one.
    """
    running = re.compile(r"^(instinct_finetune_running\{[^}]*\}) 1$", re.MULTILINE)
    for path in rank_files(folder):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if running.search(text):
            write_atomic(path, running.sub(r"\1 0", text))


def clear(folder):
    """Remove the rank files of an earlier launch (it may have had more ranks than this one)."""
    for path in rank_files(folder):
        os.unlink(path)


if __name__ == "__main__":
    # instinct_progress.py stopped|clear FOLDER: what the training unit runs around each launch.
    actions = {"stopped": mark_stopped, "clear": clear}
    if len(sys.argv) != 3 or sys.argv[1] not in actions:
        sys.exit(f"usage: {sys.argv[0]} stopped|clear FOLDER")
    if os.path.isdir(sys.argv[2]):
        actions[sys.argv[1]](sys.argv[2])
