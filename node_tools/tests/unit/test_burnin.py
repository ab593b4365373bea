"""The health role's burn-in (instinct_node_tools.burnin, the instinct-burnin console script).

What runs here, honestly:
- the arithmetic and helpers (FLOP count, TFLOP/s, batch sizing, CPU name, PCI location, options);
- the installed script as the role runs it: over the pinned training libraries (a CPU torch), a
  real short CPU burn-in and its JSON; in a venv without torch (a node's system Python), the clear
  exit status 2 the role reports;
- the measuring loop and the JSON document of ``run()`` on a stand-in torch (``FakeTorch`` below:
  two "GPUs" whose matmul only sleeps), which checks the per-device threads, the iteration count and
  the TFLOP/s arithmetic, not any kernel. A real GPU run is not part of these tests.
"""

import json
import time
from types import SimpleNamespace

import pytest

from instinct_node_tools import burnin

EPYC_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC 9654  96-Core Processor
stepping\t: 1
"""
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm
CPU implementer\t: 0x41
"""


def test_one_matmul_is_two_n_cubed_operations():
    assert burnin.flops_per_matmul(8192) == 2 * 8192**3 == 1_099_511_627_776


def test_tflops_from_iterations_and_seconds():
    # 1000 products of 8192 in 2 s: 1.0995e15 FLOP/s ~ 549.8 TFLOP/s, MI300X bf16 territory.
    assert burnin.tflops(8192, 1000, 2.0) == pytest.approx(549.755813888)
    with pytest.raises(ValueError, match="0 s"):
        burnin.tflops(8192, 10, 0)


def test_batches_aim_at_a_quarter_second_between_synchronisations():
    assert burnin.next_batch(0, 0.0) == 1
    assert burnin.next_batch(10, 0.1) == 25  # 100 per second -> 25 per 0.25 s
    assert burnin.next_batch(1, 10.0) == 1  # slow devices still make progress
    assert burnin.next_batch(10**6, 0.001) == 1024  # and fast ones do not queue without bound


def test_cpu_name_from_cpuinfo_and_the_fallback():
    assert burnin.cpu_name(EPYC_CPUINFO) == "AMD EPYC 9654 96-Core Processor"
    assert burnin.cpu_name(ARM_CPUINFO)  # no model name line: the platform's name, never empty


def test_pci_location_from_torch_device_properties():
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    assert burnin.bdf(props) == "0000:1b:00"
    assert burnin.bdf(SimpleNamespace(name="old torch")) is None


def test_options_and_their_refusal():
    args = burnin.parse_args([])
    assert (args.size, args.seconds, args.dtype) == (8192, 30.0, "bf16")
    assert args.cpu_threads == 0
    args = burnin.parse_args(["--size", "64", "--seconds", "0.5", "--dtype", "fp16", "--cpu-threads", "2"])
    assert (args.size, args.seconds, args.dtype, args.cpu_threads) == (64, 0.5, "fp16", 2)
    for argv in (["--size", "0"], ["--seconds", "0"], ["--dtype", "int8"], ["--cpu-threads", "-1"]):
        with pytest.raises(SystemExit):
            burnin.parse_args(argv)


def test_the_installed_script_burns_the_cpu_over_the_training_libraries(train_tools):
    proc = train_tools.run("instinct-burnin", "--size", "64", "--seconds", "0.5")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout.splitlines()[-1])
    assert document["device_kind"] == "cpu"  # the training libraries' torch is a CPU build
    assert document["dtype"] == "bf16" and document["matrix_size"] == 64
    assert document["devices"] and all(d["tflops"] > 0 and d["iterations"] > 0 for d in document["devices"])


def test_without_torch_the_installed_script_says_so_and_exits_2(node_tools):
    proc = node_tools.run("instinct-burnin", "--size", "64", "--seconds", "0.5")
    # No traceback: the role reports exit status 2 as "torch missing".
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert f"torch is not importable in {node_tools.python}" in proc.stderr


def test_refused_options_exit_before_torch_is_needed(node_tools):
    proc = node_tools.run("instinct-burnin", "--size", "0")
    assert proc.returncode == 2 and "--size must be >= 1" in proc.stderr


# ---- run() on a stand-in torch: the loop and the document, not a kernel


class FakeTensor:
    def __init__(self, finite=True):
        self.finite = finite


