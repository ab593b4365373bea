# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""What the fabric role writes to a node's rccl.env, in order, each setting with the reason it is
there: the pure part of the template, so that what an 8-rail MI300X node and a CPU node get can be
tested without rendering files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def rccl_env_settings(node):
    """The settings of one node's rccl.env as ``[{"name", "value", "why"}]``.

    ``node`` holds: ``ifname`` and ``reason`` (the socket interface and why it was chosen),
    ``nccl_debug``, ``hcas`` (RDMA ports for NCCL_IB_HCA, ``dev:port`` or ``dev``), ``gid_index``
    (empty: RCCL's own choice), ``gfx_archs`` (the node's GPU archs, empty on a CPU node),
    ``arch_settings`` (``[{"name", "value", "archs", "source"}]``: AMD's settings and the archs
    they are for; an empty value leaves one out), ``rdma_settings`` (``[{"name", "value",
    "source"}]``: written only with RDMA ports), ``dmabuf_by_driver`` (NCCL_DMABUF_ENABLE by the
    ports' RDMA driver, ``{"mlx5": "1", ...}``; written when every port's driver has a value and
    they agree), ``alloc_conf``, ``master_addr``, ``master_port`` and ``extra`` (the user's own
    variables, written last so that they win)."""
    out = []

    def add(name, value, why=""):
        out.append({"name": str(name), "value": str(value), "why": why})

    # "=": this interface only; without it RCCL takes the name as a prefix (eth1 would match eth10).
    # Gloo takes the name as it is.
    add("NCCL_SOCKET_IFNAME", "=" + node["ifname"], f"the socket interface: {node.get('reason', '')}".rstrip(": "))
    add("GLOO_SOCKET_IFNAME", node["ifname"])
    add("NCCL_DEBUG", node.get("nccl_debug") or "WARN")
    for setting in rdma_env(node):
        add(*setting)
    archs = set(node.get("gfx_archs") or [])
    for setting in node.get("arch_settings") or []:
        if setting.get("value") is None or str(setting["value"]) in ("", "None"):
            continue
        if not archs & set(setting.get("archs") or []):
            continue
        add(
            setting["name"],
            setting["value"],
            f"for {', '.join(sorted(archs & set(setting['archs'])))}: {setting['source']}",
        )
    alloc = node.get("alloc_conf")
    if alloc:
        why = "the caching allocator's settings under every name a torch reads (newest first)"
        add("PYTORCH_ALLOC_CONF", alloc, why)
        add("PYTORCH_HIP_ALLOC_CONF", alloc)
    add("MASTER_ADDR", node["master_addr"])
    add("MASTER_PORT", node["master_port"])
    for name, value in sorted((node.get("extra") or {}).items()):
        add(name, value, "fabric_env")
    # A later line of the same name wins in an EnvironmentFile: one line per name, the last given.
    seen = {}
    for index, setting in enumerate(out):
        seen[setting["name"]] = index
    return [setting for index, setting in enumerate(out) if seen[setting["name"]] == index]


def rdma_driver(hca):
    """The RDMA driver of a port name as the kernel names its devices: ``mlx5_3:1`` -> ``mlx5``,
    ``bnxt_re0`` -> ``bnxt_re``, ``ionic_7`` -> ``ionic``."""
    device = str(hca).split(":", 1)[0]
    return device.rstrip("0123456789").rstrip("_")


def dmabuf_setting(hcas, by_driver):
    """``(value, why)`` of NCCL_DMABUF_ENABLE for these ports, or None when a port's driver has no
    value in ``by_driver`` or the ports' drivers disagree (RCCL's own default then applies)."""
    drivers = sorted({rdma_driver(hca) for hca in hcas})
    values = {str(by_driver[driver]) for driver in drivers if driver in by_driver}
    if not drivers or any(driver not in by_driver for driver in drivers) or len(values) != 1:
        return None
    value = values.pop()
    return value, f"DMA-BUF for {', '.join(drivers)} ports, as ROCm/cvs's environment scripts set it"


def rdma_env(node):
    """``[(name, value, why)]`` of the RDMA settings: the chosen ports and what goes with them, or, with
    none chosen, IB disabled."""
    hcas = list(node.get("hcas") or [])
    if not hcas:
        # Without it RCCL opens every RDMA device it finds itself (management and bond ports included).
        return [("NCCL_IB_DISABLE", "1", "no RDMA port is chosen for RCCL on this node: sockets only")]
    # "=": exact names; without it RCCL matches prefixes (mlx5_1 would take mlx5_10 to mlx5_19 too).
    out = [("NCCL_IB_HCA", "=" + ",".join(hcas), f"every active RDMA port of the node ({len(hcas)})")]
    if str(node.get("gid_index", "")) != "":
        out.append(("NCCL_IB_GID_INDEX", node["gid_index"], "the RoCE v2 GID index of those ports"))
    for setting in node.get("rdma_settings") or []:
        if setting.get("value") is not None and str(setting["value"]) not in ("", "None"):
            out.append((setting["name"], setting["value"], f"with RDMA ports: {setting['source']}"))
    dmabuf = dmabuf_setting(hcas, node.get("dmabuf_by_driver") or {})
    if dmabuf is not None:
        out.append(("NCCL_DMABUF_ENABLE", dmabuf[0], dmabuf[1]))
    return out
