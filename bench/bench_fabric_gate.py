#!/usr/bin/env python
"""The all-reduce gate's floor for the fabrics issue 29 names, each with its reason: 2 and 8 nodes of
eight MI300X with 8 x 400G rails (the fabric AMD's acceptance guide measured), 8 x 200G rails, and a
fabric no published figure covers (8 x 100G Intel E810, irdma), plus one node (xGMI). The floors come
from the fabric role's defaults (fabric_allreduce_thresholds) through the same function the role
calls; tests/unit/plugins/module_utils/test_rccl_perf.py asserts the same rows.

Usage: python bench/bench_fabric_gate.py
"""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".venv" / "collections"))

from ansible_collections.instinct.finetune.plugins.module_utils.rccl_perf import (  # noqa: E402
    fabric_floor,
    nic_model,
)

# (label, GPU model, nodes, rails of one node as fabric_rdma.hcas, rate of each rail in Gb/s)
FABRICS = [
    ("8x400G CX-7", "AMD Instinct MI300X", [f"mlx5_{i}:1" for i in range(8)], 400),
    ("8x200G CX-7", "AMD Instinct MI300X", [f"mlx5_{i}:1" for i in range(8)], 200),
    ("8x100G E810 (no reference)", "AMD Instinct MI300X", [f"irdma{i}:1" for i in range(8)], 100),
]


def table(defaults=None):
    """The rows: (fabric, nodes, floor dict)."""
    settings = defaults or yaml.safe_load((ROOT / "roles" / "fabric" / "defaults" / "main.yml").read_text())
    gate = settings["fabric_allreduce_thresholds"]
    one_node = fabric_floor(
        "AMD Instinct MI300X", 1, 8, [], "", gate["references"], gate["efficiency"], gate["size_bytes"]
    )
    rows = [("one node (xGMI)", 1, one_node)]
    for label, model, hcas, rate in FABRICS:
        for nodes in (2, 8):
            floor = fabric_floor(model, nodes, 8, [rate] * len(hcas), nic_model(hcas), gate["references"],
                                 gate["efficiency"], gate["size_bytes"])  # fmt: skip
            rows.append((label, nodes, floor))
    return rows


def lines(rows):
    out = [f"{'fabric':<28} {'nodes':>5} {'floor GB/s':>10} {'at bytes':>11}  {'verdict':<7}  reason"]
    for label, nodes, floor in rows:
        figure = "-" if floor["busbw_gbps"] is None else f"{floor['busbw_gbps']:.1f}"
        verdict = "fail" if floor["enforce"] else ("warn" if floor["busbw_gbps"] is not None else "none")
        reason = floor["basis"] + (f" [{floor['source']}]" if floor["source"] else "")
        out.append(f"{label:<28} {nodes:>5} {figure:>10} {floor['size_bytes']:>11}  {verdict:<7}  {reason}")
    return out


def main():
    print("\n".join(lines(table())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
