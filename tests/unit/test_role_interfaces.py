"""Every role's defaults are its documented interface: each variable is declared in
meta/argument_specs.yml with the same default, prefixed with the role name, and vice versa."""

import pytest
import yaml

from tests.unit.conftest import ROOT

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "defaults" / "main.yml").is_file())


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert name.startswith(f"{role}_"), f"{name} is not prefixed with {role}_"
        assert options[name].get("description"), f"{name} has no description"
        if isinstance(value, str) and "{{" in value:
            continue  # templated defaults are documented, not duplicated
        assert options[name].get("default") == value, f"{name}: default differs from argument_specs"


@pytest.mark.parametrize("role", ROLES)
def test_every_default_has_a_comment(role):
    """A variable, or the group of variables it starts, sits under a comment saying what it is for."""
    lines = (ROOT / "roles" / role / "defaults" / "main.yml").read_text().splitlines()
    for number, line in enumerate(lines):
        if not line or line.startswith((" ", "#", "-")):
            continue
        above = number - 1
        while above >= 0 and lines[above] and not lines[above].startswith("#"):
            above -= 1
        assert above >= 0 and lines[above].startswith("#"), (
            f"roles/{role}/defaults/main.yml: '{line.split(':')[0]}' has no comment above it or its group"
        )
