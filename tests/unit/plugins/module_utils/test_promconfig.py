"""promconfig: the Prometheus server's configuration from the inventory, and its scrape health."""

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils.promconfig import (
    prometheus_config,
    scrape_health,
    scrape_target,
)

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
