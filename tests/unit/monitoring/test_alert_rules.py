"""The Prometheus alert rules (roles/monitoring/templates/instinct-alerts.rules.yml.j2) and the AMD exporter
recording rules (roles/monitoring/files/instinct-amd-exporter.rules.yml).

The template is rendered with the role's defaults as Ansible renders it (trim_blocks), then promtool checks
it and runs the unit tests of tests/unit/monitoring/promtool/ on it: synthetic series in, alerts (with their
exact labels and annotations) out. promtool is required; scripts/ensure-promtool.sh installs it.
"""

import shutil

import jinja2
import jinja2.meta
import pytest
import yaml
from yamllint import linter
from yamllint.config import YamlLintConfig

from tests.unit.monitoring.promql import KNOWN_METRICS, ROOT, metric_names, run_promtool, unknown_metrics

ROLE = ROOT / "roles" / "monitoring"
TEMPLATE = ROLE / "templates" / "instinct-alerts.rules.yml.j2"
AMD_RULES = ROLE / "files" / "instinct-amd-exporter.rules.yml"
PROMTOOL_TESTS = ROOT / "tests" / "unit" / "monitoring" / "promtool"
RUNBOOKS = ROOT / "docs" / "runbooks"
RUNBOOK_URL = "https://github.com/instinct-finetune/instinct.finetune/blob/main/docs/runbooks"

ALERTS = {
    "InstinctGPUTemperatureHigh": "thermal-throttling.md",
    "InstinctGPUPowerOverLimit": "thermal-throttling.md",
    "InstinctGPUMissing": "gpu-missing.md",
    "InstinctGPUVRAMNearFull": "oom-fragmentation.md",
    "InstinctGPUUncorrectableECC": "gpu-hardware-errors.md",
    "InstinctTrainingSlow": "rank-hung.md",
    "InstinctTrainingStalled": "rank-hung.md",
    "InstinctNodeExporterDown": "monitoring-exporter.md",
    "InstinctGPUCollectorStale": "monitoring-exporter.md",
}


# As Ansible's template module renders it: trim_blocks on, no autoescaping (YAML, not HTML); and an undefined
# variable is an error.
JINJA = jinja2.Environment(  # noqa: S701
    undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True
)


FINETUNE_DEFAULTS = ROOT / "roles" / "finetune" / "defaults" / "main.yml"


def defaults(**inventory):
    """The role's defaults as a play with the finetune role's defaults (and ``inventory``) sees them."""
    context = {**yaml.safe_load(FINETUNE_DEFAULTS.read_text(encoding="utf-8")), **inventory}
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    rendered = {}
    # In file order: a default may read one defined above it (the slow warning reads the stall limit).
    for name, value in values.items():
        if name in inventory:
            rendered[name] = inventory[name]
        elif isinstance(value, str) and "{{" in value:
            rendered[name] = yaml.safe_load(JINJA.from_string(value).render({**context, **rendered}))
        else:
            rendered[name] = value
    return rendered


def render(**overrides):
    template = JINJA.from_string(TEMPLATE.read_text(encoding="utf-8"))
    return template.render({**defaults(), "ansible_managed": "Ansible managed: test", **overrides})


@pytest.fixture
def rules_dir(tmp_path):
    """The rendered alert rules, the AMD recording rules and the promtool tests, side by side."""
    (tmp_path / "instinct-alerts.rules.yml").write_text(render(), encoding="utf-8")
    shutil.copy(AMD_RULES, tmp_path / AMD_RULES.name)
    for test in PROMTOOL_TESTS.glob("*.yml"):
        shutil.copy(test, tmp_path / test.name)
    return tmp_path


def rules():
    return [rule for group in yaml.safe_load(render())["groups"] for rule in group["rules"]]


def test_the_template_uses_only_the_documented_variables():
    source = TEMPLATE.read_text(encoding="utf-8")
    used = jinja2.meta.find_undeclared_variables(JINJA.parse(source))
    allowed = {
        "ansible_managed",
        "monitoring_alert_gpu_temperature_celsius",
        "monitoring_alert_gpu_power_ratio",
        "monitoring_alert_vram_used_ratio",
        "monitoring_alert_training_stall_minutes",
        "monitoring_alert_training_slow_minutes",
        "monitoring_alert_for",
        "monitoring_runbook_url",
        "monitoring_scrape_job",
        "monitoring_gpu_interval",
    }
    assert used == allowed, f"outside the interface: {sorted(used - allowed)}; unused: {sorted(allowed - used)}"
    assert allowed - {"ansible_managed"} <= set(defaults()), "a variable the template uses has no default"


