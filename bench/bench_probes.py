#!/usr/bin/env python
"""Time the GPU probe parsers on recorded real outputs and compare with their targets.

Target (issue 3): parsing an 8-GPU rocminfo output takes under 5 ms.
Run: .venv/bin/python bench/bench_probes.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".venv" / "collections"))

from ansible_collections.instinct.finetune.plugins.module_utils.rocminfo import parse_rocminfo  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
CASES = [
    # (label, parser, fixture, target in ms or None)
    ("rocminfo 8x MI300X", parse_rocminfo, FIXTURES / "rocminfo" / "mi300x-8gpu.txt", 5.0),
    ("rocminfo 1x MI300A", parse_rocminfo, FIXTURES / "rocminfo" / "mi300a.txt", None),
]


def measure(parser, text, repeat):
    parser(text)  # warm up (regex compilation, imports)
    samples = []
    for _round in range(repeat):
        start = time.perf_counter()
        parser(text)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    failed = False
    print(f"{'case':<24} {'bytes':>7} {'min ms':>8} {'median ms':>10} {'max ms':>8}  target")
    for label, func, fixture, target in CASES:
        text = fixture.read_text(encoding="utf-8")
        samples = measure(func, text, args.repeat)
        median = statistics.median(samples)
        verdict = "-"
        if target is not None:
            ok = median < target
            failed |= not ok
            verdict = f"< {target} ms: {'met' if ok else 'MISSED'}"
        print(f"{label:<24} {len(text):>7} {min(samples):>8.3f} {median:>10.3f} {max(samples):>8.3f}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
