"""Make ``ansible_collections.instinct.finetune`` importable from a checkout.

`make venv` links this repository into .venv/collections/ansible_collections/instinct/finetune;
the unit tests import the plugins through that path, exactly as Ansible does.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".venv" / "collections"
FIXTURES = ROOT / "tests" / "fixtures"

if not (COLLECTIONS / "ansible_collections" / "instinct" / "finetune").exists():
    raise RuntimeError(f"{COLLECTIONS} lacks instinct/finetune: run `make venv` first")
sys.path.insert(0, str(COLLECTIONS))


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