class FakeTorch:
    """Just enough of torch for burnin.run(): ``gpus`` devices whose matmul sleeps ``matmul_s``."""

    bfloat16, float16, float32 = "bfloat16", "float16", "float32"
    __version__ = "0.0-stand-in"

    def __init__(self, gpus, matmul_s=0.001, hip="7.0.0", finite=True):
        self.threads = None
        self.matmul_s = matmul_s
        self.finite = finite
        self.matmuls = {}
        self.synchronised = []
        self.version = SimpleNamespace(hip=hip)
        props = [
            SimpleNamespace(name="AMD Instinct MI300X", pci_domain_id=0, pci_bus_id=0x1B + 0x20 * i, pci_device_id=0)
            for i in range(gpus)
        ]
        self.cuda = SimpleNamespace(
            is_available=lambda: gpus > 0,
            device_count=lambda: gpus,
            get_device_properties=lambda i: props[i],
            set_device=lambda device: None,
            synchronize=self.synchronised.append,
        )

    def set_num_threads(self, threads):
        self.threads = threads

    @staticmethod
    def device(spec):
        kind, _sep, index = spec.partition(":")
        return SimpleNamespace(type=kind, index=int(index) if index else None, spec=spec)

    class Generator:
        def __init__(self, device):
            self.device = device

        def manual_seed(self, seed):
            return self

    def randn(self, *shape, device, dtype, generator):
        return FakeTensor()

    def empty(self, *shape, device, dtype):
        return FakeTensor(self.finite)

    def matmul(self, a, b, out):
        time.sleep(self.matmul_s)
        self.matmuls[id(out)] = self.matmuls.get(id(out), 0) + 1
        return out

    @staticmethod
    def isfinite(tensor):
        return SimpleNamespace(all=lambda: tensor.finite)


def test_run_burns_every_gpu_at_once_and_reports_each():
    torch = FakeTorch(gpus=2)
    start = time.monotonic()
    document = burnin.run(torch, 1024, 0.3, "bf16")
    elapsed = time.monotonic() - start
    assert elapsed < 0.3 * 2 + 0.5, "the devices ran one after the other, not at once"
    assert document["device_kind"] == "rocm" and document["hip"] == "7.0.0"
    assert (document["dtype"], document["matrix_size"], document["seconds"]) == ("bf16", 1024, 0.3)
    assert [(d["index"], d["name"], d["bdf"]) for d in document["devices"]] == [
        (0, "AMD Instinct MI300X", "0000:1b:00"),
        (1, "AMD Instinct MI300X", "0000:3b:00"),
    ]
    for device in document["devices"]:
        assert device["seconds"] >= 0.3
        assert device["iterations"] > 10
        expected = 2 * 1024**3 * device["iterations"] / device["seconds"] / 1e12
        assert device["tflops"] == pytest.approx(expected, rel=0.01, abs=1e-4)
    # Warm-up plus the measured matmuls, on each device's own output tensor.
    assert sorted(torch.matmuls.values()) == sorted(
        d["iterations"] + burnin.WARMUP_ITERATIONS for d in document["devices"]
    )
    assert {device.spec for device in torch.synchronised} == {"cuda:0", "cuda:1"}


def test_run_without_a_gpu_burns_the_cpu_as_one_device():
    torch = FakeTorch(gpus=0, hip=None)
    document = burnin.run(torch, 64, 0.1, "fp32")
    assert torch.threads is None  # torch's own thread count unless told
    assert document["device_kind"] == "cpu"
    (device,) = document["devices"]
    assert device["index"] == 0 and device["bdf"] is None and device["name"]
    assert device["iterations"] > 0


def test_cpu_threads_apply_to_a_cpu_burnin_only():
    cpu, gpu = FakeTorch(gpus=0, hip=None), FakeTorch(gpus=1)
    burnin.run(cpu, 64, 0.05, "bf16", cpu_threads=1)
    burnin.run(gpu, 64, 0.05, "bf16", cpu_threads=1)
    assert (cpu.threads, gpu.threads) == (1, None)


def test_a_cuda_build_is_not_called_rocm():
    assert burnin.run(FakeTorch(gpus=1, hip=None), 64, 0.05, "bf16")["device_kind"] == "cuda"


def test_a_non_finite_product_fails_the_script(capsys):
    with pytest.raises(SystemExit) as stop:
        burnin.run(FakeTorch(gpus=2, finite=False), 64, 0.05, "bf16")
    assert stop.value.code == 3
    err = capsys.readouterr().err
    assert "device 0 (AMD Instinct MI300X): FloatingPointError" in err and "device 1" in err
