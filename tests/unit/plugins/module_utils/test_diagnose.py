"""diagnose: the facts built from what a node's checks collected, and the rules (rules.yml)
evaluated on them with jmespath (what community.general.json_query runs), on real recordings."""

import json
from pathlib import Path

import jinja2
import jmespath
import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils import apt_sources, diagnose
from ansible_collections.instinct.finetune.plugins.module_utils.rocm_smi import build_facts, parse_amdsmi_static
from ansible_collections.instinct.finetune.plugins.module_utils.rocminfo import RocminfoError, parse_rocminfo

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures"
RULES = yaml.safe_load((ROOT / "roles" / "diagnose" / "files" / "rules.yml").read_text())
TAGS = yaml.safe_load((ROOT / "roles" / "diagnose" / "vars" / "main.yml").read_text())["diagnose_gather_sections"] + [
    "topology",
    "thermal",
    "torch",
    "deepspeed",
]
LSPCI = (FIXTURES / "lspci" / "mi300x-8gpu-d-1002-74a1-PP.txt").read_text()
# A node's kernel command line: this machine's own (no MI300X arguments expected on it; the tests
# that need them absent drop them), and AMD's arguments as preflight's apply-tuning.yml adds them.
CMDLINE = " ".join(a for a in Path("/proc/cmdline").read_text().split() if a not in ("iommu=pt", "pci=realloc=off"))
TUNED_CMDLINE = CMDLINE + " iommu=pt pci=realloc=off"
# The GRUB drop-in preflight writes with preflight_apply_tuning: true, rendered from the role's task.
_APPLY = yaml.safe_load((ROOT / "roles" / "preflight" / "tasks" / "apply-tuning.yml").read_text())
GRUB_DROPIN = next(t for t in _APPLY if t["name"].startswith("Add the IOMMU"))["ansible.builtin.copy"][
    "content"
].replace("{{ preflight_kernel_cmdline_args | join(' ') }}", "iommu=pt pci=realloc=off")
SETTINGS = {
    "expected_gpus": 0,
    "temperature_limit": 95,
    "min_free_disk_gb": 50,
    "min_free_memory_gb": 16,
    "stall_minutes": 15,
    "torch_on_gpu": True,
    "torch_version": "",
    "kernel_cmdline_args": ["iommu=pt", "pci=realloc=off"],
    "allow_reboot": False,
    "host": "node1",
    "distribution": "Ubuntu",
    "distribution_version": "22.04",
    "platform_supported": True,
}


def rocminfo_result(fixture):
    """What rocminfo_facts registers for a recording: its facts, or its failure with the reason."""
    text = (FIXTURES / "rocminfo" / fixture).read_text()
    try:
        return {"changed": False, "ansible_facts": parse_rocminfo(text)}
    except RocminfoError as error:
        return {"changed": False, "failed": False, "msg": str(error), "reason": error.reason}


def smi_result():
    gpus = parse_amdsmi_static((FIXTURES / "smi" / "amdsmi-static-mi300x-8gpu.json").read_text())
    return {"changed": False, "ansible_facts": build_facts(gpus, [])}


def healthy_raw(**changes):
    raw = {
        "time": 1_800_000_000.0,
        "os": {"kernel": "6.8.0-57-generic", "headers": True},
        "driver": {"module_loaded": True, "initstate": "live", "kfd_exists": True},
        "permissions": {
            "user": "instinct",
            "user_exists": True,
            "groups": ["instinct", "render", "video"],
            "kfd": {"mode": "0o660", "group": "render"},
        },
        "gpus": {"lspci": [LSPCI, "", "", "", "", "", ""], "lspci_found": True},
        "kernel-log": {"amdgpu_errors": []},
        "repositories": {
            "rocm_sources": [
                {
                    "file": "/etc/apt/sources.list.d/rocm.sources",
                    "trusted_yes": False,
                    "signed_by": ["/etc/apt/keyrings/rocm.asc"],
                    "keys_present": True,
                }
            ],
            "apt_lists": ["archive.ubuntu.com_ubuntu_dists_jammy_main_binary-amd64_Packages.lz4"],
        },
        "fabric": {
            "env_file": True,
            "env": "NCCL_SOCKET_IFNAME=ens50f0\nGLOO_SOCKET_IFNAME=ens50f0\nMASTER_ADDR=10.10.0.11\n",
            "nic": {"name": "ens50f0", "exists": True, "operstate": "up", "ipv4": ["10.10.0.11"], "numa_node": 0},
            "timeouts": [],
        },
        "libraries": {"hipblaslt": True, "rccl": True, "hipblaslt_archs": ["gfx942", "gfx950"]},
        "builds": {"failed": []},
        "memory": {
            "total_mb": 2_000_000,
            "available_mb": 1_800_000,
            "hip_alloc_conf": "expandable_segments:True",
            "oom": [],
        },
        "disk": {"paths": [{"path": "/", "free_gb": 800.0, "total_gb": 1800.0}], "no_space_errors": []},
        "jobs": {"jobs": []},
        "monitoring": {"textfile": None, "collector_timer": "inactive", "node_exporter": "inactive"},
        "tuning": {
            "cmdline": TUNED_CMDLINE + "\n",
            "numa_balancing": "0",
            "c2_name": "C2",
            "c2_disable": "1",
            "grub_dropin": GRUB_DROPIN,
            "lspci": [LSPCI, "", "", "", "", "", ""],
        },
    }
    for key, value in changes.items():
        raw[key.replace("_", "-") if key == "kernel_log" else key] = value
    return raw


def runbooks(raw, rocminfo="mi300x-8gpu.txt", settings=None, **probes):
    probes = {"rocminfo": rocminfo_result(rocminfo), "smi": smi_result(), **probes}
    facts = diagnose.node_facts(raw, probes, dict(SETTINGS, **(settings or {})))
    found = diagnose.findings(facts, RULES, jmespath.search)
    return [finding["runbook"] for finding in found], facts, found


def test_every_rule_parses_names_a_check_and_an_existing_page():
    assert diagnose.rule_problems(RULES, TAGS, jmespath.compile) == []
    for rule in RULES:
        assert (ROOT / "docs" / "runbooks" / rule["runbook"]).is_file(), rule["id"]


