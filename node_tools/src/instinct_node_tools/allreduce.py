"""Cross-node all-reduce: one process per GPU on every node (one per node without a GPU),
torch.distributed over the fabric NIC.

RCCL (backend "nccl") where torch sees GPUs, Gloo otherwise. Checks the sum, then the master's first
process prints one JSON line: per message size the time, algorithm and bus bandwidth (busbw = algbw *
2(n-1)/n for n ranks, as rccl-tests computes it), and the latency of a one-element all-reduce.
Usage: allreduce.py MASTER PORT FIRST_RANK LOCAL_RANKS WORLD TIMEOUT ITERATIONS SIZE_MB...
(FIRST_RANK: the global rank of this node's first process; LOCAL_RANKS: how many GPUs this node's
processes use, 0 for one process without a GPU.)
"""

import datetime
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(local_rank, settings):
    first, local, world = settings["first"], settings["local"], settings["world"]
    rank = first + local_rank
    gpu = local > 0
    if gpu:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if gpu else torch.device("cpu")
    iterations = settings["iterations"]
    dist.init_process_group(
        "nccl" if gpu else "gloo",
        init_method=f"tcp://{settings['master']}:{settings['port']}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=settings["timeout"]),
    )

    def timed(tensor):
        dist.all_reduce(tensor)  # warm-up
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _iteration in range(iterations):
            dist.all_reduce(tensor)
        if gpu:
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / iterations

    check = torch.ones(1024, device=device)
    dist.all_reduce(check)
    if not torch.all(check == world):
        sys.exit(f"all-reduce returned {check[0].item()} instead of {world}")
    results = []
    for size_mb in settings["sizes"]:
        numel = int(size_mb * 1024 * 1024 / 4)
        seconds = timed(torch.ones(numel, device=device))
        algbw = numel * 4 / seconds / 1e9
        results.append(
            {
                "size_mb": size_mb,
                "size_bytes": numel * 4,
                "time_ms": round(seconds * 1e3, 3),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(algbw * 2 * (world - 1) / world, 3),
            }
        )
    latency = timed(torch.ones(1, device=device))
    dist.destroy_process_group()
    if local_rank == 0:
        summary = {
            "host": socket.gethostname(),
            "rank": rank,
            "world_size": world,
            "local_ranks": max(local, 1),
            "backend": "nccl" if gpu else "gloo",
            "ifname": (os.environ.get("NCCL_SOCKET_IFNAME" if gpu else "GLOO_SOCKET_IFNAME") or "").lstrip("="),
            "latency_us": round(latency * 1e6, 1),
            "results": results,
        }
        print(json.dumps(summary), flush=True)


def main(argv):
    master, port, first, local, world, timeout, iterations = argv[1:8]
    settings = {
        "master": master,
        "port": int(port),
        "first": int(first),
        "local": int(local),
        "world": int(world),
        "timeout": float(timeout),
        "iterations": int(iterations),
        "sizes": [float(size) for size in argv[8:]],
    }
    if settings["local"] > 0 and torch.cuda.device_count() < settings["local"]:
        sys.exit(f"torch sees {torch.cuda.device_count()} GPU(s), the play expects {settings['local']} on this node")
    if settings["local"] <= 1:
        run(0, settings)
    else:
        # One process per GPU; an exception in any of them ends all with its traceback.
        mp.spawn(run, args=(settings,), nprocs=settings["local"], join=True)
    return 0


def cli():
    return main(sys.argv)
