# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Read-only collection of a node's state for playbooks/diagnose.yml (standard library only).

Prints one JSON document with the raw state of the requested sections; nothing here changes the
node. The controller turns it into the facts the rules read (plugins/module_utils/diagnose.py).
Usage: gather.py SETTINGS_JSON SECTION... (or "all").
"""

import contextlib
import functools
import glob
import grp
import json
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
from urllib.parse import urlsplit

# Shared with the controller (links to plugins/module_utils): the apt source parser the rocm role plans
# with, and the proxy URL redaction the roles use, so that the node reads both the same way.
from instinct_node_tools import apt_sources, proxy

SECTIONS = (
    "os",
    "driver",
    "permissions",
    "gpus",
    "kernel-log",
    "repositories",
    "fabric",
    "libraries",
    "builds",
    "memory",
    "disk",
    "jobs",
    "monitoring",
    "tuning",
    "rocm",
    "proxy",
    "preflight",
    "lock",
    "slurm",
)
# amdgpu kernel messages that mean a GPU or its memory is failing: failed probes and init, driver
# errors, uncorrectable RAS errors, resets, ring timeouts, page faults. Healthy boot lines such as
# "RAS INFO: ras initialized successfully" or "using default lockup timeout" must not match.
AMDGPU_ERRORS = re.compile(
    r"amdgpu.*("
    r"\*ERROR\*|Fatal error during GPU init|probe of \S+ failed|\buncorrectable\b|"
    r"GPU reset begin|ring \S+ timeout|\bpage fault\b|\bpoison|GPU hang"
    r")",
    re.IGNORECASE,
)
# What training logs say when a collective timed out or memory ran out.
COLLECTIVE_TIMEOUT = re.compile(
    r"(Watchdog caught collective operation timeout|(NCCL|RCCL|Gloo|gloo).*([Tt]imeout|timed out)|"
    r"DistNetworkError|Socket Timeout)"
)
OUT_OF_MEMORY = re.compile(r"(HIP out of memory|CUDA out of memory|OutOfMemoryError|hipErrorOutOfMemory)")
NO_SPACE = re.compile(r"No space left on device")
# The finetune unit marks every launch in its log; only the latest launch says what is wrong now.
LAUNCH_MARK = "==== instinct.finetune launch"
LOG_TAIL_BYTES = 2_000_000


def run(argv, timeout=30):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"rc": None, "stdout": "", "stderr": str(error)}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-2000:]}


def read(path, limit=None):
    try:
        with open(path, "rb") as handle:
            if limit:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return None


def matching_lines(text, pattern, keep=20):
    lines = [line.strip() for line in (text or "").splitlines() if pattern.search(line)]
    return lines[-keep:]


def section_os(settings):
    release = os.uname().release
    build = f"/lib/modules/{release}/build"
    return {"kernel": release, "headers": os.path.isdir(build)}


SB_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def boot_time():
    for line in (read("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    return None


def section_driver(settings):
    release = os.uname().release
    loaded = os.path.isdir("/sys/module/amdgpu")
    dkms = shutil.which("dkms")
    mokutil = shutil.which("mokutil")
    # The same files plugins/modules/amdgpu_driver.py reads; the newest is the one modprobe loads.
    modules = sorted(
        glob.glob(f"/lib/modules/{release}/updates/dkms/amdgpu.ko*")
        + glob.glob(f"/var/lib/dkms/amdgpu/*/{release}/*/module/amdgpu.ko*"),
        key=os.path.getmtime,
    )
    modinfo = shutil.which("modinfo")
    module_src = run([modinfo, "-F", "srcversion", modules[-1]]) if modinfo and modules else None
    # The keys dkms signs modules with (Ubuntu's, Debian's): plugins/module_utils/driver.py MOK_KEYS.
    key = next((k for k in ("/var/lib/shim-signed/mok/MOK.der", "/var/lib/dkms/mok.pub") if os.path.exists(k)), None)
    sb_state = run([mokutil, "--sb-state"]) if mokutil else None
    mok_test = run([mokutil, "--test-key", key]) if mokutil and key else None
    efivar = None
    with contextlib.suppress(OSError), open(SB_EFIVAR, "rb") as handle:
        efivar = list(handle.read())
    return {
        "module_loaded": loaded,
        "initstate": (read("/sys/module/amdgpu/initstate") or "").strip() or None,
        "kfd_exists": os.path.exists("/dev/kfd"),
        "kernel": release,
        # None: no amdgpu loaded; "": the in-tree one (no version file).
        "loaded_version": (read("/sys/module/amdgpu/version") or "") if loaded else None,
        "loaded_srcversion": (read("/sys/module/amdgpu/srcversion") or "").strip() or None,
        "dkms_status": run([dkms, "status", "amdgpu"])["stdout"] if dkms else None,
        "module_mtime": os.path.getmtime(modules[-1]) if modules else None,
        "module_srcversion": (module_src["stdout"].strip() or None) if module_src and module_src["rc"] == 0 else None,
        "boot_time": boot_time(),
        "sb_state": (sb_state["stdout"] + sb_state["stderr"]) if sb_state else None,
        "sb_efivar": efivar,
        "mok_key": key,
        "mok_test": (mok_test["stdout"] + mok_test["stderr"]) if mok_test else None,
    }


def section_permissions(settings):
    user = settings["service_user"]
    result = {"user": user, "user_exists": True, "groups": [], "kfd": None}
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        result["user_exists"] = False
        return result
    groups = {g.gr_name for g in grp.getgrall() if user in g.gr_mem}
    with contextlib.suppress(KeyError):
        groups.add(grp.getgrgid(entry.pw_gid).gr_name)
    result["groups"] = sorted(groups)
    try:
        info = os.stat("/dev/kfd")
        result["kfd"] = {"mode": oct(stat.S_IMODE(info.st_mode)), "group": grp.getgrgid(info.st_gid).gr_name}
    except (OSError, KeyError):
        pass
    return result


def section_gpus(settings):
    lspci = shutil.which("lspci")
    outputs = []
    for device in settings["pci_ids"]:
        outputs.append(run([lspci, "-d", f"1002:{device}", "-PP"]) if lspci else {"rc": None, "stdout": ""})
    return {"lspci": [out["stdout"] for out in outputs], "lspci_found": bool(lspci)}


def section_kernel_log(settings):
    journal = run(["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso", "-n", "20000"])
    text = journal["stdout"] if journal["rc"] == 0 else run(["dmesg", "--ctime"])["stdout"]
    return {"amdgpu_errors": matching_lines(text, AMDGPU_ERRORS, settings["kernel_log_keep"])}


def repository_entry(path, text):
    """One AMD apt source file's verification: signed-by keys (a path or an inline key block),
    whether those key files exist, and trusted=yes. None when the file is not an AMD source."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    active = "\n".join(lines)
    if "repo.radeon.com" not in active and "/rocm/apt" not in active and "/amdgpu/" not in active:
        return None
    if path.endswith(".sources") and re.search(r"^Enabled:\s*no\s*$", active, re.MULTILINE | re.IGNORECASE):
        return None
    keys = re.findall(r"signed-by=([^\]\s]+)", active, re.IGNORECASE)
    keys += re.findall(r"^Signed-By:\s*(/\S+)\s*$", active, re.MULTILINE | re.IGNORECASE)
    inline = bool(re.search(r"^Signed-By:\s*(-----BEGIN PGP|$)", active, re.MULTILINE | re.IGNORECASE))
    return {
        "file": path,
        "trusted_yes": bool(re.search(r"trusted\s*[=:]\s*yes", active, re.IGNORECASE)),
        "signed_by": keys or (["inline"] if inline else []),
        "keys_present": all(os.path.isfile(key) for key in keys) if keys else inline,
    }


