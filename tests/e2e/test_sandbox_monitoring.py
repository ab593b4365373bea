"""The monitoring stage on the sandbox cluster, after site.yml: what the molecule scenario `monitoring`
checked on a node and a Prometheus host of its own, read here on the cluster that trains (its
Prometheus runs on node1 and scrapes both nodes). The nodes' rocm-smi prints the recorded concise
table and busy/VRAM view (tests/fixtures/smi/SOURCES.md); their amd-smi metric has no recording and
fails, so the collector falls back to rocm-smi. The fallback from AMD's exporter to the collector, when
its repository does not answer, is tests/unit/roles/test_pinned_keys.py; the stage's check mode on new
nodes, its no-change run and its drift are test_sandbox.py's."""

import json
import re
import shutil
import threading
import time
import urllib.parse

import pytest
from cluster import FABRIC_PREFIX, NODES, ROOT, SANDBOX_BURNIN, AlertReceiver, node, sandbox

TEXTFILE = "/var/lib/prometheus/node-exporter/instinct_gpu.prom"

# tests/fixtures/smi/rocmsmi-concise-8gpu.txt and rocmsmi-use-meminfo-vram-8gpu.txt (SOURCES.md).
TEMPERATURE = [43.0, 41.0, 45.0, 41.0, 44.0, 42.0, 45.0, 43.0]
POWER = [155.0, 155.0, 159.0, 155.0, 160.0, 157.0, 160.0, 158.0]
POWER_CAP = [650.0] * 8
VRAM_TOTAL = [206141652992] * 8
VRAM_USED = [297611264] + [297623552] * 7
BUSY = [0.0] * 8


def listen_address(host, defaults):
    """ADDRESS:PORT a service listens on, from the arguments the role wrote."""
    return re.search(r"--web\.listen-address=([^\s\"]+)", node(host, "cat", defaults).stdout).group(1)


def management_address(host):
    """The address of the node's default route's interface (the sandbox's inventory has no
    instinct_management_address: the role takes this one)."""
    routes = json.loads(node(host, "ip", "-j", "-4", "route", "show", "default").stdout)
    return json.loads(node(host, "ip", "-j", "-4", "addr", "show", "dev", routes[0]["dev"]).stdout)[0]["addr_info"][0][
        "local"
    ]


def listening(host, port):
    return [word for word in node(host, "ss", "-Hltn", f"sport = :{port}").stdout.split() if word.endswith(f":{port}")]


def api(path, **params):
    """Prometheus's HTTP API on node1, asked from node1 at the address it listens on."""
    url = f"http://{listen_address(NODES[0], '/etc/default/prometheus')}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    script = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())"
    answer = json.loads(node(NODES[0], "python3", "-c", script, url).stdout)
    assert answer["status"] == "success", answer
    return answer["data"]


def query(expr, want=1, timeout=90):
    """The result vector of an instant query, waiting until it has at least ``want`` series."""
    deadline = time.monotonic() + timeout
    while True:
        result = api("query", query=expr)["result"]
        if len(result) >= want or time.monotonic() > deadline:
            return result
        time.sleep(2)


@pytest.mark.parametrize("host", NODES)
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
def test_prometheus_holds_every_gpu_metric_of_all_8_gpus_with_the_recorded_values(converged, host, expr, expected):
    # expr ends inside its label selector; the target's labels close it.
    result = query(f'{expr}instance="{host}",job="instinct_nodes"}}', want=8)
    assert {int(s["metric"]["gpu"]): float(s["value"][1]) for s in result} == dict(enumerate(expected))


def test_each_node_reports_its_8_expected_gpus_from_a_fresh_rocm_smi_sample(converged):
    for host in NODES:
        values = {}
        for name in ("instinct_gpu_count", "instinct_gpu_expected_count", "instinct_gpu_collector_up",
                     "instinct_gpu_collector_stale"):  # fmt: skip
            (series,) = query(f'{name}{{instance="{host}",job="instinct_nodes"}}')
            values[name] = float(series["value"][1])
        assert values == {
            "instinct_gpu_count": 8,
            "instinct_gpu_expected_count": 8,
            "instinct_gpu_collector_up": 1,
            "instinct_gpu_collector_stale": 0,
        }, host
        # amd-smi metric has no recording (the simulated tool fails), so rocm-smi gave the sample.
        (source,) = query(f'instinct_gpu_collector_source_info{{instance="{host}",job="instinct_nodes"}}')
        assert source["metric"]["tool"] == "rocm-smi"
        # node exporter read the collector's and the ranks' merged files (a family declared twice, or
        # a bad line, would be a scrape error).
        (errors,) = query(f'node_textfile_scrape_error{{instance="{host}",job="instinct_nodes"}}')
        assert float(errors["value"][1]) == 0, host
        assert node(host, "systemctl", "is-active", "instinct-gpu-collector.timer").stdout.strip() == "active"
        assert node(host, "stat", "-c", "%a %U", TEXTFILE).stdout.split() == ["644", "root"]


