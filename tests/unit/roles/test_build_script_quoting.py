"""The pytorch role's build script (templates/build-torch.sh.j2) writes the operator's source settings quoted
(issue 32, hardening: values written to shell files are quoted): a git URL, ref or pinned commit holding
$(...), backquotes or spaces is echoed and compared as written and runs nothing. The script is rendered as
the role renders it (Ansible's quote filter) and run with a stand-in git that clones nothing."""

import subprocess

import jinja2
from ansible.plugins.filter.core import FilterModule as CoreFilters

from tests.unit.conftest import ROOT

TEMPLATE = ROOT / "roles" / "pytorch" / "templates" / "build-torch.sh.j2"
# The clone is a folder with .git; the checked-out commit is not the pinned one.
GIT = """#!/bin/sh
case "$1" in
  clone) for last; do :; done; mkdir -p "$last/.git" ;;
  rev-parse) echo 0123abcd ;;
esac
"""


def test_the_source_settings_are_echoed_as_written_and_run_nothing(tmp_path):
    canary = tmp_path / "ran"
    url = f"https://git.example/py torch/$(touch {canary}).git"
    ref = f"v2.9.1`touch {canary}`"
    pinned = f"feed$(touch {canary})"
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)  # noqa: S701 - a shell script
    env.filters["quote"] = CoreFilters().filters()["quote"]
    text = env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="managed", pytorch_version="2.9.1", pytorch_arch_key="gfx942", pytorch_max_jobs=4,
        pytorch_rocm_path="/opt/rocm", pytorch_ccache_dir=str(tmp_path / "ccache"), pytorch_ccache_max_size="1G",
        instinct_venv=str(tmp_path / "venv"), pytorch_build_dir=str(tmp_path / "build"), pytorch_git_url=url,
        pytorch_git_ref=ref, pytorch_git_commit=pinned,
    )  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(GIT)
    (bin_dir / "git").chmod(0o755)
    script = tmp_path / "build-torch.sh"
    script.write_text(text)
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "WHEEL_BUILD_OUT": str(tmp_path / "out")}
    ran = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, env=environ)
    # It stops at the pin, as it must, having said what it cloned and why it stops, word for word.
    assert ran.returncode == 3, ran.stdout + ran.stderr
    assert f"[1/5] source: {url} at {ref}\n" in ran.stdout
    assert f"{ref} is 0123abcd, not the pinned {pinned}; refusing to build" in ran.stderr
    assert not canary.exists()
