"""Cross-node all-reduce smoke test: one process per node, torch.distributed over the fabric NIC.

RCCL (backend "nccl") where torch sees a GPU, Gloo otherwise. Checks the sum, then prints one JSON
line: per message size the time, algorithm and bus bandwidth (busbw = algbw * 2(n-1)/n, as
rccl-tests report it), and the latency of a one-element all-reduce.
Usage: allreduce.py MASTER PORT RANK WORLD TIMEOUT ITERATIONS SIZE_MB...
"""

import datetime
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

master, port, rank, world, timeout, iterations = sys.argv[1:7]
rank, world, iterations = int(rank), int(world), int(iterations)
sizes = [float(s) for s in sys.argv[7:]]
gpu = torch.cuda.is_available()
backend = "nccl" if gpu else "gloo"
device = torch.device("cuda", 0) if gpu else torch.device("cpu")
dist.init_process_group(
    backend,
    init_method=f"tcp://{master}:{port}",
    rank=rank,
    world_size=world,
    timeout=datetime.timedelta(seconds=float(timeout)),
)


def timed(tensor):
    dist.all_reduce(tensor)  # warm-up, and the sum check below
    if gpu:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    if gpu:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iterations


check = torch.ones(1024, device=device)
dist.all_reduce(check)
if not torch.all(check == world):
    sys.exit(f"all-reduce returned {check[0].item()} instead of {world}")
results = []
for size_mb in sizes:
    numel = int(size_mb * 1024 * 1024 / 4)
    seconds = timed(torch.ones(numel, device=device))
    algbw = numel * 4 / seconds / 1e9
    results.append(
        {
            "size_mb": size_mb,
            "time_ms": round(seconds * 1e3, 3),
            "algbw_gbps": round(algbw, 3),
            "busbw_gbps": round(algbw * 2 * (world - 1) / world, 3),
        }
    )
latency = timed(torch.ones(1, device=device))
dist.destroy_process_group()
print(
    json.dumps(
        {
            "host": socket.gethostname(),
            "rank": rank,
            "world_size": world,
            "backend": backend,
            "ifname": os.environ.get("NCCL_SOCKET_IFNAME" if gpu else "GLOO_SOCKET_IFNAME"),
            "latency_us": round(latency * 1e6, 1),
            "results": results,
        }
    )
)
