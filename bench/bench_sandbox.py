#!/usr/bin/env python3
"""Wall time of the sandbox cluster's main job (site.yml), stage by stage.

Runs site.yml on the sandbox cluster through ansible-runner (scripts/sandbox.py) and prints the
wall time of every play, read from the run's play-start events, and the changed/failed counts per
host. With --fresh the cluster is removed first, so the figures are those of a first run on bare
containers; without it they are those of a re-run (which should change nothing). With --report
it only prints the figures of the last recorded run (artifacts/sandbox/site.json).

Run: make bench-sandbox, or scripts/env.sh-ed: python bench/bench_sandbox.py [--fresh | --report]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_sandbox():
    spec = importlib.util.spec_from_file_location("sandbox", ROOT / "scripts" / "sandbox.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def print_figures(report):
    plays = report["plays"]
    width = max(len(p["play"]) for p in plays)
    print(f"site.yml on the sandbox cluster: {report['status']}, {report['seconds']:.0f} s in all")
    print(f"  {'stage (play)':<{width}}  {'seconds':>8}  share")
    for play in plays:
        share = 100 * play["seconds"] / report["seconds"] if report["seconds"] else 0
        print(f"  {play['play']:<{width}}  {play['seconds']:>8.1f}  {share:4.0f}%")
    for host in sorted(report["ok"]):
        print(f"  {host}: ok={report['ok'][host]} changed={report['changed'].get(host, 0)} "
              f"failed={report['failed'].get(host, 0)}")  # fmt: skip
    walls = sorted(report.get("task_walls", []), key=lambda t: -t["seconds"])
    if walls:
        print(f"  the 10 costliest of {len(walls)} tasks (wall seconds, every host):")
        for task in walls[:10]:
            print(f"    {task['seconds']:6.1f}  {task['role'] or '-'}: {task['task']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fresh", action="store_true", help="remove the cluster first (a first run)")
    mode.add_argument("--report", action="store_true", help="print the last recorded run only")
    args = parser.parse_args()
    sandbox = load_sandbox()
    if args.report:
        path = sandbox.collect_dir() / "site.json"
        if not path.exists():
            print(f"no recorded run at {path}; run make sandbox first", file=sys.stderr)
            return 1
        print_figures(json.loads(path.read_text()))
        return 0
    if args.fresh:
        sandbox.main(["sandbox.py", "down"])
    sandbox.cluster_up()
    result = sandbox.run_playbook(
        "site.yml",
        cmdline=sandbox.site_cmdline(),
        extravars={"finetune_collect_dir": str(sandbox.collect_dir())},
        quiet=True,
    )
    sandbox.write_report("site", result)
    print_figures(result.to_dict())
    return 0 if result.rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