def test_the_alert_rules_are_loaded_and_no_gpu_alert_fires(converged):
    groups = api("rules")["groups"]
    alerts = {rule["name"]: rule for group in groups for rule in group["rules"] if rule["type"] == "alerting"}
    assert {"InstinctGPUTemperatureHigh", "InstinctGPUMissing", "InstinctTrainingStalled"} <= set(alerts)
    assert all(rule["health"] == "ok" for rule in alerts.values()), alerts
    alerts_now = api("alerts")["alerts"]
    firing = [a for a in alerts_now if a["state"] == "firing" and a["labels"]["alertname"].startswith("InstinctGPU")]
    assert firing == []


def test_node_exporter_and_prometheus_listen_on_the_management_address_only(converged):
    """Issue 32: each binds its node's management address, not every address and not the loopback
    one; Prometheus scrapes each node where its exporter listens. No web configuration by default."""
    for host in NODES:
        address = management_address(host)
        assert listen_address(host, "/etc/default/prometheus-node-exporter") == f"{address}:9100"
        assert listening(host, 9100) == [f"{address}:9100"]
        assert "--web.config" not in node(host, "cat", "/etc/default/prometheus-node-exporter").stdout
    address = management_address(NODES[0])
    assert listen_address(NODES[0], "/etc/default/prometheus") == f"{address}:9090"
    assert listening(NODES[0], 9090) == [f"{address}:9090"]
    script = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9090/-/ready')"
    refused = node(NODES[0], "python3", "-c", script, check=False)
    assert refused.returncode != 0 and "Connection refused" in refused.stderr
    active = api("targets")["activeTargets"]
    targets = {t["labels"]["instance"]: t for t in active if t["labels"]["job"] == "instinct_nodes"}
    assert sorted(targets) == NODES
    for host, target in targets.items():
        assert target["scrapeUrl"] == f"http://{management_address(host)}:9100/metrics" and target["health"] == "up"


# Docker's embedded DNS server of a user-defined network: a listener the test harness puts in every
# container's namespace (owned by dockerd, so ss names no process), not the node's.
DOCKER_DNS = "127.0.0.11"


def listeners(host):
    """[(address, port)] of every listening TCP socket on a node, from ss -ltn, Docker's embedded DNS
    left out. (ss -p cannot name the processes here: a container's root lacks CAP_SYS_PTRACE to read
    another account's file descriptors, so the ports say whose each socket is.)"""
    found = []
    for line in node(host, "ss", "-Hltn").stdout.splitlines():
        address, _colon, port = line.split()[3].rpartition(":")
        if address != DOCKER_DNS:
            found.append((address.strip("[]"), int(port)))
    return sorted(found)


# The ports the collection listens on when no job runs: node exporter on every node, Prometheus and
# Alertmanager on their server (node1; Alertmanager's cluster port 9094 is off). Port 22 is the image's
# sshd, the operator's way in (the quick start's SSH), not the collection's, on whatever address sshd
# chose.
SSH = 22


def test_every_listener_on_a_converged_node_is_on_its_chosen_address(converged):
    """Issue 32: ss -ltnp on each converged node, no job running: node exporter (both nodes),
    Prometheus and Alertmanager (node1) on the management address and nothing else of the collection's (no wheel
    server left after the stack stage, no torchrun port with no job). The listings are kept in
    artifacts/sandbox/listeners-NODE.txt for the closing note."""
    for host in NODES:
        address = management_address(host)
        (sandbox.collect_dir() / f"listeners-{host}.txt").write_text(node(host, "ss", "-ltnp").stdout)
        ours = [(bound, port) for bound, port in listeners(host) if port != SSH]
        expected = [(address, 9090), (address, 9093), (address, 9100)] if host == NODES[0] else [(address, 9100)]
        assert ours == expected, (host, ours)


def test_promtool_accepts_the_written_configuration_and_rules(converged):
    node(NODES[0], "promtool", "check", "config", "/etc/prometheus/prometheus.yml")
    node(NODES[0], "promtool", "check", "rules", "/etc/prometheus/rules/instinct-alerts.rules.yml")


