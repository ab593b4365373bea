# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Judge the output of ``python -c "import llamafactory.train.tuner"`` (pure functions).

``llamafactory-cli version`` imports almost nothing; the trainer imports the data pipeline, whose
multimodal plugin imports torchaudio at module level (LLaMA-Factory 0.9.5), so a venv whose torch
has no torchaudio answers ``version`` and dies at ``run_exp``. This module names what is missing
and the fix from the traceback the import printed.
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

# The companions of torch that must be built for the very torch in the venv.
COMPANIONS = ("torchaudio", "torchvision")

_NO_MODULE = re.compile(r"^(?:ModuleNotFoundError|ImportError): No module named '([^']+)'", re.M)
_NO_OPERATOR = re.compile(r"operator (torchvision|torchaudio)::\w+ does not exist")
_UNDEFINED_SYMBOL = re.compile(r"(torchvision|torchaudio)[^\n]*\.so[^\n]*undefined symbol")


def _last_lines(text, count=3):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return " | ".join(lines[-count:])


def torch_install_method(torch_version):
    """``wheel`` for an index build (a local label: ``2.10.0+rocm7.0``), ``source`` for this
    collection's source build, which sets PYTORCH_BUILD_VERSION without one (``2.10.0``)."""
    return "wheel" if "+" in (torch_version or "+") else "source"


def import_problem(rc, output, host="this node", torch_version="?", install_method=None):
    """None when the import worked (rc 0), else ``{kind, module, message}``.

    ``install_method`` (``wheel``/``source``) picks the fix; None reads it from ``torch_version``.

    kind: ``missing-companion`` (torchaudio/torchvision absent), ``companion-mismatch`` (built for
    another torch), ``missing-module`` (another module absent) or ``other``. ``message`` names the
    host, what is missing, the fix and the runbook.
    """
    if rc == 0:
        return None
    text = output or ""
    runbook = "docs/runbooks/trainer-import.md"
    if install_method is None:
        install_method = torch_install_method(torch_version)
    if install_method == "source":
        build_fix = (
            "run the stack stage again: with pytorch_install_method: source the pytorch role builds "
            "torchaudio from its tag (pytorch_companions) against this torch, once per arch set"
        )
    else:
        build_fix = (
            "use a torch source that has a build of it for this torch (pytorch_index_url or "
            "pytorch_find_links), or pytorch_install_method: source, which builds it"
        )
    mismatch = _NO_OPERATOR.search(text) or _UNDEFINED_SYMBOL.search(text)
    if mismatch:
        module = mismatch.group(1)
        return {
            "kind": "companion-mismatch",
            "module": module,
            "message": (
                f"{host}: the trainer does not import: {module} was built for another torch than "
                f"{torch_version} ({_last_lines(text, 1)}). Remove it from the venv and {build_fix}. "
                f"See {runbook}"
            ),
        }
    missing = _NO_MODULE.search(text)
    if missing:
        module = missing.group(1).split(".")[0]
        if module in COMPANIONS:
            return {
                "kind": "missing-companion",
                "module": module,
                "message": (
                    f"{host}: torch {torch_version} has no {module}, which LLaMA-Factory's trainer imports "
                    f"('No module named {module}' from import llamafactory.train.tuner); {build_fix}. "
                    f"See {runbook}"
                ),
            }
        return {
            "kind": "missing-module",
            "module": module,
            "message": (
                f"{host}: the trainer does not import: no module named {module}. Run the stack stage again "
                f"so that the llama_factory role installs its requirements. See {runbook}"
            ),
        }
    return {
        "kind": "other",
        "module": None,
        "message": (
            f"{host}: import llamafactory.train.tuner exits {rc}: {_last_lines(text) or 'no output'}. See {runbook}"
        ),
    }
