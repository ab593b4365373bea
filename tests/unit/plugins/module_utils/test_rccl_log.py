"""RCCL's INFO log read and judged (module_utils/rccl_log.py) on every INIT recording kept in
tests/fixtures/rccl (SOURCES.md says where each comes from): IB and RoCE with GPU Direct RDMA and
DMA-BUF (NCCL), RoCE with GPU Direct RDMA disabled, eight IB rails plus a frontend RoCE port on an
Azure MI300X node (RCCL 2.21.5), Broadcom RoCE (bnxt_re) under the UCX plugin (RCCL 2.18.3), and two
socket fall-backs without libibverbs (RCCL 2.20.5 on LUMI, RCCL 2.21.5 of ROCm/rccl-tests#163)."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.rccl_log import (
    RUNBOOK,
    net_problems,
    net_summary,
    parse_init_log,
)
from tests.unit.conftest import FIXTURES

RCCL = FIXTURES / "rccl"
IB_ROCE_DMABUF = RCCL / "nccl-init-ib-roce-dmabuf-gdrdma-nccltests350-EXCERPT.log"
ROCE_NO_GDR = RCCL / "nccl-init-roce-gdr-disabled-nccl1537.log"
AZURE = RCCL / "rccl-init-ib-azure-mi300x-nogdrlines-EXCERPT.log"
BNXT_UCX = RCCL / "rccl-init-roce-bnxt-ucx-gdrdma-rccl1261-EXCERPT.log"
SOCKET_LUMI = RCCL / "rccl-init-socket-fallback-lumi-mi250x.log"
SOCKET_163 = RCCL / "rccl-init-socket-fallback-rccltests163-EXCERPT.log"
INIT_LOGS = sorted(RCCL.glob("*init*.log"))
AZURE_RAILS = [f"mlx5_ib{i}:1" for i in range(8)]
NO_LIBIBVERBS = "RCCL could not open libibverbs.so ('Failed to open libibverbs.so')"


def parse(path):
    return parse_init_log(path.read_text())


def base(**fields):
    """A process record with the parser's empty values, and the given ones."""
    record = {
        "devices": [0], "library": None, "version": None, "network": None, "ib_devices": [], "oob": None,
        "socket_devices": [], "libibverbs_missing": False, "ib_no_device": False, "peer_memory": False,
        "gdr_hcas": {}, "gdr_gpus": {"enabled": 0, "disabled": 0}, "gdr": None, "dmabuf": None,
        "dmabuf_line": None, "channels": {}, "ranks": [], "nranks": None, "warnings": [],
    }  # fmt: skip
    record.update(fields)
    return record


def ib(index, name, layer, port=1):
    return {"index": index, "name": name, "port": port, "link_layer": layer}


def test_every_recording_is_covered_here():
    covered = (IB_ROCE_DMABUF, ROCE_NO_GDR, AZURE, BNXT_UCX, SOCKET_LUMI, SOCKET_163)
    assert {p.name for p in INIT_LOGS} == {p.name for p in covered}


def test_ib_and_roce_with_gdr_and_dmabuf_is_read_whole():
    parsed = parse(IB_ROCE_DMABUF)
    assert parsed["versions"] == ["2.16.5"]
    assert parsed["processes"] == [
        base(
            host="n013", pid=101855, library="NCCL", version="2.16.5", network="IB",
            ib_devices=[ib(0, "mlx5_0", "RoCE"), ib(1, "mlx5_2", "IB")], oob="ibp209s0f0:10.128.3.13",
            gdr_hcas={"mlx5_0": True, "mlx5_2": True}, gdr_gpus={"enabled": 8, "disabled": 0}, gdr=True,
            dmabuf="available", dmabuf_line="DMA-BUF is available on GPU device 0",
            channels={"NET/IB/1/GDRDMA": 4}, ranks=[0], nranks=2,
        )
    ]  # fmt: skip