def test_the_collector_keeps_its_last_good_sample_marked_stale_when_no_tool_answers(converged):
    host = NODES[-1]
    node(host, "systemctl", "stop", "instinct-gpu-collector.timer")
    try:
        # A profile without GPU tool recordings: amd-smi and rocm-smi both fail.
        node(host, "sh", "-c", "echo driver-not-loaded > /etc/instinct-sim/profile")
        since = node(host, "date", "+%s").stdout.strip()
        node(host, "systemctl", "start", "instinct-gpu-collector.service")
        text = node(host, "cat", TEXTFILE).stdout
        assert "instinct_gpu_collector_up 0" in text
        assert "instinct_gpu_collector_stale 1" in text
        assert 'instinct_gpu_temperature_celsius{gpu="7",sensor="junction"} 43' in text
        assert "instinct_gpu_count 8" in text
        # The service's own lines reach the journal through its stdout stream, a moment after
        # systemd's; read again for a while rather than once.
        wanted = "no tool could read the GPUs (keeping the last good sample, marked stale)"
        for _attempt in range(20):
            journal = node(host, "journalctl", "-u", "instinct-gpu-collector.service", "--since", f"@{since}",
                           "--no-pager").stdout  # fmt: skip
            if wanted in journal:
                break
            time.sleep(1)
        assert wanted in journal
        assert "amd-smi" in journal and "rocm-smi" in journal
    finally:
        node(host, "sh", "-c", "echo mi300x-8gpu > /etc/instinct-sim/profile")
        node(host, "systemctl", "start", "instinct-gpu-collector.service")
        node(host, "systemctl", "start", "instinct-gpu-collector.timer")
    text = node(host, "cat", TEXTFILE).stdout
    assert "instinct_gpu_collector_up 1" in text and "instinct_gpu_collector_stale 0" in text


DASHBOARD = ROOT / "roles" / "monitoring" / "files" / "grafana" / "instinct-finetune.json"


