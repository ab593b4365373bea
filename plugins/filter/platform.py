"""Filters that match node facts against the supported platform list."""

from __future__ import annotations

from ansible_collections.instinct.finetune.plugins.module_utils.platform import (
    kernel_packages,
    path_ancestors,
    platform_list,
    supported_platform,
)


class FilterModule:
    """Supported-platform filters."""

    def filters(self):
        return {
            "supported_platform": supported_platform,
            "platform_list": platform_list,
            "path_ancestors": path_ancestors,
            "kernel_packages": kernel_packages,
        }
