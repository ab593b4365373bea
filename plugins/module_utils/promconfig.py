# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The Prometheus server's configuration, built from the inventory (pure)."""

from __future__ import absolute_import, division, print_function

import re

from ansible_collections.instinct.finetune.plugins.module_utils.apt_index import policy_versions
from ansible_collections.instinct.finetune.plugins.module_utils.listen import is_any_address

__metaclass__ = type

NODE_JOB_DEFAULT = "instinct_nodes"
AMD_EXPORTER_JOB = "instinct_amd_exporter"
RUNBOOK = "docs/runbooks/monitoring-exporter.md"
# The fact the role sets on each node: the one address its node exporter listens on.
LISTEN_FACT = "monitoring_node_exporter_address"
# A bcrypt hash as htpasswd -B and Python's bcrypt write it (what node exporter and Prometheus check).
_BCRYPT = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")
_USER = re.compile(r"^[^\s:]+$")
# Node exporter renamed --web.config to --web.config.file in 1.5.0 (prometheus/node_exporter#2534);
# Ubuntu 22.04 ships 1.3.1, Ubuntu 24.04 and Debian 12 ship 1.7.0 and 1.5.0.
_WEB_CONFIG_FILE_SINCE = (1, 5, 0)


def scrape_target(host_vars, address_var="monitoring_scrape_address"):
    """``{host, address, gpu_exporter}`` of one node from its host variables.

    The address is the node's ``address_var`` when set and not empty, else the one address its node
    exporter listens on (``monitoring_node_exporter_address``, set by the role on the node), else
    ``ansible_host``, else its inventory name. ``gpu_exporter`` is what the node runs
    (``monitoring_gpu_exporter_active``, set by the role on the node; "instinct" when the node has
    not run it yet).
    """
    host = host_vars["inventory_hostname"]
    listening = host_vars.get(LISTEN_FACT)
    listening = None if is_any_address(listening) else listening
    address = host_vars.get(address_var) or listening or host_vars.get("ansible_host") or host
    return {
        "host": host,
        "address": str(address),
        "gpu_exporter": host_vars.get("monitoring_gpu_exporter_active") or "instinct",
    }


def web_access(host, settings):
    """Who may reach node exporter and Prometheus, from the role's settings, checked.

    ``settings``: ``user``, ``password``, ``password_hash`` (basic auth: the bcrypt hash the
    exporters check, the password Prometheus, the role's checks and Grafana send), ``tls_cert``,
    ``tls_key`` (this host's certificate and key) and ``tls_ca`` (the CA that signed every host's).
    Each group is all set or all empty. Returns ``{"basic_auth", "tls", "scheme"}``; a ValueError
    names the host, the variables, the fix and the runbook, never the password.
    """
    auth = {name: str(settings.get(name) or "") for name in ("user", "password", "password_hash")}
    given = sorted(f"monitoring_basic_auth_{name}" for name, value in auth.items() if value)
    if given and len(given) < len(auth):
        missing = sorted(f"monitoring_basic_auth_{name}" for name, value in auth.items() if not value)
        raise ValueError(
            f"{host}: basic auth needs all three of monitoring_basic_auth_user, _password and _password_hash; "
            f"{', '.join(given)} set, {', '.join(missing)} empty. Set the missing ones (the hash: "
            f"htpasswd -nBC 10 '' | tr -d ':\\n') or empty them all. See {RUNBOOK}."
        )
    if given and not _USER.match(auth["user"]):
        raise ValueError(
            f"{host}: monitoring_basic_auth_user {auth['user']!r} is not a user name (no spaces, no colon). "
            f"See {RUNBOOK}."
        )
    if given and not _BCRYPT.match(auth["password_hash"]):
        raise ValueError(
            f"{host}: monitoring_basic_auth_password_hash is not a bcrypt hash ($2y$10$ and 53 characters, as "
            f"htpasswd -nBC 10 '' | tr -d ':\\n' prints it); node exporter and Prometheus accept no other. "
            f"See {RUNBOOK}."
        )
    tls = {name: str(settings.get(name) or "") for name in ("tls_cert", "tls_key", "tls_ca")}
    given_tls = sorted(f"monitoring_{name}_src" for name, value in tls.items() if value)
    if given_tls and len(given_tls) < len(tls):
        missing = sorted(f"monitoring_{name}_src" for name, value in tls.items() if not value)
        raise ValueError(
            f"{host}: TLS needs this host's certificate and key and the CA that signed them: "
            f"{', '.join(given_tls)} set, {', '.join(missing)} empty. Set them (files on the controller; the "
            f"certificate must name the address Prometheus reaches the host at) or empty them all. See {RUNBOOK}."
        )
    # Basic auth over plain http sends the password in clear on every scrape (issue 32, review): on a
    # network where that is acceptable the operator says so.
    if given and not given_tls and not settings.get("basic_auth_without_tls"):
        raise ValueError(
            f"{host}: basic auth without TLS sends the password in clear with every scrape and query. Set "
            f"monitoring_tls_cert_src, monitoring_tls_key_src and monitoring_tls_ca_src too, or, on a management "
            f"network where clear text is acceptable, monitoring_basic_auth_without_tls: true. See {RUNBOOK}."
        )
    return {"basic_auth": bool(given), "tls": bool(given_tls), "scheme": "https" if given_tls else "http"}


