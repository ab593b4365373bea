"""Where node exporter and Prometheus listen and who may reach them (issue 32, finding 5), as the monitoring
role renders it: its validate and listen steps and its templates, through ansible-playbook on this machine
(one local node that is both a node and the Prometheus server).

By default both bind the host's management address (here: the address of this machine's default route,
read from its network facts as a real run reads a node's), never every address; Prometheus scrapes the
node and itself there, and Grafana's data source asks it there. With basic auth and TLS set, both get
their web configuration (node exporter's flag by its version: --web.config before 1.5.0, Ubuntu 22.04's
1.3.1), Prometheus scrapes with the password file and the CA, and promtool accepts what was rendered. A
half-set access is refused naming the host, never the password."""

import json
import subprocess

import pytest
import yaml

from tests.unit.conftest import FIXTURES, ROOT, run_local_play
from tests.unit.monitoring.promql import run_promtool

TEMPLATES = ["prometheus-node-exporter.default", "prometheus.default", "prometheus.yml", "grafana-datasources.yml"]
JAMMY_POLICY = (
    "prometheus-node-exporter:\n  Installed: 1.3.1-1ubuntu0.22.04.2\n  Candidate: 1.3.1-1ubuntu0.22.04.2\n"
    "  Version table:\n *** 1.3.1-1ubuntu0.22.04.2 500\n"
    "        500 http://archive.ubuntu.com/ubuntu jammy-updates/universe amd64 Packages\n"
)
PASSWORD = "not-in-any-output-7f3a"  # noqa: S105 - the test's own password
HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"


def playbook(tmp_path):
    files = [ROOT / "roles" / "common" / "defaults" / "main.yml"] + [
        ROOT / "roles" / "monitoring" / kind / "main.yml" for kind in ("defaults", "vars")
    ]
    tasks = ROOT / "roles" / "monitoring" / "tasks"
    text = f"""\
- name: Render the monitoring role's listeners
  hosts: all
  gather_facts: false
  vars_files: {json.dumps([str(f) for f in files])}
  tasks:
    - name: Check the monitoring settings
      ansible.builtin.include_tasks: {tasks / "validate.yml"}
    - name: Work out where node exporter and Prometheus listen
      ansible.builtin.include_tasks: {tasks / "listen.yml"}
    - name: Stand in for apt-cache policy of node exporter
      ansible.builtin.set_fact:
        monitoring_node_exporter_policy: {{stdout: "{{{{ policy_text }}}}"}}
    - name: Render the templates
      ansible.builtin.template:
        src: {ROOT / "roles" / "monitoring" / "templates"}/{{{{ item }}}}.j2
        dest: {tmp_path / "out"}/{{{{ item }}}}
        mode: "0600"
      loop: {json.dumps(TEMPLATES)}
    - name: Write the web configuration as the role's tasks write it
      ansible.builtin.copy:
        content: "{{{{ monitoring_web_settings | to_nice_yaml(indent=2) }}}}"
        dest: {tmp_path / "out"}/web.yml
        mode: "0600"
      when: monitoring_web_enabled | bool
"""
    path = tmp_path / "play.yml"
    path.write_text(text)
    (tmp_path / "out").mkdir(exist_ok=True)
    inventory = tmp_path / "hosts.yml"
    node = {"hosts": {"node1": {}}}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"instinct_nodes": node, "monitoring": node}}}))
    return path, inventory


def render(tmp_path, **settings):
    path, inventory = playbook(tmp_path)
    extravars = {"policy_text": "", "monitoring_web_dir": str(tmp_path / "web"), **settings}
    proc = run_local_play(path, extravars, inventory=inventory)
    out = tmp_path / "out"
    rendered = {name: (out / name).read_text() for name in [*TEMPLATES, "web.yml"] if (out / name).exists()}
    return proc, rendered


def args(text):
    (line,) = [line for line in text.splitlines() if line.startswith("ARGS=")]
    return line[len('ARGS="') : -1].split()