def test_every_runbook_page_is_named_by_a_rule():
    pages = {path.name for path in (ROOT / "docs" / "runbooks").glob("*.md")} - {"README.md"}
    assert pages - {rule["runbook"] for rule in RULES} == set()


def test_a_healthy_mi300x_node_needs_no_runbook():
    found, facts, _details = runbooks(healthy_raw())
    assert found == []
    assert facts["tuning"]["pci_gpus"] == 8 and facts["tuning"]["missing"] == []
    assert facts["gpus"] == {"pci": 8, "rocm": 8, "smi": 8, "expected": 8, "missing": 0, "unparsed": False}
    assert facts["driver"]["loaded"] is True


def test_driver_not_loaded_names_only_its_page():
    found, facts, details = runbooks(healthy_raw(), rocminfo="fail-rock-not-loaded.txt", smi=None)
    assert found == ["driver-not-loaded.md"]
    assert facts["driver"]["reason"] == "driver_not_loaded"
    assert "ROCk" in details[0]["detail"] or "driver" in details[0]["detail"]


def recorded(folder, name):
    return (FIXTURES / folder / name).read_text()


def driver_raw(**section):
    raw = healthy_raw()
    raw["driver"] = dict(raw["driver"], kernel="6.17.0-8-generic", boot_time=1_700_000_000, **section)
    return raw


DKMS_711 = "dkms-status_rocm711_ubuntu2510_two-kernels_original-modules-exist.txt"


def test_a_node_still_running_an_older_amdgpu_than_dkms_installed_needs_a_reboot():
    """7.1.1's 6.16.6 installed since the boot, the MI300X VF's recorded 6.12.12 still loaded."""
    raw = driver_raw(
        dkms_status=recorded("driver", DKMS_711),
        loaded_version=recorded("driver", "sys-module-amdgpu-version_mi300x-vf_6.12.12.txt"),
        module_mtime=1_700_000_600,
    )
    found, _facts, details = runbooks(raw)
    assert found == ["reboot-required.md"]
    assert details[0]["detail"] == "amdgpu 6.12.12 loaded; DKMS installed 6.16.6-2255209.24.04"
    # The same node once it booted the new driver (its dmesg says "amdgpu version: 6.16.6").
    current = driver_raw(dkms_status=recorded("driver", DKMS_711), loaded_version="6.16.6\n", module_mtime=1)
    assert runbooks(current)[0] == []
    assert runbooks(current)[1]["driver"]["state"] == "current"


def test_secure_boot_without_an_enrolled_dkms_key_names_its_page_until_the_driver_runs():
    """The DKMS module was there at boot and did not load (Debian 12's "Key was rejected by service")."""
    enabled = recorded("secureboot", "mokutil-sb-state_enabled_ubuntu2204_salt-66955.txt")
    refused = {"dkms_status": recorded("driver", DKMS_711), "loaded_version": None, "module_mtime": 1_600_000_000}
    found, facts, details = runbooks(driver_raw(sb_state=enabled, mok_key=None, **refused))
    assert found == ["secure-boot.md"]
    assert facts["driver"]["state"] == "not-loaded"
    assert facts["driver"]["secure_boot"] == "enabled"
    assert "no key for dkms" in details[0]["detail"]
    enrolled = recorded("secureboot", "mokutil-test-key_already-enrolled_shim-signed-MOK-der.txt")
    ok = driver_raw(sb_state=enabled, mok_key="/var/lib/shim-signed/mok/MOK.der", mok_test=enrolled, **refused)
    assert runbooks(ok)[0] == []
    # A node on the kernel's own amdgpu by choice (no DKMS) needs no key.
    assert runbooks(driver_raw(sb_state=enabled, mok_key=None))[0] == []
    # Without mokutil, the EFI variable (recorded "06 00 00 00 00": disabled).
    efivar = driver_raw(sb_efivar=[6, 0, 0, 0, 0], mok_key=None, **refused)
    assert runbooks(efivar)[1]["driver"]["secure_boot"] == "disabled"


def test_kfd_permission_names_only_its_page():
    found, _facts, _details = runbooks(healthy_raw(), rocminfo="fail-kfd-permission-not-render-group.txt", smi=None)
    assert found == ["kfd-permission.md"]


def test_a_gpu_short_of_the_expected_count():
    found, facts, details = runbooks(healthy_raw(), settings={"expected_gpus": 9})
    assert found == ["gpu-missing.md"]
    assert facts["gpus"]["missing"] == 1
    assert details[0]["detail"] == "8 of 9 GPUs seen (PCI bus: 8)"


@pytest.mark.parametrize(
    ("change", "page"),
    [
        ({"os": {"kernel": "6.8.0-57-generic", "headers": False}}, "kernel-headers.md"),
        ({"kernel_log": {"amdgpu_errors": ["amdgpu 0000:1b:00.0: amdgpu: GPU reset begin!"]}},
         "gpu-hardware-errors.md"),
        ({"builds": {"failed": [{"log": "/var/log/instinct-finetune/build-torch.log", "tail": ["error: x"]}]}},
         "wheel-build-failed.md"),
        ({"disk": {"paths": [{"path": "/", "free_gb": 3.0, "total_gb": 100.0}], "no_space_errors": []}},
         "disk-full.md"),
    ],
)  # fmt: skip
def test_each_finding_names_its_page(change, page):
    found, _facts, _details = runbooks(healthy_raw(**change))
    assert found == [page]


def test_a_firewalled_or_missing_fabric_nic_and_a_collective_timeout():
    fabric = healthy_raw()["fabric"]
    fabric["nic"] = dict(fabric["nic"], exists=False)
    assert runbooks(healthy_raw(fabric=fabric))[0] == ["fabric-iface.md"]
    fabric = dict(
        healthy_raw()["fabric"], timeouts=[{"log": "train.log", "line": "Watchdog caught collective operation timeout"}]
    )
    assert runbooks(healthy_raw(fabric=fabric))[0] == ["rccl-timeout.md"]