def web_config(user="", password_hash="", cert_file="", key_file=""):
    """The web configuration file node exporter and Prometheus read (exporter-toolkit's format):
    TLS with ``cert_file`` and ``key_file``, basic auth of ``user`` with its bcrypt hash; ``{}``
    for neither (then no web configuration is given at all)."""
    config = {}
    if cert_file:
        config["tls_server_config"] = {"cert_file": cert_file, "key_file": key_file}
    if user:
        config["basic_auth_users"] = {user: password_hash}
    return config


def _upstream_version(version):
    """(1, 3, 1) of a Debian version such as ``1:1.3.1-1ubuntu0.22.04.2``; None when it has none."""
    text = str(version or "").strip()
    text = text.split(":", 1)[1] if ":" in text.split("-", 1)[0] else text
    match = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def node_exporter_web_flag(policy_text, package="prometheus-node-exporter"):
    """Node exporter's web configuration flag for the version ``apt-cache policy PACKAGE`` shows
    installed, else the candidate: ``--web.config`` before 1.5.0 (Ubuntu 22.04's 1.3.1),
    ``--web.config.file`` since. A ValueError when apt knows no version of it."""
    known = policy_versions(policy_text or "").get(package) or {}
    version = known.get("installed") or known.get("candidate")
    upstream = _upstream_version(version)
    if upstream is None:
        raise ValueError(
            f"apt knows no version of {package} (installed or candidate: {version!r}), so the flag of its web "
            f"configuration (--web.config before 1.5.0, --web.config.file since) cannot be chosen. Check the node's "
            f"apt sources (monitoring_node_exporter_package). See {RUNBOOK}."
        )
    return "--web.config.file" if upstream >= _WEB_CONFIG_FILE_SINCE else "--web.config"


def _client_options(settings):
    """What a scrape job needs to reach a listener behind the web configuration."""
    options = {}
    if settings.get("scheme", "http") != "http":
        options["scheme"] = settings["scheme"]
    if settings.get("basic_auth"):
        options["basic_auth"] = dict(settings["basic_auth"])
    if settings.get("tls_config"):
        options["tls_config"] = dict(settings["tls_config"])
    return options


def _static_configs(targets, port, labels):
    return [
        {"targets": [f"{target['address']}:{port}"], "labels": dict(labels, instance=target["host"])}
        for target in targets
    ]


def prometheus_config(targets, settings):
    """prometheus.yml as a dict.

    ``settings``: scrape_interval, evaluation_interval, rule_files (globs), job (the nodes' node
    exporter job), node_exporter_port, amd_exporter_port, labels (added to every node target),
    prometheus_port, extra_scrape_configs; and how Prometheus reaches itself and the nodes' exporters
    behind their web configuration: prometheus_address (the address Prometheus listens on, as a
    client writes it; default localhost), scheme (http or https), basic_auth (``{username,
    password_file}``) and tls_config (``{ca_file}``), each left out when not given. AMD's exporter
    has no such configuration and is scraped over plain http. The instance label of a node is its
    inventory name, so alerts, the dashboard and ``ansible-playbook --limit`` all name nodes the
    same way.
    """
    labels = dict(settings.get("labels") or {})
    job = settings.get("job") or NODE_JOB_DEFAULT
    client = _client_options(settings)
    own = settings.get("prometheus_address") or "localhost"
    scrape_configs = [
        dict(
            {"job_name": "prometheus", "static_configs": [{"targets": [f"{own}:{settings['prometheus_port']}"]}]},
            **client,
        ),
        dict(
            {"job_name": job, "static_configs": _static_configs(targets, settings["node_exporter_port"], labels)},
            **client,
        ),
    ]
    amd = [target for target in targets if target["gpu_exporter"] == "amd"]
    if amd:
        scrape_configs.append(
            {
                "job_name": AMD_EXPORTER_JOB,
                "static_configs": _static_configs(amd, settings["amd_exporter_port"], labels),
            }
        )
    names = {config["job_name"] for config in scrape_configs}
    for extra in settings.get("extra_scrape_configs") or []:
        if extra.get("job_name") in names:
            raise ValueError(f"the extra scrape job '{extra.get('job_name')}' has the name of a job of the role")
        names.add(extra.get("job_name"))
        scrape_configs.append(extra)
    config = {
        "global": {
            "scrape_interval": settings["scrape_interval"],
            "evaluation_interval": settings["evaluation_interval"],
        },
        "rule_files": list(settings.get("rule_files") or []),
        "scrape_configs": scrape_configs,
    }
    if settings.get("alertmanager"):
        # Alertmanager sits behind the same web configuration as Prometheus (same host, same files).
        config["alerting"] = {
            "alertmanagers": [dict({"static_configs": [{"targets": [settings["alertmanager"]]}]}, **client)]
        }
    return config


_URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")
_DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d)$")
# Every alert of a node about the same thing is one notification; a firing one is repeated this often.
_ROUTE_DEFAULTS = {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h"}


def alertmanager_problems(settings):
    """What is wrong with the receiver settings (``alertmanager_config``'s), each naming its variable."""
    problems = []
    for index, url in enumerate(settings.get("webhook_urls") or []):
        # Named by its place, never echoed: a webhook URL often carries its token.
        if not isinstance(url, str) or not _URL.fullmatch(url):
            problems.append(f"monitoring_alertmanager_webhook_urls[{index}] is not an http(s) URL (no blanks)")
    email = settings.get("email") or {}
    # require_tls is a switch with a default, not part of a receiver someone set.
    given = {key: value for key, value in email.items() if value and key != "require_tls"}
    if given and not all(given.get(key) for key in ("to", "from", "smarthost")):
        missing = [f"monitoring_alertmanager_email_{key}" for key in ("to", "from", "smarthost") if not given.get(key)]
        problems.append(f"the e-mail receiver needs {', '.join(missing)} too")
    if given.get("smarthost") and not re.fullmatch(r"[^\s:]+:[0-9]+", str(given["smarthost"])):
        problems.append(f"monitoring_alertmanager_email_smarthost is {given['smarthost']!r}, not HOST:PORT")
    if bool(given.get("auth_username")) != bool(given.get("auth_password")):
        problems.append("monitoring_alertmanager_email_auth_username and _auth_password go together")
    for key, value in (settings.get("route") or {}).items():
        if not _DURATION.fullmatch(str(value)):
            problems.append(f"monitoring_alertmanager_{key} is {value!r}, not a duration such as 30s or 4h")
    return problems


def alertmanager_config(settings):
    """alertmanager.yml as a dict: every alert goes to one receiver, ``instinct``, which posts to each of
    ``webhook_urls`` (Alertmanager's webhook payload, resolved alerts too) and mails ``email`` (``{to,
    from, smarthost, auth_username, auth_password, require_tls}``) when given; with neither, the alerts
    are only in Alertmanager's own API and UI. Alerts are grouped by alert name and node; ``route``
    overrides group_wait, group_interval and repeat_interval. A ValueError names each bad setting."""
    problems = alertmanager_problems(settings)
    if problems:
        raise ValueError("; ".join(problems) + f". See {RUNBOOK}")
    receiver = {"name": "instinct"}
    urls = list(settings.get("webhook_urls") or [])
    if urls:
        receiver["webhook_configs"] = [{"url": url, "send_resolved": True} for url in urls]
    email = {key: value for key, value in (settings.get("email") or {}).items() if value not in (None, "")}
    if email.get("to"):
        mail = {"to": email["to"], "from": email["from"], "smarthost": email["smarthost"], "send_resolved": True}
        if email.get("auth_username"):
            mail.update(auth_username=email["auth_username"], auth_password=email["auth_password"])
        mail["require_tls"] = bool(email.get("require_tls", True))
        receiver["email_configs"] = [mail]
    route = dict(_ROUTE_DEFAULTS, **(settings.get("route") or {}))
    return {
        "route": dict({"receiver": "instinct", "group_by": ["alertname", "instance"]}, **route),
        "receivers": [receiver],
    }


def scrape_health(targets_response, job, hosts):
    """Prometheus's ``/api/v1/targets`` answer -> the nodes' scrape health.

    Returns ``{"up": [...], "down": [...], "pending": [...]}``: ``up`` and ``down`` are
    ``{host, url, error}`` of the job's targets (matched by their instance label, the inventory
    name); ``pending`` lists the hosts without a finished scrape yet (absent, or health unknown).
    """
    data = (targets_response or {}).get("data") or {}
    seen = {}
    for target in data.get("activeTargets") or []:
        labels = target.get("labels") or {}
        if labels.get("job") == job and labels.get("instance") in hosts:
            seen[labels["instance"]] = target
    result = {"up": [], "down": [], "pending": []}
    for host in hosts:
        target = seen.get(host)
        if target is None or target.get("health") not in ("up", "down"):
            result["pending"].append(host)
            continue
        entry = {"host": host, "url": target.get("scrapeUrl", ""), "error": target.get("lastError", "")}
        result[target["health"]].append(entry)
    return result