def default_route_address():
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route", "show", "default"], capture_output=True,
                                       text=True, check=True).stdout)  # fmt: skip
    if not routes:
        pytest.skip("this machine has no default IPv4 route: nothing to compare the management address with")
    addrs = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", routes[0]["dev"]], capture_output=True,
                                      text=True, check=True).stdout)  # fmt: skip
    return addrs[0]["addr_info"][0]["local"]


def test_by_default_both_bind_the_management_address_and_prometheus_reaches_them_there(tmp_path):
    address = default_route_address()
    proc, rendered = render(tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert args(rendered["prometheus-node-exporter.default"]) == [
        "--collector.textfile.directory=/var/lib/prometheus/node-exporter",
        f"--web.listen-address={address}:9100",
    ]
    assert args(rendered["prometheus.default"]) == [
        f"--web.listen-address={address}:9090",
        "--storage.tsdb.retention.time=30d",
    ]
    config = yaml.safe_load(rendered["prometheus.yml"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["prometheus"] == {"job_name": "prometheus", "static_configs": [{"targets": [f"{address}:9090"]}]}
    assert jobs["instinct_nodes"]["static_configs"] == [
        {"targets": [f"{address}:9100"], "labels": {"instance": "node1"}}
    ]
    assert set(jobs["instinct_nodes"]) == {"job_name", "static_configs"}
    (source,) = yaml.safe_load(rendered["grafana-datasources.yml"])["datasources"]
    assert source["url"] == f"http://{address}:9090"
    assert "basicAuth" not in source and "secureJsonData" not in source


def test_the_inventorys_addresses_win(tmp_path):
    proc, rendered = render(
        tmp_path,
        instinct_management_address="192.0.2.11",
        monitoring_prometheus_listen_address="0.0.0.0",  # noqa: S104
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "--web.listen-address=192.0.2.11:9100" in args(rendered["prometheus-node-exporter.default"])
    # 0.0.0.0: every address, the operator's choice; the role's checks then ask the loopback address.
    assert "--web.listen-address=:9090" in args(rendered["prometheus.default"])
    (source,) = yaml.safe_load(rendered["grafana-datasources.yml"])["datasources"]
    assert source["url"] == "http://127.0.0.1:9090"


def tls_files(tmp_path):
    """A CA and the host's certificate (IP SAN 192.0.2.11) and key, made here with openssl."""
    files = tmp_path / "pki"
    files.mkdir()

    def openssl(*argv):
        subprocess.run(["openssl", *argv], check=True, capture_output=True, cwd=files)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
            "-subj", "/CN=test CA", "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=node1",
            "-keyout", "node1.key", "-out", "node1.csr")  # fmt: skip
    (files / "san.ext").write_text("subjectAltName=IP:192.0.2.11\n")
    openssl("x509", "-req", "-in", "node1.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "1", "-extfile", "san.ext", "-out", "node1.pem")  # fmt: skip
    return files


def test_basic_auth_and_tls_give_both_their_web_configuration_and_prometheus_its_credentials(tmp_path):
    pki = tls_files(tmp_path)
    web = tmp_path / "web"
    settings = {
        "instinct_management_address": "192.0.2.11",
        "monitoring_basic_auth_user": "prom",
        "monitoring_basic_auth_password": PASSWORD,
        "monitoring_basic_auth_password_hash": HASH,
        "monitoring_tls_cert_src": str(pki / "node1.pem"),
        "monitoring_tls_key_src": str(pki / "node1.key"),
        "monitoring_tls_ca_src": str(pki / "ca.pem"),
        "policy_text": JAMMY_POLICY,
    }
    proc, rendered = render(tmp_path, **settings)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert PASSWORD not in proc.stdout + proc.stderr
    # Ubuntu 22.04's node exporter 1.3.1 takes --web.config; Prometheus 2.31 --web.config.file.
    assert args(rendered["prometheus-node-exporter.default"])[-1] == f"--web.config={web}/node-exporter-web.yml"
    assert args(rendered["prometheus.default"])[-1] == f"--web.config.file={web}/prometheus-web.yml"
    config = yaml.safe_load(rendered["prometheus.yml"])
    for job in config["scrape_configs"]:
        assert job["scheme"] == "https"
        assert job["basic_auth"] == {"username": "prom", "password_file": f"{web}/scrape.password"}
        assert job["tls_config"] == {"ca_file": f"{web}/tls/ca.pem"}
    assert PASSWORD not in rendered["prometheus.yml"]
    (source,) = yaml.safe_load(rendered["grafana-datasources.yml"])["datasources"]
    assert source["url"] == "https://192.0.2.11:9090"
    assert (source["basicAuth"], source["basicAuthUser"], source["jsonData"]) == (
        True,
        "prom",
        {"tlsAuthWithCACert": True},
    )
    assert source["secureJsonData"] == {
        "basicAuthPassword": PASSWORD,
        "tlsCACert": (pki / "ca.pem").read_text().rstrip("\n"),
    }
    # The web configuration both read: the user's hash and this host's certificate and key, no password.
    assert yaml.safe_load(rendered["web.yml"]) == {
        "basic_auth_users": {"prom": HASH},
        "tls_server_config": {"cert_file": f"{web}/tls/cert.pem", "key_file": f"{web}/tls/key.pem"},
    }
    # With the files the web step installs in place, promtool accepts the scrape and web configurations.
    (web / "tls").mkdir(parents=True)
    for source, name in (("ca.pem", "ca.pem"), ("node1.pem", "cert.pem"), ("node1.key", "key.pem")):
        (web / "tls" / name).write_bytes((pki / source).read_bytes())
    (web / "scrape.password").write_text(PASSWORD)
    for name in ("prometheus.yml", "web.yml"):
        (tmp_path / name).write_text(rendered[name])
    rc, out = run_promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert rc == 0, out
    rc, out = run_promtool("check", "web-config", str(tmp_path / "web.yml"))
    assert rc == 0, out


def test_node_exporter_1_5_takes_web_config_file(tmp_path):
    settings = {
        "monitoring_basic_auth_without_tls": True,
        "monitoring_basic_auth_user": "prom",
        "monitoring_basic_auth_password": PASSWORD,
        "monitoring_basic_auth_password_hash": HASH,
        "instinct_management_address": "192.0.2.11",
        "policy_text": (FIXTURES / "apt" / "bookworm-prometheus-node-exporter.txt").read_text(),
    }
    proc, rendered = render(tmp_path, **settings)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert args(rendered["prometheus-node-exporter.default"])[-1].startswith("--web.config.file=")
    jobs = yaml.safe_load(rendered["prometheus.yml"])["scrape_configs"]
    assert all(job["scheme"] == "http" if "scheme" in job else True for job in jobs)
    assert all("tls_config" not in job and job["basic_auth"]["username"] == "prom" for job in jobs[:2])


def test_a_half_set_access_is_refused_before_anything_is_rendered_naming_the_host_not_the_password(tmp_path):
    proc, rendered = render(
        tmp_path, instinct_management_address="192.0.2.11", monitoring_basic_auth_user="prom",
        monitoring_basic_auth_password=PASSWORD,
    )  # fmt: skip
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "node1: basic auth needs all three of monitoring_basic_auth_user, _password and _password_hash" in out
    assert "docs/runbooks/monitoring-exporter.md" in out
    assert PASSWORD not in proc.stdout + proc.stderr
    assert rendered == {}


def test_basic_auth_without_tls_is_refused_unless_the_operator_accepts_clear_text(tmp_path):
    """Issue 32 (review): the password would cross the network in clear with every scrape."""
    proc, rendered = render(
        tmp_path, instinct_management_address="192.0.2.11", monitoring_basic_auth_user="prom",
        monitoring_basic_auth_password=PASSWORD, monitoring_basic_auth_password_hash=HASH,
    )  # fmt: skip
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "node1: basic auth without TLS sends the password in clear" in out
    assert "monitoring_basic_auth_without_tls: true" in out and "docs/runbooks/monitoring-exporter.md" in out
    assert PASSWORD not in proc.stdout + proc.stderr
    assert rendered == {}


def test_without_basic_auth_or_tls_no_web_configuration_is_written(tmp_path):
    proc, rendered = render(tmp_path, instinct_management_address="192.0.2.11")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "web.yml" not in rendered
    assert not any(arg.startswith("--web.config") for arg in args(rendered["prometheus-node-exporter.default"]))