def test_an_rdma_port_of_nccl_ib_hca_that_is_down_or_missing():
    fabric = dict(healthy_raw()["fabric"], rdma={"mlx5_0:1": "4: ACTIVE", "mlx5_1:1": "4: ACTIVE"})
    assert runbooks(healthy_raw(fabric=fabric))[0] == []
    fabric["rdma"] = {"mlx5_0:1": "4: ACTIVE", "mlx5_1:1": "1: DOWN", "mlx5_9:1": None}
    found, facts, _details = runbooks(healthy_raw(fabric=fabric))
    assert found == ["fabric-bandwidth.md"]
    assert facts["fabric"]["rdma_ports_not_active"] == ["mlx5_1:1 1: DOWN", "mlx5_9:1 missing"]


def test_a_nic_on_a_socket_without_gpus_is_cross_socket():
    fabric = healthy_raw()["fabric"]
    fabric["nic"] = dict(fabric["nic"], numa_node=1)
    # The recorded static output puts GPUs 0-3 on NUMA node 0 and 4-7 on node 1: no finding.
    assert runbooks(healthy_raw(fabric=fabric))[0] == []
    fabric["nic"] = dict(fabric["nic"], numa_node=2)
    found, facts, _details = runbooks(healthy_raw(fabric=fabric))
    assert found == ["rccl-timeout.md"] and facts["fabric"]["gpu_numa_nodes"] == [0, 1]


def test_hipblaslt_without_kernels_for_the_gpus_arch():
    libraries = {"hipblaslt": True, "rccl": True, "hipblaslt_archs": ["gfx90a"]}
    found, facts, _details = runbooks(healthy_raw(libraries=libraries))
    assert found == ["hipblaslt-missing.md"] and facts["libraries"]["archs_without_kernels"] == ["gfx942"]


def venv(**changes):
    probe = {
        "python": "3.11.7",
        "torch": {"version": "2.10.0+rocm7.0", "hip": "7.0", "available": True, "device_count": 8,
                  "arch_list": ["gfx942"]},
        "companions": {"torchvision": None, "torchaudio": None},
        "deepspeed_error": None,
        "llamafactory_error": None,
    }  # fmt: skip
    probe.update(changes)
    return probe


def test_the_training_venv_checks():
    assert runbooks(healthy_raw(), venv=venv())[0] == []
    cuda_build = venv(torch={"version": "2.10.0", "hip": None, "cuda": "12.8", "device_count": 0, "arch_list": []})
    assert runbooks(healthy_raw(), venv=cuda_build)[0] == ["illegal-instruction.md"]
    wrong_arch = venv(torch=dict(venv()["torch"], arch_list=["gfx90a"]))
    assert runbooks(healthy_raw(), venv=wrong_arch)[0] == ["illegal-instruction.md"]
    broken = venv(companions={"torchvision": "RuntimeError: operator torchvision::nms does not exist"})
    assert runbooks(healthy_raw(), venv=broken)[0] == ["torch-companions.md"]
    assert runbooks(healthy_raw(), venv=venv(python="3.10.12"))[0] == ["python-interpreter.md"]
    replaced = runbooks(healthy_raw(), venv=venv(), settings={"torch_version": "2.9.1"})[0]
    assert replaced == ["torch-replaced.md"]
    no_deepspeed = venv(deepspeed_error="ModuleNotFoundError: No module named 'deepspeed'")
    assert runbooks(healthy_raw(), venv=no_deepspeed)[0] == []
    broken_ds = venv(deepspeed_error="OSError: CUDA_HOME does not exist, unable to compile CUDA op(s)")
    assert runbooks(healthy_raw(), venv=broken_ds)[0] == ["deepspeed-ops.md"]


def test_a_cpu_training_stack_on_purpose_is_not_a_fault():
    cpu = venv(torch={"version": "2.13.0+cpu", "hip": None, "available": False, "device_count": 0, "arch_list": []})
    assert runbooks(healthy_raw(), venv=cpu, settings={"torch_on_gpu": False})[0] == []


def test_jobs_failed_hung_or_without_a_finite_perplexity():
    ranks = {
        "rank0.prom": {
            "instinct_finetune_running": 1.0,
            "instinct_finetune_last_step_timestamp_seconds": 1_800_000_000 - 3600,
        }
    }
    jobs = {
        "jobs": [
            {
                "name": "a",
                "unit_state": "failed",
                "exit_record": "result=exit-code code=exited status=1 at=1",
                "ranks": {},
            },
            {"name": "b", "unit_state": "active", "exit_record": None, "ranks": ranks},
        ]
    }
    found, facts, _details = runbooks(healthy_raw(jobs=jobs))
    assert found == ["rank-failed.md", "rank-hung.md"]
    assert facts["jobs"]["failed"][0]["job"] == "a" and facts["jobs"]["stalled"][0]["minutes"] == 60
    bad = {"jobs": [{"name": "c", "unit_state": "inactive", "exit_record": "result=success code=exited status=0 at=1",
                     "ranks": {}, "eval": {"perplexity": float("nan")}}]}  # fmt: skip
    assert runbooks(healthy_raw(jobs=bad))[0] == ["finetune-job.md"]


def test_a_hub_model_that_could_not_be_staged_names_its_page_and_problem():
    problem = "https://hub.example has no revision 1111 in org/model (404 RevisionNotFound ...)"
    refused = {"jobs": [{"name": "d", "unit_state": None, "exit_record": None, "ranks": {},
                         "staging": {"status": "refused", "problems": [problem]}}]}  # fmt: skip
    found, facts, details = runbooks(healthy_raw(jobs=refused))
    assert found == ["hub-model.md"]
    assert facts["jobs"]["stage_refused"] == [{"job": "d", "problems": [problem]}]
    assert problem in json.dumps(details)
    staged = {"jobs": [dict(refused["jobs"][0], staging={"status": "reused"})]}
    assert runbooks(healthy_raw(jobs=staged))[0] == []


def test_a_job_whose_inputs_were_refused_names_its_page_and_problem():
    problem = "dataset: /d/a.jsonl line 5000 of 10000 is not valid JSON: ... See docs/runbooks/job-inputs.md"
    refused = {"jobs": [{"name": "e", "unit_state": None, "exit_record": None, "ranks": {},
                         "inputs": {"problems": [problem], "tokenized": None}}]}  # fmt: skip
    found, facts, details = runbooks(healthy_raw(jobs=refused))
    assert found == ["job-inputs.md"] and problem in json.dumps(details)
    assert facts["jobs"]["inputs_refused"] == [{"job": "e", "problems": [problem]}]
    passed = {"jobs": [dict(refused["jobs"][0], inputs={"problems": [], "tokenized": "reused"})]}
    assert runbooks(healthy_raw(jobs=passed))[0] == []


