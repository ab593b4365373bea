# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Which verbs stack (the RDMA user space RCCL loads through libibverbs) a node has, and whether the
distribution's should be installed: only where no NIC vendor's stack is present, since a vendor
stack replaces the distribution's packages with its own builds and installing those over it breaks it.

Vendor stacks, as their installers leave them:

- NVIDIA DOCA / MLNX_OFED: the ``ofed_info`` tool, packages named ``mlnx-*`` or ``doca-*`` (for example
  ``mlnx-ofed-kernel-utils``), and rdma-core's packages in its own builds (versions like
  ``2307mlnx47-1.2310119``; ``mlnxofedinstall`` removes the distribution's).
- Broadcom (Thor, ``bnxt_re``): Broadcom's user library ``libbnxt_re`` of the release matching its
  out-of-tree kernel driver, from its apt repository or bundle (package ``bnxt-rocelib``) or built from
  the bundle's ``libbnxt_re-<release>.tar.gz`` into ``/usr/local/lib`` (AMD-AGI/Primus,
  ``runner/helpers/nic_userspace_driver.py`` and its ``00_rebuild_bnxt.sh`` hook).
- AMD Pensando (Pollara, ``ionic``): AMD's ``libionic1`` from the AINIC packages (repo.radeon.com/amdainic,
  the same Primus helper); rdma-core has an ionic provider only from release 61, newer than the
  distributions this collection supports ship.

The readers take what the module gathered (``dpkg -l`` text, a path, file names) so that recorded
outputs stand for a node in the tests.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

RUNBOOK = "docs/runbooks/fabric-bandwidth.md"
# rdma-core's Debian packages RCCL needs: the core (udev rules, the rdma service), the providers,
# libibverbs itself and ibv_devinfo, which the fabric role's verbs check runs.
DISTRIBUTION_PACKAGES = ("rdma-core", "ibverbs-providers", "libibverbs1", "ibverbs-utils")
# dpkg -l: the desired action, the package's status ("i": installed) and an error flag, then the name
# (with ":arch" for multi-arch packages) and the version.
_DPKG_LINE = re.compile(r"^\s*([uihrp])([ncUFhWti])([ R]?)\s+(\S+)\s+(\S+)")
_VENDOR_PREFIXES = {"mlnx-": "nvidia", "doca-": "nvidia", "bnxt-rocelib": "broadcom", "libionic": "amd",
                    "ionic-common": "amd"}  # fmt: skip
VENDORS = {
    "nvidia": "NVIDIA DOCA/MLNX_OFED",
    "broadcom": "Broadcom bnxt_re (libbnxt_re)",
    "amd": "AMD Pensando AINIC (libionic1)",
}
# PCI vendor ids of the RDMA devices (sysfs device/vendor), for the notes.
_PCI_VENDORS = {"0x15b3": "nvidia", "0x14e4": "broadcom", "0x1dd8": "amd"}


def installed_packages(text):
    """The installed packages in ``dpkg -l`` (or ``dpkg-query -l``) output as ``{name: version}``,
    the architecture suffix dropped; header lines, messages and packages not installed (``rc``,
    ``un``, half-installed) are left out."""
    packages = {}
    for line in str(text).splitlines():
        match = _DPKG_LINE.match(line)
        if match and match.group(2) == "i":
            packages[match.group(4).partition(":")[0]] = match.group(5)
    return packages


def vendor_stacks(packages, ofed_info="", vendor_files=()):
    """The vendor verbs stacks a node has, each ``{"vendor", "name", "evidence": [...]}``, from its
    installed packages (:func:`installed_packages`), the path of ``ofed_info`` ("" when absent) and
    the vendor library files found outside the distribution's folders (``/usr/local/lib``)."""
    evidence = {}
    if ofed_info:
        evidence.setdefault("nvidia", []).append(f"ofed_info at {ofed_info}")
    for name, version in sorted((packages or {}).items()):
        for prefix, vendor in _VENDOR_PREFIXES.items():
            if name.startswith(prefix):
                evidence.setdefault(vendor, []).append(f"package {name} {version}")
        if name in DISTRIBUTION_PACKAGES and "mlnx" in version:
            evidence.setdefault("nvidia", []).append(f"package {name} {version} (a vendor build of rdma-core)")
    for path in sorted(vendor_files or ()):
        if "libbnxt_re" in path.rpartition("/")[2]:
            evidence.setdefault("broadcom", []).append(f"{path} (Broadcom's libbnxt_re)")
    return [{"vendor": vendor, "name": VENDORS[vendor], "evidence": evidence[vendor]} for vendor in sorted(evidence)]


def userspace_plan(packages, stacks, rdma_devices, wanted=DISTRIBUTION_PACKAGES, dpkg=True):
    """Whether to install the distribution's verbs stack, as ``{"install_distribution_stack",
    "missing", "reason", "notes"}``.

    Installed only when no vendor stack is present (``stacks``: :func:`vendor_stacks`), the node has
    RDMA devices (``rdma_devices``: ``[{"device", "vendor"}]``, vendor the PCI id), it uses dpkg, and a
    package of ``wanted`` is missing. ``notes`` say where the distribution's stack cannot drive a
    device: Pollara (ionic) needs AMD's library."""
    installed = packages or {}
    missing = [name for name in wanted if name not in installed]
    families = {_PCI_VENDORS.get(str(d.get("vendor", "")).lower(), "") for d in rdma_devices or []}
    notes = []
    if "amd" in families and not any(stack["vendor"] == "amd" for stack in stacks or []):
        ionic = ", ".join(d["device"] for d in rdma_devices if _PCI_VENDORS.get(str(d.get("vendor")).lower()) == "amd")
        notes.append(
            f"AMD Pensando devices ({ionic}) need AMD's libionic1 (the AINIC packages, repo.radeon.com/amdainic): "
            f"rdma-core has an ionic provider only from release 61. See {RUNBOOK}"
        )
    if stacks:
        names = "; ".join(f"{s['name']}: {', '.join(s['evidence'][:3])}" for s in stacks)
        reason, install = f"a vendor verbs stack is present ({names}); it is left as it is", False
    elif not dpkg:
        reason, install = "the node has no dpkg: install the verbs stack with the node's own package manager", False
    elif not rdma_devices:
        reason, install = "the node has no RDMA device, so it needs no verbs stack", False
    elif not missing:
        reason, install = "the distribution's verbs stack is installed", False
    else:
        reason, install = f"no vendor verbs stack; the distribution's lacks {', '.join(missing)}", True
    return {"install_distribution_stack": install, "missing": missing, "reason": reason, "notes": notes}
