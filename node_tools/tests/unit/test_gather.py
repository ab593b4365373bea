"""The diagnose role's node-side reader (instinct_node_tools.gather, the instinct-gather console
script): what it counts as an amdgpu error, which part of a training log it reads, and how it judges
an AMD apt source."""

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from instinct_node_tools import gather
from tests.unit.conftest import FIXTURES, ROOT

DMESG = FIXTURES / "dmesg"


def test_the_failure_lines_of_real_amdgpu_logs_count_and_their_healthy_lines_do_not():
    mi210 = (DMESG / "mi210-2gpu-probe-failed-error-12.txt").read_text()
    found = gather.matching_lines(mi210, gather.AMDGPU_ERRORS)
    assert len(found) == 4
    assert all("Fatal error during GPU init" in line or "failed with error -12" in line for line in found)
    mi300x = (DMESG / "mi300x-probe-failed-ip-discovery-error-22.txt").read_text()
    assert any(
        "*ERROR* amdgpu_discovery_init failed" in line for line in gather.matching_lines(mi300x, gather.AMDGPU_ERRORS)
    )
    # The same logs' healthy boot lines ("kernel modesetting enabled", "enabling device", ...).
    healthy = [line for line in mi210.splitlines() if "Fatal" not in line and "probe of" not in line]
    assert gather.matching_lines("\n".join(healthy), gather.AMDGPU_ERRORS) == []


def test_messages_with_error_like_words_are_not_failures():
    # What amdgpu_ras_init() and the lockup timeout option print on every healthy Instinct boot
    # (drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c, amdgpu_device.c), written out here.
    lines = [
        "amdgpu 0000:05:00.0: amdgpu: RAS INFO: ras initialized successfully, hardware ability[105] ras_mask[105]",
        "amdgpu 0000:05:00.0: amdgpu: using default lockup timeout",
    ]
    assert gather.matching_lines("\n".join(lines), gather.AMDGPU_ERRORS) == []


def test_only_the_latest_launch_of_a_training_log_is_read():
    log = (
        "==== instinct.finetune launch of rank 1 at 2026-12-03T07:00:00 ====\n"
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB\n"
        "==== instinct.finetune launch of rank 1 at 2026-12-03T08:00:00 resume_from_checkpoint=x ====\n"
        "{'loss': 4.2}\n"
    )
    assert gather.matching_lines(gather.latest_launch(log), gather.OUT_OF_MEMORY) == []
    assert gather.matching_lines(log, gather.OUT_OF_MEMORY) != []


def test_a_connection_reset_alone_is_not_a_collective_timeout():
    assert not gather.COLLECTIVE_TIMEOUT.search("requests.exceptions.ConnectionError: Connection reset by peer")
    assert gather.COLLECTIVE_TIMEOUT.search(
        "[rank1]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580)"
    )


def test_amd_apt_sources_are_judged_by_their_active_lines():
    signed = "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/rocm/apt/7.0.2 jammy main\n"
    entry = gather.repository_entry("/etc/apt/sources.list.d/rocm.list", signed)
    assert entry["signed_by"] == ["/etc/apt/keyrings/rocm.gpg"] and entry["trusted_yes"] is False
    commented = "# deb [trusted=yes] https://repo.radeon.com/rocm/apt/6.0 jammy main\n"
    assert gather.repository_entry("/etc/apt/sources.list.d/old.list", commented) is None
    trusted = "deb [trusted=yes] https://repo.radeon.com/rocm/apt/7.0.2 jammy main\n"
    assert gather.repository_entry("/etc/apt/sources.list.d/rocm.list", trusted)["trusted_yes"] is True
    inline = (
        "Types: deb\nURIs: https://repo.radeon.com/rocm/apt/7.0.2\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n"
    )
    entry = gather.repository_entry("/etc/apt/sources.list.d/rocm.sources", inline)
    assert entry["signed_by"] == ["inline"] and entry["keys_present"] is True
    disabled = "Types: deb\nURIs: https://repo.radeon.com/amdgpu/30.10/ubuntu\nEnabled: no\n"
    assert gather.repository_entry("/etc/apt/sources.list.d/amdgpu.sources", disabled) is None