def test_monitoring_and_memory_and_repositories():
    monitoring = {
        "textfile": "instinct_gpu_collector_up 0\ninstinct_gpu_collector_stale 1\n",
        "collector_timer": "active",
        "node_exporter": "active",
    }
    assert runbooks(healthy_raw(monitoring=monitoring))[0] == ["monitoring-exporter.md"]
    memory = dict(
        healthy_raw()["memory"], oom=[{"log": "train.log", "line": "torch.OutOfMemoryError: HIP out of memory."}]
    )
    assert runbooks(healthy_raw(memory=memory))[0] == ["oom-fragmentation.md"]
    lists = healthy_raw()["repositories"]["apt_lists"]
    repos = {"rocm_sources": [{"file": "/etc/apt/sources.list.d/rocm.list", "trusted_yes": True, "signed_by": [],
                               "keys_present": False}], "apt_lists": lists}  # fmt: skip
    assert runbooks(healthy_raw(repositories=repos))[0] == ["rocm-repository.md"]
    # A freshly built or trimmed image: only the lock and the InRelease files, no Packages index.
    empty = dict(healthy_raw()["repositories"], apt_lists=[])
    found, facts, _details = runbooks(healthy_raw(repositories=empty))
    assert found == ["apt-index.md"]
    assert facts["repositories"]["package_lists"] is False


def test_sections_not_collected_are_absent_and_their_rules_do_not_apply():
    raw = {"time": 1.0, "disk": {"paths": [{"path": "/", "free_gb": 1.0, "total_gb": 10.0}], "no_space_errors": []}}
    facts = diagnose.node_facts(raw, {}, SETTINGS)
    assert set(facts) == {"disk", "collection_errors"}
    assert [f["runbook"] for f in diagnose.findings(facts, RULES, jmespath.search)] == ["disk-full.md"]


def test_a_section_that_raised_is_reported_not_guessed():
    facts = diagnose.node_facts({"time": 1.0, "fabric": {"error": "PermissionError: x"}}, {}, SETTINGS)
    assert "fabric" not in facts and facts["collection_errors"] == {"fabric": "PermissionError: x"}


def test_broken_rules_are_named():
    rules = [
        {"id": "a", "title": "t", "runbook": "disk-full.md", "tag": "disk", "when": "disk.low[?"},
        {"id": "b", "title": "t", "runbook": "disk-full.md", "tag": "nonsense", "when": "disk"},
        {"id": "b", "title": "t", "runbook": "disk-full.md", "tag": "disk"},
    ]
    problems = diagnose.rule_problems(rules, TAGS, jmespath.compile)
    assert [p["id"] for p in problems] == ["a", "b", "b"]
    assert (
        "when:" in problems[0]["problem"]
        and "nonsense" in problems[1]["problem"]
        and "lacks when" in problems[2]["problem"]
    )


def test_each_page_tells_how_to_run_the_check_that_finds_it():
    for rule in RULES:
        page = (ROOT / "docs" / "runbooks" / rule["runbook"]).read_text()
        assert f"playbooks/diagnose.yml --tags {rule['tag']}" in page, (rule["runbook"], rule["tag"])


def test_a_venv_whose_python_dies_of_an_illegal_instruction_is_diagnosed_not_crashed_on():
    crashed = {"python": "unknown", "rc": -4, "stderr": "", "torch": {"error": "the venv probe printed nothing"}}
    found, facts, _details = runbooks(healthy_raw(), venv=crashed)
    assert found == ["illegal-instruction.md"]
    assert facts["torch"]["python_ok"] is None and facts["torch"]["illegal_instruction"] is True


def test_the_group_that_owns_dev_kfd_is_what_counts():
    render_only = dict(healthy_raw()["permissions"], groups=["instinct", "render"])
    assert runbooks(healthy_raw(permissions=render_only))[0] == []
    video_only = dict(healthy_raw()["permissions"], groups=["instinct", "video"])
    found, _facts, details = runbooks(healthy_raw(permissions=video_only))
    assert found == ["kfd-permission.md"] and details[0]["detail"] == "instinct not in the group of /dev/kfd: render"


def test_a_gpu_node_without_amds_host_tuning_gets_a_warning_not_a_fault():
    """The settings the end-of-run summary warns of (module_utils/host_tuning.py), read by diagnose
    itself: a warning naming each setting, which never counts as a fault."""
    untuned = {"cmdline": CMDLINE + "\n", "numa_balancing": "1", "c2_name": "C2", "c2_disable": "0",
               "grub_dropin": None, "lspci": [LSPCI, "", "", "", "", "", ""]}  # fmt: skip
    found, facts, details = runbooks(healthy_raw(tuning=untuned))
    assert found == ["host-tuning.md"]
    assert details[0]["severity"] == "warning" and details[0]["tag"] == "tuning"
    assert facts["tuning"]["summary"] == [
        "kernel command line iommu=pt missing",
        "kernel command line pci=realloc=off missing",
        "NUMA auto-balancing off (kernel.numa_balancing = 0) missing",
        "C2 idle state off (cpuidle state2 disable = 1) missing",
    ]
    assert details[0]["detail"].startswith("kernel command line iommu=pt missing; ")
    assert all("preflight_apply_tuning: true" in f["fix"] for f in facts["tuning"]["missing"])
    # Every other rule is an error (the default).
    warnings = ("host-tuning", "proxy-nodes-not-exempt", "run-lock")
    assert {rule.get("severity", "error") for rule in RULES if rule["id"] not in warnings} == {"error"}


