"""Every runbook page that a role or plugin names exists, and the index lists every page."""

import re

from tests.unit.conftest import ROOT

RUNBOOKS = ROOT / "docs" / "runbooks"
# Literal paths, and role messages built as "{{ <role>_runbook_base }}/page.md".
REFERENCE = re.compile(r"docs/runbooks/([\w.-]+\.md)|runbook_base \}\}/([\w.-]+\.md)")


def referenced_pages():
    pages = {}
    for folder in ("roles", "plugins", "playbooks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".yml", ".yaml", ".j2"} and path.is_file():
                for match in REFERENCE.finditer(path.read_text(encoding="utf-8")):
                    pages.setdefault(match.group(1) or match.group(2), []).append(path.relative_to(ROOT))
    return pages


def test_every_named_runbook_exists():
    pages = referenced_pages()
    assert pages, "no failure message names a runbook"
    missing = {page: where for page, where in pages.items() if not (RUNBOOKS / page).is_file()}
    assert not missing, f"runbook pages named but missing: {missing}"


def test_index_lists_every_page_and_every_page_has_the_sections():
    index = (RUNBOOKS / "README.md").read_text(encoding="utf-8")
    for page in sorted(RUNBOOKS.glob("*.md")):
        if page.name == "README.md":
            continue
        assert f"({page.name})" in index, f"{page.name} is not in docs/runbooks/README.md"
        text = page.read_text(encoding="utf-8")
        for section in (
            "## Symptom",
            "## Cause",
            "## How to confirm",
            "## Fix",
            "## How the collection prevents it",
        ):
            assert section in text, f"{page.name} lacks '{section}'"