def training_log(folder):
    (folder / "job").mkdir()
    (folder / "job" / "train.log").write_text(
        "==== instinct.finetune launch of rank 0 at 2026-12-03T07:00:00 ====\n"
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB\n"
        "==== instinct.finetune launch of rank 0 at 2026-12-03T08:00:00 ====\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7)\n"
        "OSError: [Errno 28] No space left on device\n"
    )


def test_the_log_sections_search_each_training_logs_latest_launch(tmp_path):
    training_log(tmp_path)
    settings = {"log_root": str(tmp_path), "env_file": str(tmp_path / "absent.env"), "disk_paths": ["/"]}
    log = str(tmp_path / "job" / "train.log")
    assert gather.section_memory(settings)["oom"] == []
    assert [t["log"] for t in gather.section_fabric(settings)["timeouts"]] == [log]
    assert gather.section_disk(settings)["no_space_errors"] == [
        {"log": log, "line": "OSError: [Errno 28] No space left on device"}
    ]


def test_the_state_of_every_port_nccl_ib_hca_names_is_read_from_sysfs(tmp_path):
    # gpud's recorded /sys/class/infiniband of an H100 node (tests/fixtures/rdma/SOURCES.md): mlx5_3
    # is not a device of that node.
    env = tmp_path / "rccl.env"
    env.write_text("NCCL_SOCKET_IFNAME=ens50f0\nNCCL_IB_HCA=mlx5_0,mlx5_bond_0:1,mlx5_3\n")
    settings = {
        "log_root": str(tmp_path),
        "env_file": str(env),
        "rdma_class_dir": str(ROOT / "tests" / "fixtures" / "rdma" / "gpud_testdata_sys-class-infiniband-h100.0"),
    }
    assert gather.section_fabric(settings)["rdma"] == {
        "mlx5_0:1": "4: ACTIVE",
        "mlx5_bond_0:1": "4: ACTIVE",
        "mlx5_3:1": None,
    }
    # A list of ports RCCL must not use says nothing of the others: not checked.
    env.write_text("NCCL_SOCKET_IFNAME=ens50f0\nNCCL_IB_HCA=^mlx5_bond_0\n")
    assert gather.section_fabric(settings)["rdma"] == {}


def test_the_installed_script_prints_the_sections_it_is_asked_for(node_tools, tmp_path):
    training_log(tmp_path)
    settings = {"log_root": str(tmp_path), "env_file": str(tmp_path / "absent.env"), "disk_paths": ["/"]}
    proc = node_tools.run("instinct-gather", json.dumps(settings), "memory", "disk", "no-such-section")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"time", "memory", "disk"}
    assert out["memory"]["oom"] == [] and out["memory"]["total_mb"] > 0
    assert out["disk"]["no_space_errors"] == [
        {"log": str(tmp_path / "job" / "train.log"), "line": "OSError: [Errno 28] No space left on device"}
    ]


def test_the_tuning_section_reads_what_preflight_reads(monkeypatch, tmp_path):
    """/proc/cmdline and numa_balancing of this machine (read, not changed), cpu0's C2 state and
    preflight's GRUB drop-in (stand-ins in a temporary folder), and the Instinct GPUs on the PCI bus
    as section_gpus lists them (this machine has none)."""
    state2 = tmp_path / "state2"
    state2.mkdir()
    (state2 / "name").write_text("C2\n")
    (state2 / "disable").write_text("0\n")
    monkeypatch.setattr(gather, "C2_STATE", str(state2))
    monkeypatch.setattr(gather, "GRUB_DROPIN", str(tmp_path / "absent.cfg"))
    found = gather.section_tuning({"pci_ids": ["74a1", "74b5"]})
    assert found["cmdline"] == Path("/proc/cmdline").read_text()
    numa = Path("/proc/sys/kernel/numa_balancing")
    assert found["numa_balancing"] == (numa.read_text().strip() if numa.exists() else None)
    assert (found["c2_name"], found["c2_disable"], found["grub_dropin"]) == ("C2", "0", None)
    assert len(found["lspci"]) == 2


def test_the_installed_script_reads_the_tuning_section(node_tools):
    proc = node_tools.run("instinct-gather", json.dumps({"pci_ids": ["74a1"]}), "tuning")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"time", "tuning"} and "error" not in out["tuning"], out
    assert out["tuning"]["cmdline"].split() == Path("/proc/cmdline").read_text().split()


