"""What a runbook tells the operator to type names things that exist (issue 31): every variable-looking
name in its code (``finetune_...``, ``fabric_...``: a role's prefix) is a role variable, a module, a
filter or one of the exceptions below (each with the file that defines it); every repository path
exists; every node path under the collection's folders is one the roles write; and no page asks
``finetune_extra_args`` for a training setting the role writes itself from a variable of its own
(rccl-timeout.md once named ``finetune_extra_args: {ddp_timeout: ...}`` for
``finetune_ddp_timeout_minutes``)."""

import fnmatch
import re

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils import jobspec
from tests.unit.conftest import ROOT, role_tasks

RUNBOOKS = sorted((ROOT / "docs" / "runbooks").glob("*.md"))
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
ROLE_PREFIX = re.compile(
    r"(?<![\w./$-])((?:preflight|rocm|instinct|pytorch|wheel_build|deepspeed|llama_factory|fabric|monitoring"
    r"|finetune|evaluate|diagnose|health|node_tools)_[a-z0-9_]*[a-z0-9])(?![\w(])(?!\.(?:prom|py|yml|json|log|txt)\b)"
)
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:docs|roles|playbooks|inventories|plugins|tests|molecule|node_tools)/[\w./<>*-]*)"
)
NODE_ROOTS = ("/etc/instinct-finetune", "/opt/instinct", "/var/lib/instinct-finetune", "/var/log/instinct-finetune")
NODE_PATH = re.compile(r"((?:" + "|".join(re.escape(r) for r in NODE_ROOTS) + r")(?![\w-])[\w./<>*-]*)")

# Names that are not role variables, each with the file that defines it and why a runbook names it.
EXCEPTIONS = {
    "rocm_gfx_archs": ("plugins/modules/rocminfo_facts.py", "a fact the module sets (DESIGN.md fact contract)"),
    "rocm_gpu_count": ("plugins/modules/rocminfo_facts.py", "a fact the module sets (DESIGN.md fact contract)"),
    "fabric_reason": ("plugins/modules/fabric_iface.py", "a fact the module sets (DESIGN.md fact contract)"),
    "fabric_address": ("plugins/modules/fabric_iface.py", "a fact the module sets (DESIGN.md fact contract)"),
    "fabric_ifname": ("plugins/modules/fabric_iface.py", "a fact the module sets (DESIGN.md fact contract)"),
    "fabric_mtu": ("plugins/modules/fabric_iface.py", "a fact the module sets (DESIGN.md fact contract)"),
    "deepspeed_zero3": ("roles/finetune/meta/argument_specs.yml", "a value of finetune_strategy"),
    "instinct_nodes": ("inventories/example/hosts.yml", "the inventory group of the training nodes"),
    "monitoring_scrape_address": (
        "roles/monitoring/defaults/main.yml",
        "the host variable monitoring_scrape_address_var names",
    ),
    "instinct_gpu": ("plugins/module_utils/gpu_metrics.py", "the prefix of every GPU metric (grep instinct_gpu)"),
    "instinct_gpu_collector": ("plugins/module_utils/gpu_metrics.py", "the prefix of the collector's own metrics"),
    "instinct_gpu_collector_up": ("plugins/module_utils/gpu_metrics.py", "a metric of the GPU collector"),
    "instinct_gpu_collector_stale": ("plugins/module_utils/gpu_metrics.py", "a metric of the GPU collector"),
    "instinct_gpu_ecc_errors_total": ("plugins/module_utils/gpu_metrics.py", "a metric of the GPU collector"),
    "instinct_finetune_last_step_timestamp_seconds": ("node_tools/src/instinct_node_tools/progress.py", "a metric"),
}
# Repository paths that are the operator's, not the collection's.
OPERATOR_PATHS = {"inventories/production": "the operator's own inventory, as in the README's commands"}
# Node paths the runbook's own commands make, not a role.
OPERATOR_NODE_PATHS = {"/opt/instinct/venv.old": "python-interpreter.md moves the old venv aside there"}


def code(text):
    """The fenced blocks and the inline code spans of a page."""
    return [m.group(1) for m in FENCE.finditer(text)] + SPAN.findall(FENCE.sub("", text))


def role_files(kind):
    documents = {}
    for path in sorted(ROOT.glob(f"roles/*/{kind}/main.yml")):
        documents.update(yaml.safe_load(path.read_text()) or {})
    return documents


