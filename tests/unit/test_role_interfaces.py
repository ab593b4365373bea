"""Every role's defaults are its documented interface: each variable is declared in
meta/argument_specs.yml with the same default, prefixed with the role name, and vice versa. The names
every stage shares are the common role's alone, and a role that reads one lists common as a dependency."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.conftest import COLLECTIONS, ROOT

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "defaults" / "main.yml").is_file())
COMMON = ROOT / "roles" / "common"
# The shared names (issue 19: two names for one account lost training /dev/kfd; issue 28: one place).
SHARED = set(yaml.safe_load((COMMON / "defaults" / "main.yml").read_text())) | set(
    yaml.safe_load((COMMON / "vars" / "main.yml").read_text())
)
# Names that each role once kept for a shared name, retired for the common role's.
RETIRED = {
    "fabric_master", "fabric_master_host", "fabric_master_port", "fabric_env_file", "fabric_helper_dir",
    "finetune_master", "finetune_master_port", "finetune_env_file", "health_libexec", "health_fabric_env_file",
    "diagnose_env_file", "diagnose_preflight", "preflight_supported_platforms", "preflight_instinct_pci_ids",
}  # fmt: skip


def _yaml(path):
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def _role_text(role):
    """Everything a role's tasks, templates, handlers, vars and defaults say, as one string."""
    folder = ROOT / "roles" / role
    return "\n".join(
        p.read_text() for sub in ("tasks", "templates", "handlers", "vars", "defaults") if (folder / sub).is_dir()
        for p in sorted((folder / sub).rglob("*")) if p.is_file()
    )  # fmt: skip


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = _yaml(ROOT / "roles" / role / "defaults" / "main.yml")
    specs = _yaml(ROOT / "roles" / role / "meta" / "argument_specs.yml")
    options = specs["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    prefix = "instinct_" if role == "common" else f"{role}_"
    for name, value in defaults.items():
        assert name.startswith(prefix), f"{name} is not prefixed with {prefix}"
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


def test_the_common_role_holds_only_defaults_and_data():
    """No tasks or handlers: listing it as a dependency costs a role nothing but the names (and the
    validation of its argument_specs, which runs on the controller)."""
    assert sorted(p.name for p in COMMON.iterdir()) == ["defaults", "meta", "vars"]
    assert {"instinct_user", "instinct_group", "instinct_user_home", "instinct_venv", "instinct_tools_dir",
            "instinct_rccl_env_file", "instinct_master_host", "instinct_master_port", "instinct_supported_platforms",
            "instinct_pci_ids"} <= SHARED  # fmt: skip


@pytest.mark.parametrize("role", [r for r in ROLES if r != "common"])
def test_the_shared_names_are_defined_only_in_common(role):
    folder = ROOT / "roles" / role
    defined = set(_yaml(folder / "defaults" / "main.yml")) | set(_yaml(folder / "vars" / "main.yml"))
    declared = set(_yaml(folder / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"])
    assert not defined & (SHARED | RETIRED), f"roles/{role} defines {sorted(defined & (SHARED | RETIRED))}"
    assert not declared & SHARED, f"roles/{role}/meta/argument_specs.yml redeclares {sorted(declared & SHARED)}"
    # No role keeps an alias of its own for the account or the venv.
    for alias in (f"{role}_owner", f"{role}_venv", f"{role}_service_user", f"{role}_libexec"):
        assert alias not in defined, f"roles/{role} defines {alias}"


@pytest.mark.parametrize("role", [r for r in ROLES if r != "common"])
def test_a_role_that_reads_a_shared_name_lists_common_as_a_dependency(role):
    text = _role_text(role)
    used = sorted(name for name in SHARED if re.search(rf"\b{name}\b", text))
    dependencies = _yaml(ROOT / "roles" / role / "meta" / "main.yml").get("dependencies") or []
    names = [d["role"] if isinstance(d, dict) else d for d in dependencies]
    assert not used or "instinct.finetune.common" in names, f"roles/{role} reads {used} without depending on common"


def test_no_copy_of_a_shared_value_or_a_retired_name_is_left():
    """The values behind the shared names are written once: no role rebuilds a libexec folder from
    the venv (the node tools replaced it), spells out the RCCL environment file, or keeps a name retired
    for the common role's."""
    for folder in ("roles", "playbooks", "plugins", "inventories", "molecule", "tests/e2e", "bench"):
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.suffix not in {".yml", ".yaml", ".j2", ".py", ".md", ".cfg", ""}:
                continue
            if COMMON in path.parents:
                continue
            text = path.read_text(errors="replace")
            where = path.relative_to(ROOT)
            for name in RETIRED:
                assert not re.search(rf"\b{name}\b", text), f"{where} still names {name}"
            assert not re.search(r"dirname\W{0,20}libexec", text), f"{where} derives libexec from the venv"
            if folder in ("roles", "playbooks"):
                assert "/etc/instinct-finetune/rccl.env" not in text, f"{where} spells out instinct_rccl_env_file"


PLAYBOOK = """\
- name: Run a role that lists common as a dependency, alone
  hosts: localhost
  gather_facts: false
  roles:
    - role: reader
"""


def _run_alone(tmp_path, extravars):
    """A throwaway role depending on common, as the collection's roles do, run on its own."""
    role = tmp_path / "roles" / "reader"
    (role / "meta").mkdir(parents=True, exist_ok=True)
    (role / "tasks").mkdir(exist_ok=True)
    (role / "meta" / "main.yml").write_text("---\ndependencies:\n  - role: instinct.finetune.common\n")
    (role / "tasks" / "main.yml").write_text(
        "---\n- name: Show the shared names\n  ansible.builtin.debug:\n    msg: >-\n"
        "      {{ [instinct_user, instinct_venv, instinct_tools_dir, instinct_rccl_env_file, instinct_master_host,\n"
        "          instinct_master_port, instinct_pci_ids | length] | join(',') }}\n"
    )
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_ROLES_PATH=str(tmp_path / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")  # fmt: skip
    playbook = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run(
        [str(playbook) if playbook.exists() else "ansible-playbook", "-i", "localhost,", "-c", "local",
         str(tmp_path / "play.yml"), "-e", json.dumps({"ansible_python_interpreter": sys.executable, **extravars})],
        capture_output=True, text=True, env=env, check=False, cwd=tmp_path, timeout=300,
    )  # fmt: skip


def test_a_role_run_alone_has_the_shared_names_and_common_validates_them(tmp_path):
    proc = _run_alone(tmp_path, {"instinct_venv": "/srv/venv"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = " ".join(proc.stdout.split())
    assert "Validating arguments against arg spec 'main'" in out
    assert '"msg": "instinct,/srv/venv,/opt/instinct/tools,/etc/instinct-finetune/rccl.env,localhost,29500,' in out

    proc = _run_alone(tmp_path, {"instinct_master_port": "not-a-port"})
    assert proc.returncode != 0
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "Validation of arguments failed" in out and "argument 'instinct_master_port' is of type" in out, out[-3000:]