def section_repositories(settings):
    entries = []
    for pattern in ("*.list", "*.sources"):
        for path in sorted(glob.glob(os.path.join("/etc/apt/sources.list.d", pattern))):
            entry = repository_entry(path, read(path) or "")
            if entry:
                entries.append(entry)
    # The names of apt's index files: a node whose lists hold no Packages index cannot install
    # anything (a minimal image, or lists removed to save space).
    try:
        lists = sorted(name for name in os.listdir("/var/lib/apt/lists") if "Packages" in name)
    except OSError:
        lists = []
    # Every entry of every source file, read as the rocm role reads them (apt_sources.parse_files):
    # apt refuses all sources when two entries for one repository name different Signed-By keyrings.
    return {"rocm_sources": entries, "apt_lists": lists, "apt_entries": apt_sources.parse_files(apt_source_files())}


def apt_source_files(root="/etc/apt"):
    """``{path: text}`` of sources.list and every *.list and *.sources file of sources.list.d (readable ones)."""
    paths = [os.path.join(root, "sources.list")]
    for pattern in ("*.list", "*.sources"):
        paths += sorted(glob.glob(os.path.join(root, "sources.list.d", pattern)))
    return {path: text for path in paths for text in [read(path)] if text is not None}


def latest_launch(text):
    """The part of a training log written since its latest launch (all of it when unmarked)."""
    return (text or "").rsplit(LAUNCH_MARK, 1)[-1]


