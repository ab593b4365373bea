"""Every role's defaults are its documented interface: each variable is declared in
meta/argument_specs.yml with the same default, prefixed with the role name (or one of the shared
names of the training account and venv), and vice versa."""

import pytest
import yaml

from tests.unit.conftest import ROOT

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "defaults" / "main.yml").is_file())
# One name per concept across the roles (issue 19: two names for one account lost training /dev/kfd).
SHARED = {"instinct_user", "instinct_group", "instinct_user_home", "instinct_venv"}


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert name.startswith(f"{role}_") or name in SHARED, f"{name} is not prefixed with {role}_"
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


def test_the_shared_names_have_one_default_in_every_role_and_no_role_renames_them():
    found = {}
    for role in ROLES:
        defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}
        for name in SHARED & set(defaults):
            found.setdefault(name, {})[role] = defaults[name]
    assert {name: len(set(by_role.values())) for name, by_role in found.items()} == dict.fromkeys(found, 1), found
    assert set(found["instinct_user"]) >= {"rocm", "instinct_python", "pytorch", "deepspeed", "llama_factory",
                                           "fabric", "finetune", "health", "diagnose", "wheel_build"}  # fmt: skip
    # No role keeps an alias of its own for the account or the venv.
    for role in ROLES:
        for folder in ("defaults", "vars"):
            path = ROOT / "roles" / role / folder / "main.yml"
            text = path.read_text() if path.is_file() else ""
            for alias in (f"{role}_owner:", f"{role}_venv:", f"{role}_service_user:"):
                assert alias not in text, f"roles/{role}/{folder}/main.yml defines {alias}"
