"""Verify the monitoring scenario on the Prometheus server: it scrapes the simulated 8x MI300X node
and holds every GPU metric of all 8 GPUs with the values of the recorded rocm-smi output."""

import json
import re
import time
import urllib.parse

import pytest

testinfra_hosts = ["ansible://monitoring"]

NODE = "instinct-mon-node1"

# tests/fixtures/smi/rocmsmi-concise-8gpu.txt and rocmsmi-use-meminfo-vram-8gpu.txt (SOURCES.md).
TEMPERATURE = [43.0, 41.0, 45.0, 41.0, 44.0, 42.0, 45.0, 43.0]
POWER = [155.0, 155.0, 159.0, 155.0, 160.0, 157.0, 160.0, 158.0]
POWER_CAP = [650.0] * 8
VRAM_TOTAL = [206141652992] * 8
VRAM_USED = [297611264] + [297623552] * 7
BUSY = [0.0] * 8


def listen_address(host, defaults="/etc/default/prometheus"):
    """ADDRESS:PORT the service listens on, from the arguments the role wrote: the host's management
    address (issue 32), not every address."""
    return re.search(r"--web\.listen-address=([^\s\"]+)", host.file(defaults).content_string).group(1)


def api(host, path, **params):
    url = f"http://{listen_address(host)}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    out = host.check_output(
        "python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' %s", url
    )
    answer = json.loads(out)
    assert answer["status"] == "success", answer
    return answer["data"]


def query(host, expr, want=1, timeout=60):
    """The result vector of an instant query, waiting until it has at least ``want`` series."""
    deadline = time.monotonic() + timeout
    while True:
        result = api(host, "query", query=expr)["result"]
        if len(result) >= want or time.monotonic() > deadline:
            return result
        time.sleep(2)


def by_gpu(result):
    return {int(series["metric"]["gpu"]): float(series["value"][1]) for series in result}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('instinct_gpu_temperature_celsius{sensor="junction",', TEMPERATURE),
        ("instinct_gpu_power_watts{", POWER),
        ("instinct_gpu_power_limit_watts{", POWER_CAP),
        ("instinct_gpu_vram_total_bytes{", VRAM_TOTAL),
        ("instinct_gpu_vram_used_bytes{", VRAM_USED),
        ("instinct_gpu_utilization_ratio{", BUSY),
    ],
)
def test_prometheus_holds_every_gpu_metric_of_all_8_gpus_with_the_recorded_values(host, expr, expected):
    # expr ends inside its label selector; the target's labels close it.
    result = query(host, f'{expr}instance="{NODE}",job="instinct_nodes",cluster="molecule"}}', want=8)
    assert by_gpu(result) == dict(enumerate(expected))


def test_the_node_reports_its_8_expected_gpus_from_a_fresh_rocm_smi_sample(host):
    # The node's verifier marks the sample stale for a moment (its stale test): wait for the scrape
    # that follows its recovery.
    query(host, f'instinct_gpu_collector_stale{{instance="{NODE}"}} == 0', timeout=120)
    values = {}
    for name in (
        "instinct_gpu_count",
        "instinct_gpu_expected_count",
        "instinct_gpu_collector_up",
        "instinct_gpu_collector_stale",
    ):
        (series,) = query(host, f'{name}{{instance="{NODE}"}}')
        values[name] = float(series["value"][1])
    assert values == {
        "instinct_gpu_count": 8,
        "instinct_gpu_expected_count": 8,
        "instinct_gpu_collector_up": 1,
        "instinct_gpu_collector_stale": 0,
    }
    # amd-smi metric has no recording (the simulated tool fails), so rocm-smi gave the sample.
    (source,) = query(host, f'instinct_gpu_collector_source_info{{instance="{NODE}"}}')
    assert source["metric"]["tool"] == "rocm-smi"


def test_the_alert_rules_are_loaded_and_quiet_on_a_healthy_node(host):
    groups = api(host, "rules")["groups"]
    alerts = {rule["name"]: rule for group in groups for rule in group["rules"] if rule["type"] == "alerting"}
    assert {"InstinctGPUTemperatureHigh", "InstinctGPUMissing", "InstinctTrainingStalled"} <= set(alerts)
    assert all(rule["health"] == "ok" for rule in alerts.values()), alerts
    # Firing, not pending: the node's stale test may leave a collector-stale alert pending briefly.
    alerts_now = api(host, "alerts")["alerts"]
    firing = [a for a in alerts_now if a["labels"].get("instance") == NODE and a["state"] == "firing"]
    assert firing == []


def test_prometheus_listens_on_the_servers_management_address_only(host):
    """Issue 32: Prometheus binds the server's management address (its default route's here), not every
    address and not the loopback one; the scrape job of the nodes reaches node1 where its exporter listens."""
    routes = json.loads(host.check_output("ip -j -4 route show default"))
    address = json.loads(host.check_output(f"ip -j -4 addr show dev {routes[0]['dev']}"))[0]["addr_info"][0]["local"]
    assert listen_address(host) == f"{address}:9090"
    listening = host.check_output("ss -Hltn 'sport = :9090'").split()
    assert [word for word in listening if word.endswith(":9090")] == [f"{address}:9090"]
    refused = host.run("python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:9090/-/ready\")'")
    assert refused.rc != 0 and "Connection refused" in refused.stderr
    # The node is scraped at its own management address (molecule.yml's network), where its exporter listens.
    (target,) = [t for t in api(host, "targets")["activeTargets"] if t["labels"]["job"] == "instinct_nodes"]
    assert re.fullmatch(r"http://172\.30\.70\.\d+:9100/metrics", target["scrapeUrl"]), target
    assert target["scrapeUrl"] != f"http://{address}:9100/metrics" and target["health"] == "up", target


def test_promtool_accepts_the_written_configuration_and_rules(host):
    host.run_expect([0], "promtool check config /etc/prometheus/prometheus.yml")
    host.run_expect([0], "promtool check rules /etc/prometheus/rules/instinct-alerts.rules.yml")
    config = host.file("/etc/prometheus/prometheus.yml").content_string
    # AMD's exporter was asked for but its repository did not answer: no scrape job for it.
    assert "instinct_amd_exporter" not in config