@functools.cache
def _launch_texts(log_root):
    """Every training log's latest launch, read once for the sections that search them."""
    paths = sorted(glob.glob(os.path.join(log_root, "*", "*.log")))
    return tuple((path, latest_launch(read(path, LOG_TAIL_BYTES))) for path in paths)


def log_findings(settings, pattern, keep):
    """The last ``keep`` lines of each training log's latest launch that match ``pattern``."""
    return [
        {"log": path, "line": line[:400]}
        for path, text in _launch_texts(settings["log_root"])
        for line in matching_lines(text, pattern, keep)
    ]


def section_fabric(settings):
    env_text = read(settings["env_file"])
    result = {"env_file": env_text is not None, "env": env_text or "", "nic": None, "timeouts": []}
    names = re.findall(r"^NCCL_SOCKET_IFNAME=(.+)$", env_text or "", re.MULTILINE)
    if names:
        # A leading "=" asks RCCL for this exact name (no prefix match); the interface is the rest.
        name = names[-1].strip().strip("\"'").lstrip("=")
        base = f"/sys/class/net/{name}"
        addresses = run(["ip", "-j", "-4", "addr", "show", "dev", name])
        try:
            ipv4 = [a["local"] for item in json.loads(addresses["stdout"] or "[]") for a in item.get("addr_info", [])]
        except ValueError:
            ipv4 = []
        numa = (read(f"{base}/device/numa_node") or "").strip()
        result["nic"] = {
            "name": name,
            "exists": os.path.isdir(base),
            "operstate": (read(f"{base}/operstate") or "").strip() or None,
            "ipv4": ipv4,
            "numa_node": int(numa) if re.match(r"^-?\d+$", numa) else None,
        }
    # The state of every RDMA port NCCL_IB_HCA names ("mlx5_0" or "mlx5_0:1"; port 1 when none).
    result["rdma"] = {}
    hcas = re.findall(r"^NCCL_IB_HCA=(.+)$", env_text or "", re.MULTILINE)
    value = hcas[-1].strip().strip("\"'") if hcas else ""
    # "^..." lists the ports RCCL must not use; only a list of ports to use can be checked.
    for entry in value.lstrip("=").split(",") if value and not value.startswith("^") else []:
        device, _sep, port = entry.strip().partition(":")
        if device:
            class_dir = settings.get("rdma_class_dir", "/sys/class/infiniband")
            state = read(f"{class_dir}/{device}/ports/{port or '1'}/state")
            result["rdma"][f"{device}:{port or '1'}"] = state.strip() if state is not None else None
    result["timeouts"] = log_findings(settings, COLLECTIVE_TIMEOUT, 3)
    return result


