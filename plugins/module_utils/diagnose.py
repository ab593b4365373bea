# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The facts diagnose.yml's rules read, built from what it collected on a node (pure functions).

``node_facts(raw, probes, settings)`` turns the raw sections of the node tools' gather and the probe
results (rocminfo_facts, rocm_smi_facts, the venv probe, the node's ROCm release, ds_report) into one document
per node. Every section is present only when it was collected (``--tags`` limits what is), so a
rule about a section that did not run finds null and does not apply. The rules themselves are data
(``roles/diagnose/files/rules.yml``): JMESPath expressions over this document. A rule's
``severity`` is ``error`` (the default: the node is broken) or ``warning`` (it works, slower or less
safely than it could): warnings are reported apart and never fail a run.
"""

from __future__ import absolute_import, division, print_function

import ipaddress
import json
import math
import re

from ansible_collections.instinct.finetune.plugins.module_utils import (
    apt_index,
    driver,
    gpu_metrics,
    host_tuning,
    jobstate,
    pci,
    proxy,
    pystack,
    runlock,
    slurm,
    torch_release,
    trainer_import,
)
from ansible_collections.instinct.finetune.plugins.module_utils import ds_report as ds_report_utils
from ansible_collections.instinct.finetune.plugins.module_utils import rocm_release as releases
from ansible_collections.instinct.finetune.plugins.module_utils.rdma import port_state
from ansible_collections.instinct.finetune.plugins.module_utils.rocm_release import normalize_version

__metaclass__ = type

ROCM_REASONS_DRIVER = ("driver_not_loaded",)
ROCM_REASONS_PERMISSION = ("kfd_permission", "kfd_permission_not_render_group")
# preflight_kernel_cmdline_args' default: what the tuning check looks for when settings name nothing.
KERNEL_ARGS = ("iommu=pt", "pci=realloc=off")
SEVERITIES = ("error", "warning")
_RELEASE = re.compile(r"^\s*(\d+\.\d+(?:\.\d+)?)")


def _probe_reason(result):
    """The failure reason of a probe module's registered result (None when it succeeded or did not run)."""
    if not result or result.get("skipped"):
        return None
    # The role registers the probes with failed_when: false, so "failed" is false even when they
    # failed; the module's reason code says what went wrong.
    if result.get("reason"):
        return result["reason"]
    return "failed" if result.get("failed") else None


def _os(raw, settings):
    # Headers matter only where the rocm stage builds amdgpu-dkms against them (settings'
    # install_driver: rocm_install_driver, true where unset); a node on its kernel's own driver needs none.
    install_driver = settings.get("install_driver", True)
    return {
        "distribution": settings.get("distribution"),
        "version": settings.get("distribution_version"),
        "supported": settings.get("platform_supported"),
        "kernel": raw.get("kernel"),
        "headers": raw.get("headers"),
        "headers_needed": str(install_driver).strip().lower() not in ("false", "no", "off", "0"),
    }


# A wheel_build log, build-NAME-VERSION-ARCHKEY.log: the name runs to the first "-" before a digit.
_BUILD_LOG = re.compile(r"build-(?P<name>.+?)-(?P<version>\d[^-]*)-(?P<key>.+)\.log$")


def build_log_key(log):
    """The build a log is of, whatever its version: ``(name, arch key)``; the file name where it does
    not follow wheel_build's pattern."""
    base = log.rsplit("/", 1)[-1]
    match = _BUILD_LOG.match(base)
    return (match.group("name"), match.group("key")) if match else (base, "")


def _builds(raw):
    """The failed build logs that still stand. wheel_build logs each (name, version, arch set) to a
    file of its own, so a failed log stays after a later build of that name and arch set succeeded
    (another version, or the same built elsewhere) or failed anew: only the newest log of each
    (name, arch set) speaks for the build; an older failed one is ``superseded``. A gather without
    ``logs`` (every log with its mtime) gives its failed ones as they are."""
    failed = raw.get("failed") or []
    logs = raw.get("logs")
    if logs is None:
        return {"failed": failed, "superseded": []}
    newest = {}
    for entry in logs:
        key = build_log_key(entry["log"])
        if key not in newest or (entry.get("mtime") or 0) >= (newest[key].get("mtime") or 0):
            newest[key] = entry
    current = {entry["log"] for entry in newest.values()}
    return {
        "failed": [entry for entry in failed if entry["log"] in current],
        "superseded": [entry["log"] for entry in failed if entry["log"] not in current],
    }


def _driver(raw, rocminfo):
    reason = _probe_reason(rocminfo)
    loaded = None
    if rocminfo and not rocminfo.get("skipped"):
        loaded = reason not in ROCM_REASONS_DRIVER and reason != "missing_binary"
    facts = {
        "rocminfo": "missing" if reason == "missing_binary" else ("failed" if reason else "ok"),
        "loaded": loaded,
        "reason": reason,
        "message": (rocminfo or {}).get("msg") if reason else None,
        "module_loaded": raw.get("module_loaded"),
        "kfd_exists": raw.get("kfd_exists"),
        "state": None,
        "running": None,
        "installed_version": None,
        "secure_boot": None,
        "secure_boot_problem": None,
    }
    if raw.get("dkms_status") is not None:
        module = raw.get("loaded_version")
        if module is not None:
            module = {"version": module, "srcversion": raw.get("loaded_srcversion")}
        installed = {"mtime": raw.get("module_mtime"), "srcversion": raw.get("module_srcversion")}
        state = driver.driver_state(raw.get("kernel"), raw["dkms_status"], module, installed, raw.get("boot_time"))
        facts.update(
            state=state["state"], running=driver.describe_loaded(state), installed_version=state["installed_version"]
        )
    if raw.get("sb_state") is not None:
        facts["secure_boot"] = driver.parse_sb_state(raw["sb_state"])
    elif "sb_efivar" in raw:
        efivar = raw.get("sb_efivar")
        facts["secure_boot"] = driver.parse_sb_efivar(bytes(efivar) if efivar is not None else None)
    # Only where DKMS installed amdgpu: a node on the kernel's own driver by choice needs no key.
    if facts["secure_boot"] is not None and facts["state"] is not None:
        enrolled = driver.parse_mok_test_key(raw.get("mok_test")) if raw.get("mok_test") is not None else None
        facts["secure_boot_problem"] = driver.secure_boot_problem(facts["secure_boot"], raw.get("mok_key"), enrolled)
    return facts


def _permissions(raw, rocminfo):
    groups = raw.get("groups") or []
    kfd_group = (raw.get("kfd") or {}).get("group")
    return {
        "user": raw.get("user"),
        "user_exists": raw.get("user_exists"),
        "in_render": "render" in groups,
        "in_video": "video" in groups,
        "kfd": raw.get("kfd"),
        # The group that owns /dev/kfd is the one that matters (render with the collection's udev
        # rule); without /dev/kfd to look at, render.
        "in_kfd_group": (kfd_group or "render") in groups,
        "kfd_denied": _probe_reason(rocminfo) in ROCM_REASONS_PERMISSION,
    }


def _gpus(raw, rocminfo, smi, settings):
    pci_paths = [path for text in raw.get("lspci") or [] for path in pci.parse_lspci_paths(text)]
    rocm = (rocminfo or {}).get("ansible_facts", {}).get("rocm_gpu_count")
    smi_gpus = (smi or {}).get("ansible_facts", {}).get("rocm_smi_gpus")
    expected = int(settings.get("expected_gpus") or 0) or len(pci_paths)
    seen = rocm if rocm is not None else (len(smi_gpus) if smi_gpus is not None else None)
    reasons = {_probe_reason(rocminfo), _probe_reason(smi)}
    return {
        "pci": len(pci_paths),
        "rocm": rocm,
        "smi": None if smi_gpus is None else len(smi_gpus),
        "expected": expected,
        "missing": max(0, expected - seen) if seen is not None else None,
        "unparsed": "unparsable" in reasons,
    }


def _topology(smi):
    facts = (smi or {}).get("ansible_facts") or {}
    topology = facts.get("rocm_smi_topology") or {}
    return {
        "gpus": len(facts.get("rocm_smi_gpus") or []),
        "all_xgmi": topology.get("all_xgmi"),
        "pcie_pairs": topology.get("pcie_pairs") or [],
        "numa_nodes": topology.get("numa_nodes") or {},
    }


def _thermal(smi, settings):
    gpus = ((smi or {}).get("ansible_facts") or {}).get("rocm_smi_gpus") or []
    limit = float(settings.get("temperature_limit") or 95)
    readings = [(gpu["index"], gpu.get("temperature_c")) for gpu in gpus if gpu.get("temperature_c") is not None]
    return {
        "limit": limit,
        "max_celsius": max((t for _index, t in readings), default=None),
        "hot_gpus": [index for index, t in readings if t >= limit],
    }


def _repositories(raw):
    sources = raw.get("rocm_sources") or []
    return {
        "rocm_sources": len(sources),
        "trusted_yes": [s["file"] for s in sources if s.get("trusted_yes")],
        "unsigned": [s["file"] for s in sources if not s.get("signed_by")],
        "missing_keys": [s["file"] for s in sources if s.get("signed_by") and not s.get("keys_present")],
        "package_lists": apt_index.has_package_lists(raw.get("apt_lists") or []),
        "signed_by_conflicts": signed_by_conflicts(raw.get("apt_entries") or []),
    }


def signed_by_conflicts(entries):
    """The repositories that two source entries name with different Signed-By (a missing one counts, as
    the rocm role's apt_sources.plan counts it): apt then reads no source at all ("Conflicting values set
    for option Signed-By regarding source URI SUITE"). ``entries``: apt_sources.parse_files' entries.
    Returns ``[{uri, suite, named}]``, ``named`` being ``"<file>: <signed-by or (none)>"`` per entry."""
    by_repository = {}
    for entry in entries:
        by_repository.setdefault((entry.get("uri"), entry.get("suite")), []).append(entry)
    conflicts = []
    for (uri, suite), found in sorted(by_repository.items(), key=lambda item: (str(item[0][0]), str(item[0][1]))):
        if len({entry.get("signed_by") for entry in found}) > 1:
            named = []
            for entry in found:
                text = f"{entry.get('file')}: {entry.get('signed_by') or '(none)'}"
                if text not in named:
                    named.append(text)
            conflicts.append({"uri": uri, "suite": suite, "named": named})
    return conflicts


def _env(text):
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip().strip("\"'")
    return values


def _fabric(raw, smi):
    env = _env(raw.get("env"))
    nic = raw.get("nic")
    problems = []
    if raw.get("env_file") and not nic:
        problems.append("the RCCL environment sets no NCCL_SOCKET_IFNAME")
    if nic:
        if not nic.get("exists"):
            problems.append(f"NCCL_SOCKET_IFNAME={nic['name']} is not an interface of this node")
        elif nic.get("operstate") not in ("up", "unknown"):
            problems.append(f"{nic['name']} is {nic.get('operstate')}")
        elif not nic.get("ipv4"):
            problems.append(f"{nic['name']} has no IPv4 address")
        if env.get("GLOO_SOCKET_IFNAME") and env.get("GLOO_SOCKET_IFNAME") != nic["name"]:
            problems.append(f"GLOO_SOCKET_IFNAME={env['GLOO_SOCKET_IFNAME']} differs from NCCL_SOCKET_IFNAME")
    gpu_numa = sorted(int(node) for node in _topology(smi)["numa_nodes"])
    nic_numa = (nic or {}).get("numa_node")
    return {
        "configured": bool(raw.get("env_file")),
        "ifname": (nic or {}).get("name"),
        "master_addr": env.get("MASTER_ADDR"),
        "problems": problems,
        "nic_numa_node": nic_numa,
        "gpu_numa_nodes": gpu_numa,
        # The NIC sits on a socket none of the GPUs is on: every collective crosses the socket link.
        "cross_socket": nic_numa is not None and nic_numa >= 0 and bool(gpu_numa) and nic_numa not in gpu_numa,
        "timeouts": raw.get("timeouts") or [],
        # RDMA ports NCCL_IB_HCA names that are missing (None) or not ACTIVE ("1: DOWN").
        "rdma_ports_not_active": sorted(
            f"{name} {state or 'missing'}"
            for name, state in (raw.get("rdma") or {}).items()
            if not state or port_state(state) != "ACTIVE"
        ),
    }


def _libraries(raw, rocminfo):
    gfx = ((rocminfo or {}).get("ansible_facts") or {}).get("rocm_gfx_archs") or []
    installed = raw.get("hipblaslt") or raw.get("rccl")
    archs = raw.get("hipblaslt_archs") or []
    return {
        "rocm_installed": bool(installed),
        "missing": [name for name in ("hipblaslt", "rccl") if installed and not raw.get(name)],
        "hipblaslt_archs": archs,
        "archs_without_kernels": [a for a in gfx if raw.get("hipblaslt") and archs and a not in archs],
    }


def rocm_release(release):
    """The ROCm release of a node, ``(version, source)``: ``<rocm>/.info/version`` first (``7.0.2-56``: what
    /opt/rocm holds, what extensions compile against), then the rocm stage's record (its JSON's
    ``version``); ``(None, None)`` when neither is there or readable. ``release``: ``{installed, record}``,
    the two files' texts (None where absent)."""
    release = release or {}
    match = _RELEASE.match(str(release.get("installed") or ""))
    if match:
        return normalize_version(match.group(1)), "rocm_path"
    try:
        record = json.loads(release.get("record") or "null")
        version = record.get("version") if isinstance(record, dict) else None
        return (normalize_version(version), "record") if version else (None, None)
    except ValueError:
        return None, None


def _trainer(venv, probe, settings):
    """The judgement of ``import llamafactory.train.tuner`` in the venv (the probe's ``trainer``):
    None when it imports or was not tried, else trainer_import's ``{kind, module, message}``."""
    trainer = venv.get("trainer")
    if not isinstance(trainer, dict) or trainer.get("rc") == 0:
        return None
    rc = trainer.get("rc")
    return trainer_import.import_problem(
        "no status (it did not finish)" if rc is None else rc,
        trainer.get("output"),
        settings.get("host") or "this node",
        probe.get("version") or "?",
    )


def _torch(venv, rocminfo, settings, release=None):
    if not venv or venv.get("skipped"):
        return {"installed": None}
    if not venv.get("python"):
        return {"installed": False, "python_ok": None, "problems": [], "companions": {}}
    probe = venv.get("torch") or {}
    python = venv.get("python")
    version = re.match(r"^(\d+)\.(\d+)", str(python))
    facts = (rocminfo or {}).get("ansible_facts") or {}
    problems = []
    # The probe itself died: SIGILL (rc -4 through Python's subprocess, 132 through a shell) is the
    # "illegal instruction" of a torch built for other CPUs or GPUs.
    crashed = venv.get("rc") in (-4, 132) or "illegal instruction" in str(venv.get("stderr") or "").lower()
    if crashed:
        problems.append(f"the venv's python died with 'illegal instruction' (rc {venv.get('rc')})")
    if probe.get("error"):
        problems.append(f"import torch fails: {probe['error']}")
    elif settings.get("torch_on_gpu"):
        problems = pystack.torch_problems(probe, facts.get("rocm_gfx_archs") or [], facts.get("rocm_gpu_count") or 0)
    wanted = settings.get("torch_version")
    llamafactory = venv.get("llamafactory_error")
    rocm, rocm_source = rocm_release(release)
    mismatch = torch_release.hip_problem(probe.get("hip"), rocm, probe.get("version") or "") if rocm else ""
    return {
        "installed": "No module named 'torch'" not in (probe.get("error") or ""),
        "python": python,
        "python_ok": (int(version.group(1)), int(version.group(2))) >= (3, 11) if version else None,
        "version": probe.get("version"),
        "problems": problems,
        "illegal_instruction": crashed or any("no kernels for" in p or "not a ROCm build" in p for p in problems),
        "companions": {name: error for name, error in (venv.get("companions") or {}).items() if error},
        "replaced": bool(wanted and probe.get("version") and not str(probe["version"]).startswith(str(wanted))),
        "llamafactory_error": llamafactory,
        # Not installed yet is not a fault; installed and failing to import is.
        "llamafactory_broken": bool(llamafactory) and "No module named 'llamafactory'" not in llamafactory,
        # What LLaMA-Factory's run_exp imports (torchaudio among it), judged as the llama_factory role does.
        "trainer_import": _trainer(venv, probe, settings),
        # torch.version.hip against the node's ROCm release, judged as the pytorch role does.
        "hip": probe.get("hip"),
        "rocm_release": rocm,
        "rocm_release_source": rocm_source,
        "rocm_mismatch": mismatch or None,
    }


def _deepspeed(venv, report_text):
    if not venv or venv.get("skipped") or not venv.get("python"):
        return {"installed": None}
    error = venv.get("deepspeed_error")
    if error and "No module named 'deepspeed'" in error:
        return {"installed": False, "problems": []}
    problems = [f"import deepspeed fails: {error}"] if error else []
    report = None
    if report_text:
        try:
            report = ds_report_utils.parse_ds_report(report_text)
        except ValueError as err:
            problems.append(f"ds_report: {err}")
    if (
        report
        and report.get("accelerator") not in (None, "cuda", "cpu")
        and "rocm" not in str(report.get("accelerator"))
    ):
        problems.append(f"DeepSpeed's accelerator is {report.get('accelerator')}")
    return {
        "installed": True,
        "problems": problems,
        "hip": (report or {}).get("hip_version"),
        "ops_prebuilt": (report or {}).get("ops_prebuilt"),
    }


def _memory(raw, settings):
    available = raw.get("available_mb")
    return {
        "total_mb": raw.get("total_mb"),
        "available_mb": available,
        "low": available is not None and available < float(settings.get("min_free_memory_gb") or 0) * 1024,
        "hip_alloc_conf": raw.get("hip_alloc_conf"),
        "oom": raw.get("oom") or [],
    }


def _disk(raw, settings):
    minimum = float(settings.get("min_free_disk_gb") or 0)
    return {
        "paths": raw.get("paths") or [],
        "low": [p["path"] for p in raw.get("paths") or [] if p["free_gb"] < minimum],
        "no_space_errors": raw.get("no_space_errors") or [],
    }


def _jobs(raw, now, settings):
    stall = float(settings.get("stall_minutes") or 15) * 60
    failed, stalled, bad_eval, stage_refused, inputs_refused, unstable = [], [], [], [], [], []
    for job in raw.get("jobs") or []:
        stability = job.get("stability")
        if isinstance(stability, dict) and stability.get("verdict") == "fail":
            unstable.append({"job": job["name"], "failed": stability.get("failed") or []})
        staging = job.get("staging")
        if isinstance(staging, dict) and staging.get("status") == "refused":
            stage_refused.append({"job": job["name"], "problems": staging.get("problems") or []})
        inputs = job.get("inputs")
        if isinstance(inputs, dict) and inputs.get("problems"):
            inputs_refused.append({"job": job["name"], "problems": inputs["problems"]})
        evaluation = job.get("eval")
        if evaluation is not None:
            perplexity = evaluation.get("perplexity") if isinstance(evaluation, dict) else None
            if not isinstance(perplexity, (int, float)) or not math.isfinite(perplexity):
                bad_eval.append({"job": job["name"], "perplexity": perplexity})
        record = jobstate.parse_exit_record(job.get("exit_record") or "")
        if record and record.get("result") not in (None, "success") and job.get("unit_state") != "active":
            failed.append({"job": job["name"], "result": record.get("result"), "status": record.get("status")})
        for rank, values in sorted((job.get("ranks") or {}).items()):
            last = values.get("instinct_finetune_last_step_timestamp_seconds")
            if values.get("instinct_finetune_running") == 1 and last is not None and now - last > stall:
                stalled.append({"job": job["name"], "rank": rank, "minutes": round((now - last) / 60, 1)})
    return {
        "count": len(raw.get("jobs") or []),
        "failed": failed,
        "stalled": stalled,
        "bad_eval": bad_eval,
        "stage_refused": stage_refused,
        "inputs_refused": inputs_refused,
        "unstable": unstable,
    }


def _monitoring(raw):
    state = gpu_metrics.textfile_summary(raw.get("textfile") or "")
    installed = raw.get("textfile") is not None or raw.get("collector_timer") == "active"
    return {
        "installed": installed,
        "collector_down": installed and state["up"] is False,
        "stale": bool(state["stale"]),
        "node_exporter_down": installed and raw.get("node_exporter") != "active",
        "ecc_uncorrectable": _uncorrectable(raw.get("textfile") or ""),
    }


def _uncorrectable(text):
    counts = re.findall(r'^instinct_gpu_ecc_errors_total\{gpu="(\d+)",severity="uncorrectable"\} (\S+)$', text, re.M)
    return [int(gpu) for gpu, value in counts if float(value) > 0]


def _tuning(raw, settings):
    """AMD's MI300X host settings the node lacks, judged as the end-of-run summary judges preflight's
    record (host_tuning.tuning_findings): nothing for a node without Instinct GPUs on the PCI bus. A
    kernel argument that preflight's GRUB drop-in already holds waits for a reboot."""
    wanted = list(settings.get("kernel_cmdline_args") or KERNEL_ARGS)
    cmdline = raw.get("cmdline")
    missing = [arg for arg in wanted if arg not in cmdline.split()] if cmdline is not None else []
    dropin = raw.get("grub_dropin")
    pending = bool(missing) and dropin is not None and all(_in_dropin(arg, dropin) for arg in missing)
    c2 = "unknown" if raw.get("c2_name") != "C2" else ("off" if raw.get("c2_disable") == "1" else "on")
    record = {
        "cmdline_missing": missing,
        "numa_balancing": raw.get("numa_balancing") or "",
        "c2": c2,
        "applied": pending,
        "reboot_allowed": bool(settings.get("allow_reboot")),
    }
    gpus = len([path for text in raw.get("lspci") or [] for path in pci.parse_lspci_paths(text)])
    found = host_tuning.tuning_findings(record, gpus)
    return {
        "pci_gpus": gpus,
        "cmdline_missing": missing,
        "numa_balancing": record["numa_balancing"] or None,
        "c2": c2,
        "pending_reboot": pending,
        "missing": found,
        "summary": [f"{finding['setting']} {finding['state']}" for finding in found],
    }


def _in_dropin(arg, text):
    """The argument as a word of the drop-in's GRUB_CMDLINE_LINUX_DEFAULT line (quotes around it)."""
    return re.search(r'(?<![^\s"])' + re.escape(arg) + r'(?![^\s"])', text) is not None


def _rocm(raw, settings):
    """The node's installed ROCm judged as the rocm role's validate.yml judges it, from the same dpkg-query
    output: with rocm_manage install (and no rocm_allow_downgrade), a ROCm or amdgpu newer than
    rocm_version's release is refused; with verify, a release missing from instinct_rocm_releases (or without its
    driver) is. ``problem``: the role's own words, None when the role would go on."""
    installed = releases.parse_dpkg_query(raw.get("packages") or "")
    have = releases.installed_releases(installed)
    info, _source = rocm_release({"installed": raw.get("info_version")})
    manage = settings.get("rocm_manage") or "install"
    known = settings.get("rocm_releases") or {}
    check_driver = settings.get("install_driver", True) is not False
    problem = ""
    try:
        if manage == "verify":
            releases.existing_release(installed, known, check_driver)
        elif not settings.get("rocm_allow_downgrade"):
            target = releases.rocm_release(settings.get("rocm_version") or "", known)
            problem = releases.downgrade_problem(installed, target, check_driver)
    except ValueError as error:
        problem = str(error)
    in_map = None
    if have["rocm"]:
        in_map = have["rocm"] in {releases.normalize_version(version) for version in known}
    return {
        "manage": manage,
        "pinned": settings.get("rocm_version"),
        # rocm-core's release, else <rocm>/.info/version's (a ROCm installed without AMD's packages).
        "installed": have["rocm"] or info,
        "installed_package": have["rocm_package"],
        "amdgpu": have["amdgpu"],
        "amdgpu_package": have["amdgpu_package"],
        "in_release_map": in_map,
        "problem": problem or None,
    }


def _preflight(raw):
    """Preflight's record on the node (``{"problems": [{check, value, fix, runbook}]}``, written by its
    last run): the problems, and each as "check: value" for the rule's detail. A node no preflight has
    checked has no record and no problem; a record that is not such JSON is said to be unreadable."""
    text = raw.get("record")
    problems, unreadable = [], False
    if text is not None:
        try:
            problems = json.loads(text).get("problems")
        except (ValueError, AttributeError):
            problems = None
        if not isinstance(problems, list) or not all(isinstance(p, dict) for p in problems):
            problems, unreadable = [], True
    return {
        "recorded": text is not None,
        "unreadable": unreadable,
        "since": raw.get("mtime"),
        "problems": problems,
        "checks": [f"{p.get('check')}: {' '.join(str(p.get('value')).split())}" for p in problems],
    }


def _lock(raw, now):
    """The node's run lock (instinct.finetune.run_lock): held or not, by whom, since when. A file that is
    not a lock (cut short by a crash) is no holder, as the lock itself reads it."""
    text = raw.get("text")
    holder = runlock.parse(text) if text is not None else None
    return {
        "held": holder is not None,
        "holder": runlock.describe_holder(holder, now) if holder is not None else None,
        "unreadable": text is not None and holder is None,
    }


def no_proxy_covers(no_proxy, host):
    """Whether a no_proxy value (comma or space separated) keeps ``host`` off the proxy as curl, pip and
    apt's environment readers match it: ``*``, the host itself, a domain suffix (``.example.com`` or
    ``example.com``) or, for an address, a CIDR that holds it (curl 7.86 and later, Python's requests)."""
    host = str(host or "").strip().lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in [item.lower() for item in proxy.split_no_proxy(no_proxy or "")]:
        if entry in ("*", host):
            return True
        if "/" in entry and address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
        elif address is None and host.endswith("." + entry.lstrip(".")):
            return True
    return False


def _proxy(raw, settings):
    """The proxies the node uses outside the play that do not accept a connection (``unreachable``:
    ``"<source> <url>: <error>"``), and, where /etc/environment sets a proxy, the cluster's nodes (settings'
    ``nodes``: inventory names and ansible_host) its no_proxy does not exempt (``no_proxy_missing``)."""
    proxies = raw.get("proxies") or []
    unreachable = [
        f"{entry.get('source')} {entry.get('url')} ({entry.get('target') or 'no host'}): {entry['error']}"
        for entry in proxies
        if entry.get("error")
    ]
    environment = [entry for entry in proxies if str(entry.get("source", "")).startswith("/etc/environment")]
    nodes = [node for node in settings.get("nodes") or [] if node]
    missing = [node for node in nodes if not no_proxy_covers(raw.get("env_no_proxy"), node)] if environment else []
    return {
        "proxies": [f"{entry.get('source')} {entry.get('url')}" for entry in proxies],
        "unreachable": unreachable,
        "environment_proxy": bool(environment),
        "no_proxy_missing": sorted(set(missing), key=missing.index),
        "apt_file": raw.get("apt_file"),
    }


def _slurm(raw, settings):
    """Slurm on the node (the slurm role's, or a site's): whether it is installed, and what keeps the
    node from taking a job: munge or slurmd not running, sinfo failing, the node not IDLE or not showing
    its GPUs as GRES (slurm.node_problems, as the role's own check reads it)."""
    if not raw.get("installed"):
        return {"installed": False, "problems": []}
    problems = [f"{unit} is {state or 'not active'}" for unit, state in (raw.get("units") or {}).items()
                if state != "active"]  # fmt: skip
    sinfo = raw.get("sinfo") or {}
    host = raw.get("host") or "?"
    if sinfo.get("rc") != 0:
        problems.append(f"sinfo failed: {(sinfo.get('stderr') or '').strip()[-300:] or 'no output'}")
    else:
        expected = int(settings.get("expected_gpus") or 0)
        try:
            found = slurm.node_problems(sinfo.get("stdout") or "", {host: expected}, busy_ok=True)
        except slurm.SlurmError as error:
            found = [f"sinfo's answer could not be read: {error}"]
        # Without an expected count the node's GPUs are not judged, only its state.
        problems += [p for p in found if expected or " GPUs, 0 expected" not in p]
    return {"installed": True, "host": host, "problems": problems}


def node_facts(raw, probes, settings):
    """The diagnose facts of one node.

    ``raw``: gather.py's JSON (sections by name). ``probes``: the registered results of
    ``rocminfo`` and ``smi`` (the probe modules), ``venv`` (venv_probe.py's JSON or
    ``{"skipped": true}``), ``rocm_release`` (``{installed, record}``: the texts of ``<rocm>/.info/version``
    and of the rocm stage's record, None where absent) and ``ds_report`` (its stdout or None).
    ``settings``: expected_gpus, temperature_limit, min_free_disk_gb, min_free_memory_gb,
    stall_minutes, torch_on_gpu, torch_version, kernel_cmdline_args, allow_reboot, host, install_driver,
    rocm_manage, rocm_version, rocm_releases, rocm_allow_downgrade, nodes (the inventory's node names and
    addresses), and the platform facts (distribution, distribution_version, platform_supported).
    """
    rocminfo, smi = probes.get("rocminfo"), probes.get("smi")
    facts = {}
    sections = {
        "os": lambda r: _os(r, settings),
        "driver": lambda r: _driver(r, rocminfo),
        "permissions": lambda r: _permissions(r, rocminfo),
        "gpus": lambda r: _gpus(r, rocminfo, smi, settings),
        "kernel-log": lambda r: {"amdgpu_errors": r.get("amdgpu_errors") or []},
        "repositories": _repositories,
        "fabric": lambda r: _fabric(r, smi),
        "libraries": lambda r: _libraries(r, rocminfo),
        "builds": _builds,
        "memory": lambda r: _memory(r, settings),
        "disk": lambda r: _disk(r, settings),
        "jobs": lambda r: _jobs(r, raw.get("time") or 0, settings),
        "monitoring": _monitoring,
        "tuning": lambda r: _tuning(r, settings),
        "rocm": lambda r: _rocm(r, settings),
        "proxy": lambda r: _proxy(r, settings),
        "preflight": _preflight,
        "lock": lambda r: _lock(r, raw.get("time") or 0),
        "slurm": lambda r: _slurm(r, settings),
    }
    errors = {}
    for name, build in sections.items():
        if name in raw:
            if isinstance(raw[name], dict) and "error" in raw[name] and len(raw[name]) == 1:
                errors[name] = raw[name]["error"]
                continue
            facts[name.replace("-", "_")] = build(raw[name])
    if smi is not None and not smi.get("skipped"):
        facts["topology"] = _topology(smi)
        facts["thermal"] = _thermal(smi, settings)
    if "venv" in probes:
        facts["torch"] = _torch(probes.get("venv"), rocminfo, settings, probes.get("rocm_release"))
        facts["deepspeed"] = _deepspeed(probes.get("venv"), probes.get("ds_report"))
    facts["collection_errors"] = errors
    return facts


def findings(facts, rules, evaluate):
    """The rules that apply to a node: ``[{id, runbook, tag, title, severity, detail}]`` in rule order.

    ``evaluate(expression, facts)`` runs a JMESPath expression (Ansible's json_query, or jmespath
    itself); a rule applies when its ``when`` is truthy, and its ``detail`` expression (optional)
    says what was found.
    """
    found = []
    for rule in rules:
        if evaluate(rule["when"], facts):
            detail = evaluate(rule["detail"], facts) if rule.get("detail") else None
            found.append(
                {
                    "id": rule["id"],
                    "runbook": rule["runbook"],
                    "tag": rule["tag"],
                    "title": rule["title"],
                    "severity": rule.get("severity") or "error",
                    "detail": detail,
                }
            )
    return found


RULE_KEYS = ("id", "title", "runbook", "tag", "when")


def rule_problems(rules, tags, compile_expression=None):
    """The rules that cannot be evaluated: a key missing, an unknown tag or severity, a duplicate id, or (with
    ``compile_expression``, e.g. ``jmespath.compile``) an expression that does not parse.
    Returns ``[{id, problem}]``."""
    problems = []
    seen = set()
    for number, rule in enumerate(rules or []):
        if not isinstance(rule, dict):
            problems.append({"id": f"#{number}", "problem": "not a mapping"})
            continue
        rule_id = rule.get("id") or f"#{number}"
        missing = [key for key in RULE_KEYS if not rule.get(key)]
        if missing:
            problems.append({"id": rule_id, "problem": f"lacks {', '.join(missing)}"})
            continue
        if rule["tag"] not in tags:
            problems.append({"id": rule_id, "problem": f"tag '{rule['tag']}' is not a check"})
        if rule.get("severity", "error") not in SEVERITIES:
            problems.append(
                {"id": rule_id, "problem": f"severity '{rule['severity']}' is not one of {', '.join(SEVERITIES)}"}
            )
        if rule_id in seen:
            problems.append({"id": rule_id, "problem": "the id is used twice"})
        seen.add(rule_id)
        for key in ("when", "detail"):
            if compile_expression and rule.get(key):
                try:
                    compile_expression(rule[key])
                except Exception as error:
                    problems.append({"id": rule_id, "problem": f"{key}: {error}"})
    return problems


def host_report(host_vars):
    """One node's part of diagnose.json: what applies and the facts it was decided on. ``runbooks`` and
    ``findings`` are the errors; ``warnings`` the rules of severity warning (never a failed run)."""
    return {
        "runbooks": [finding["runbook"] for finding in host_vars.get("diagnose_findings") or []],
        "findings": list(host_vars.get("diagnose_findings") or []),
        "warnings": list(host_vars.get("diagnose_warnings") or []),
        "facts": host_vars.get("diagnose_facts") or {},
    }