def test_ib_and_roce_with_gdr_and_dmabuf_passes_on_its_ports_and_names_a_port_that_is_not_a_rail():
    parsed = parse(IB_ROCE_DMABUF)
    assert net_problems(parsed, ["mlx5_0:1", "mlx5_2:1"], require_gdr=True, require_dmabuf=True) == []
    # A bare device name stands for its ports.
    assert net_problems(parsed, ["mlx5_0", "mlx5_2"], require_gdr=True, expected=1) == []
    extra, missing = net_problems(parsed, ["mlx5_0:1", "mlx5_1:1"])
    assert extra == (
        "n013 pid 101855 (GPU 0, rank 0): RCCL opened RDMA port(s) mlx5_2:1 that are not chosen rails (mlx5_0:1, "
        "mlx5_1:1): NCCL_IB_HCA in RCCL's environment is not the fabric stage's choice, or a slower port joined the "
        f"ring. See {RUNBOOK}"
    )
    assert missing.startswith("n013 pid 101855 (GPU 0, rank 0): RCCL did not open the chosen rail(s) mlx5_1:1 (it "
                              "opened mlx5_0:1, mlx5_2:1)")  # fmt: skip


def test_roce_without_gdr_is_read_and_accepted_or_refused_by_the_flag():
    parsed = parse(ROCE_NO_GDR)
    assert parsed["versions"] == []
    assert parsed["processes"] == [
        base(
            host="hostname1", pid=25668, network="IB",
            ib_devices=[ib(0, "mlx5_0", "RoCE"), ib(1, "mlx5_1", "RoCE")], oob="primaryip:10.10.10.10",
            gdr_hcas={"mlx5_0": False, "mlx5_1": False}, gdr=False, ranks=[0], nranks=16,
        )
    ]  # fmt: skip
    rails = ["mlx5_0:1", "mlx5_1:1"]
    assert net_problems(parsed, rails, require_gdr=False) == []
    (problem,) = net_problems(parsed, rails, require_gdr=True)
    assert problem.startswith(
        "hostname1 pid 25668 (GPU 0, rank 0): RCCL runs without GPU Direct RDMA for HCA mlx5_0, mlx5_1: data is "
        "staged through host memory. amdgpu's peer memory interface (no 'Found .../memory_peers/amdkfd/version' line)"
    )
    assert problem.endswith(f"See {RUNBOOK}")
    # The log has no DMA-BUF line: asked for, that is a problem too.
    (dmabuf,) = net_problems(parsed, rails, require_dmabuf=True)
    assert "has no DMA-BUF although it was asked for: the log has no DMA-BUF line" in dmabuf


def test_the_azure_mi300x_node_is_read_process_by_process():
    parsed = parse(AZURE)
    assert parsed["versions"] == ["2.21.5"]
    procs = parsed["processes"]
    assert [(p["pid"], p["devices"]) for p in procs] == [
        (2664386, [0]), (2664389, [3]), (2664387, [1]), (2664390, [4]),
        (2664393, [7]), (2664388, [2]), (2664392, [6]), (2664391, [5]),
    ]  # fmt: skip
    assert {p["host"] for p in procs} == {"pdfc-aig-00000H"}
    # Every process says DMA-BUF is off; the banner follows the first process's lines.
    assert {p["dmabuf"] for p in procs} == {"disabled"}
    assert {p["dmabuf_line"] for p in procs} == {"Dmabuf feature disabled without NCCL_DMABUF_ENABLE=1"}
    assert [(p["pid"], p["library"], p["version"]) for p in procs if p["version"]] == [(2664386, "RCCL", "2.21.5")]
    # The excerpt ends after the second process that chose its network.
    chose = [p for p in procs if p["network"]]
    assert [p["pid"] for p in chose] == [2664393, 2664391]
    rails = [ib(i, f"mlx5_ib{i}", "IB") for i in range(8)] + [ib(8, "mlx5_an0", "RoCE")]
    for proc in chose:
        assert proc == base(
            host="pdfc-aig-00000H", pid=proc["pid"], devices=proc["devices"], network="IB", ib_devices=rails,
            oob="eth0:10.215.224.34", peer_memory=True, dmabuf="disabled",
            dmabuf_line="Dmabuf feature disabled without NCCL_DMABUF_ENABLE=1",
        )  # fmt: skip
    assert all(p["gdr"] is None and p["channels"] == {} and p["ranks"] == [] for p in procs)


