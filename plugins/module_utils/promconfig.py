# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The Prometheus server's configuration, built from the inventory (pure)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

NODE_JOB_DEFAULT = "instinct_nodes"
AMD_EXPORTER_JOB = "instinct_amd_exporter"


def scrape_target(host_vars, address_var="monitoring_scrape_address"):
    """``{host, address, gpu_exporter}`` of one node from its host variables.

    The address is the node's ``address_var`` when set and not empty, else ``ansible_host``, else
    its inventory name. ``gpu_exporter`` is what the node runs (``monitoring_gpu_exporter_active``,
    set by the role on the node; "instinct" when the node has not run it yet).
    """
    host = host_vars["inventory_hostname"]
    address = host_vars.get(address_var) or host_vars.get("ansible_host") or host
    return {
        "host": host,
        "address": str(address),
        "gpu_exporter": host_vars.get("monitoring_gpu_exporter_active") or "instinct",
    }


def _static_configs(targets, port, labels):
    return [
        {"targets": [f"{target['address']}:{port}"], "labels": dict(labels, instance=target["host"])}
        for target in targets
    ]


def prometheus_config(targets, settings):
    """prometheus.yml as a dict.

    ``settings``: scrape_interval, evaluation_interval, rule_files (globs), job (the nodes' node
    exporter job), node_exporter_port, amd_exporter_port, labels (added to every node target),
    prometheus_port, extra_scrape_configs. The instance label of a node is its inventory name, so
    alerts, the dashboard and ``ansible-playbook --limit`` all name nodes the same way.
    """
    labels = dict(settings.get("labels") or {})
    job = settings.get("job") or NODE_JOB_DEFAULT
    scrape_configs = [
        {
            "job_name": "prometheus",
            "static_configs": [{"targets": [f"localhost:{settings['prometheus_port']}"]}],
        },
        {
            "job_name": job,
            "static_configs": _static_configs(targets, settings["node_exporter_port"], labels),
        },
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
    return {
        "global": {
            "scrape_interval": settings["scrape_interval"],
            "evaluation_interval": settings["evaluation_interval"],
        },
        "rule_files": list(settings.get("rule_files") or []),
        "scrape_configs": scrape_configs,
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
