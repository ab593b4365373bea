# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""instinct-gpu-collector: one sample of the node's GPUs (and its fine-tune ranks) for node exporter.

Run by instinct-gpu-collector.timer. Reads amd-smi, else rocm-smi (see gpu_metrics.py), writes
instinct_gpu.prom into node exporter's textfile folder, and merges the fine-tune ranks' progress
files into instinct_finetune.prom (only what rank_files lets through of the training account's
folders). When no tool answers, the last good sample is written again marked stale and the reasons
go to the journal; the timer keeps trying.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from instinct_node_tools import exposition, gpu_metrics, progress, rank_files
from instinct_node_tools._probe import ROCM_BIN, find_tool


def log(message):
    print(message, file=sys.stderr, flush=True)


def write_atomic(path, text):
    folder = os.path.dirname(path)
    handle, tmp = tempfile.mkstemp(prefix=".instinct", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


class Runner:
    def __init__(self, paths, timeout):
        self.paths = paths
        self.timeout = timeout

    def executable(self, tool):
        return find_tool(self.paths[tool])

    def __call__(self, tool, args):
        path = self.executable(tool)
        if path is None:
            raise gpu_metrics.ToolFailed(f"{self.paths[tool]} is not installed (not in PATH or {ROCM_BIN})")
        argv = [path, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise gpu_metrics.ToolFailed(f"'{' '.join(argv)}' did not finish in {self.timeout} s") from None
        except OSError as error:
            raise gpu_metrics.ToolFailed(f"'{' '.join(argv)}' could not run: {error}") from None
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise gpu_metrics.ToolFailed(
                f"'{' '.join(argv)}' exited {done.returncode}: {said[-1] if said else 'no output'}"
            )
        return done.stdout


def amdsmi_static(run, state_dir, max_age):
    """amd-smi static --json, cached: it only changes with the hardware, and it is slow."""
    cache = os.path.join(state_dir, "amd-smi-static.json")
    try:
        if time.time() - os.stat(cache).st_mtime < max_age:
            with open(cache, encoding="utf-8") as handle:
                return handle.read()
    except OSError:
        pass
    try:
        text = run("amd-smi", gpu_metrics.AMDSMI_STATIC)
        gpu_metrics.parse_amdsmi_static(text)
    except (gpu_metrics.ToolFailed, gpu_metrics.SmiError, ValueError):
        return None
    write_atomic(cache, text)
    return text


def collect_gpus(args, run):
    state = os.path.join(args.state_dir, "last-good.json")
    static = amdsmi_static(run, args.state_dir, args.static_max_age) if run.executable("amd-smi") else None
    source, records, problems = gpu_metrics.read_gpus(run, static)
    now = time.time()
    if source:
        sample = {"source": source, "records": records, "at": now}
        write_atomic(state, json.dumps(sample))
    else:
        sample = read_json(state)
    # Say why once per change of reasons, not on every tick of the timer.
    reasons = os.path.join(args.state_dir, "last-problems.json")
    if problems != read_json(reasons):
        if source:
            for problem in problems:
                log(f"read the GPUs with {source}; before it, {problem}")
        else:
            kept = "keeping the last good sample, marked stale" if sample else "no good sample yet"
            log(f"no tool could read the GPUs ({kept}): " + "; ".join(problems))
        write_atomic(reasons, json.dumps(problems))
    samples = gpu_metrics.gpu_textfile_samples(sample, expected=args.expected_gpus, up=bool(source))
    exposition.write(os.path.join(args.textfile_dir, "instinct_gpu.prom"), gpu_metrics.METRICS, samples)
    return bool(source)


# How many problem lines of the ranks' files one change puts in the journal.
LOGGED_PROBLEMS = 50


def collect_finetune(args):
    """Merge the ranks' progress files into instinct_finetune.prom (see rank_files: what root reads
    of the training account's folders, and what of it gets through), and say in the journal what
    was refused or dropped, once per change of those lines."""
    target = os.path.join(args.textfile_dir, "instinct_finetune.prom")
    merged, problems = rank_files.collect(args.finetune_glob, args.training_user)
    if merged:
        exposition.write(target, progress.METRICS, merged)
    elif os.path.exists(target):
        os.unlink(target)
    said = os.path.join(args.state_dir, "last-rank-file-problems.json")
    if problems != (read_json(said) or []):
        for problem in problems[:LOGGED_PROBLEMS]:
            log(f"rank files: {problem}")
        if len(problems) > LOGGED_PROBLEMS:
            log(f"rank files: and {len(problems) - LOGGED_PROBLEMS} more problems")
        if problems:
            log("rank files: the lines above are repeated only when they change")
        write_atomic(said, json.dumps(problems))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--textfile-dir", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--expected-gpus", type=int)
    parser.add_argument("--amd-smi", default="amd-smi")
    parser.add_argument("--rocm-smi", default="rocm-smi")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--static-max-age", type=float, default=3600.0)
    parser.add_argument("--skip-gpus", action="store_true", help="another exporter serves the GPUs")
    parser.add_argument("--finetune-glob", default="/var/lib/instinct-finetune/jobs/*/metrics/rank*.prom")
    parser.add_argument(
        "--training-user",
        default="instinct",
        help="the account that runs the jobs: only its rank files are read, in its folders or root's",
    )
    args = parser.parse_args(argv)
    run = Runner({"amd-smi": args.amd_smi, "rocm-smi": args.rocm_smi}, args.timeout)
    if args.skip_gpus:
        # Another exporter serves the GPUs; the "GPU missing" alert still needs the expected count.
        exposition.write(
            os.path.join(args.textfile_dir, "instinct_gpu.prom"),
            gpu_metrics.METRICS,
            [("instinct_gpu_expected_count", {}, args.expected_gpus)],
        )
    else:
        collect_gpus(args, run)
    collect_finetune(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
