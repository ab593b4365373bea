"""The soak tests import the collection as the unit tests do (tests/unit/conftest.py)."""

# Imported for its effect: it puts .venv/collections on sys.path.
from tests.unit.conftest import ROOT  # noqa: F401  # pylint: disable=unused-import