# ---------------------------------------------------------------- issue 31: existing ROCm, proxies
# AMD's documented rocm.list line (ROCm's "Ubuntu native installation"; as test_apt_sources.py writes it)
# and the rocm role's deb822 file naming the same repository with its own keyring.
AMD_ROCM_LIST = (
    "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/rocm/apt/7.0.2 jammy main\n"
)
ROLE_ROCM_SOURCES = (
    "Types: deb\nURIs: https://repo.radeon.com/rocm/apt/7.0.2/\nSuites: jammy\nComponents: main\n"
    "Signed-By: /etc/apt/keyrings/rocm.asc\n"
)


def test_every_source_file_is_read_with_the_rocm_roles_parser(tmp_path):
    listed = tmp_path / "sources.list.d"
    listed.mkdir()
    (tmp_path / "sources.list").write_text("deb http://archive.ubuntu.com/ubuntu jammy main\n")
    (listed / "rocm.list").write_text(AMD_ROCM_LIST)
    (listed / "rocm.sources").write_text(ROLE_ROCM_SOURCES)
    (listed / "rocm.list.save").write_text(AMD_ROCM_LIST.replace("rocm.gpg", "old.gpg"))  # apt skips it too
    files = gather.apt_source_files(str(tmp_path))
    assert sorted(files) == [str(tmp_path / "sources.list"), str(listed / "rocm.list"), str(listed / "rocm.sources")]
    entries = gather.apt_sources.parse_files(files)
    rocm = [(e["file"], e["signed_by"]) for e in entries if e["uri"] == "https://repo.radeon.com/rocm/apt/7.0.2"]
    assert rocm == [
        (str(listed / "rocm.list"), "/etc/apt/keyrings/rocm.gpg"),
        (str(listed / "rocm.sources"), "/etc/apt/keyrings/rocm.asc"),
    ]


def test_the_shared_parsers_are_the_controllers_own_files():
    """Links, not copies: the node reads sources and redacts proxies exactly as the roles do."""
    package = ROOT / "node_tools" / "src" / "instinct_node_tools"
    for name in ("apt_sources.py", "proxy.py"):
        assert (package / name).is_symlink()
        assert (package / name).resolve() == ROOT / "plugins" / "module_utils" / name