def test_host_tuning_applied_but_not_booted_is_pending_a_reboot():
    waiting = dict(healthy_raw()["tuning"], cmdline=CMDLINE + "\n")
    found, facts, _details = runbooks(healthy_raw(tuning=waiting))
    assert found == ["host-tuning.md"] and facts["tuning"]["pending_reboot"] is True
    assert facts["tuning"]["summary"] == [
        "kernel command line iommu=pt pending reboot",
        "kernel command line pci=realloc=off pending reboot",
    ]
    assert "preflight_allow_reboot: true" in facts["tuning"]["missing"][0]["fix"]
    # A drop-in that lacks an argument the inventory asks for: the argument is missing, not pending.
    _found, facts, _details = runbooks(
        healthy_raw(tuning=waiting), settings={"kernel_cmdline_args": ["iommu=pt", "amd_iommu=on"]}
    )
    assert facts["tuning"]["summary"] == [
        "kernel command line iommu=pt missing",
        "kernel command line amd_iommu=on missing",
    ]


def test_host_tuning_is_asked_only_of_gpu_nodes_and_an_unreadable_c2_is_not_missing():
    untuned = {"cmdline": CMDLINE, "numa_balancing": "1", "c2_name": None, "c2_disable": None,
               "grub_dropin": None, "lspci": ["", ""]}  # fmt: skip
    found, facts, _details = runbooks(healthy_raw(tuning=untuned))
    assert found == [] and facts["tuning"]["pci_gpus"] == 0
    # No ACPI idle driver (a VM): C2 cannot be read, so it is not said to be on.
    no_c2 = dict(untuned, lspci=[LSPCI], numa_balancing="0", cmdline=TUNED_CMDLINE)
    found, facts, _details = runbooks(healthy_raw(tuning=no_c2))
    assert found == [] and facts["tuning"]["c2"] == "unknown"
    # A state2 that is not C2 (another idle driver's naming) is not judged either.
    assert runbooks(healthy_raw(tuning=dict(no_c2, c2_name="C1E", c2_disable="0")))[0] == []


NO_TORCHAUDIO = recorded("trainer_import", "anynode-22-no-torchaudio.txt")
TORCHVISION_NMS = recorded("trainer_import", "hallo-98-torchvision-nms.txt")


def test_a_trainer_that_does_not_import_names_trainer_import():
    """The probe's `import llamafactory.train.tuner` (a child Python), judged by trainer_import.py."""
    assert runbooks(healthy_raw(), venv=venv(trainer={"rc": 0, "output": ""}))[0] == []
    # LLaMA-Factory not importable: the trainer was not tried (torch-replaced says why, or nothing is installed).
    assert runbooks(healthy_raw(), venv=venv(trainer=None))[0] == []
    found, facts, details = runbooks(healthy_raw(), venv=venv(trainer={"rc": 1, "output": NO_TORCHAUDIO}))
    assert found == ["trainer-import.md"]
    assert facts["torch"]["trainer_import"]["kind"] == "missing-companion"
    assert details[0]["detail"].startswith("node1: torch 2.10.0+rocm7.0 has no torchaudio")
    assert "pytorch_index_url or pytorch_find_links" in details[0]["detail"]  # a wheel's fix
    # A source build's torch (no local label): the fix is the pytorch role's torchaudio build.
    source = venv(torch=dict(venv()["torch"], version="2.10.0"), trainer={"rc": 1, "output": NO_TORCHAUDIO})
    assert "pytorch_companions" in runbooks(healthy_raw(), venv=source)[2][0]["detail"]


def test_a_companion_built_for_another_torch_is_named_once():
    """torchvision's own import already fails in the probe: torch-companions names it; the trainer's
    failure on the same module is not said twice. Where only the trainer shows it, trainer-import."""
    broken = venv(
        companions={"torchvision": "RuntimeError: operator torchvision::nms does not exist"},
        trainer={"rc": 1, "output": TORCHVISION_NMS},
    )
    found, facts, _details = runbooks(healthy_raw(), venv=broken)
    assert found == ["torch-companions.md"]
    assert facts["torch"]["trainer_import"]["kind"] == "companion-mismatch"
    only_trainer = venv(trainer={"rc": 1, "output": TORCHVISION_NMS})
    assert runbooks(healthy_raw(), venv=only_trainer)[0] == ["trainer-import.md"]


def test_a_trainer_import_that_hangs_or_crashes_is_reported():
    hung = venv(trainer={"rc": None, "output": "import llamafactory.train.tuner did not finish in 300 s"})
    found, _facts, details = runbooks(healthy_raw(), venv=hung)
    assert found == ["trainer-import.md"] and "did not finish in 300 s" in details[0]["detail"]


# torch.version.hip as ROCm torch builds print it (tests/unit/plugins/module_utils/test_torch_release.py),
# and /opt/rocm/.info/version as rocm-core writes it (MAJOR.MINOR.PATCH-BUILD).
HIP_70 = "7.0.51831-a3e329ad8"


def test_a_torch_built_for_another_rocm_minor_than_opt_rocm():
    same = {"installed": "7.0.2-56\n", "record": None}
    assert runbooks(healthy_raw(), venv=venv(torch=dict(venv()["torch"], hip=HIP_70)), rocm_release=same)[0] == []
    newer = {"installed": "7.1.0-20\n", "record": '{"version": "7.0.2"}'}
    found, facts, details = runbooks(healthy_raw(), venv=venv(torch=dict(venv()["torch"], hip=HIP_70)),
                                     rocm_release=newer)  # fmt: skip
    assert found == ["torch-rocm-mismatch.md"]
    assert (facts["torch"]["rocm_release"], facts["torch"]["rocm_release_source"]) == ("7.1.0", "rocm_path")
    assert (
        "was built for ROCm 7.0 (torch.version.hip 7.0.51831-a3e329ad8) but /opt/rocm is ROCm 7.1.0"
        in (details[0]["detail"])
    )
    assert "https://download.pytorch.org/whl/rocm7.1" in details[0]["detail"]


def test_without_opt_rocm_version_the_rocm_stage_record_is_the_release():
    record = {"installed": None, "record": '{"version": "7.1.1", "gpu_count": 8, "gfx_archs": ["gfx942"]}'}
    found, facts, _details = runbooks(healthy_raw(), venv=venv(torch=dict(venv()["torch"], hip=HIP_70)),
                                      rocm_release=record)  # fmt: skip
    assert found == ["torch-rocm-mismatch.md"] and facts["torch"]["rocm_release_source"] == "record"
    # Neither there (a node not provisioned), unreadable, or a torch without HIP: nothing to compare.
    for release in (None, {"installed": None, "record": None}, {"installed": "garbage", "record": "{"}):
        assert (
            runbooks(healthy_raw(), venv=venv(torch=dict(venv()["torch"], hip=HIP_70)), rocm_release=release)[0] == []
        )
    cpu = venv(torch={"version": "2.13.0+cpu", "hip": None, "available": False, "device_count": 0, "arch_list": []})
    assert runbooks(healthy_raw(), venv=cpu, settings={"torch_on_gpu": False}, rocm_release=record)[0] == []


