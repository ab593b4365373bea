# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Parse ``lspci -d VENDOR:DEVICE -PP`` output (pure functions)."""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

_BDF = r"(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_LINE = re.compile(rf"^(?P<path>{_BDF}(?:/{_BDF})*) (?P<cls>[^:]+): (?P<name>.+)$")


def parse_lspci_paths(text):
    """One dict per device: ``bdf``, ``root_port`` (first element of the -PP path), ``path``,
    ``class`` and ``name``. Raises ValueError on a line that is not lspci's."""
    devices = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _LINE.match(line)
        if not match:
            raise ValueError(f"not an lspci -PP line: {line!r}")
        path = match.group("path").split("/")
        devices.append(
            {
                "bdf": path[-1],
                "root_port": path[0],
                "path": path,
                "class": match.group("cls"),
                "name": match.group("name"),
            }
        )
    return devices
