"""Match a node's distribution facts against the supported platform list (pure functions)."""

from __future__ import annotations


def release_of(facts: dict) -> str:
    """The release string that the platform list uses for this distribution.

    Ubuntu is identified by its full release (22.04), Debian by its major version (12), because
    Debian point releases (12.5, 12.7) all carry the same ROCm support.
    """
    distribution = facts.get("distribution", "")
    if distribution == "Ubuntu":
        return str(facts.get("distribution_version", ""))
    return str(facts.get("distribution_major_version", facts.get("distribution_version", "")))


def supported_platform(facts: dict, platforms: list[dict]) -> dict:
    """Return the entry of ``platforms`` that matches ``facts``, or an empty dict."""
    release = release_of(facts)
    for entry in platforms:
        if entry["distribution"] == facts.get("distribution") and str(entry["version"]) == release:
            return dict(entry)
    return {}


def platform_list(platforms: list[dict], tiers: list[str] | None = None) -> str:
    """Human-readable list of the platforms in ``tiers`` (all when None), for error messages."""
    return ", ".join(
        f"{p['distribution']} {p['version']} ({p['tier']})" for p in platforms if tiers is None or p["tier"] in tiers
    )


def path_ancestors(path):
    """``/opt/instinct`` -> ``["/", "/opt", "/opt/instinct"]``: the mount points that may hold it."""
    parts = [part for part in str(path).split("/") if part]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def next_boot_kernel(vmlinuz_target):
    """The kernel release a node boots next, from the target of ``/boot/vmlinuz`` (Ubuntu's and Debian's
    kernel packages point it at the newest installed kernel, which GRUB boots by default):
    ``vmlinuz-6.8.0-49-generic`` or ``/boot/vmlinuz-6.8.0-49-generic`` -> ``6.8.0-49-generic``;
    None for no link or another name."""
    name = str(vmlinuz_target or "").rsplit("/", 1)[-1]
    if not name.startswith("vmlinuz-"):
        return None
    return name[len("vmlinuz-") :] or None


def kernel_packages(facts, vmlinuz_target=None):
    """Packages amdgpu-dkms needs for the running kernel and for the kernel the node boots next (a
    kernel update waiting for its reboot would otherwise boot without amdgpu, since DKMS builds only for
    kernels whose headers are installed): their headers, and on Ubuntu the linux-modules-extra split that
    carries the drivers amdgpu depends on."""
    kernel = facts.get("kernel")
    if not kernel:
        raise ValueError("the facts have no 'kernel' (gather facts first)")
    kernels = [kernel]
    upcoming = next_boot_kernel(vmlinuz_target)
    if upcoming and upcoming != kernel:
        kernels.append(upcoming)
    packages = []
    for release in kernels:
        packages.append(f"linux-headers-{release}")
        if facts.get("distribution") == "Ubuntu":
            packages.append(f"linux-modules-extra-{release}")
    return packages