def test_a_rule_of_an_unknown_severity_is_named():
    rules = [{"id": "a", "title": "t", "runbook": "disk-full.md", "tag": "disk", "when": "disk", "severity": "fatal"}]
    assert diagnose.rule_problems(rules, TAGS, jmespath.compile) == [
        {"id": "a", "problem": "severity 'fatal' is not one of error, warning"}
    ]


def test_the_report_keeps_warnings_apart_from_the_runbooks_that_apply():
    warning = {"id": "host-tuning", "runbook": "host-tuning.md", "severity": "warning"}
    report = diagnose.host_report({"diagnose_findings": [], "diagnose_warnings": [warning], "diagnose_facts": {}})
    assert report["runbooks"] == [] and report["warnings"] == [warning]


# ---------------------------------------------------------------- issue 31: existing ROCm, proxies
# AMD's documented one-line sources (ROCm's "Ubuntu native installation" and amdgpu-install, as
# tests/unit/plugins/module_utils/test_apt_sources.py writes them), the role's deb822 file, and the
# packages of a node with ROCm 7.1.0 and amdgpu 30.20 (versions from public ROCm issues; sources in
# tests/unit/plugins/module_utils/test_rocm_existing.py), in the role's dpkg-query format.
AMD_ROCM_LIST = (
    "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/rocm/apt/7.0.2 jammy main\n"
)
AMD_AMDGPU_LIST = (
    "deb [arch=amd64,i386 signed-by=/etc/apt/keyrings/rocm.gpg] "
    "https://repo.radeon.com/amdgpu/30.10.2/ubuntu jammy main\n"
)
ROLE_ROCM_SOURCES = (
    "Types: deb\nURIs: https://repo.radeon.com/rocm/apt/7.0.2/\nSuites: jammy\nComponents: main\n"
    "Architectures: amd64\nSigned-By: /etc/apt/keyrings/rocm.asc\n"
)
ROCM_710_NODE = "rocm-core\t7.1.0.70100-20~22.04\tii \namdgpu-dkms\t1:6.16.6.30200000-2238411.24.04\tii \n"
ROCM_644_NODE = "rocm-core\t6.4.4.60404-129~24.04\tii \namdgpu-dkms\t1:6.12.12.60404-2202139.24.04\tii \n"
ROCM_DEFAULTS = yaml.safe_load((ROOT / "roles" / "rocm" / "defaults" / "main.yml").read_text())
COMMON_DEFAULTS = yaml.safe_load((ROOT / "roles" / "common" / "defaults" / "main.yml").read_text())
ROCM_SETTINGS = {
    "rocm_manage": "install",
    "rocm_version": "7.0.2",
    "rocm_releases": COMMON_DEFAULTS["instinct_rocm_releases"],
    "rocm_allow_downgrade": False,
    "install_driver": True,
}


def repositories_raw(files):
    """The repositories section as gather.py reads it: the AMD source check, and every entry parsed by
    the rocm role's apt_sources (what the node tools' link to it runs)."""
    raw = healthy_raw()["repositories"]
    return dict(raw, apt_entries=apt_sources.parse_files(files))


def test_amds_rocm_list_beside_a_source_with_another_keyring_names_existing_rocm():
    files = {
        "/etc/apt/sources.list.d/rocm.list": AMD_ROCM_LIST,
        "/etc/apt/sources.list.d/rocm.sources": ROLE_ROCM_SOURCES,
    }
    found, facts, details = runbooks(healthy_raw(repositories=repositories_raw(files)))
    assert found == ["existing-rocm.md"]
    assert facts["repositories"]["signed_by_conflicts"] == [
        {
            "uri": "https://repo.radeon.com/rocm/apt/7.0.2",
            "suite": "jammy",
            "named": [
                "/etc/apt/sources.list.d/rocm.list: /etc/apt/keyrings/rocm.gpg",
                "/etc/apt/sources.list.d/rocm.sources: /etc/apt/keyrings/rocm.asc",
            ],
        }
    ]
    assert details[0]["id"] == "apt-signed-by-conflict"
    assert details[0]["detail"].startswith("https://repo.radeon.com/rocm/apt/7.0.2 jammy named by ")


def test_amds_own_files_with_one_keyring_are_no_conflict():
    files = {"/etc/apt/sources.list.d/rocm.list": AMD_ROCM_LIST, "/etc/apt/sources.list.d/amdgpu.list": AMD_AMDGPU_LIST}
    found, facts, _details = runbooks(healthy_raw(repositories=repositories_raw(files)))
    assert found == []
    assert facts["repositories"]["signed_by_conflicts"] == []
    # deb and deb-src of one repository with one keyring, a trailing slash apart: still one repository.
    same = AMD_ROCM_LIST + AMD_ROCM_LIST.replace("deb ", "deb-src ", 1).replace("7.0.2 ", "7.0.2/ ")
    assert (
        diagnose.signed_by_conflicts(repositories_raw({"/etc/apt/sources.list.d/rocm.list": same})["apt_entries"]) == []
    )


def test_an_entry_without_signed_by_conflicts_with_one_that_names_a_keyring():
    entries = repositories_raw(
        {
            "/etc/apt/sources.list": "deb https://repo.radeon.com/rocm/apt/7.0.2 jammy main\n",
            "/etc/apt/sources.list.d/rocm.list": AMD_ROCM_LIST,
        }
    )["apt_entries"]
    assert diagnose.signed_by_conflicts(entries)[0]["named"][0] == "/etc/apt/sources.list: (none)"


def rocm_runbooks(packages, info_version=None, **settings):
    raw = healthy_raw(rocm={"packages": packages, "info_version": info_version})
    return runbooks(raw, settings=dict(ROCM_SETTINGS, **settings))


