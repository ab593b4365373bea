"""promconfig: the Prometheus server's configuration from the inventory, and its scrape health; where
node exporter and Prometheus listen and who may reach them (issue 32: their web configuration)."""

import subprocess

import pytest
import yaml

from ansible_collections.instinct.finetune.plugins.module_utils.promconfig import (
    node_exporter_web_flag,
    prometheus_config,
    scrape_health,
    scrape_target,
    web_access,
    web_config,
)
from tests.unit.conftest import FIXTURES
from tests.unit.monitoring.promql import run_promtool

SETTINGS = {
    "scrape_interval": "15s",
    "evaluation_interval": "15s",
    "rule_files": ["/etc/prometheus/rules/*.rules.yml"],
    "job": "instinct_nodes",
    "node_exporter_port": 9100,
    "amd_exporter_port": 5000,
    "labels": {"cluster": "mi300-a"},
    "prometheus_port": 9090,
    "extra_scrape_configs": [],
}


def test_the_scrape_address_is_the_named_variable_then_ansible_host_then_the_name():
    assert (
        scrape_target({"inventory_hostname": "n1", "monitoring_scrape_address": "10.0.0.1", "ansible_host": "x"})[
            "address"
        ]
        == "10.0.0.1"
    )
    assert (
        scrape_target({"inventory_hostname": "n1", "monitoring_scrape_address": "", "ansible_host": "x"})["address"]
        == "x"
    )
    assert scrape_target({"inventory_hostname": "n1"}) == {"host": "n1", "address": "n1", "gpu_exporter": "instinct"}
    assert scrape_target({"inventory_hostname": "n1", "mgmt": "10.1.1.1"}, "mgmt")["address"] == "10.1.1.1"


