"""Filters for the monitoring role: the Prometheus server's configuration from the inventory."""

from __future__ import absolute_import, division, print_function

from ansible_collections.instinct.finetune.plugins.filter.build import _wrap
from ansible_collections.instinct.finetune.plugins.module_utils import gpu_metrics, promconfig

__metaclass__ = type


class FilterModule:
    """Monitoring filters."""

    def filters(self):
        return {
            "scrape_target": _wrap(promconfig.scrape_target),
            "prometheus_config": _wrap(promconfig.prometheus_config),
            "alertmanager_config": _wrap(promconfig.alertmanager_config),
            "alertmanager_problems": _wrap(promconfig.alertmanager_problems),
            "scrape_health": _wrap(promconfig.scrape_health),
            "monitoring_web_access": _wrap(promconfig.web_access),
            "monitoring_web_config": _wrap(promconfig.web_config),
            "node_exporter_web_flag": _wrap(promconfig.node_exporter_web_flag),
            "gpu_textfile_summary": _wrap(gpu_metrics.textfile_summary),
        }