def test_a_newer_rocm_than_rocm_version_names_existing_rocm_in_the_roles_words():
    found, facts, details = rocm_runbooks(ROCM_710_NODE)
    assert found == ["existing-rocm.md"]
    assert facts["rocm"]["installed"] == "7.1.0" and facts["rocm"]["amdgpu"] == "30.20"
    assert facts["rocm"]["in_release_map"] is True
    assert "newer than the pinned ROCm 7.0.2 with amdgpu 30.10.2" in details[0]["detail"]
    assert "rocm_manage: verify" in details[0]["detail"]


@pytest.mark.parametrize(
    "settings",
    [
        {"rocm_manage": "verify"},  # 7.1.0 with 30.20: the map's pair
        {"rocm_allow_downgrade": True},
        {"rocm_version": "7.1.0"},
    ],
)
def test_the_same_node_passes_where_the_rocm_stage_would_go_on(settings):
    found, facts, _details = rocm_runbooks(ROCM_710_NODE, **settings)
    assert found == [] and facts["rocm"]["problem"] is None


def test_verify_refuses_a_release_the_map_lacks_and_install_upgrades_it():
    found, facts, details = rocm_runbooks(ROCM_644_NODE, rocm_manage="verify")
    assert found == ["existing-rocm.md"]
    assert facts["rocm"]["in_release_map"] is False
    assert "not in the supported release map" in details[0]["detail"]
    # install takes an older release to rocm_version: no refusal, no finding.
    assert rocm_runbooks(ROCM_644_NODE)[0] == []
    # A site that adds 6.4.4 to the map (instinct_rocm_releases, which the rocm stage reads too) is fine.
    releases = dict(COMMON_DEFAULTS["instinct_rocm_releases"], **{"6.4.4": {"amdgpu": "6.4.4"}})
    assert rocm_runbooks(ROCM_644_NODE, rocm_manage="verify", rocm_releases=releases)[0] == []


def test_a_rocm_without_amds_packages_is_read_from_its_prefix():
    found, facts, _details = rocm_runbooks("", info_version="7.1.0-20\n")
    assert found == [] and facts["rocm"]["installed"] == "7.1.0" and facts["rocm"]["installed_package"] is None
    # verify with no rocm-core: the role's own refusal.
    assert rocm_runbooks("", info_version="7.1.0-20\n", rocm_manage="verify")[0] == ["existing-rocm.md"]


def test_diagnose_judges_by_the_rocm_roles_defaults_and_the_common_release_map():
    defaults = yaml.safe_load((ROOT / "roles" / "diagnose" / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles" / "diagnose" / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    render = jinja2.Environment().from_string  # noqa: S701 - renders a default, not HTML
    # One release map, in the common role that both roles depend on: neither keeps a copy.
    assert "instinct_rocm_releases" not in ROCM_DEFAULTS and "diagnose_rocm_releases" not in defaults
    evaluate = (ROOT / "roles" / "diagnose" / "tasks" / "evaluate.yml").read_text()
    assert 'rocm_releases: "{{ instinct_rocm_releases }}"' in evaluate
    for name in ("rocm_version", "rocm_manage", "rocm_allow_downgrade"):
        assert render(defaults[f"diagnose_{name}"]).render() == str(ROCM_DEFAULTS[name]), name
        assert str(options[f"diagnose_{name}"]["default"]) == str(ROCM_DEFAULTS[name]), name


def proxy_raw(proxies, env_no_proxy=None):
    return healthy_raw(proxy={"proxies": proxies, "apt_direct": [], "env_no_proxy": env_no_proxy, "apt_file": True})


APT_PROXY_DOWN = {
    "source": "apt Acquire::http::Proxy",
    "url": "http://user:***@proxy.example.com:3128/",
    "target": "proxy.example.com:3128",
    "error": "TimeoutError: timed out",
}


def test_a_proxy_that_does_not_answer_names_proxy_md():
    found, facts, details = runbooks(proxy_raw([APT_PROXY_DOWN]))
    assert found == ["proxy.md"]
    assert details[0]["detail"] == (
        "apt Acquire::http::Proxy http://user:***@proxy.example.com:3128/ (proxy.example.com:3128): "
        "TimeoutError: timed out"
    )
    # apt's proxy alone says nothing of /etc/environment's no_proxy.
    assert facts["proxy"]["no_proxy_missing"] == []
    up = dict(APT_PROXY_DOWN, error=None)
    assert runbooks(proxy_raw([up]))[0] == []


def test_a_node_proxy_whose_no_proxy_lacks_the_nodes_is_a_warning():
    environment = dict(APT_PROXY_DOWN, source="/etc/environment http_proxy", error=None)
    settings = {"nodes": ["node1", "node2", "10.10.0.11", "10.10.0.12"]}
    raw = proxy_raw([environment], env_no_proxy="localhost,127.0.0.1,node1,.cluster.example")
    found, facts, details = runbooks(raw, settings=settings)
    assert found == ["proxy.md"]
    assert facts["proxy"]["no_proxy_missing"] == ["node2", "10.10.0.11", "10.10.0.12"]
    assert [(d["id"], d["severity"], d["detail"]) for d in details] == [
        ("proxy-nodes-not-exempt", "warning", "node2, 10.10.0.11, 10.10.0.12")
    ]
    covered = proxy_raw([environment], env_no_proxy="node1,node2 10.10.0.0/24")
    assert runbooks(covered, settings=settings)[1]["proxy"]["no_proxy_missing"] == []


@pytest.mark.parametrize(
    ("no_proxy", "host", "covered"),
    [
        ("*", "node1", True),
        ("Node1", "node1", True),
        (".cluster.example", "node1.cluster.example", True),
        ("cluster.example", "node1.cluster.example", True),
        ("cluster.example", "othercluster.example", False),
        ("10.10.0.0/16", "10.10.3.4", True),
        ("10.10.0.0/16", "10.11.0.1", False),
        ("10.10.0.0/16", "node1", False),
        ("10.10", "10.10.0.1", False),
        ("", "node1", False),
    ],
)
def test_no_proxy_matching(no_proxy, host, covered):
    assert diagnose.no_proxy_covers(no_proxy, host) is covered


PREFLIGHT_MEMORY = {
    "check": "memory",
    "value": "7.6 GB, below\npreflight_min_memory_gb=64",
    "fix": "Add memory",
    "runbook": "oom-fragmentation.md",
}


@pytest.mark.parametrize(
    ("record", "found", "detail"),
    [
        (None, [], None),  # no preflight ever ran on the node
        ('{"problems": []}', [], None),  # its last one passed
        (
            json.dumps({"problems": [PREFLIGHT_MEMORY]}),
            ["preflight.md"],
            "memory: 7.6 GB, below preflight_min_memory_gb=64",
        ),
        ("problems: memory", ["preflight.md"], "the record is not the JSON preflight writes"),
        ('{"problems": ["memory"]}', ["preflight.md"], "the record is not the JSON preflight writes"),
    ],
    ids=["no-record", "passed", "problems", "not-json", "not-problems"],
)
def test_a_node_whose_last_preflight_found_problems_names_the_preflight_page(record, found, detail):
    """preflight's record (the preflight role's report.yml; tests/unit/roles/test_preflight_problems.py
    reads one the role wrote): a problem, or a record that cannot be read, applies preflight.md."""
    raw = healthy_raw(preflight={"record": record, "mtime": 1_800_000_000.0 if record else None})
    names, facts, details = runbooks(raw)
    assert names == found
    assert facts["preflight"]["recorded"] is (record is not None)
    assert [d["detail"] for d in details] == ([detail] if detail else [])
    # Not collected (--tags without preflight): the rule does not apply.
    assert runbooks(healthy_raw())[0] == []


LOCK = {"id": "ctl:4242:99", "controller": "ctl", "user": "ana", "pid": 4242, "playbook": "site.yml",
        "taken": 1_800_000_000.0 - 900, "renewed": 1_800_000_000.0 - 30}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "found"),
    [(None, []), (json.dumps(LOCK), ["run-lock.md"]), ("{", ["run-lock.md"])],
    ids=["free", "held", "cut-short"],
)
def test_a_node_whose_run_lock_a_run_holds_names_the_run_lock_page_as_a_warning(text, found):
    """The run lock (instinct.finetune.run_lock): a run holds the node, or one that died left its lock;
    a file cut short is no holder, as the lock itself reads it."""
    raw = healthy_raw(lock={"text": text, "mtime": None})
    names, facts, details = runbooks(raw)
    assert names == found
    assert facts["lock"]["held"] is (text is not None and text != "{") and facts["lock"]["unreadable"] is (text == "{")
    if text == "{":
        assert details[0]["detail"].startswith("a lock file that is not a lock")
    elif found:
        (finding,) = details
        assert finding["severity"] == "warning"
        assert finding["detail"].startswith("ana@ctl (ansible-playbook pid 4242, site.yml), since ")
        assert "15 min ago; last renewed 30 s ago" in finding["detail"]