def test_every_node_is_a_target_named_by_its_inventory_name():
    targets = [
        scrape_target({"inventory_hostname": "n1", "ansible_host": "10.0.0.1"}),
        scrape_target(
            {"inventory_hostname": "n2", "ansible_host": "10.0.0.2", "monitoring_gpu_exporter_active": "amd"}
        ),
    ]
    config = prometheus_config(targets, SETTINGS)
    assert config["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}
    assert config["rule_files"] == ["/etc/prometheus/rules/*.rules.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert list(jobs) == ["prometheus", "instinct_nodes", "instinct_amd_exporter"]
    assert jobs["instinct_nodes"]["static_configs"] == [
        {"targets": ["10.0.0.1:9100"], "labels": {"cluster": "mi300-a", "instance": "n1"}},
        {"targets": ["10.0.0.2:9100"], "labels": {"cluster": "mi300-a", "instance": "n2"}},
    ]
    # Only the node that runs AMD's exporter is scraped on its port.
    assert jobs["instinct_amd_exporter"]["static_configs"] == [
        {"targets": ["10.0.0.2:5000"], "labels": {"cluster": "mi300-a", "instance": "n2"}}
    ]


def test_no_amd_job_without_a_node_running_amds_exporter_and_extra_jobs_come_last():
    extra = {"job_name": "switches", "static_configs": [{"targets": ["sw1:9116"]}]}
    config = prometheus_config(
        [scrape_target({"inventory_hostname": "n1"})], dict(SETTINGS, extra_scrape_configs=[extra])
    )
    assert [job["job_name"] for job in config["scrape_configs"]] == ["prometheus", "instinct_nodes", "switches"]


def test_an_extra_job_may_not_take_the_name_of_the_roles_job():
    with pytest.raises(ValueError, match="'instinct_nodes'"):
        prometheus_config([], dict(SETTINGS, extra_scrape_configs=[{"job_name": "instinct_nodes"}]))


def answer(*targets):
    return {"status": "success", "data": {"activeTargets": list(targets), "droppedTargets": []}}


def target(instance, health, job="instinct_nodes", error=""):
    return {
        "labels": {"instance": instance, "job": job},
        "scrapeUrl": f"http://{instance}:9100/metrics",
        "lastError": error,
        "health": health,
    }


def test_scrape_health_sorts_the_nodes():
    health = scrape_health(
        answer(
            target("n1", "up"),
            target("n2", "down", error="connection refused"),
            target("n3", "unknown"),
            target("n1", "down", job="prometheus"),
        ),
        "instinct_nodes",
        ["n1", "n2", "n3", "n4"],
    )
    assert health["up"] == [{"host": "n1", "url": "http://n1:9100/metrics", "error": ""}]
    assert health["down"] == [{"host": "n2", "url": "http://n2:9100/metrics", "error": "connection refused"}]
    assert health["pending"] == ["n3", "n4"]


def test_scrape_health_of_an_empty_answer_is_all_pending():
    assert scrape_health({}, "instinct_nodes", ["n1"]) == {"up": [], "down": [], "pending": ["n1"]}


def test_a_node_is_scraped_where_its_exporter_listens_unless_the_scrape_address_is_set():
    listening = {
        "inventory_hostname": "n1",
        "ansible_host": "203.0.113.5",
        "monitoring_node_exporter_address": "10.0.0.1",
    }
    assert scrape_target(listening)["address"] == "10.0.0.1"
    assert scrape_target(dict(listening, monitoring_scrape_address="n1.mgmt.example"))["address"] == "n1.mgmt.example"
    # An exporter on every address (0.0.0.0, the operator's choice) says nothing: ansible_host, as before.
    assert scrape_target(dict(listening, monitoring_node_exporter_address="0.0.0.0"))["address"] == "203.0.113.5"  # noqa: S104


SECURE = dict(
    SETTINGS,
    prometheus_address="10.0.0.9",
    scheme="https",
    basic_auth={"username": "prom", "password_file": "/etc/instinct-monitoring/scrape.password"},
    tls_config={"ca_file": "/etc/instinct-monitoring/tls/ca.pem"},
)


def test_behind_the_web_configuration_prometheus_scrapes_itself_and_the_exporters_with_it():
    targets = [
        scrape_target({"inventory_hostname": "n1", "monitoring_node_exporter_address": "10.0.0.1"}),
        scrape_target({"inventory_hostname": "n2", "monitoring_gpu_exporter_active": "amd"}),
    ]
    jobs = {job["job_name"]: job for job in prometheus_config(targets, SECURE)["scrape_configs"]}
    for name in ("prometheus", "instinct_nodes"):
        assert jobs[name]["scheme"] == "https"
        assert jobs[name]["basic_auth"] == SECURE["basic_auth"]
        assert jobs[name]["tls_config"] == SECURE["tls_config"]
    assert jobs["prometheus"]["static_configs"] == [{"targets": ["10.0.0.9:9090"]}]
    assert jobs["instinct_nodes"]["static_configs"][0]["targets"] == ["10.0.0.1:9100"]
    # AMD's exporter is not behind the web configuration: plain http, no credentials sent to it.
    assert set(jobs["instinct_amd_exporter"]) == {"job_name", "static_configs"}


def test_without_the_web_configuration_the_jobs_are_as_before():
    jobs = prometheus_config([scrape_target({"inventory_hostname": "n1"})], dict(SETTINGS, scheme="http"))
    for job in jobs["scrape_configs"]:
        assert set(job) == {"job_name", "static_configs"}
    assert jobs["scrape_configs"][0]["static_configs"] == [{"targets": ["localhost:9090"]}]


# A well-formed bcrypt hash (htpasswd -nBC 10's layout). The role checks its form only; node exporter and
# Prometheus check the password against it.
HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"


def test_web_access_is_off_by_default_and_on_when_each_group_is_complete():
    assert web_access("n1", {}) == {"basic_auth": False, "tls": False, "scheme": "http"}
    auth = {"user": "prom", "password": "s3cret", "password_hash": HASH}
    assert web_access("n1", {**auth, "basic_auth_without_tls": True}) == {
        "basic_auth": True,
        "tls": False,
        "scheme": "http",
    }
    tls = {"tls_cert": "files/n1.pem", "tls_key": "files/n1.key", "tls_ca": "files/ca.pem"}
    assert web_access("n1", {**auth, **tls}) == {"basic_auth": True, "tls": True, "scheme": "https"}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"user": "prom", "password": "s3cret"}, "monitoring_basic_auth_password_hash empty"),
        ({"password_hash": HASH}, "monitoring_basic_auth_password, monitoring_basic_auth_user empty"),
        ({"user": "prom", "password": "s3cret", "password_hash": "s3cret"}, "is not a bcrypt hash"),
        ({"user": "a:b", "password": "s3cret", "password_hash": HASH}, "'a:b' is not a user name"),
        ({"tls_cert": "n1.pem", "tls_ca": "ca.pem"}, "monitoring_tls_key_src empty"),
        ({"tls_ca": "ca.pem"}, "monitoring_tls_cert_src, monitoring_tls_key_src empty"),
        # The review of issue 32: a password in clear with every scrape was accepted without a word.
        ({"user": "prom", "password": "s3cret", "password_hash": HASH}, "monitoring_basic_auth_without_tls: true"),
    ],
)
def test_a_half_set_access_is_refused_naming_the_host_and_never_the_password(settings, message):
    with pytest.raises(ValueError, match=r"monitoring-exporter\.md") as refused:
        web_access("n1", settings)
    text = str(refused.value)
    assert text.startswith("n1: ") and message in text
    assert "s3cret" not in text


