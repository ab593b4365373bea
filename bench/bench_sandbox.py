#!/usr/bin/env python
"""Wall time of the sandbox cluster's main job (site.yml), stage by stage.

Runs site.yml on the sandbox cluster through ansible-runner (scripts/sandbox.py) and prints the
wall time of every play, read from the run's play-start events, and the changed/failed counts per
host. With --fresh the cluster is removed first, so the figures are those of a first run on bare
containers; without it they are those of a re-run (which should change nothing). With --report
it only prints the figures of the last recorded run (artifacts/sandbox/site.json).

With --scale 2 8 it measures, in one run, what issue 20 asks: a first run and a no-change run on new
clusters of 2 and of 8 nodes, each stage side by side, the no-change run's share of the first (target:
at most 25%), the 8-node no-change run against the 2-node one (target: at most 1.3x), and the 10
costliest tasks of the no-change run (from ansible-runner's events).

Run: make bench-sandbox, or scripts/env.sh-ed: python bench/bench_sandbox.py [--fresh | --report | --scale 2 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
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
    if report.get("cpu"):
        cpu = report["cpu"]
        print(f"  CPU seconds: controller {cpu['controller']:.0f}, the rest of this machine (Docker engine, "
              f"nodes) {cpu['machine'] - cpu['controller']:.0f}")  # fmt: skip
    for host in sorted(report["ok"]):
        print(f"  {host}: ok={report['ok'][host]} changed={report['changed'].get(host, 0)} "
              f"failed={report['failed'].get(host, 0)}")  # fmt: skip
    walls = sorted(report.get("task_walls", []), key=lambda t: -t["seconds"])
    if walls:
        print(f"  the 10 costliest of {len(walls)} tasks (wall seconds, every host):")
        for task in walls[:10]:
            print(f"    {task['seconds']:6.1f}  {task['role'] or '-'}: {task['task']}")


def run_site(sandbox, name):
    result = sandbox.run_playbook(
        "site.yml",
        cmdline=sandbox.site_cmdline(),
        extravars={"finetune_collect_dir": str(sandbox.collect_dir())},
        quiet=True,
    )
    sandbox.write_report(name, result)
    if result.rc != 0:
        for failure in result.failures:
            print(f"FAILED {failure['host']}: {failure['task']}: {failure['msg']}", file=sys.stderr)
        raise SystemExit(f"site.yml failed on {len(sandbox.nodes())} nodes (rc {result.rc})")
    return result.to_dict()


ROUND_TRIPS = 30


def round_trip_cpu(sandbox, count):
    """This machine's CPU-seconds for one round trip (one module run on one node: the controller's
    fork and Docker client, the engine's exec, the node's Python), from a play of ROUND_TRIPS pings on
    every node less the same play without them."""
    used = []
    with tempfile.TemporaryDirectory(prefix="instinct-bench-") as folder:
        for pings in (0, ROUND_TRIPS):
            tasks = [{"name": f"Ping {n}", "ansible.builtin.ping": None} for n in range(pings)]
            tasks.append({"name": "End", "ansible.builtin.meta": "noop"})
            book = Path(folder) / f"ping-{pings}.yml"
            book.write_text(json.dumps([{"hosts": "instinct_nodes", "gather_facts": False, "tasks": tasks}]))
            result = sandbox.run_playbook(book, quiet=True)
            if result.rc != 0:
                raise SystemExit(f"the round-trip play failed on {count} nodes: {result.failures}")
            used.append(result.cpu["machine"])
    return (used[1] - used[0]) / (ROUND_TRIPS * count)


def first_and_again(sandbox, count):
    """A first run of site.yml on ``count`` new nodes, then a run that should change nothing."""
    os.environ["SANDBOX_NODES"] = str(count)
    sandbox.main(["sandbox.py", "down"])
    sandbox.cluster_up()
    first = run_site(sandbox, f"site-{count}-first")
    again = run_site(sandbox, f"site-{count}-again")
    again["round_trip_cpu"] = round_trip_cpu(sandbox, count)
    changed = sum(again["changed"].values())
    if changed:
        raise SystemExit(f"the second run on {count} nodes changed {changed} task results: {again['changed']}")
    return first, again


def print_side_by_side(first, again, count):
    print(f"\nsite.yml on {count} sandbox nodes: first run {first['seconds']:.0f} s, no-change run "
          f"{again['seconds']:.0f} s")  # fmt: skip
    width = max(len(p["play"]) for p in first["plays"])
    print(f"  {'stage (play)':<{width}}  {'first':>7}  {'again':>7}")
    for one, two in zip(first["plays"], again["plays"], strict=True):
        print(f"  {one['play']:<{width}}  {one['seconds']:>7.1f}  {two['seconds']:>7.1f}")


def print_cpu(results):
    """Where the no-change runs' CPU went: this machine's cores serve the controller and every node at
    once, so the wall time grows with the nodes' work; on a real cluster each node brings its own."""
    print("\nCPU seconds of the no-change run (2 cores shared by the controller, the Docker engine and every node):")
    print(f"  {'nodes':>5}  {'wall':>7}  {'controller':>10}  {'engine+nodes':>12}  {'controller/node':>15}")
    for count, (_first, again) in results.items():
        cpu = again.get("cpu") or {}
        controller, machine = cpu.get("controller", 0.0), cpu.get("machine", 0.0)
        print(f"  {count:>5}  {again['seconds']:>7.0f}  {controller:>10.0f}  {machine - controller:>12.0f}  "
              f"{controller / count:>15.1f}")  # fmt: skip
    counts = sorted(results)
    small, large = counts[0], counts[-1]
    cpu_small = (results[small][1].get("cpu") or {}).get("machine", 0.0)
    cpu_large = (results[large][1].get("cpu") or {}).get("machine", 0.0)
    if cpu_small and large != small:
        per_node = (cpu_large - cpu_small) / (large - small)
        fixed = cpu_small - small * per_node
        trip = results[small][1].get("round_trip_cpu") or 0.0
        if trip:
            print(f"  one round trip (a module on one node) costs {1000 * trip:.0f} CPU-ms here: the no-change "
                  f"run's {per_node:.1f} CPU-s per node are some {per_node / trip:.0f} round trips' worth")  # fmt: skip
        # A negative fixed part means the per-node work itself grew with the node count (an all-reduce
        # over more ranks, more targets to scrape), not that the run has a negative overhead.
        base = f"over a fixed {fixed:.0f}" if fixed >= 0 else "(each node's share grows with the count)"
        print(f"  CPU seconds grow by {per_node:.1f} per node {base}: {large} nodes need "
              f"{cpu_large / cpu_small:.2f}x the CPU of {small}. While these cores are saturated, that is also "
              "the least the wall time can grow here; on a cluster each node brings its own cores.")  # fmt: skip


