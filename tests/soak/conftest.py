"""The soak tests import the collection as the unit tests do (tests/unit/conftest.py)."""

from tests.unit.conftest import ROOT  # noqa: F401 - puts .venv/collections on sys.path