def dashboard_queries():
    """(panel title, expression) of every target of every panel of the shipped Grafana dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(panel["title"], target["expr"]) for panel in panels for target in panel.get("targets", [])]


def test_every_dashboard_panel_query_returns_series_from_the_sandboxs_prometheus(converged):
    """Issue 34: the dashboard had never been loaded anywhere. Each of its queries runs against the
    sandbox.s Prometheus over the last two hours (the sandbox jobs trained in them: the panels that follow a
    running job need that window) with its variables at every value, and must return series; so must
    the queries of its template variables. Names, labels and units therefore agree with what the
    collector and the progress writer export."""
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    for variable in variables:
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query  # the datasource's is a string
        found = re.fullmatch(r"label_values\((\w+), (\w+)\)", str(query or ""))
        if found:
            metric, label = found.groups()
            values = api(f"label/{label}/values", **{"match[]": metric})
            assert values, (variable["name"], metric, label)
    end = time.time()
    empty = []
    for title, expr in dashboard_queries():
        concrete = expr.replace("$instance", ".+").replace("$finetune_job", ".+")
        result = api("query_range", query=concrete, start=end - 7200, end=end, step=30)["result"]
        if not result:
            empty.append(title)
    # The simulated nodes replay rocm-smi's concise table and VRAM view (the recordings of
    # tests/fixtures/smi/SOURCES.md), which have no ECC or PCIe replay counts, no XGMI error flag and
    # no HBM temperature (junction only), and amd-smi metric has no recording: those panels stay empty
    # here because their series are not in the nodes' textfile at all, not because a name or label
    # disagrees.
    assert sorted(empty) == sorted(NOT_RECORDED), empty
    textfile = node(NODES[0], "cat", TEXTFILE).stdout
    for series in NOT_RECORDED.values():
        assert not re.search(series, textfile, re.M), series
    assert len(dashboard_queries()) >= 15


# Panels whose metric no recorded output of the simulated nodes carries, and that metric.
NOT_RECORDED = {
    "ECC errors": r"^instinct_gpu_ecc_errors_total[{ ]",
    "PCIe replays": r"^instinct_gpu_pcie_replays_total[{ ]",
    "XGMI link errors": r"^instinct_gpu_xgmi_error[{ ]",
    "GPU memory (HBM) temperature": r'^instinct_gpu_temperature_celsius\{[^}]*sensor="memory"',
}


RUNBOOKS = "https://github.com/instinct-finetune/instinct.finetune/blob/main/docs/runbooks"


SOAK_SECONDS = 30  # health_soak_hours 1/120: two of the collector's samples after the switch
BURNIN_WAIT = "Wait for the burn-in on every node"


def test_node2_loses_its_gpus_in_a_soak_its_verdict_names_them_and_the_alert_reaches_the_webhook(
    converged, alert_receiver
):
    """Issue 34, two paths over one GPU loss (the suite's last test of the GPU metrics: the nodes' tests
    after it read no alert). Alertmanager listens on node1's management address only, its cluster port
    off, and Prometheus sends it its alerts. A soak (health.yml -e health_soak_hours) runs the fabric's
    all-reduce again and burns in both nodes under monitoring; 5 s into the burn-in, node2's GPU tools
    switch to a real recording of an MI300X node that lists one GPU (ROCm/ROCm#5231,
    tests/fixtures/smi/SOURCES.md). The all-reduce and the burn-in pass on both nodes (the suite's run
    of health.yml's checks: the_health_checks_passed_on_both_nodes); the soak's stability report fails
    naming node2 and the GPUs that left (node1's pass), with its report and plots on the controller; and
    InstinctGPUMissing reaches the webhook receiver the test started, with the absolute runbook link."""
    address = management_address(NODES[0])
    assert listening(NODES[0], 9093) == [f"{address}:9093"]
    defaults = node(NODES[0], "cat", "/etc/default/prometheus-alertmanager").stdout
    assert re.search(r'--cluster\.listen-address=[ "]', defaults), defaults  # empty: no gossip port
    managers = [manager["url"] for manager in api("alertmanagers")["activeAlertmanagers"]]
    assert len(managers) == 1 and managers[0].startswith(f"http://{address}:9093/api/"), managers
    host = NODES[-1]
    soak_dir = sandbox.collect_dir() / "health" / "soak"
    shutil.rmtree(soak_dir, ignore_errors=True)
    timers = []

    def switch():
        node(host, "sh", "-c", "echo mi300x-vf-1gpu > /etc/instinct-sim/profile")
        node(host, "systemctl", "start", "instinct-gpu-collector.service")

    def at_the_burnin(event):
        data = event.get("event_data") or {}
        if event.get("event") == "playbook_on_task_start" and data.get("task") == BURNIN_WAIT and not timers:
            timers.append(threading.Timer(5, switch))
            timers[0].start()

    try:
        soak = sandbox.run_playbook(
            "health.yml",
            cmdline=sandbox.site_cmdline(),
            extravars={
                **SANDBOX_BURNIN,
                "health_allreduce_sizes_mb": [1, 4],
                "health_soak_hours": SOAK_SECONDS / 3600,
                "health_report_dir": str(soak_dir),
            },
            on_event=at_the_burnin,
        )
        sandbox.write_report("health-soak", soak)
        assert timers, "the soak never started its burn-in"
        timers[0].join()
        assert "instinct_gpu_count 1" in node(host, "cat", TEXTFILE).stdout
        # The rule's 1m, a scrape and an evaluation (15 s each) and Alertmanager's group_wait (5 s here),
        # counted from the switch: partly spent while the soak ran and was judged.
        deadline = time.monotonic() + 200
        while not alert_receiver.alerts("InstinctGPUMissing", host) and time.monotonic() < deadline:
            time.sleep(5)
    finally:
        for timer in timers:
            timer.join()
        node(host, "sh", "-c", "echo mi300x-8gpu > /etc/instinct-sim/profile")
        node(host, "systemctl", "start", "instinct-gpu-collector.service")
    the_health_checks_passed_on_both_nodes(soak, soak_dir)
    the_soak_failed_naming_node2s_gpus(soak, soak_dir, host)
    the_alert_reached_the_webhook(alert_receiver, host)


def the_health_checks_passed_on_both_nodes(soak, soak_dir):
    """health.yml's checks, judged before the soak's window: the fabric role's all-reduce ran again
    between both nodes over the fabric NIC (Gloo, the nodes are CPU-only); the burn-in ran in the
    training venv as its owner and measured each node's CPU as one device (torch sees no GPU behind the
    simulated MI300X); the judgement and the report reached the controller. The nodes are containers
    sharing this machine's cores, so their figures say nothing about hardware: one thread per node and a
    wide tolerance (flag under 10 % of the median) check the path, not the figures. Flagging a slow GPU
    is tests/unit/plugins/module_utils/test_health.py. The GPU tools' switch does not reach the burn-in,
    which reads torch, not amd-smi."""
    report = json.loads((soak_dir / "health.json").read_text())
    shown = {d["host"] for d in soak.debug if "all-reduce figures" in str(d["task"])}
    assert shown == set(NODES), soak.debug
    allreduce = report["allreduce"]
    assert sorted(allreduce) == NODES
    assert sorted(allreduce[host]["rank"] for host in NODES) == [0, 1]
    for host in NODES:
        result = allreduce[host]
        assert result["world_size"] == 2 and result["backend"] == "gloo"
        assert [r["size_mb"] for r in result["results"]] == [1, 4]
        assert all(r["busbw_gbps"] > 0 for r in result["results"])
        env = node(host, "cat", "/etc/instinct-finetune/rccl.env").stdout
        assert re.search(rf"^GLOO_SOCKET_IFNAME={re.escape(result['ifname'])}$", env, re.M)
        address = node(host, "ip", "-4", "-o", "addr", "show", "dev", result["ifname"]).stdout
        assert FABRIC_PREFIX in address, (host, result["ifname"], address)
    rows = report["burnin"]["rows"]
    assert sorted(row["host"] for row in rows) == NODES
    for row in rows:
        assert row["device_kind"] == "cpu" and row["index"] == 0
        assert row["tflops"] > 0 and row["iterations"] > 0
        assert row["peers"] == 2 and row["ratio_to_median"] > 0 and row["slow"] is False
        # amd-smi answers with the recorded MI300X (node1), but no temperature belongs to a CPU.
        assert row["temperature_before"] is None and row["temperature_after"] is None
    assert report["burnin"]["problems"] == []
    assert report["settings"]["matrix_size"] == 256 and report["settings"]["dtype"] == "bf16"
    (table,) = [d["msg"] for d in soak.debug if d["task"] == "Show the burn-in table"]
    assert table[0].split()[:4] == ["host", "gpu", "name", "TFLOP/s"]
    assert sorted(line.split()[0] for line in table[1:]) == NODES
    markdown = (soak_dir / "health.md").read_text()
    for host in NODES:
        assert re.search(rf"^\| {host} \| cpu \| ", markdown, re.M), markdown
        assert re.search(rf"^\| {host} \| [01] \| 2 \| gloo \| eth\d+ \| ", markdown, re.M), markdown
    assert "None: every device is within tolerance" in markdown


def the_soak_failed_naming_node2s_gpus(soak, soak_dir, host):
    """The soak's verdict, made on the first node, which fails the run with it."""
    assert soak.rc != 0 and soak.failed_hosts() == [NODES[0]], soak.failures
    message = " ".join(str(f["msg"]) for f in soak.failures)
    assert "the stability report of soak soak-" in message and "docs/runbooks/stability.md" in message
    (report,) = soak_dir.glob("soak-*/stability/report.json")
    judged = json.loads(report.read_text())
    assert judged["verdict"] == "fail"
    drops = {v["node"]: v for v in judged["verdicts"] if v["check"] == "gpu_drop"}
    assert drops[host]["verdict"] == "fail" and drops[host]["gpu"] == "1,2,3,4,5,6,7", drops[host]
    assert "instinct_gpu_count fell to 1 (expected 8)" in drops[host]["detail"]
    assert drops[NODES[0]]["verdict"] == "pass"
    # A soak has no training series: every verdict is of a node or a GPU.
    assert {v["node"] for v in judged["verdicts"]} <= set(NODES)
    assert report.with_name("report.md").is_file() and list(report.parent.glob("plots/*.png"))


def the_alert_reached_the_webhook(alert_receiver, host):
    """InstinctGPUMissing of node2 alone, through Alertmanager, with the absolute runbook link."""
    fired = alert_receiver.alerts("InstinctGPUMissing", host)
    assert fired, [p["body"].get("alerts") for p in alert_receiver.payloads]
    alert = fired[0]
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}/gpu-missing.md"
    assert alert["annotations"]["description"].startswith(f"{host} sees 1 GPUs but should have 8"), alert
    assert alert["labels"]["severity"] == "critical"
    assert alert_receiver.alerts("InstinctGPUMissing", NODES[0]) == []
    assert AlertReceiver.URL in node(NODES[0], "cat", "/etc/prometheus/alertmanager.yml").stdout
    assert node(NODES[0], "stat", "-c", "%a %U %G", "/etc/prometheus/alertmanager.yml").stdout.split() == [
        "640", "root", "prometheus"]  # fmt: skip