def test_the_azure_frontend_port_among_the_rails_is_refused_and_the_cut_log_is_said_to_be_cut():
    parsed = parse(AZURE)
    cut, frontend = net_problems(parsed, AZURE_RAILS, expected=8)
    assert cut == (
        "pdfc-aig-00000H pid 2664386 (GPU 0); pdfc-aig-00000H pid 2664389 (GPU 3); pdfc-aig-00000H pid 2664387 "
        "(GPU 1); pdfc-aig-00000H pid 2664390 (GPU 4); pdfc-aig-00000H pid 2664388 (GPU 2); pdfc-aig-00000H pid "
        "2664392 (GPU 6): RCCL logged no 'Using network' line: it did not get as far as choosing a network (or the "
        f"log is cut). See {RUNBOOK}"
    )
    assert frontend.startswith(
        "pdfc-aig-00000H pid 2664393 (GPU 7); pdfc-aig-00000H pid 2664391 (GPU 5): RCCL opened RDMA port(s) "
        "mlx5_an0:1 that are not chosen rails (mlx5_ib0:1, mlx5_ib1:1,"
    )
    # With the frontend port among the chosen ones, only the cut remains; DMA-BUF asked for is refused.
    assert net_problems(parsed, [*AZURE_RAILS, "mlx5_an0:1"]) == [cut]
    problems = net_problems(parsed, [*AZURE_RAILS, "mlx5_an0:1"], require_dmabuf=True)
    assert any("set NCCL_DMABUF_ENABLE=1 in RCCL's environment" in p for p in problems)


def test_ucx_over_broadcom_roce_with_gdr_is_accepted_and_dmabuf_refused_when_asked():
    parsed = parse(BNXT_UCX)
    assert parsed["versions"] == ["2.18.3"]
    off = "Dmabuf feature disabled without NCCL_ENABLE_DMABUF_SUPPORT=1"
    numa = ('NUMA auto balancing enabled which can lead to variability in the RCCL performance! Disable by "sudo '
            'sysctl kernel.numa_balancing=0"')  # fmt: skip
    iommu = 'Missing "iommu=pt" from kernel command line which can lead to system instablity or hang!'
    assert parsed["processes"] == [
        base(
            host="node01", pid=5646, library="RCCL", version="2.18.3", network="UCX",
            ib_devices=[ib(0, "bnxt_re0", "RoCE")], oob="ens52np0:192.168.2.11", gdr=True, dmabuf="disabled",
            dmabuf_line=off, channels={"NET/UCX/0/GDRDMA": 8}, ranks=[0], nranks=2, warnings=[numa, iommu],
        ),
        base(
            host="node02", pid=10366, network="UCX", ib_devices=[ib(0, "bnxt_re0", "RoCE")],
            oob="ens7np0:192.168.2.12", gdr=True, dmabuf="disabled", dmabuf_line=off,
            channels={"NET/UCX/0/GDRDMA": 8}, ranks=[1], nranks=2, warnings=[iommu],
        ),
    ]  # fmt: skip
    assert net_problems(parsed, ["bnxt_re0:1"], require_gdr=True, expected=1) == []
    (problem,) = net_problems(parsed, ["bnxt_re0"], require_gdr=True, require_dmabuf=True)
    assert problem == (
        "node01 pid 5646 (GPU 0, rank 0); node02 pid 10366 (GPU 0, rank 1): RCCL has no DMA-BUF although it was "
        f"asked for: RCCL says '{off}': set NCCL_DMABUF_ENABLE=1 in RCCL's environment. See {RUNBOOK}"
    )
    assert net_summary(parsed) == [
        "node01 pid 5646 (GPU 0, rank 0): RCCL 2.18.3 network UCX bnxt_re0:1/RoCE GDR on DMA-BUF disabled",
        "node02 pid 10366 (GPU 0, rank 1): RCCL ? network UCX bnxt_re0:1/RoCE GDR on DMA-BUF disabled",
    ]


def test_the_socket_fallback_without_libibverbs_on_lumi_is_refused_naming_the_cause():
    parsed = parse(SOCKET_LUMI)
    assert parsed["versions"] == ["2.20.5"]
    hsn = [("hsn0", "10.253.1.200"), ("hsn1", "10.253.1.199"), ("hsn2", "10.253.1.183"), ("hsn3", "10.253.1.184")]
    assert parsed["processes"] == [
        base(
            host="nid007971", pid=55487, library="RCCL", version="2.20.5", network="Socket",
            socket_devices=[{"index": i, "ifname": n, "address": a} for i, (n, a) in enumerate(hsn)],
            libibverbs_missing=True, dmabuf="disabled",
            dmabuf_line="Dmabuf feature disabled without NCCL_DMABUF_ENABLE=1", ranks=[0], nranks=1,
        )
    ]  # fmt: skip
    (problem,) = net_problems(parsed, ["mlx5_0:1", "mlx5_1:1"])
    assert problem.startswith(
        "nid007971 pid 55487 (GPU 0, rank 0): RCCL says 'Using network Socket', not the RDMA ports mlx5_0:1, "
        f"mlx5_1:1: {NO_LIBIBVERBS}: the RDMA user space (rdma-core, libibverbs1"
    )
    assert problem.endswith(f"is not installed for the training account. See {RUNBOOK}")
    # No RDMA port chosen: sockets are what RCCL should use, and did.
    assert net_problems(parsed, []) == []