def test_the_rendered_file_starts_with_ansible_managed_and_passes_yamllint():
    text = render()
    assert text.startswith("# Ansible managed: test\n")
    config = YamlLintConfig(file=str(ROOT / ".yamllint"))
    problems = [f"{p.line}: {p.desc}" for p in linter.run(text, config)]
    assert not problems, problems


def test_promtool_checks_the_rendered_rules(rules_dir):
    rc, out = run_promtool("check", "rules", "instinct-alerts.rules.yml", cwd=rules_dir)
    assert rc == 0, out
    assert f"SUCCESS: {len(ALERTS)} rules found" in out, out


def test_promtool_checks_the_amd_exporter_recording_rules(rules_dir):
    rc, out = run_promtool("check", "rules", AMD_RULES.name, cwd=rules_dir)
    assert rc == 0, out
    assert "SUCCESS" in out, out


@pytest.mark.parametrize("test_file", sorted(p.name for p in PROMTOOL_TESTS.glob("*.yml")))
def test_promtool_unit_tests_pass(rules_dir, test_file):
    rc, out = run_promtool("test", "rules", test_file, cwd=rules_dir)
    assert rc == 0, out


def test_the_promtool_tests_cover_the_alerts_asked_for():
    fired = set()
    for path in PROMTOOL_TESTS.glob("*.yml"):
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for check in case.get("alert_rule_test", []):
                if check.get("exp_alerts"):
                    fired.add(check["alertname"])
    assert set(ALERTS) <= fired, f"no promtool test makes these fire: {sorted(set(ALERTS) - fired)}"


def test_a_lower_threshold_fires_where_the_default_does_not(tmp_path):
    """The threshold comes from the variable: rendered with 89 C, the 90 C GPU of the promtool test alerts."""
    (tmp_path / "instinct-alerts.rules.yml").write_text(
        render(monitoring_alert_gpu_temperature_celsius=89), encoding="utf-8"
    )
    shutil.copy(PROMTOOL_TESTS / "gpu-temperature-power.yml", tmp_path)
    rc, out = run_promtool("test", "rules", "gpu-temperature-power.yml", cwd=tmp_path)
    assert rc != 0
    assert "GPU 1 on node1:9100 is hot: junction 90 C" in out, out


def test_every_alert_is_there_with_severity_summary_description_and_runbook():
    by_name = {rule["alert"]: rule for rule in rules() if "alert" in rule}
    assert set(by_name) == set(ALERTS)
    for name, page in ALERTS.items():
        rule = by_name[name]
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        annotations = rule["annotations"]
        assert "{{ $labels.instance }}" in annotations["summary"], name
        assert "{{ $labels.instance }}" in annotations["description"], name
        # Absolute: an alert is read in Alertmanager, a mail or a chat, far from this checkout.
        assert annotations["runbook_url"] == f"{RUNBOOK_URL}/{page}", name
        assert (RUNBOOKS / page).is_file(), f"{name} links {page}, which is not in docs/runbooks/"


def test_the_thresholds_come_from_the_defaults():
    values = defaults()
    by_name = {rule["alert"]: rule for rule in rules() if "alert" in rule}
    temperature = by_name["InstinctGPUTemperatureHigh"]
    assert temperature["expr"].endswith(f"> {values['monitoring_alert_gpu_temperature_celsius']}")
    assert temperature["for"] == values["monitoring_alert_for"]
    assert f"* {values['monitoring_alert_gpu_power_ratio']:g}" in by_name["InstinctGPUPowerOverLimit"]["expr"]
    assert by_name["InstinctGPUVRAMNearFull"]["expr"].endswith(f"> {values['monitoring_alert_vram_used_ratio']:g}")
    assert by_name["InstinctTrainingSlow"]["expr"].startswith(
        "time() - instinct_finetune_last_step_timestamp_seconds > 900"
    )
    stall = values["monitoring_alert_training_stall_minutes"] * 60
    assert f"> {stall}" in by_name["InstinctTrainingStalled"]["expr"]
    assert f'up{{job="{values["monitoring_scrape_job"]}"}}' in by_name["InstinctNodeExporterDown"]["expr"]