def section_libraries(settings):
    lib = os.path.join(settings["rocm_path"], "lib")
    tensile = glob.glob(os.path.join(lib, "hipblaslt", "library", "*"))
    archs = sorted({m.group(0) for path in tensile for m in [re.search(r"gfx[0-9a-f]+", os.path.basename(path))] if m})
    return {
        "hipblaslt": bool(glob.glob(os.path.join(lib, "libhipblaslt.so*"))),
        "rccl": bool(glob.glob(os.path.join(lib, "librccl.so*"))),
        "hipblaslt_archs": archs,
    }


def section_builds(settings):
    """The build logs that end in an error (``failed``), and every log with its mtime (``logs``), so
    that the diagnosis can leave out a failed log a later build of the same wheel superseded."""
    failed, logs = [], []
    for log in sorted(glob.glob(os.path.join(settings["build_log_dir"], "build-*.log"))):
        tail = (read(log, 20000) or "").strip().splitlines()[-5:]
        text = "\n".join(tail)
        broken = bool(re.search(r"(error:|Error|FAILED|failed with exit code|exited with|Traceback)", text))
        try:
            mtime = os.path.getmtime(log)
        except OSError:
            mtime = None
        logs.append({"log": log, "mtime": mtime, "failed": broken})
        if broken:
            failed.append({"log": log, "tail": tail})
    return {"failed": failed, "logs": logs}


def section_memory(settings):
    info = {}
    for line in (read("/proc/meminfo") or "").splitlines():
        key, _sep, value = line.partition(":")
        if value.strip().endswith("kB"):
            info[key] = int(value.split()[0]) // 1024
    env_text = read(settings["env_file"]) or ""
    alloc = re.findall(r"^PYTORCH_(?:HIP_)?ALLOC_CONF=(.*)$", env_text, re.MULTILINE)
    oom = log_findings(settings, OUT_OF_MEMORY, 2)
    return {
        "total_mb": info.get("MemTotal"),
        "available_mb": info.get("MemAvailable"),
        "hip_alloc_conf": alloc[-1] if alloc else None,
        "oom": oom,
    }


def section_disk(settings):
    paths = []
    for path in settings["disk_paths"]:
        probe = path
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        usage = shutil.disk_usage(probe or "/")
        paths.append(
            {"path": path, "free_gb": round(usage.free / 1024**3, 1), "total_gb": round(usage.total / 1024**3, 1)}
        )
    return {"paths": paths, "no_space_errors": log_findings(settings, NO_SPACE, 2)}


def last_result(path, mark):
    """The last result line (``MARK{json}``) a node tool wrote to a log, or None."""
    for line in reversed((read(path) or "").splitlines()):
        if line.startswith(mark + "{"):
            try:
                return json.loads(line[len(mark) :])
            except ValueError:
                return {"unreadable": line[:200]}
    return None


def stability_verdict(path):
    """The verdict of the job's last stability report (the stability role's report.json), or None."""
    text = read(path)
    if text is None:
        return None
    try:
        report = json.loads(text)
    except ValueError:
        return {"verdict": "unreadable"}
    failed = [f"{v.get('check')}@{v.get('node')}" for v in report.get("verdicts") or [] if v.get("verdict") == "fail"]
    return {"verdict": report.get("verdict"), "failed": failed}


