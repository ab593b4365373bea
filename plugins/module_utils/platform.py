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


def kernel_packages(facts):
    """Packages amdgpu-dkms needs for the running kernel: its headers, and on Ubuntu the
    linux-modules-extra split that carries the drivers amdgpu depends on."""
    kernel = facts.get("kernel")
    if not kernel:
        raise ValueError("the facts have no 'kernel' (gather facts first)")
    packages = [f"linux-headers-{kernel}"]
    if facts.get("distribution") == "Ubuntu":
        packages.append(f"linux-modules-extra-{kernel}")
    return packages