def scale(sandbox, counts):
    """First and no-change runs side by side, at each node count; the ratios against their targets."""
    results = {count: first_and_again(sandbox, count) for count in counts}
    for count, (first, again) in results.items():
        print_side_by_side(first, again, count)
    small = counts[0]
    first, again = results[small]
    verdicts = []
    ratio = again["seconds"] / first["seconds"]
    verdicts.append(ratio <= 0.25)
    print(f"\nno-change run / first run on {small} nodes: {ratio:.0%} (target: at most 25%) "
          f"{'PASS' if verdicts[-1] else 'FAIL'}")  # fmt: skip
    for count in counts[1:]:
        ratio = results[count][1]["seconds"] / again["seconds"]
        verdicts.append(ratio <= 1.3)
        print(f"no-change run on {count} nodes / on {small} nodes: {ratio:.2f}x (target: at most 1.3x) "
              f"{'PASS' if verdicts[-1] else 'FAIL'}")  # fmt: skip
    print_cpu(results)
    walls = sorted(again.get("task_walls", []), key=lambda t: -t["seconds"])
    print(f"where the no-change run on {small} nodes goes, the 10 costliest of {len(walls)} tasks:")
    for task in walls[:10]:
        print(f"  {task['seconds']:6.1f}  {task['role'] or '-'}: {task['task']}")
    return 0 if all(verdicts) else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fresh", action="store_true", help="remove the cluster first (a first run)")
    mode.add_argument("--report", action="store_true", help="print the last recorded run only")
    mode.add_argument(
        "--scale",
        type=int,
        nargs="+",
        metavar="NODES",
        help="first and no-change runs on new clusters of these sizes (e.g. 2 8), with the ratios",
    )
    args = parser.parse_args()
    sandbox = load_sandbox()
    if args.scale:
        return scale(sandbox, args.scale)
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
    result = run_site(sandbox, "site")
    print_figures(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