def test_the_stall_alert_waits_as_long_as_the_finetune_roles_stall_stop():
    # unset: the default; 0 turns the stop off only, also as the string an -e key=value gives
    for minutes, expected in ((None, 30), (45, 45), (0, 30), ("0", 30), ("20", 20)):
        values = defaults() if minutes is None else defaults(finetune_stall_minutes=minutes)
        assert values["monitoring_alert_training_stall_minutes"] == expected
        rules = [rule for group in yaml.safe_load(render(**values))["groups"] for rule in group["rules"]]
        stalled = next(rule for rule in rules if rule.get("alert") == "InstinctTrainingStalled")
        assert f"> {expected * 60}" in stalled["expr"], (minutes, stalled["expr"])


def test_the_metric_name_parser_finds_names_and_skips_the_rest():
    expr = (
        'max by (gpu) (rate(foo_total{a="b",instance=~"$instance"}[5m])) > on(instance) group_left() bar '
        'and time() - baz:rec offset 5m > 1e3 or label_replace(qux, "gpu", "$1", "gpu_id", "(.*)")'
    )
    assert metric_names(expr) == {"foo_total", "bar", "baz:rec", "qux"}


def test_every_alert_reads_only_exported_metrics():
    for rule in rules():
        assert not unknown_metrics(rule["expr"]), f"{rule['alert']} reads unknown metrics"


def test_the_amd_recording_rules_record_only_our_names():
    groups = yaml.safe_load(AMD_RULES.read_text(encoding="utf-8"))["groups"]
    recorded = {rule["record"] for group in groups for rule in group["rules"]}
    assert recorded, "no recording rule"
    assert recorded <= KNOWN_METRICS, sorted(recorded - KNOWN_METRICS)
    assert "afd0fe81cfb1a36cf15e79edb057e92adb197946" in AMD_RULES.read_text(encoding="utf-8")


def test_promtool_checks_the_scrape_configuration_built_from_an_inventory(rules_dir):
    """prometheus.yml as the role builds it (instinct.finetune.prometheus_config), with both rule
    files beside it, passes `promtool check config` (which also checks the rule files it loads)."""
    from ansible_collections.instinct.finetune.plugins.module_utils.promconfig import (  # noqa: PLC0415
        prometheus_config,
        scrape_target,
    )

    targets = [
        scrape_target({"inventory_hostname": "mi300x-01", "ansible_host": "10.10.0.11"}),
        scrape_target({"inventory_hostname": "mi300x-02", "monitoring_gpu_exporter_active": "amd"}),
    ]
    config = prometheus_config(
        targets,
        {
            "scrape_interval": "15s",
            "evaluation_interval": "15s",
            "rule_files": [str(rules_dir / "*.rules.yml")],
            "job": "instinct_nodes",
            "node_exporter_port": 9100,
            "amd_exporter_port": 5000,
            "labels": {"cluster": "mi300-a"},
            "prometheus_port": 9090,
            "extra_scrape_configs": [{"job_name": "switches", "static_configs": [{"targets": ["sw1:9116"]}]}],
        },
    )
    path = rules_dir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    rc, out = run_promtool("check", "config", str(path))
    assert rc == 0, out
    assert "instinct-alerts.rules.yml" in out and "instinct-amd-exporter.rules.yml" in out


def test_numbers_given_as_strings_render_the_same_rules():
    """Issue 34: ``-e key=value`` gives strings. The stall limit "45" rendered "45" * 60, a 120-digit
    threshold that never fires; every templated number is cast, so strings render the rules numbers do."""
    as_numbers = {"monitoring_alert_training_stall_minutes": 45, "monitoring_alert_training_slow_minutes": 20,
                  "monitoring_alert_gpu_temperature_celsius": 90, "monitoring_alert_gpu_power_ratio": 1.1,
                  "monitoring_alert_vram_used_ratio": 0.95, "monitoring_gpu_interval": 30}  # fmt: skip
    as_strings = {name: str(value) for name, value in as_numbers.items()}
    assert render(**defaults(**as_strings)) == render(**defaults(**as_numbers))
    by_name = {r["alert"]: r for g in yaml.safe_load(render(**defaults(**as_strings)))["groups"] for r in g["rules"]}
    assert "> 2700" in by_name["InstinctTrainingStalled"]["expr"]
    assert "> 1200" in by_name["InstinctTrainingSlow"]["expr"]
    assert by_name["InstinctGPUTemperatureHigh"]["expr"].endswith("> 90")
    assert "> 150" in by_name["InstinctGPUCollectorStale"]["expr"]


def test_the_slow_warning_comes_at_half_the_stall_limit():
    for stall, slow in ((30, 15), (45, 22), (2, 1), (1, 1)):
        assert defaults(finetune_stall_minutes=stall)["monitoring_alert_training_slow_minutes"] == slow, stall