def section_jobs(settings):
    jobs = []
    for folder in sorted(glob.glob(os.path.join(settings["jobs_root"], "*"))):
        if not os.path.isdir(folder):
            continue
        name = os.path.basename(folder)
        unit = f"instinct-finetune-{name}.service"
        active = run(["systemctl", "is-active", unit])["stdout"].strip() or None
        ranks = {}
        for path in glob.glob(os.path.join(folder, "metrics", "rank*.prom")):
            values = dict(re.findall(r"^(instinct_finetune_\w+)\{[^}]*\} (\S+)$", read(path) or "", re.MULTILINE))
            ranks[os.path.basename(path)] = {key: float(value) for key, value in values.items()}
        evaluation = None
        text = read(os.path.join(folder, "output", "eval.json"))
        if text is not None:
            try:
                evaluation = json.loads(text)
            except ValueError:
                evaluation = {"unreadable": text[:200]}
        jobs.append(
            {
                "name": name,
                "unit_state": active,
                "exit_record": (read(os.path.join(folder, "exit-status")) or "").strip() or None,
                "ranks": ranks,
                "eval": evaluation,
                # The last result of staging its hub model and of checking its inputs (the finetune
                # role's model.yml and inputs.yml log them there).
                "staging": last_result(os.path.join(folder, "stage-model.log"), "instinct-stage-model: "),
                "inputs": last_result(os.path.join(folder, "check-inputs.log"), "instinct-check-inputs: "),
                "stability": stability_verdict(os.path.join(folder, "stability", "report.json")),
            }
        )
    return {"jobs": jobs}


def section_monitoring(settings):
    return {
        "textfile": read(os.path.join(settings["textfile_dir"], "instinct_gpu.prom")),
        "collector_timer": run(["systemctl", "is-active", "instinct-gpu-collector.timer"])["stdout"].strip() or None,
        "node_exporter": run(["systemctl", "is-active", "prometheus-node-exporter"])["stdout"].strip() or None,
    }


# preflight's apply-tuning.yml writes the kernel arguments here; present and not booted yet = pending reboot.
GRUB_DROPIN = "/etc/default/grub.d/90-instinct-finetune.cfg"
C2_STATE = "/sys/devices/system/cpu/cpu0/cpuidle/state2"


def section_tuning(settings):
    """What preflight's read-tuning.yml reads (AMD's MI300X host settings), and the Instinct GPUs on
    the PCI bus as section_gpus lists them: the guide is for GPU nodes."""
    return {
        "cmdline": read("/proc/cmdline"),
        "numa_balancing": (read("/proc/sys/kernel/numa_balancing") or "").strip() or None,
        "c2_name": (read(f"{C2_STATE}/name") or "").strip() or None,
        "c2_disable": (read(f"{C2_STATE}/disable") or "").strip() or None,
        "grub_dropin": read(GRUB_DROPIN),
        "lspci": section_gpus(settings)["lspci"],
    }


def section_rocm(settings):
    """The ROCm and amdgpu packages the node has, as the rocm role's validate.yml reads them (dpkg-query's
    rocm-core and amdgpu-dkms; exit status 1 is "no packages found"), and ``<rocm>/.info/version``."""
    dpkg = shutil.which("dpkg-query")
    query = (
        run([dpkg, "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n", "rocm-core", "amdgpu-dkms"])
        if dpkg
        else None
    )
    return {
        "packages": query["stdout"] if query and query["rc"] in (0, 1) else None,
        "info_version": read(os.path.join(settings["rocm_path"], ".info", "version")),
    }