def test_the_socket_fallback_of_rccl_tests_163_is_refused_and_one_process_for_four_gpus_is_counted():
    parsed = parse(SOCKET_163)
    assert parsed["versions"] == ["2.21.5"]
    assert parsed["processes"] == [
        base(
            host="z292", pid=58192, devices=[0, 2, 3], library="RCCL", version="2.21.5", network="Socket",
            socket_devices=[{"index": 0, "ifname": "eno2np1", "address": "192.168.2.194"}],
            libibverbs_missing=True, dmabuf="disabled",
            dmabuf_line="Dmabuf feature disabled without NCCL_DMABUF_ENABLE=1",
        )
    ]  # fmt: skip
    count, socket = net_problems(parsed, ["mlx5_0:1"], expected=4)
    assert count == f"only 1 of the 4 RCCL processes wrote an INFO log (z292 pid 58192 (GPU 0,2,3)). See {RUNBOOK}"
    assert socket.startswith(f"z292 pid 58192 (GPU 0,2,3): RCCL says 'Using network Socket', not the RDMA ports "
                             f"mlx5_0:1: {NO_LIBIBVERBS}")  # fmt: skip
    assert net_problems(parsed, [], expected=1) == []


@pytest.mark.parametrize("path", INIT_LOGS, ids=lambda p: p.name)
def test_every_recording_read_again_with_other_lines_around_it_gives_the_same_processes(path):
    """A launcher's prefix, a timestamp and unrelated lines (torch's own output) do not change what is read."""
    text = path.read_text()
    noisy = "\n".join(["[rank0]: torch warning: something", *text.splitlines(), "Traceback (most recent call last):"])
    assert parse_init_log(noisy) == parse_init_log(text)
    prefixed = "\n".join(f"(RayWorkerWrapper pid=927) {line}" if ":" in line else line for line in text.splitlines())
    assert [p["network"] for p in parse_init_log(prefixed)["processes"]] == [
        p["network"] for p in parse_init_log(text)["processes"]
    ]


def test_newer_formats_are_read_too():
    """NCCL 2.2x's DMA-BUF GDR line and plugin lines, RCCL 2.27's prefixed banner and a socket GDR line."""
    text = "\n".join([
        "TARS:829507:829507 [0] NCCL INFO RCCL version : 2.27.7-HEAD:0d2c4fd",
        "TARS:829507:829600 [0] NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:192.168.100.12<0>",
        "TARS:829507:829600 [0] NCCL INFO Initialized NET plugin IB",
        "TARS:829507:829600 [0] NCCL INFO Assigned NET plugin IB to comm",
        "TARS:829507:829600 [0] NCCL INFO Using network IB",
        "TARS:829507:829600 [0] NCCL INFO NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'rocep1s0f0'",
        "TARS:829507:829600 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0(1)/GDRDMA",
        "node:1:2 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
        "node:1:2 [0] NCCL INFO NET/IB : No device found.",
        "node:1:2 [0] NCCL INFO Using network Socket",
    ])  # fmt: skip
    first, second = parse_init_log(text)["processes"]
    assert (first["library"], first["version"], first["network"]) == ("RCCL", "2.27.7", "IB")
    assert first["gdr_hcas"] == {"rocep1s0f0": True} and first["dmabuf"] == "available" and first["gdr"] is True
    assert first["channels"] == {"NET/IB/0/GDRDMA": 1}
    assert net_problems({"processes": [first]}, ["rocep1s0f0:1"], require_gdr=True, require_dmabuf=True) == []
    assert second["ib_no_device"] is True and second["gdr"] is False
    (problem,) = net_problems({"processes": [second]}, ["mlx5_0:1"])
    assert "RCCL found no usable RDMA device ('NET/IB : No device found')" in problem


def test_an_empty_log_is_a_problem_even_without_rdma_ports():
    (problem,) = net_problems(parse_init_log(""), [])
    assert "holds no 'NCCL INFO' line" in problem and RUNBOOK in problem
