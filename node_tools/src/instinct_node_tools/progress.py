# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""A fine-tune rank's progress in the Prometheus text format (no torch, no transformers).

Every rank of a job writes its own file, ``rank<N>.prom``, in the job's metrics folder; the
monitoring role's GPU collector merges those files into node exporter's textfile folder, so one
dashboard shows the GPUs and the training side by side. The file is replaced atomically (written
beside it, then renamed), so a reader never sees half of it.

transformers counts input tokens job-wide (it gathers every rank's count), so a rank's tokens/s is
its share: the job's rate divided by the world size.
"""

import os
import sys
import time

from instinct_node_tools import exposition

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

# The labels of every progress sample, in this order.
LABELS = ("finetune_job", "rank", "local_rank", "node_rank")


class Progress:
    """What one rank knows about its training, updated from the Trainer's state and logs."""

    def __init__(self, labels, world_size, clock=time.time):
        """``labels``: finetune_job, rank, local_rank and node_rank of the rank."""
        missing = set(LABELS) - set(labels)
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

    def write(self, path):
        write(path, self.labels, self.values)


def samples(labels, values):
    """``[(name, labels, value)]`` of one rank's values, in :data:`METRICS` order."""
    return [(name, dict(labels), values[name]) for name in METRICS if values.get(name) is not None]


def render(labels, values):
    """The Prometheus text exposition of one rank's values (prometheus_client renders it)."""
    return exposition.render(METRICS, samples(labels, values))


def write(path, labels, values):
    """Replace ``path`` with one rank's values, atomically (prometheus_client's textfile writer)."""
    exposition.write(path, METRICS, samples(labels, values))


def rank_files(folder):
    return sorted(
        os.path.join(folder, name) for name in os.listdir(folder) if name.startswith("rank") and name.endswith(".prom")
    )


def mark_stopped(folder):
    """Set ``instinct_finetune_running`` to 0 in every rank file of ``folder``.

    The unit runs this after the rank's processes ended however they ended (a rank killed or stopped
    never reaches on_train_end), so a job that is over never looks like a stalled one.
    """
    for path in rank_files(folder):
        with open(path, encoding="utf-8") as handle:
            found = exposition.read_samples(handle.read(), METRICS)
        if any(name == "instinct_finetune_running" and value == 1 for name, _labels, value in found):
            stopped = [
                (name, labels, 0 if name == "instinct_finetune_running" else value) for name, labels, value in found
            ]
            exposition.write(path, METRICS, stopped)


def clear(folder):
    """Remove the rank files of an earlier launch (it may have had more ranks than this one)."""
    for path in rank_files(folder):
        os.unlink(path)


def main(argv=None):
    """instinct-progress stopped|clear FOLDER: what the training unit runs around each launch."""
    argv = sys.argv[1:] if argv is None else argv
    actions = {"stopped": mark_stopped, "clear": clear}
    if len(argv) != 2 or argv[0] not in actions:
        sys.exit("usage: instinct-progress stopped|clear FOLDER")
    if os.path.isdir(argv[1]):
        actions[argv[0]](argv[1])
    return 0
