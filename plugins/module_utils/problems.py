# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Every problem a stage's checks found on every node, as one table, and what the run does about them
(pure functions; issue 31).

A check records each problem it finds on a node, instead of failing at once, as a mapping of four texts:
``check`` (what was checked), ``value`` (what was found), ``fix`` (what to do) and ``runbook`` (a page
of docs/runbooks). After the checks, ``problem_report`` reads every node's list, renders one table and
decides: without exclusion every node stops (nothing is installed on part of a cluster); with it the
nodes with a problem are failed, so that Ansible leaves them out of the run's later plays, and the
others go on. A node that left the play before the table (unreachable, or an error no check caught)
recorded nothing and is reported as such.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.instinct.finetune.plugins.module_utils.summary import render_table

PROBLEM_KEYS = ("check", "value", "fix", "runbook")
HEADERS = ("node", "check", "value", "fix", "runbook")


def problem_errors(host, problems):
    """Why ``problems`` (a node's recorded list) is not a list of problems: one text per fault, none when
    it is. A fault is a check's mistake, not the node's, so the report refuses it rather than guess."""
    if not isinstance(problems, list):
        return [f"{host}: the problems are {type(problems).__name__}, not a list"]
    errors = []
    for number, problem in enumerate(problems):
        if not isinstance(problem, dict):
            errors.append(f"{host}: problem {number} is {type(problem).__name__}, not a mapping")
            continue
        missing = [key for key in PROBLEM_KEYS if not str(problem.get(key) or "").strip()]
        if missing:
            errors.append(f"{host}: problem {number} ({problem.get('check') or '?'}) lacks {', '.join(missing)}")
    return errors


def _one_line(text):
    return " ".join(str(text).split())


def node_problems(hostvars, hosts, var, remaining, *, stage, runbook):  # noqa: PLR0913 - each named as the report names it
    """``{host: [problem, ...]}`` for every host of ``hosts``, in order, from each host's variable ``var``.

    A host that is no longer in ``remaining`` (the play's hosts that have not failed) and recorded no
    problem left the play before its checks ended: it gets one problem saying so, since it cannot go
    on either. Raises ValueError, naming every fault, when a recorded list is malformed."""
    found, errors = {}, []
    for host in hosts:
        problems = (hostvars.get(host) or {}).get(var)
        if problems is None:
            problems = []
        errors += problem_errors(host, problems)
        if errors:
            continue
        problems = [{key: _one_line(problem[key]) for key in PROBLEM_KEYS} for problem in problems]
        if not problems and host not in remaining:
            problems = [
                {
                    "check": f"{stage} did not finish",
                    "value": "the node left the play before the table (unreachable, or a failed task above)",
                    "fix": "read the node's error above, fix it or its connection, and run again",
                    "runbook": runbook,
                }
            ]
        found[host] = problems
    if errors:
        raise ValueError("; ".join(errors))
    return found


def table_rows(problems, runbook_base="docs/runbooks"):
    """One row (node, check, value, fix, runbook path) per problem, nodes in order."""
    base = runbook_base.rstrip("/")
    return [
        [host, problem["check"], problem["value"], problem["fix"], f"{base}/{problem['runbook']}"]
        for host, found in problems.items()
        for problem in found
    ]


def _names(hosts):
    return ", ".join(hosts) if hosts else "none"


def decide(problems, remaining, exclude):
    """What the run does after the table, given ``{host: [problem, ...]}`` (node_problems) and the hosts
    still in the play.

    Returns ``{action, problem_nodes, fail, go_on}``: ``problem_nodes`` the nodes with a problem; ``fail`` the hosts
    still in the play that the role must fail now; ``go_on`` those that carry on. ``action``: ``go``
    (no problem), ``exclude`` (the failed nodes are left out, the rest go on) or ``stop`` (every node
    stops: no exclusion, or no node without a problem is left). When stopping, the failed nodes still
    in the play fail; if none is (they all left the play before the table), every remaining host does."""
    failed = [host for host, found in problems.items() if found]
    healthy = [host for host in remaining if host not in failed]
    if not failed:
        return {"action": "go", "problem_nodes": [], "fail": [], "go_on": list(remaining)}
    if exclude and healthy:
        fail = [host for host in remaining if host in failed]
        return {"action": "exclude", "problem_nodes": failed, "fail": fail, "go_on": healthy}
    fail = [host for host in remaining if host in failed] or list(remaining)
    return {"action": "stop", "problem_nodes": failed, "fail": fail, "go_on": []}


def _problem_text(problem, runbook_base):
    value, fix = problem["value"].rstrip("."), problem["fix"].rstrip(".")
    return f"{problem['check']}: {value}. {fix}. See {runbook_base.rstrip('/')}/{problem['runbook']}"


def messages(problems, decision, stage, runbook, runbook_base="docs/runbooks"):
    """The failure message of each host in ``decision['fail']``: its own problems, each with its fix and
    runbook (or, for a node stopped because of the others, their names), then what the run does."""
    page = f"{runbook_base.rstrip('/')}/{runbook}"
    failed = _names(decision["problem_nodes"])
    if decision["action"] == "exclude":
        after = (
            f"It is left out of this run (instinct_exclude_failed_nodes: true), which goes on with "
            f"{_names(decision['go_on'])}. See the table above and {page}"
        )
    else:
        after = (
            f"Every node stops, since {failed} failed {stage} (instinct_exclude_failed_nodes: true would go on "
            f"without them). See the table above and {page}"
        )
    texts = {}
    for host in decision["fail"]:
        own = problems.get(host) or []
        found = "; ".join(_problem_text(problem, runbook_base) for problem in own)
        texts[host] = f"{host} failed {stage}: {found}. {after}" if own else f"{host}: {after}"
    return texts


def headline(problems, decision, stage):
    """The line above the table: how many problems on how many nodes, and what happens next."""
    count = sum(len(found) for found in problems.values())
    failed = decision["problem_nodes"]
    if not failed:
        return f"{stage}: no problem on {len(problems)} node(s)"
    what = {
        "exclude": f"left out: {_names(failed)}; going on with {_names(decision['go_on'])}",
        "stop": "every node stops",
    }[decision["action"]]
    return f"{stage}: {count} problem(s) on {len(failed)} of {len(problems)} node(s): {_names(failed)}; {what}"


def report(hostvars, hosts, remaining, *, var, stage, exclude, runbook, runbook_base="docs/runbooks"):  # noqa: PLR0913 - the task's options
    """Everything ``problem_report`` returns: ``lines`` (headline, then the table when there are
    problems), ``rows``, the decision's keys, ``messages`` by host and ``problems`` (the count)."""
    remaining = [host for host in hosts if host in remaining]
    problems = node_problems(hostvars, hosts, var, remaining, stage=stage, runbook=runbook)
    decision = decide(problems, remaining, exclude)
    rows = table_rows(problems, runbook_base)
    lines = [headline(problems, decision, stage)]
    if rows:
        lines += render_table(rows, HEADERS)
    return dict(
        decision,
        lines=lines,
        rows=rows,
        messages=messages(problems, decision, stage, runbook, runbook_base),
        problems=len(rows),
    )