DEFAULTS = role_files("defaults")
ROLE_VARS = role_files("vars")
PLUGINS = {path.stem for path in ROOT.glob("plugins/modules/*.py")} | {
    path.stem for path in ROOT.glob("plugins/filter/*.yml")
}


def role_facts():
    """The facts the roles' tasks set (set_fact) or register, which a runbook may name to read."""
    names = set()
    for _path, task in role_tasks():
        names.update([task["register"]] if isinstance(task.get("register"), str) else [])
        facts = task.get("ansible.builtin.set_fact")
        names.update(facts if isinstance(facts, dict) else [])
    return names


FACTS = role_facts()


def defined(name):
    if name in DEFAULTS or name in ROLE_VARS or name in PLUGINS or name in FACTS:
        return True
    if name in EXCEPTIONS:
        return name in (ROOT / EXCEPTIONS[name][0]).read_text()
    return False


def undefined_names(text):
    return sorted({name for block in code(text) for name in ROLE_PREFIX.findall(block) if not defined(name)})


def glob_of(path):
    """A path with placeholders (``<job>``, ``NAME``) as a glob."""
    return re.sub(r"<[^>]*>", "*", path).rstrip("./")


def missing_repo_paths(text):
    missing = set()
    for block in code(text):
        for path in REPO_PATH.findall(block):
            pattern = glob_of(path)
            if pattern in OPERATOR_PATHS or ("*" in pattern and list(ROOT.glob(pattern))):
                continue
            if not (ROOT / pattern).exists():
                missing.add(path)
    return sorted(missing)


def _resolve(value, depth=0):
    """A role variable's path value with the variables it names filled in where they are plain
    paths; anything else (a job name, a filter) as ``*``."""

    def fill(match):
        name = match.group(1)
        inner = DEFAULTS.get(name, ROLE_VARS.get(name))
        return _resolve(inner, depth + 1) if isinstance(inner, str) and depth < 5 else "*"

    def parent(match):
        inner = DEFAULTS.get(match.group(1), ROLE_VARS.get(match.group(1)))
        return _resolve(inner, depth + 1).rsplit("/", 1)[0] if isinstance(inner, str) and depth < 5 else "*"

    value = re.sub(r"\{\{\s*(\w+)\s*\|\s*dirname\s*\}\}", parent, value)
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", fill, re.sub(r"\{\{[^}]*\|[^}]*\}\}", "*", value))


def written_node_paths():
    """The node paths the roles' variables name (defaults and vars), placeholders as ``*``."""
    paths = set()
    for value in (*DEFAULTS.values(), *ROLE_VARS.values()):
        if isinstance(value, str):
            resolved = _resolve(value.strip())
            if resolved.startswith(NODE_ROOTS):
                paths.add(resolved.rstrip("/"))
    return paths


WRITTEN = written_node_paths()
# What the roles, plugins and node tools name: a file below a written folder must be one of theirs.
SOURCES = "\n".join(
    path.read_text(errors="replace")
    for folder in ("roles", "plugins", "node_tools/src")
    for path in (ROOT / folder).rglob("*")
    if path.is_file() and path.suffix in {".py", ".yml", ".j2", ".sh", ".service"}
)
# File names the sources build from variables or globs (build-{{ name }}-{{ version }}-{{ key }}.log,
# rank*.prom), as patterns: any part a variable or a star stands for matches anything. A bare "*.json"
# (a download's file patterns) or "{name}.json" (one file per name) names no file of its own.
NAME_PATTERNS = [
    re.compile("".join(".*" if part.startswith(("{{", "{", "*")) else re.escape(part) for part in parts))
    for parts in (
        re.split(r"(\{\{.*?\}\}|\{\w*\}|\*)", name)
        for name in re.findall(r"[\w.-]*(?:(?:\{\{[^}]*\}\}|\{\w*\}|\*)[\w.-]*)+\.[a-z]{2,5}\b", SOURCES)
        if not re.fullmatch(r"(\*|\{\{[^}]*\}\}|\{\w*\})\.[a-z]{2,5}", name)
    )
]


def named_by_sources(leaf):
    """Whether the collection's code names this file: literally, or by a pattern it builds."""
    if leaf == "*" or re.search(re.escape(leaf).replace(r"\*", r"[\w.{}*-]*"), SOURCES):
        return True
    concrete = leaf.replace("*", "x")
    return any(pattern.fullmatch(concrete) for pattern in NAME_PATTERNS)


