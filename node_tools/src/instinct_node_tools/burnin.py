"""GPU burn-in: a square matmul loop on every visible accelerator at once, TFLOP/s per device.

Every GPU torch sees (HIP devices on ROCm, exposed as torch.cuda) gets its own thread that multiplies
two N x N matrices (bf16 by default) for the given seconds; the GPUs run together so that the node's
power and cooling are loaded as in training. A node without GPUs burns its CPU as one device (with
--cpu-threads threads, where nodes share a host's cores as the sandbox's containers do). One
matmul is 2 * N^3 floating point operations; a device's figure is its operations over the time
between two synchronisations. The result is checked to be finite (a NaN or infinity from a GEMM is a
hardware or driver fault). Prints one JSON document on stdout:

    {"device_kind": "rocm" | "cuda" | "cpu", "dtype": "bf16", "matrix_size": N, "seconds": S,
     "torch": VERSION, "hip": VERSION | null,
     "devices": [{"index": i, "name": ..., "bdf": "0000:1b:00" | null, "tflops": ..., "iterations": ...,
                  "seconds": ...}]}

Usage: burnin.py [--size N] [--seconds S] [--dtype bf16|fp16|fp32] [--cpu-threads T]
Exit status 2: torch does not import; 3: a device returned a non-finite result.
"""

import argparse
import json
import platform
import sys
import threading
import time

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# Work between two synchronisations: enough to hide the host's loop, short enough to stop on time.
BATCH_SECONDS = 0.25
WARMUP_ITERATIONS = 3


def flops_per_matmul(size):
    """Floating point operations of one N x N by N x N product (a multiply and an add per term)."""
    return 2 * size**3


def tflops(size, iterations, seconds):
    """TFLOP/s of ``iterations`` products of size ``size`` in ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"a measurement of {seconds} s")
    return flops_per_matmul(size) * iterations / seconds / 1e12


def next_batch(done, elapsed, target=BATCH_SECONDS):
    """How many matmuls to queue before the next synchronisation, from the rate measured so far."""
    if done <= 0 or elapsed <= 0:
        return 1
    return max(1, min(1024, int(target * done / elapsed)))


def cpu_name(cpuinfo=None):
    """The CPU's model name from /proc/cpuinfo (text given for tests), else the platform's."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _sep, value = line.partition(":")
        if key.strip() in ("model name", "Model name") and value.strip():
            return " ".join(value.split())
    return platform.processor() or platform.machine() or "cpu"


def bdf(props):
    """``domain:bus:device`` of a torch device's properties (lower case hex), or None when torch does
    not expose the PCI location (older releases)."""
    try:
        return f"{int(props.pci_domain_id):04x}:{int(props.pci_bus_id):02x}:{int(props.pci_device_id):02x}"
    except (AttributeError, TypeError, ValueError):
        return None


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Matmul burn-in on every GPU (or the CPU).")
    parser.add_argument("--size", type=int, default=8192, help="matrix size N (default 8192)")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds per device (default 30)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="element type (default bf16)")
    parser.add_argument(
        "--cpu-threads", type=int, default=0, help="threads of a CPU burn-in (default 0: torch's own choice)"
    )
    args = parser.parse_args(argv)
    if args.size < 1 or args.seconds <= 0 or args.cpu_threads < 0:
        parser.error(
            f"--size must be >= 1, --seconds > 0 and --cpu-threads >= 0, "
            f"not {args.size}, {args.seconds} and {args.cpu_threads}"
        )
    return args


def burn(torch, device, size, seconds, dtype):
    """Multiply two random matrices on ``device`` for ``seconds``; returns (iterations, elapsed)."""

    def synchronize():
        if device.type == "cuda":  # HIP devices too: ROCm torch exposes them as torch.cuda
            torch.cuda.synchronize(device)

    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    c = torch.empty(size, size, device=device, dtype=dtype)
    for _warmup in range(WARMUP_ITERATIONS):
        torch.matmul(a, b, out=c)
    synchronize()
    done, elapsed, batch = 0, 0.0, 1
    start = time.perf_counter()
    while elapsed < seconds:
        for _iteration in range(batch):
            torch.matmul(a, b, out=c)
        synchronize()
        done += batch
        elapsed = time.perf_counter() - start
        batch = min(next_batch(done, elapsed), max(1, int((seconds - elapsed) * done / elapsed) + 1))
    if not bool(torch.isfinite(c).all()):
        raise FloatingPointError(f"{device}: the product has NaN or infinite entries")
    return done, elapsed


def run(torch, size, seconds, dtype_name, cpu_threads=0):
    dtype = getattr(torch, DTYPES[dtype_name])
    gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    hip = getattr(torch.version, "hip", None)
    if gpu:
        kind = "rocm" if hip else "cuda"
        devices = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append({"index": index, "name": props.name, "bdf": bdf(props), "device": f"cuda:{index}"})
    else:
        kind = "cpu"
        devices = [{"index": 0, "name": cpu_name(), "bdf": None, "device": "cpu"}]
        if cpu_threads:
            torch.set_num_threads(cpu_threads)

    results, errors = {}, {}

    def worker(entry):
        device = torch.device(entry["device"])
        try:
            if device.type == "cuda":
                torch.cuda.set_device(device)
            results[entry["index"]] = burn(torch, device, size, seconds, dtype)
        except Exception as err:  # reported per device, then the script fails
            errors[entry["index"]] = f"{type(err).__name__}: {err}"

    threads = [threading.Thread(target=worker, args=(entry,), name=entry["device"]) for entry in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        for index, error in sorted(errors.items()):
            print(f"device {index} ({devices[index]['name']}): {error}", file=sys.stderr)
        sys.exit(3)
    report = []
    for entry in devices:
        iterations, elapsed = results[entry["index"]]
        report.append(
            {
                "index": entry["index"],
                "name": entry["name"],
                "bdf": entry["bdf"],
                "tflops": round(tflops(size, iterations, elapsed), 4),
                "iterations": iterations,
                "seconds": round(elapsed, 3),
            }
        )
    return {
        "device_kind": kind,
        "dtype": dtype_name,
        "matrix_size": size,
        "seconds": seconds,
        "torch": torch.__version__,
        "hip": hip,
        "devices": report,
    }


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch  # noqa: PLC0415 - imported here so that the helpers above load without it
    except ImportError as err:
        print(f"torch is not importable in {sys.executable}: {err}", file=sys.stderr)
        return 2
    print(json.dumps(run(torch, args.size, args.seconds, args.dtype, args.cpu_threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