def _text_and_mtime(path):
    """A file's text (None when absent) and when it last changed, as they are: judged on the controller."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        mtime = None
    return read(path), mtime


def section_preflight(settings):
    """Preflight's record of the problems it found on the node at its last run (the preflight role's
    report.yml writes it, JSON), and when it last changed."""
    record, mtime = _text_and_mtime(settings["preflight_record"])
    return {"record": record, "mtime": mtime}


def section_lock(settings):
    """The run lock (instinct.finetune.run_lock): the text of the lock file, or None when no run holds
    it, and when it last changed."""
    text, mtime = _text_and_mtime(settings["run_lock"])
    return {"text": text, "mtime": mtime}


# sinfo's one line per node and partition, as the slurm role and plugins/module_utils/slurm.py read it.
SINFO_FORMAT = "%N|%P|%T|%c|%m|%G|%E"


def section_slurm(settings):
    """Slurm on this node where it is installed: munge's and slurmd's state, and this node's line of
    sinfo (by its short host name, the name slurm.conf gives it)."""
    if shutil.which("sinfo") is None:
        return {"installed": False}
    host = socket.gethostname().split(".")[0]
    active = {unit: run(["systemctl", "is-active", unit])["stdout"].strip() or None for unit in ("munge", "slurmd")}
    return {
        "installed": True,
        "host": host,
        "units": active,
        "sinfo": run(["sinfo", "--Node", "--noheader", f"--format={SINFO_FORMAT}", f"--nodes={host}"]),
    }


# apt's resolved configuration: 'Acquire::http::Proxy "http://proxy:3128";' (every file, block syntax
# included) and its per-host exceptions 'Acquire::http::Proxy::node1 "DIRECT";'.
APT_PROXY = re.compile(r'^Acquire::(https?)::Proxy(?:::(\S+))?\s+"([^"]*)";\s*$', re.MULTILINE | re.IGNORECASE)
ENVIRONMENT_PROXY = re.compile(
    r"^\s*(?:export\s+)?(https?_proxy|no_proxy)\s*=\s*(.*?)\s*$", re.MULTILINE | re.IGNORECASE
)


def proxy_target(url):
    """``(host, port)`` a proxy URL connects to (the scheme's port when it names none), or None."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def can_connect(target, timeout):
    """None when a TCP connection to ``(host, port)`` opens within ``timeout`` seconds, else why not."""
    try:
        with socket.create_connection(target, timeout=timeout):
            return None
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def section_proxy(settings):
    """The proxies the node is set up to use outside the play: apt's resolved configuration (``apt-config
    dump``: every apt.conf.d file, preflight's among them) and /etc/environment."""
    apt_config = shutil.which("apt-config")
    dump = run([apt_config, "dump"])["stdout"] if apt_config else ""
    found = proxy_settings(dump, read("/etc/environment") or "", float(settings.get("proxy_timeout", 3)))
    found["apt_file"] = os.path.exists(settings["apt_proxy_file"]) if settings.get("apt_proxy_file") else None
    return found


def proxy_settings(apt_dump, environment, timeout):
    """The proxies in ``apt_dump`` (``apt-config dump``'s output) and ``environment`` (/etc/environment's
    text), each tried with a TCP connect from this node (``timeout`` seconds; one try per host and port),
    and their exceptions (apt's DIRECT hosts, the environment's no_proxy). URLs are redacted here: a
    password never leaves the node."""
    proxies, apt_direct, env_no_proxy = [], [], None
    for scheme, host, value in APT_PROXY.findall(apt_dump or ""):
        if host and value.upper() == "DIRECT":
            apt_direct.append(host)
        elif not host and value and value.upper() != "DIRECT":
            proxies.append({"source": f"apt Acquire::{scheme.lower()}::Proxy", "url": value})
    for name, quoted in ENVIRONMENT_PROXY.findall(environment or ""):
        value = quoted.strip("\"'")
        if name.lower() == "no_proxy":
            env_no_proxy = value
        elif value:
            proxies.append({"source": f"/etc/environment {name}", "url": value})
    tried = {}
    for entry in proxies:
        target = proxy_target(entry["url"])
        if target and target not in tried:
            tried[target] = can_connect(target, timeout)
        entry.update(
            url=proxy.redact(entry["url"]),
            target=f"{target[0]}:{target[1]}" if target else None,
            error=tried[target] if target else "the URL names no host",
        )
    return {"proxies": proxies, "apt_direct": apt_direct, "env_no_proxy": env_no_proxy}


def main(argv):
    settings = json.loads(argv[1])
    wanted = SECTIONS if "all" in argv[2:] else [s for s in argv[2:] if s in SECTIONS]
    out = {"time": __import__("time").time()}
    for section in wanted:
        try:
            out[section] = globals()["section_" + section.replace("-", "_")](settings)
        except Exception as error:
            out[section] = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(out))
    return 0


def cli():
    return main(sys.argv)


if __name__ == "__main__":
    # python -m instinct_node_tools.gather: how the diagnose role runs it from the wheel, installing nothing.
    sys.exit(cli())
