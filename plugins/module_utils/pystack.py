# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Pure helpers for the Python training stack: which interpreter, which requirements, which
node builds which wheel, and what a torch probe says is wrong."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Only the controller's filters call what needs it, and ansible-core depends on it there; a
# module_utils file must still import where it is missing (a node's Python without it).
try:
    from packaging.requirements import Requirement
except ImportError as err:
    Requirement = None
    PACKAGING_IMPORT_ERROR = err
else:
    PACKAGING_IMPORT_ERROR = None

PYTHON_SOURCES = ("auto", "deadsnakes", "os", "path")


def _version_tuple(text):
    try:
        return tuple(int(part) for part in str(text).strip().split(".")[:2])
    except ValueError as err:
        raise ValueError(f"'{text}' is not a MAJOR.MINOR Python version") from err


def python_source(requested, distribution, distribution_version, os_python_version, min_version="3.11"):
    """Resolve ``instinct_python_source``: ``auto`` picks the OS Python where it is new enough and
    the deadsnakes PPA on Ubuntu where it is not. Raises ValueError with the fix otherwise."""
    if requested not in PYTHON_SOURCES:
        raise ValueError(f"'{requested}' is not a Python source; use one of {', '.join(PYTHON_SOURCES)}")
    os_new_enough = bool(os_python_version) and _version_tuple(os_python_version) >= _version_tuple(min_version)
    if requested == "os" and not os_new_enough:
        raise ValueError(
            f"the OS Python of {distribution} {distribution_version} is {os_python_version or 'missing'}, "
            f"older than {min_version}; use instinct_python_source: deadsnakes (Ubuntu) or path"
        )
    if requested == "deadsnakes" and distribution != "Ubuntu":
        raise ValueError(
            f"the deadsnakes PPA builds for Ubuntu only, not {distribution}; use instinct_python_source: os or path"
        )
    if requested != "auto":
        return requested
    if os_new_enough:
        return "os"
    if distribution == "Ubuntu":
        return "deadsnakes"
    raise ValueError(
        f"{distribution} {distribution_version} has Python {os_python_version or 'missing'}, older than "
        f"{min_version}, and no known package source; set instinct_python_source: path and instinct_python_path"
    )


def _canonical(name):
    return str(name).strip().lower().replace("_", "-").replace(".", "-")


def pip_requirements(report, extras=None, exclude=None):
    """The dependencies of the one package in a ``pip install --dry-run --report`` document, with
    markers evaluated for the target environment the report describes and ``exclude`` left out.

    Returns requirement strings without markers (``["accelerate<=1.11.0,>=1.3.0", ...]``)."""
    install = (report or {}).get("install") or []
    if len(install) != 1:
        raise ValueError(f"expected a report on exactly one package, got {len(install)}")
    metadata = install[0].get("metadata") or {}
    environment = dict((report or {}).get("environment") or {})
    extras = [_canonical(e) for e in (extras or [])]
    excluded = {_canonical(e) for e in (exclude or [])}
    known_extras = {_canonical(e) for e in metadata.get("provides_extra") or []}
    unknown = [e for e in extras if e not in known_extras]
    if unknown:
        raise ValueError(
            f"{metadata.get('name')} {metadata.get('version')} has no extra(s) {', '.join(unknown)}; "
            f"it offers: {', '.join(sorted(known_extras)) or 'none'}"
        )
    if Requirement is None:
        raise ValueError(
            "reading requirements needs the Python package packaging (an ansible-core dependency): "
            f"{PACKAGING_IMPORT_ERROR}"
        )
    wanted = []
    for line in metadata.get("requires_dist") or []:
        req = Requirement(line)
        if _canonical(req.name) in excluded:
            continue
        if req.marker is not None:
            contexts = [dict(environment, extra=e) for e in ["", *extras]]
            if not any(req.marker.evaluate(ctx) for ctx in contexts):
                continue
        spec = f"{req.name}[{','.join(sorted(req.extras))}]" if req.extras else req.name
        text = spec + str(req.specifier)
        if text not in wanted:
            wanted.append(text)
    return wanted


def pip_report_pins(report, exclude=None):
    """What a ``pip install --dry-run --report`` would install, as exact pins for ``pip wheel
    --no-deps``: ``name==version`` for a release from an index, ``name @ URL`` for a direct reference
    (a URL or a VCS checkout, whose version an index cannot give). ``exclude`` names are left out.
    Sorted by name, so that every node that reads the same report gets the same list."""
    excluded = {_canonical(e) for e in (exclude or [])}
    pins = {}
    for item in (report or {}).get("install") or []:
        metadata = item.get("metadata") or {}
        name, version = metadata.get("name"), metadata.get("version")
        if not name or not version:
            raise ValueError(f"a pip report entry without a name or version: {item.get('download_info')}")
        if _canonical(name) in excluded:
            continue
        info = item.get("download_info") or {}
        if item.get("is_direct"):
            url = str(info.get("url") or "")
            commit = (info.get("vcs_info") or {}).get("commit_id")
            if "vcs_info" in info:
                url = f"{info['vcs_info'].get('vcs', 'git')}+{url}@{commit}" if commit else url
            if not url:
                raise ValueError(f"{name} {version} is a direct reference without a URL")
            pins[_canonical(name)] = f"{name} @ {url}"
        else:
            pins[_canonical(name)] = f"{name}=={version}"
    return [pins[key] for key in sorted(pins)]