def test_the_rocm_section_reads_dpkg_query_and_the_prefix(monkeypatch, tmp_path):
    """A stand-in dpkg-query answering as a node with ROCm 7.1.0 and amdgpu 30.20 (versions of AMD's
    packages from public ROCm issues: tests/unit/plugins/module_utils/test_rocm_existing.py)."""
    installed = "rocm-core\t7.1.0.70100-20~22.04\tii \namdgpu-dkms\t1:6.16.6.30200000-2238411.24.04\tii \n"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (tmp_path / "answer").write_text(installed)
    script = bin_dir / "dpkg-query"
    script.write_text(f"#!/bin/sh\necho \"$*\" > '{calls}'\ncat '{tmp_path / 'answer'}'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    (tmp_path / "rocm" / ".info").mkdir(parents=True)
    (tmp_path / "rocm" / ".info" / "version").write_text("7.1.0-20\n")
    found = gather.section_rocm({"rocm_path": str(tmp_path / "rocm")})
    assert found == {"packages": installed, "info_version": "7.1.0-20\n"}
    assert calls.read_text().split()[-2:] == ["rocm-core", "amdgpu-dkms"]


def apt_config_dump(tmp_path, text):
    """What `apt-config dump` prints for a configuration holding ``text`` (and no other file)."""
    if not shutil.which("apt-config"):
        pytest.skip("apt-config is not on this machine")
    parts = tmp_path / "apt.conf.d"
    parts.mkdir()
    conf = tmp_path / "apt.conf"
    conf.write_text(f'Dir::Etc::parts "{parts}";\n{text}')
    done = subprocess.run(
        ["apt-config", "dump"], env={**os.environ, "APT_CONFIG": str(conf)}, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_proxies_from_apt_and_etc_environment_are_tried_and_redacted(tmp_path):
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: the connection is refused
        up, down = listening.getsockname()[1], closed.getsockname()[1]
        dump = apt_config_dump(
            tmp_path,
            f'Acquire::http::Proxy "http://user:p%40ss@127.0.0.1:{up}/";\n'
            f'Acquire {{ https::Proxy "http://127.0.0.1:{down}"; http::Proxy::node1 "DIRECT"; }};\n',
        )
        environment = f'PATH="/usr/bin"\nhttp_proxy="http://127.0.0.1:{down}/"\nno_proxy="localhost,node1"\n'
        found = gather.proxy_settings(dump, environment, 2)
    assert found["apt_direct"] == ["node1"]
    assert found["env_no_proxy"] == "localhost,node1"
    assert [(p["source"], p["url"], p["target"]) for p in found["proxies"]] == [
        ("apt Acquire::http::Proxy", f"http://user:***@127.0.0.1:{up}/", f"127.0.0.1:{up}"),
        ("apt Acquire::https::Proxy", f"http://127.0.0.1:{down}", f"127.0.0.1:{down}"),
        ("/etc/environment http_proxy", f"http://127.0.0.1:{down}/", f"127.0.0.1:{down}"),
    ]
    assert found["proxies"][0]["error"] is None
    # One try per host and port: the https proxy and /etc/environment's are the same closed port.
    assert "ConnectionRefusedError" in found["proxies"][1]["error"]
    assert found["proxies"][2]["error"] == found["proxies"][1]["error"]
    assert "p%40ss" not in json.dumps(found)


def test_the_installed_script_reads_the_repositories_rocm_and_proxy_sections(node_tools, tmp_path):
    settings = {"rocm_path": str(tmp_path), "apt_proxy_file": str(tmp_path / "absent"), "proxy_timeout": 1}
    proc = node_tools.run("instinct-gather", json.dumps(settings), "repositories", "rocm", "proxy")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert all("error" not in out[name] for name in ("repositories", "rocm", "proxy")), out
    assert isinstance(out["repositories"]["apt_entries"], list) and out["proxy"]["apt_file"] is False
    assert out["rocm"]["info_version"] is None


def test_preflights_record_is_read_as_it_is_with_its_time(tmp_path):
    record = tmp_path / "instinct_preflight.fact"
    assert gather.section_preflight({"preflight_record": str(record)}) == {"record": None, "mtime": None}
    record.write_text('{\n  "problems": []\n}\n')
    os.utime(record, (1_800_000_000, 1_800_000_000))
    found = gather.section_preflight({"preflight_record": str(record)})
    assert found == {"record": '{\n  "problems": []\n}\n', "mtime": 1_800_000_000.0}


def test_the_run_lock_is_read_as_it_is_with_its_time(tmp_path):
    lock = tmp_path / "run.lock"
    assert gather.section_lock({"run_lock": str(lock)}) == {"text": None, "mtime": None}
    lock.write_text('{"id": "ctl:1:2"}\n')
    os.utime(lock, (1_800_000_000, 1_800_000_000))
    assert gather.section_lock({"run_lock": str(lock)}) == {"text": '{"id": "ctl:1:2"}\n', "mtime": 1_800_000_000.0}


def test_slurm_is_read_where_it_is_installed(tmp_path, monkeypatch):
    """Issue 35: this node's line of sinfo, by its short host name, and munge's and slurmd's state; a node
    without Slurm says only that."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gather.section_slurm({}) == {"installed": False}
    calls = tmp_path / "calls"
    for name, answer in (("sinfo", "node1|main*|idle|2|1900|gpu:8|none"), ("systemctl", "active")):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\necho \"{name} $*\" >> {calls}\necho '{answer}'\n")
        script.chmod(0o755)
    found = gather.section_slurm({})
    host = socket.gethostname().split(".")[0]
    assert found["installed"] is True and found["host"] == host
    assert found["units"] == {"munge": "active", "slurmd": "active"}
    assert found["sinfo"]["rc"] == 0 and found["sinfo"]["stdout"] == "node1|main*|idle|2|1900|gpu:8|none\n"
    assert f"sinfo --Node --noheader --format=%N|%P|%T|%c|%m|%G|%E --nodes={host}" in calls.read_text()
