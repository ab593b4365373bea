"""diagnose: two rules that fired where nothing was wrong (issue 31). The wheel-build rule kept
flagging a failed log that a later build of the same wheel superseded, and the kernel-headers rule
fired on nodes whose driver the rocm stage does not build (rocm_install_driver: false). The node's
side (instinct_node_tools.gather's section_builds) runs on real files with real mtimes."""

import os
from pathlib import Path

import jmespath
import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils import diagnose
from instinct_node_tools import gather

ROOT = Path(__file__).resolve().parents[4]
RULES = yaml.safe_load((ROOT / "roles" / "diagnose" / "files" / "rules.yml").read_text())
# The end of a failed log, as wheel_build's failure message quotes one; and of a good build.
FAILED_TAIL = "error: command '/usr/bin/gcc' failed with exit code 1\n"
GOOD_TAIL = "Successfully built torch\n"


def rule_ids(raw, settings=None):
    facts = diagnose.node_facts(raw, {}, settings or {})
    return [finding["id"] for finding in diagnose.findings(facts, RULES, jmespath.search)], facts


def write_logs(folder, logs):
    """``logs``: (file name, tail, mtime) written as wheel_build leaves them."""
    for name, text, mtime in logs:
        path = folder / name
        path.write_text("building...\n" + text)
        os.utime(path, (mtime, mtime))


def builds(folder):
    return gather.section_builds({"build_log_dir": str(folder)})


@pytest.mark.parametrize(
    ("log", "key"),
    [
        ("/var/log/instinct-finetune/build-torch-2.7.1-gfx942.log", ("torch", "gfx942")),
        ("build-flash-attn-2.7.4.post1-gfx90a-gfx942.log", ("flash-attn", "gfx90a-gfx942")),
        ("build-deepspeed-0.16.9+rocm-cpu.log", ("deepspeed", "cpu")),
        ("build-torch.log", ("build-torch.log", "")),
    ],
)
def test_a_build_log_names_its_wheel_and_arch_set_whatever_the_version(log, key):
    assert diagnose.build_log_key(log) == key


def test_a_failed_build_that_a_later_build_of_the_same_wheel_replaced_is_not_a_finding(tmp_path):
    write_logs(
        tmp_path,
        [
            ("build-torch-2.7.0-gfx942.log", FAILED_TAIL, 1_700_000_000),
            ("build-torch-2.7.1-gfx942.log", GOOD_TAIL, 1_700_100_000),
        ],
    )
    raw = builds(tmp_path)
    # The node still reports the failed log; the diagnosis knows a later build superseded it.
    assert [entry["log"] for entry in raw["failed"]] == [str(tmp_path / "build-torch-2.7.0-gfx942.log")]
    found, facts = rule_ids({"builds": raw})
    assert found == []
    assert facts["builds"]["superseded"] == [str(tmp_path / "build-torch-2.7.0-gfx942.log")]


def test_the_newest_failure_of_a_wheel_and_a_failure_of_another_arch_set_stay_findings(tmp_path):
    write_logs(
        tmp_path,
        [
            ("build-torch-2.7.0-gfx942.log", GOOD_TAIL, 1_700_000_000),
            ("build-torch-2.7.1-gfx942.log", FAILED_TAIL, 1_700_100_000),
            ("build-torch-2.7.0-gfx90a.log", FAILED_TAIL, 1_600_000_000),
            ("build-deepspeed-0.16.9-gfx942.log", GOOD_TAIL, 1_700_200_000),
        ],
    )
    found, facts = rule_ids({"builds": builds(tmp_path)})
    assert found == ["wheel-build-failed"]
    assert sorted(entry["log"].rsplit("/", 1)[-1] for entry in facts["builds"]["failed"]) == [
        "build-torch-2.7.0-gfx90a.log",
        "build-torch-2.7.1-gfx942.log",
    ]
    assert facts["builds"]["superseded"] == []


def test_a_gather_without_the_list_of_logs_reports_its_failed_ones():
    raw = {"failed": [{"log": "/var/log/instinct-finetune/build-torch.log", "tail": ["error: x"]}]}
    assert rule_ids({"builds": raw})[0] == ["wheel-build-failed"]


@pytest.mark.parametrize(
    ("install_driver", "fires"),
    [(None, True), (True, True), (False, False), ("False", False), ("true", True)],
)
def test_missing_headers_matter_only_where_the_rocm_stage_builds_the_driver(install_driver, fires):
    settings = {} if install_driver is None else {"install_driver": install_driver}
    found, _facts = rule_ids({"os": {"kernel": "6.8.0-57-generic", "headers": False}}, settings)
    assert found == (["kernel-headers"] if fires else [])
    # Headers present: never a finding.
    assert rule_ids({"os": {"kernel": "6.8.0-57-generic", "headers": True}}, settings)[0] == []


def test_the_diagnosis_passes_rocm_install_driver_to_the_rules():
    evaluate = yaml.safe_load((ROOT / "roles" / "diagnose" / "tasks" / "evaluate.yml").read_text())
    settings = evaluate[0]["vars"]["_settings"]
    assert "rocm_install_driver" in settings["install_driver"]
