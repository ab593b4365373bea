"""The Grafana dashboard (roles/monitoring/files/grafana/instinct-finetune.json)."""

import json

import pytest

from tests.unit.monitoring.promql import ROOT, metric_names, unknown_metrics

DASHBOARD = ROOT / "roles" / "monitoring" / "files" / "grafana" / "instinct-finetune.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(scope="module")
def dashboard():
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def all_panels(dashboard):
    """Every panel, those inside collapsed rows too."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def data_panels(dashboard):
    return [panel for panel in all_panels(dashboard) if panel["type"] != "row"]


def test_identity_and_schema(dashboard):
    assert dashboard["uid"] == "instinct-finetune"
    assert 30 <= dashboard["schemaVersion"] <= 39
    assert dashboard["id"] is None, "a provisioned dashboard must not carry a database id"


def test_every_panel_has_a_unique_id_and_a_target(dashboard):
    ids = [panel["id"] for panel in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    panels = data_panels(dashboard)
    assert len(panels) >= 12
    for panel in panels:
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no target"
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), f"panel {panel['title']!r} repeats a refId"


def test_every_expr_reads_only_exported_metrics(dashboard):
    for panel in data_panels(dashboard):
        for target in panel["targets"]:
            unknown = unknown_metrics(target["expr"])
            assert not unknown, f"panel {panel['title']!r} reads unknown metrics {sorted(unknown)}"


def test_the_datasource_is_the_template_variable(dashboard):
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    source = variables["datasource"]
    assert source["type"] == "datasource"
    assert source["query"] == "prometheus"
    for panel in data_panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


def test_the_instance_variable_lists_the_nodes_and_every_panel_filters_on_it(dashboard):
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    instance = variables["instance"]
    assert instance["type"] == "query"
    assert instance["definition"] == "label_values(instinct_gpu_count, instance)"
    assert instance["query"]["query"] == "label_values(instinct_gpu_count, instance)"
    for panel in data_panels(dashboard):
        for target in panel["targets"]:
            assert 'instance=~"$instance"' in target["expr"], panel["title"]


@pytest.mark.parametrize(
    ("title", "metrics"),
    [
        ("GPU junction temperature", {"instinct_gpu_temperature_celsius"}),
        ("GPU power vs power cap", {"instinct_gpu_power_watts", "instinct_gpu_power_limit_watts"}),
        ("VRAM used / total", {"instinct_gpu_vram_used_bytes", "instinct_gpu_vram_total_bytes"}),
        ("GPU busy", {"instinct_gpu_utilization_ratio"}),
        ("ECC errors", {"instinct_gpu_ecc_errors_total"}),
        ("PCIe replays", {"instinct_gpu_pcie_replays_total"}),
        ("GPUs seen vs expected", {"instinct_gpu_count", "instinct_gpu_expected_count"}),
        ("Exporter and GPU collector", {"up", "instinct_gpu_collector_up", "instinct_gpu_collector_stale"}),
        ("Training step / total", {"instinct_finetune_step", "instinct_finetune_total_steps"}),
        ("Loss", {"instinct_finetune_loss", "instinct_finetune_eval_loss"}),
        ("Tokens/s per rank", {"instinct_finetune_tokens_per_second"}),
        ("Seconds since last step", {"instinct_finetune_last_step_timestamp_seconds"}),
        # Issue 34: HBM temperature, XGMI errors, the job's total tokens/s and its step rate.
        ("GPU memory (HBM) temperature", {"instinct_gpu_temperature_celsius"}),
        ("XGMI link errors", {"instinct_gpu_xgmi_error"}),
        ("Job tokens/s (all ranks)", {"instinct_finetune_tokens_per_second"}),
        ("Step rate", {"instinct_finetune_step"}),
    ],
)
def test_the_panels_asked_for_are_there(dashboard, title, metrics):
    panels = {panel["title"]: panel for panel in data_panels(dashboard)}
    assert title in panels, f"no panel {title!r}"
    read = set().union(*(metric_names(target["expr"]) for target in panels[title]["targets"]))
    assert metrics <= read, f"panel {title!r} reads {sorted(read)}"


# What the schema leaves out on purpose: a provisioned dashboard carries no database id (null), and the UI's
# copy of a query variable's query (definition) is not in the schema's variable model.
SCHEMA_EXEMPT = {"/id", "/templating/list[1]/definition", "/templating/list[2]/definition"}


def _dropped(original, parsed, path=""):
    """The paths of ``original`` that ``parsed`` (the schema model's JSON) does not carry."""
    if isinstance(original, dict) and isinstance(parsed, dict):
        for key, value in original.items():
            if key not in parsed:
                yield f"{path}/{key}"
            else:
                yield from _dropped(value, parsed[key], f"{path}/{key}")
    elif isinstance(original, list) and isinstance(parsed, list):
        for index, (value, other) in enumerate(zip(original, parsed, strict=False)):
            yield from _dropped(value, other, f"{path}[{index}]")


def schema_round_trip(document):
    """The dashboard read into Grafana Labs' schema models (grafana-foundation-sdk, Grafana 11.6's schemas)
    and written back: a key the schema does not know is not written back."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: PLC0415 - dev-only library
    from grafana_foundation_sdk.cog.plugins import register_default_plugins  # noqa: PLC0415
    from grafana_foundation_sdk.models.dashboard import Dashboard  # noqa: PLC0415

    register_default_plugins()
    return json.loads(json.dumps(Dashboard.from_json(document), cls=JSONEncoder))


def test_every_key_of_the_dashboard_is_in_grafanas_schema(dashboard):
    """Issue 34: the dashboard checked against a maintained Grafana schema library. Every key it sets
    survives the round trip through Grafana 11.6's dashboard, panel (timeseries, stat, row) and
    Prometheus query models, with its value; a misspelt key would be dropped."""
    parsed = schema_round_trip(dashboard)
    assert set(_dropped(dashboard, parsed)) == SCHEMA_EXEMPT
    assert parsed["schemaVersion"] == dashboard["schemaVersion"]
    for original, read in zip(dashboard["panels"], parsed["panels"], strict=True):
        if read["type"] != "row":
            assert read["targets"] == original["targets"] and read["gridPos"] == original["gridPos"]
    # The check has teeth: a misspelt key of a panel is dropped by the schema.
    broken = json.loads(json.dumps(dashboard))
    broken["panels"][1]["tragets"] = broken["panels"][1].pop("targets")
    assert "/panels[1]/tragets" in set(_dropped(broken, schema_round_trip(broken)))
