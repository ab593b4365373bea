# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""What the GPU probe modules share: finding the tool, and errors that carry their runbook."""

import os
import shutil

ROCM_BIN = "/opt/rocm/bin"


class ProbeError(ValueError):
    """A probe output this collection cannot trust, or one that reports a known failure.

    ``reason`` is a stable code (a key of the subclass's ``RUNBOOKS``), ``runbook`` the page to read.
    """

    RUNBOOKS = None  # set by each subclass: reason -> runbook page

    def __init__(self, reason, message):
        self.reason = reason
        self.runbook = self.RUNBOOKS[reason]
        super().__init__(f"{message} See {self.runbook}")


def find_tool(name):
    """An explicit path as given (when executable); a bare name from PATH first, then /opt/rocm/bin."""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    fallback = os.path.join(ROCM_BIN, name)
    return fallback if os.access(fallback, os.X_OK) else None