def wheel_build_plan(hosts, archs_by_host):
    """Group hosts by the arch set they need; the first host (inventory order) of each set builds.

    ``archs_by_host`` maps host -> PYTORCH_ROCM_ARCH string (``"gfx942"``; ``"cpu"`` for no GPU).
    Returns ``{arch_key: {"builder": host, "hosts": [...], "archs": "gfx90a;gfx942"}}`` where
    ``arch_key`` is safe in a path (``gfx90a-gfx942``)."""
    plan = {}
    for host in hosts:
        if host not in archs_by_host:
            raise ValueError(f"no arch set known for host {host}")
        archs = str(archs_by_host[host])
        key = archs.replace(";", "-")
        entry = plan.setdefault(key, {"builder": host, "hosts": [], "archs": archs})
        entry["hosts"].append(host)
    return plan


def read_sha256_record(text):
    """The wheels a build or a dependency download recorded, from ``sha256sum``'s output (the
    ``SHA256SUMS`` file the build account writes when the wheels are made): ``{name: sha256}``.
    A line that is not ``HEX  NAME`` (a name with a folder in it, a short sum) is an error."""
    record = {}
    for number, line in enumerate(str(text or "").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        digest = parts[0].lower()
        name = parts[1].strip().lstrip("*") if len(parts) == 2 else ""
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name or "/" in name:
            raise ValueError(f"line {number} of the sha256 record is not 'SHA256  NAME': {line[:120]!r}")
        record[name] = digest
    return record


def wheel_transfers(builder_files, files_by_peer, name_prefix="", record=None):
    """What each peer of an arch set must fetch from its builder, judged by the sha256 recorded when
    the wheels were built or downloaded (issue 32), never by what the builder's folder holds now.

    ``record`` is the builder's ``SHA256SUMS`` text (``read_sha256_record``); ``builder_files`` and
    each value of ``files_by_peer`` are the results of ``ansible.builtin.find`` with ``get_checksum``
    and ``checksum_algorithm: sha256`` (dicts with ``path`` and ``checksum``). Only the recorded files
    whose name starts with ``name_prefix`` are shared: a file the record does not name (put there
    after the build) is never served nor installed, and a recorded file that is missing or whose
    sha256 differs from the record is an error. A peer fetches every shared file it lacks or holds
    with another checksum. Returns ``{"files": [{"name", "sha256"}], "fetch": {peer: [names]},
    "transfers": count}``: the builder serves ``transfers`` downloads, then stops serving. An empty
    record is a set with nothing to share (a dependency set its builder already had installed)."""
    if record is None:
        raise ValueError("no sha256 was recorded for the builder's wheels (its SHA256SUMS is missing)")
    recorded = read_sha256_record(record)
    found = {str(f["path"]).rsplit("/", 1)[-1]: str(f.get("checksum") or "") for f in builder_files or []}
    files = []
    for name in sorted(recorded):
        if not name.startswith(name_prefix):
            continue
        if name not in found:
            raise ValueError(f"the builder's {name} is recorded but missing")
        if found[name] != recorded[name]:
            raise ValueError(
                f"the builder's {name} has sha256 {found[name] or 'unknown'}, not the {recorded[name]} "
                "recorded when it was made: it changed since"
            )
        files.append({"name": name, "sha256": recorded[name]})
    fetch = {}
    for peer, peer_files in (files_by_peer or {}).items():
        have = {str(f["path"]).rsplit("/", 1)[-1]: str(f.get("checksum") or "") for f in peer_files or []}
        fetch[peer] = [f["name"] for f in files if have.get(f["name"]) != f["sha256"]]
    return {"files": files, "fetch": fetch, "transfers": sum(len(names) for names in fetch.values())}


def wheel_serve_plan(transfers, tokens):
    """What the builder's wheel server serves to whom: ``{peer: {"token", "files"}}`` for every peer
    of ``transfers`` (wheel_transfers' answer) that fetches something, with the secret
    ``tokens[peer]`` the controller made for that peer this run. The server gives each peer its own
    list only and ends when every peer has all of it; a peer without a secret is an error, never a
    peer served without one."""
    plan = {}
    for peer, names in sorted(((transfers or {}).get("fetch") or {}).items()):
        if not names:
            continue
        token = (tokens or {}).get(peer)
        if not isinstance(token, str) or len(token) < 24:
            raise ValueError(f"no secret of at least 24 characters for {peer}, which fetches {', '.join(names)}")
        plan[peer] = {"token": token, "files": list(names)}
    return plan


def torch_problems(probe, gfx_archs, gpu_count, allow_no_gpu=False):
    """What a torch probe (``torch_probe.py`` JSON) says is wrong on a node, as sentences."""
    problems = []
    gpu_count = int(gpu_count or 0)
    if gpu_count == 0:
        if not allow_no_gpu:
            problems.append("the node has no GPU and allow_no_gpu is false")
        return problems
    if not probe.get("hip"):
        problems.append(
            f"torch {probe.get('version')} is not a ROCm build (torch.version.hip is unset, cuda={probe.get('cuda')})"
        )
    if int(probe.get("device_count") or 0) != gpu_count:
        problems.append(f"torch sees {probe.get('device_count')} GPU(s), rocminfo reports {gpu_count}")
    compiled = probe.get("arch_list") or []
    compiled_base = {str(a).partition(":")[0] for a in compiled}
    missing = [a for a in gfx_archs or [] if a not in compiled_base]
    if missing:
        problems.append(f"torch has no kernels for {', '.join(missing)} (built for {', '.join(compiled) or 'nothing'})")
    return problems
