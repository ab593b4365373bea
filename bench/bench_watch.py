#!/usr/bin/env python
"""Seconds and controller memory per round of the job watch, at 10, 100 and 1000 rounds.

The watch (instinct.finetune.finetune_watch) follows a job in one task; the task that included
itself once per round grew Ansible's task iterator a level per round (RecursionError after about 246
rounds). Each run here drives the real watch through ansible-playbook on two local nodes whose job
stays running (tests/soak/watch_soak.py, a stand-in systemctl at the systemd boundary), and prints
the wall time per round and the peak RSS of the largest ansible process.

Targets (issue 17): the seconds per round and the peak RSS stay flat from 10 to 1000 rounds (within
25 %), so that a job of days is watched at the cost of a job of minutes.
Run: .venv/bin/python bench/bench_watch.py [--rounds 10 100 1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROWTH_TARGET = 1.25


def one_run(rounds):
    """One soak in a fresh process, so that the peak RSS is this run's own."""
    code = (
        "import json, sys, tempfile; sys.path.insert(0, sys.argv[1]);"
        "from tests.soak.watch_soak import soak;"
        "s, m, r, _ = soak(tempfile.mkdtemp(prefix='instinct-watch-bench-'), int(sys.argv[2]));"
        "print(json.dumps({'seconds': s, 'peak_mib': m, 'rounds': min(v['rounds'] for v in r.values())}))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(ROOT), str(rounds)], capture_output=True, text=True,
                         check=True, cwd=ROOT)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[10, 100, 1000])
    args = parser.parse_args()
    rows = []
    print(f"{'rounds':>7} {'seconds':>9} {'s/round':>9} {'peak RSS MiB':>13}")
    for rounds in args.rounds:
        run = one_run(rounds)
        per_round = run["seconds"] / run["rounds"]
        rows.append((rounds, per_round, run["peak_mib"]))
        print(f"{run['rounds']:>7} {run['seconds']:>9.1f} {per_round:>9.3f} {run['peak_mib']:>13.1f}")
    first, last = rows[0], rows[-1]
    time_growth = last[1] / first[1]
    rss_growth = last[2] / first[2]
    ok = time_growth <= GROWTH_TARGET and rss_growth <= GROWTH_TARGET
    print(f"growth {first[0]} -> {last[0]} rounds: time per round x{time_growth:.2f}, peak RSS x{rss_growth:.2f} "
          f"(target <= x{GROWTH_TARGET}): {'PASS' if ok else 'FAIL'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