def test_the_web_configuration_file_holds_what_is_set_only():
    assert web_config() == {}
    assert web_config("prom", HASH) == {"basic_auth_users": {"prom": HASH}}
    assert web_config("", "", "/etc/c.pem", "/etc/k.pem") == {
        "tls_server_config": {"cert_file": "/etc/c.pem", "key_file": "/etc/k.pem"}
    }


def test_promtool_accepts_the_web_configuration_file(tmp_path):
    """Prometheus's own parser (exporter-toolkit's, which node exporter shares) reads the file: basic
    auth alone, and with TLS (promtool also loads the certificate and key: a pair made here)."""
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(web_config("prom", HASH)))
    rc, out = run_promtool("check", "web-config", str(path))
    assert rc == 0, out
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
         "-subj", "/CN=n1", "-addext", "subjectAltName=IP:10.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    path.write_text(yaml.safe_dump(web_config("prom", HASH, str(cert), str(key))))
    rc, out = run_promtool("check", "web-config", str(path))
    assert rc == 0, out
    path.write_text(yaml.safe_dump(web_config("prom", HASH, str(cert), str(tmp_path / "missing.pem"))))
    assert run_promtool("check", "web-config", str(path))[0] != 0


def test_node_exporter_1_5_and_later_take_web_config_file():
    # Debian 12's candidate, recorded (tests/fixtures/apt/SOURCES.md).
    policy = (FIXTURES / "apt" / "bookworm-prometheus-node-exporter.txt").read_text()
    assert node_exporter_web_flag(policy) == "--web.config.file"


@pytest.mark.parametrize(
    ("installed", "candidate", "flag"),
    [
        ("1.3.1-1ubuntu0.22.04.2", "1.3.1-1ubuntu0.22.04.2", "--web.config"),  # Ubuntu 22.04's 1.3.1
        ("(none)", "1.3.1-1", "--web.config"),  # not installed yet: the candidate decides
        ("1:1.4.0-1", "1:1.4.0-1", "--web.config"),
        ("1.7.0-1ubuntu0.3", "1.7.0-1ubuntu0.3", "--web.config.file"),  # Ubuntu 24.04
    ],
)
def test_node_exporter_before_1_5_takes_web_config(installed, candidate, flag):
    # In apt-cache policy's layout (the parser itself is tested on recordings in test_apt_index.py).
    policy = (
        f"prometheus-node-exporter:\n  Installed: {installed}\n  Candidate: {candidate}\n  Version table:\n"
        f" *** {candidate} 500\n        500 http://archive.ubuntu.com/ubuntu jammy/universe amd64 Packages\n"
    )
    assert node_exporter_web_flag(policy) == flag


def test_no_known_node_exporter_version_is_refused():
    with pytest.raises(ValueError, match="apt knows no version of prometheus-node-exporter"):
        node_exporter_web_flag("")