def test_a_job_whose_stability_report_failed_names_its_page_and_the_failing_checks():
    report = {"verdict": "fail", "failed": ["gpu_drop@node2", "vram_leak@node1"]}
    jobs = {"jobs": [{"name": "f", "unit_state": None, "exit_record": None, "ranks": {}, "stability": report}]}
    found, facts, details = runbooks(healthy_raw(jobs=jobs))
    assert found == ["stability.md"] and "gpu_drop@node2" in json.dumps(details)
    assert facts["jobs"]["unstable"] == [{"job": "f", "failed": ["gpu_drop@node2", "vram_leak@node1"]}]
    passed = {"jobs": [dict(jobs["jobs"][0], stability={"verdict": "warn", "failed": []})]}
    assert runbooks(healthy_raw(jobs=passed))[0] == []


# This node's line of sinfo in the collection's format (gather.section_slurm), values from the recordings
# of tests/fixtures/slurm (a drained node with Slurm's own GRES reason; as test_slurm.py's SINFO_OUT).
SINFO_DRAINED = (
    "node1|mi300x*|drained*|192|2063000|gpu:mi300x:8(S:0-1)|gres/gpu count reported lower than configured (0 < 8)\n"
)
SINFO_IDLE = "node1|mi300x*|idle|192|2063000|gpu:mi300x:8(S:0-1)|none\n"


def slurm_raw(stdout, rc=0, units=None):
    return {"installed": True, "host": "node1", "units": units or {"munge": "active", "slurmd": "active"},
            "sinfo": {"rc": rc, "stdout": stdout, "stderr": "" if rc == 0 else "slurm_load_node error"}}  # fmt: skip


def test_a_slurm_node_that_cannot_take_a_job_names_the_slurm_page():
    """Issue 35: Slurm's view of the node (the slurm role's, or a site's own): munge or slurmd down, sinfo
    failing, the node not IDLE, its GPUs missing as GRES. A node without Slurm has nothing to say."""
    assert runbooks(healthy_raw(slurm={"installed": False}))[0] == []
    assert runbooks(healthy_raw(slurm=slurm_raw(SINFO_IDLE)), settings={"expected_gpus": 8})[0] == []
    names, facts, _details = runbooks(healthy_raw(slurm=slurm_raw(SINFO_DRAINED)), settings={"expected_gpus": 8})
    assert names == ["slurm.md"]
    assert facts["slurm"]["problems"] == [
        "node1: drained (not_responding), not working, reason: gres/gpu count reported lower than configured (0 < 8)"
    ]
    # A node running a job is working: no finding on a busy cluster.
    busy = SINFO_IDLE.replace("|idle|", "|mixed|")
    assert runbooks(healthy_raw(slurm=slurm_raw(busy)), settings={"expected_gpus": 8})[0] == []
    names, facts, _details = runbooks(
        healthy_raw(slurm=slurm_raw("", rc=1, units={"munge": "failed", "slurmd": "inactive"})),
        settings={"expected_gpus": 8},
    )
    assert names == ["slurm.md"]
    assert facts["slurm"]["problems"] == [
        "munge is failed",
        "slurmd is inactive",
        "sinfo failed: slurm_load_node error",
    ]
    # Another GPU count as GRES than the node should have.
    four = SINFO_IDLE.replace("gpu:mi300x:8", "gpu:mi300x:4")
    assert runbooks(healthy_raw(slurm=slurm_raw(four)), settings={"expected_gpus": 8})[1]["slurm"]["problems"] == [
        "node1: GRES gpu:mi300x:4(S:0-1) shows 4 GPUs, 8 expected"
    ]
