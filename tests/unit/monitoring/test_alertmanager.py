"""Alertmanager's configuration (issue 34: alerts that reach someone): the receivers the inventory
gives, checked by Alertmanager's own amtool (check-config), and Prometheus pointed at it."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils.promconfig import (
    alertmanager_config,
    alertmanager_problems,
    prometheus_config,
    scrape_target,
)
from tests.unit.monitoring.promql import ROOT, run_promtool

LOCAL_AMTOOL = ROOT / ".cache" / "amtool" / "amtool"
WEBHOOK = "http://172.29.10.1:8771/alerts"
EMAIL = {"to": "oncall@example.org", "from": "alerts@example.org", "smarthost": "smtp.example.org:587",
         "auth_username": "alerts", "auth_password": "s3cret", "require_tls": True}  # fmt: skip


def amtool():
    """$AMTOOL (scripts/test.sh), else the one on PATH, else .cache/amtool/amtool."""
    for candidate in (os.environ.get("AMTOOL"), shutil.which("amtool"), str(LOCAL_AMTOOL)):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise AssertionError("amtool not found: run PROMTOOL_TOOL=amtool scripts/ensure-promtool.sh (or set AMTOOL)")


def check_config(tmp_path, config):
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    done = subprocess.run([amtool(), "check-config", str(path)], capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def test_a_webhook_and_a_mailbox_receive_every_alert_and_amtool_accepts_it(tmp_path):
    config = alertmanager_config({"webhook_urls": [WEBHOOK], "email": EMAIL, "route": {"group_wait": "5s"}})
    assert config["route"] == {"receiver": "instinct", "group_by": ["alertname", "instance"], "group_wait": "5s",
                               "group_interval": "5m", "repeat_interval": "4h"}  # fmt: skip
    (receiver,) = config["receivers"]
    assert receiver["webhook_configs"] == [{"url": WEBHOOK, "send_resolved": True}]
    assert receiver["email_configs"] == [{"to": EMAIL["to"], "from": EMAIL["from"], "smarthost": EMAIL["smarthost"],
                                          "send_resolved": True, "auth_username": "alerts", "auth_password": "s3cret",
                                          "require_tls": True}]  # fmt: skip
    rc, out = check_config(tmp_path, config)
    assert rc == 0, out
    assert "SUCCESS" in out and "1 receivers" in out, out


def test_without_a_receiver_the_alerts_stay_in_alertmanager_and_amtool_accepts_it(tmp_path):
    # The role's defaults: every e-mail setting empty but require_tls, a switch that is on by default.
    defaults = {"webhook_urls": [], "email": dict(dict.fromkeys(EMAIL, ""), require_tls=True),
                "route": {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h"}}  # fmt: skip
    assert alertmanager_problems(defaults) == []
    config = alertmanager_config(defaults)
    assert config["receivers"] == [{"name": "instinct"}]
    rc, out = check_config(tmp_path, config)
    assert rc == 0, out


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"webhook_urls": ["hooks.example.com/x"]}, "monitoring_alertmanager_webhook_urls[0] is not an http(s) URL"),
        ({"webhook_urls": [WEBHOOK, "file:///etc/passwd"]}, "monitoring_alertmanager_webhook_urls[1] is not"),
        # A vault value with a trailing newline: refused here, not by amtool under no_log.
        ({"webhook_urls": [WEBHOOK + "\n"]}, "monitoring_alertmanager_webhook_urls[0] is not an http(s) URL"),
        (
            {"email": {"to": "a@b.c"}},
            "needs monitoring_alertmanager_email_from, monitoring_alertmanager_email_smarthost",
        ),
        ({"email": dict(EMAIL, smarthost="smtp.example.org")}, "monitoring_alertmanager_email_smarthost is "),
        ({"email": dict(EMAIL, auth_password="")}, "_auth_username and _auth_password go together"),
        ({"route": {"repeat_interval": "four hours"}}, "monitoring_alertmanager_repeat_interval is 'four hours'"),
    ],
)
def test_receiver_settings_it_could_not_use_are_named(settings, problem):
    problems = alertmanager_problems(settings)
    assert any(problem in p for p in problems), problems
    # A webhook URL may carry its token: the problem names its place, never the URL.
    assert not any("hooks.example.com" in p or "8771" in p or "passwd" in p for p in problems), problems
    with pytest.raises(ValueError, match=r"docs/runbooks/monitoring-exporter\.md"):
        alertmanager_config(settings)


def test_prometheus_sends_its_alerts_to_alertmanager_as_it_scrapes_behind_the_web_config(tmp_path):
    targets = [scrape_target({"inventory_hostname": "mi300x-01", "ansible_host": "10.10.0.11"})]
    settings = {"scrape_interval": "15s", "evaluation_interval": "15s", "rule_files": [], "job": "instinct_nodes",
                "node_exporter_port": 9100, "amd_exporter_port": 5000, "labels": {}, "prometheus_port": 9090,
                "prometheus_address": "10.10.0.1", "alertmanager": "10.10.0.1:9093", "scheme": "https",
                "basic_auth": {"username": "prom", "password_file": "/etc/instinct-monitoring/scrape.password"},
                "tls_config": {"ca_file": "/etc/instinct-monitoring/tls/ca.pem"}}  # fmt: skip
    config = prometheus_config(targets, settings)
    assert config["alerting"] == {"alertmanagers": [{
        "static_configs": [{"targets": ["10.10.0.1:9093"]}], "scheme": "https",
        "basic_auth": {"username": "prom", "password_file": "/etc/instinct-monitoring/scrape.password"},
        "tls_config": {"ca_file": "/etc/instinct-monitoring/tls/ca.pem"},
    }]}  # fmt: skip
    assert "alerting" not in prometheus_config(targets, dict(settings, alertmanager=None))
    for name in ("scrape.password", "ca.pem"):
        (tmp_path / name).write_text("x\n")
    config["alerting"]["alertmanagers"][0]["basic_auth"]["password_file"] = str(tmp_path / "scrape.password")
    config["alerting"]["alertmanagers"][0]["tls_config"]["ca_file"] = str(tmp_path / "ca.pem")
    for job in config["scrape_configs"]:
        job.pop("basic_auth", None), job.pop("tls_config", None)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    rc, out = run_promtool("check", "config", str(path))
    assert rc == 0, out
