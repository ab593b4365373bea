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
    they are for; an empty value leaves one out), ``alloc_conf``, ``master_addr``, ``master_port``
    and ``extra`` (the user's own variables, written last so that they win)."""
    out = []

    def add(name, value, why=""):
        out.append({"name": str(name), "value": str(value), "why": why})

    add("NCCL_SOCKET_IFNAME", node["ifname"], f"the socket interface: {node.get('reason', '')}".rstrip(": "))
    add("GLOO_SOCKET_IFNAME", node["ifname"])
    add("NCCL_DEBUG", node.get("nccl_debug") or "WARN")
    hcas = list(node.get("hcas") or [])
    if hcas:
        # "=": exact names; without it RCCL matches prefixes (mlx5_1 would take mlx5_10 to mlx5_19 too).
        add("NCCL_IB_HCA", "=" + ",".join(hcas), f"every active RDMA port of the node ({len(hcas)})")
    if str(node.get("gid_index", "")) != "":
        add("NCCL_IB_GID_INDEX", node["gid_index"], "the RoCE v2 GID index of those ports")
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