def _under(parts, folder):
    return len(parts) >= len(folder) and all(
        fnmatch.fnmatch(p, f) or fnmatch.fnmatch(f, p) for p, f in zip(parts, folder, strict=False)
    )


def unknown_node_paths(text):
    unknown = set()
    for block in code(text):
        for path in NODE_PATH.findall(block):
            if path in OPERATOR_NODE_PATHS:
                continue
            parts = glob_of(path).split("/")
            folders = [w.split("/") for w in WRITTEN if _under(parts, w.split("/"))]
            # The folder itself, or a file below it that the collection's code names.
            deepest = max(folders, key=len, default=None)
            if deepest is None:
                known = any(_under(w.split("/"), parts) for w in WRITTEN)
            else:
                known = len(parts) == len(deepest) or named_by_sources(parts[-1])
            if not known:
                unknown.add(path)
    return sorted(unknown)


def owned_train_keys():
    """The LLaMA-Factory settings the role writes from its own finetune_* variables."""
    job = {key: DEFAULTS["finetune_" + key] for key in ROLE_VARS["finetune_job"] if "finetune_" + key in DEFAULTS}
    job.update(dataset_name="demo", val_size=0.1, max_steps=10)
    node = {"device": "rocm", "model": "m", "dataset_dir": "d", "output_dir": "o", "strategy_file": "s"}
    return set(jobspec.train_args(job, node)) - set(job.get("extra_args") or {})


EXTRA_ARGS = re.compile(r"finetune_extra_args(?:\.(\w+)|:\s*\{\s*(\w+)\s*:|:\s*\n\s+(\w+)\s*:)")


def extra_args_owned(text, owned):
    found = set()
    for block in code(text):
        for match in EXTRA_ARGS.finditer(block):
            key = next(group for group in match.groups() if group)
            if key in owned:
                found.add(key)
    return sorted(found)


def test_the_exceptions_are_not_role_variables_and_their_files_define_them():
    for name, (path, _why) in EXCEPTIONS.items():
        assert name not in DEFAULTS, f"{name} is a role variable now: drop its exception"
        assert name in (ROOT / path).read_text(), (name, path)
    assert len(WRITTEN) > 10 and "/etc/instinct-finetune/rccl.env" in WRITTEN


@pytest.mark.parametrize("page", RUNBOOKS, ids=lambda page: page.name)
def test_every_variable_a_runbook_names_exists(page):
    assert undefined_names(page.read_text()) == []


@pytest.mark.parametrize("page", RUNBOOKS, ids=lambda page: page.name)
def test_every_path_a_runbook_names_exists_or_is_written_by_a_role(page):
    text = page.read_text()
    assert missing_repo_paths(text) == []
    assert unknown_node_paths(text) == []


@pytest.mark.parametrize("page", RUNBOOKS, ids=lambda page: page.name)
def test_no_runbook_asks_extra_args_for_a_setting_the_role_owns(page):
    assert extra_args_owned(page.read_text(), owned_train_keys()) == []


def test_the_checks_catch_what_they_are_for():
    """The defect of rccl-timeout.md as it was, a renamed variable, a missing playbook and a node file
    no role writes are each found."""
    owned = owned_train_keys()
    assert {"ddp_timeout", "save_steps", "cutoff_len"} <= owned
    assert extra_args_owned("raise it with\n`finetune_extra_args: {ddp_timeout: ...}`.", owned) == ["ddp_timeout"]
    assert extra_args_owned("```yaml\nfinetune_extra_args:\n  ddp_timeout: 7200\n```\n", owned) == ["ddp_timeout"]
    assert extra_args_owned("`finetune_extra_args: {neftune_noise_alpha: 5}`", owned) == []
    assert undefined_names("set `finetune_ddp_timeout_minute: 90`") == ["finetune_ddp_timeout_minute"]
    assert undefined_names("set `finetune_ddp_timeout_minutes: 90`") == []
    assert missing_repo_paths("`ansible-playbook playbooks/no-such.yml`") == ["playbooks/no-such.yml"]
    assert missing_repo_paths("`ansible-playbook playbooks/diagnose.yml`") == []
    assert unknown_node_paths("`cat /etc/instinct-finetune/rccl.envv`") == ["/etc/instinct-finetune/rccl.envv"]
    assert unknown_node_paths("`cat /etc/instinct-finetune/jobs/<job>/no-such.json`") != []
    assert unknown_node_paths("`cat /etc/instinct-finetune/jobs/<job>/ds_config.json`") == []
