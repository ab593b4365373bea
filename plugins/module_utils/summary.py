# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The per-node summary table that ends a site.yml run (pure functions)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.instinct.finetune.plugins.module_utils.host_tuning import tuning_cell, tuning_warnings


def _deepspeed(report):
    if not report:
        return None
    ops = report.get("installed_ops") or []
    return f"{report.get('deepspeed_version')} ({len(ops)} ops)"


def _llama_factory(variables):
    version = variables.get("llama_factory_installed_version")
    if not version:
        return None
    left_out = variables.get("llama_factory_left_out") or []
    return f"{version} (no {'/'.join(left_out)})" if left_out else version


def _job(variables):
    result = variables.get("finetune_result")
    if not result:
        return None
    text = f"{result.get('job')} {result.get('state')}"
    if result.get("total_steps"):
        text += f" {result.get('steps')}/{result.get('total_steps')}"
    return text


def _strategy(variables):
    job = (variables.get("finetune_context") or {}).get("job") or {}
    return " ".join(filter(None, [job.get("strategy"), job.get("finetuning_type")])) or None


def _evaluated(name):
    def read(variables):
        value = (variables.get("evaluate_result") or {}).get(name)
        return None if value is None else f"{float(value):.3f}"

    return read


def _improvement(variables):
    """How much lower the fine-tuned perplexity is than the base model's, in percent."""
    value = (variables.get("evaluate_result") or {}).get("improvement")
    return None if value is None else f"{100 * float(value):+.1f}%"


def _gpu_metrics(variables):
    exporter = variables.get("monitoring_gpu_exporter_active")
    if not exporter:
        return None
    if exporter == "amd":
        return "AMD exporter"
    state = variables.get("monitoring_gpu_state") or {}
    if not state.get("up"):
        return "stale" if state.get("stale") else "down"
    return f"{state.get('source')} {state.get('gpus')}/{state.get('expected')}"


# (column title, how to read it from a host's variables); later stages add their columns here.
COLUMNS = (
    ("node", lambda v: v.get("inventory_hostname", "")),
    ("OS", lambda v: " ".join(filter(None, [_fact(v, "distribution"), _fact(v, "distribution_version")]))),
    ("ROCm", lambda v: (v.get("rocm_release_info") or {}).get("version")),
    ("gfx", lambda v: ",".join(v.get("rocm_gfx_archs") or []) or None),
    ("GPUs", lambda v: v.get("rocm_gpu_count")),
    ("PCI GPUs", lambda v: v.get("preflight_pci_gpu_count")),
    ("host tuning", lambda v: tuning_cell(v.get("preflight_tuning"), v.get("preflight_pci_gpu_count"))),
    ("torch", lambda v: (v.get("pytorch_probe") or {}).get("version")),
    ("DeepSpeed", lambda v: _deepspeed(v.get("deepspeed_report"))),
    ("LLaMA-Factory", _llama_factory),
    ("fabric NIC", lambda v: f"{v['fabric_ifname']} {v.get('fabric_address')}" if v.get("fabric_ifname") else None),
    ("GPU metrics", _gpu_metrics),
    ("job", _job),
    ("strategy", _strategy),
    ("perplexity", _evaluated("perplexity")),
    ("base ppl", _evaluated("base_perplexity")),
    ("vs base", _improvement),
    ("stability", lambda v: v.get("stability_verdict")),
)


def _fact(hostvars, name):
    return (hostvars.get("ansible_facts") or {}).get(name)


def node_rows(hostvars, hosts, left_out=None):
    """One row (a list of cells, '-' where a stage did not run) per host, in inventory order. With
    ``left_out`` ({host: why}, left_out_nodes) one more cell, the "left out" column: why, or '-'."""
    rows = []
    for host in hosts:
        variables = dict(hostvars[host])
        variables.setdefault("inventory_hostname", host)
        row = []
        for _title, read in COLUMNS:
            value = read(variables)
            row.append("-" if value in (None, "") else str(value))
        if left_out:
            row.append(left_out.get(host) or "-")
        rows.append(row)
    return rows


def headers(left_out=None):
    """The columns' titles; "left out" last only where a node was left out (left_out_nodes)."""
    return [title for title, _read in COLUMNS] + (["left out"] if left_out else [])


def left_out_nodes(hostvars, hosts, remaining):
    """``{host: why}`` for the hosts of ``hosts`` (a play's hosts) that are not in ``remaining`` (the
    play's hosts less those an earlier play of the run failed: instinct_exclude_failed_nodes leaves the
    nodes that failed preflight out). Why: the checks preflight's record on the host names, or an
    earlier stage."""
    why = {}
    for host in hosts:
        if host in remaining:
            continue
        recorded = (hostvars.get(host) or {}).get("preflight_problems")
        checks = []
        for problem in recorded if isinstance(recorded, list) else []:
            check = " ".join(str(problem.get("check") or "?").split()) if isinstance(problem, dict) else "?"
            if check not in checks:
                checks.append(check)
        why[host] = f"failed preflight: {', '.join(checks)}" if checks else "failed an earlier stage of this run"
    return why


def left_out_warnings(left_out):
    """One line per node left out of the run, in order: who, why, and what brings it back."""
    return [
        f"{host} was left out of this run ({why}; instinct_exclude_failed_nodes: true): the stages after preflight "
        "ran without it. Its problems are in preflight's table above; fix them and run again. "
        "See docs/runbooks/preflight.md"
        for host, why in left_out.items()
    ]


def node_warnings(hostvars, hosts):
    """What an operator should act on, one line per finding with the nodes it concerns, in inventory
    order: the MI300X host settings GPU nodes lack (preflight's record), with the guide's section and
    the switch."""
    nodes = [
        (host, hostvars[host].get("preflight_tuning"), hostvars[host].get("preflight_pci_gpu_count")) for host in hosts
    ]
    return tuning_warnings(nodes)


def render_table(rows, headers=None):
    """Rows of cells as aligned text lines, header first."""
    headers = list(headers or [title for title, _read in COLUMNS])
    table = [headers, *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]

    def line(cells):
        return " | ".join(cells[i].ljust(widths[i]) for i in range(len(widths))).rstrip()

    return [line(headers), "-+-".join("-" * width for width in widths), *[line(row) for row in table[1:]]]


def _markdown_cell(cell):
    """A cell as Markdown table text: one line, its pipes escaped."""
    return " ".join(str(cell).split()).replace("\\", "\\\\").replace("|", "\\|") or "-"


def render_markdown(rows, headers=None, title="Node summary", warnings=()):
    """Rows of cells as a Markdown document a person reads: a title, a table whose columns are
    padded so that the text reads as a table too, what a dash means, and the warnings as a list."""
    headers = [_markdown_cell(name) for name in (headers or [name for name, _read in COLUMNS])]
    table = [headers, *[[_markdown_cell(cell) for cell in row] for row in rows]]
    widths = [max(3, *(len(row[i]) for row in table)) for i in range(len(headers))]

    def line(cells):
        return "| " + " | ".join(cells[i].ljust(widths[i]) for i in range(len(widths))) + " |"

    lines = [f"# {title}", "", line(headers), line(["-" * width for width in widths])]
    lines += [line(row) for row in table[1:]]
    lines += ["", "`-`: the stage did not run on that node, or found nothing to report.", ""]
    if warnings:
        lines += ["## Warnings", "", *[f"- {' '.join(str(text).split())}" for text in warnings], ""]
    return "\n".join(lines)
