#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation only, as for ansible.builtin.debug: the action plugin of the same name
# (plugins/action/problem_report.py) does the work on the controller and checks the options.

DOCUMENTATION = r"""
---
module: problem_report
short_description: Print every problem a stage's checks found on every node as one table, and decide who stops
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Runs on the controller (an action plugin), once (C(run_once)) after a stage's checks. Each check records the
    problems it finds on a node in the host variable O(var) (a list of mappings with the texts C(check), C(value),
    C(fix) and C(runbook), a page of C(docs/runbooks)) instead of failing at once.
  - Prints one line saying how many problems were found on which nodes and what happens next, then one table
    (node, check, value, fix, runbook) with every problem of every node, through Ansible's display so that no stdout
    callback folds a row.
  - A node of O(hosts) that is no longer among O(remaining) and recorded nothing left the play before the table
    (unreachable, or an error no check caught); it gets a row saying so and cannot go on either.
  - Decides, and returns, which hosts the tasks after it must fail (RV(fail)), each with its message (RV(messages)).
    Without O(exclude) every node stops (RV(action) C(stop)) and the nodes with problems fail. With it (RV(action)
    C(exclude)) only they fail, so that Ansible leaves them out of the run's later plays, and the others go on
    (RV(go_on)); when no node without a problem is left, every node stops.
  - Never fails on the nodes' problems (a failed C(run_once) task would fail every host of the play); only on its
    own arguments or a malformed problem, which is a mistake in the checks.
options:
  var:
    description: The host variable that holds each node's list of problems (for example C(preflight_problems)).
    type: str
    required: true
  stage:
    description: The stage whose checks recorded them, as the messages name it (for example C(preflight)).
    type: str
    required: true
  exclude:
    description:
      - Leave the nodes with a problem out and let the others go on (C(instinct_exclude_failed_nodes)); false stops
        every node.
    type: bool
    default: false
  runbook:
    description: The runbook page that explains the table and the choice (for example C(preflight.md)).
    type: str
    required: true
  runbook_base:
    description: Where the runbook pages are, as the messages name them.
    type: str
    default: docs/runbooks
  hosts:
    description: The nodes to report on, in order; by default every host of the play (C(ansible_play_hosts_all)).
    type: list
    elements: str
  remaining:
    description:
      - The nodes still in the play; by default C(ansible_play_hosts) (the play's hosts less those that failed or
        were unreachable).
    type: list
    elements: str
attributes:
  check_mode:
    support: full
    description: Reads the nodes' variables only; the same report in check mode.
  diff_mode:
    support: none
    description: Returns no diff.
notes:
  - Never C(changed) (a report of the run on the controller, not a change to a node).
  - The tasks after it fail the hosts of RV(fail) with RV(messages); with RV(action) C(stop) that task is marked
    C(any_errors_fatal), so that one failure stops every node as the stage playbooks' rule has it.
seealso:
  - module: instinct.finetune.summary_report
"""

EXAMPLES = r"""
- name: Print every problem of every node in one table
  instinct.finetune.problem_report:
    var: preflight_problems
    stage: preflight
    exclude: "{{ instinct_exclude_failed_nodes }}"
    runbook: preflight.md
  register: preflight_report
  run_once: true

- name: Stop every node when one has a problem
  ansible.builtin.fail:
    msg: "{{ preflight_report.messages[inventory_hostname] }}"
  when: preflight_report.action == 'stop' and inventory_hostname in preflight_report.fail
  any_errors_fatal: true

- name: Leave out the nodes with a problem; the others go on
  ansible.builtin.fail:
    msg: "{{ preflight_report.messages[inventory_hostname] }}"
  when: preflight_report.action == 'exclude' and inventory_hostname in preflight_report.fail
"""

RETURN = r"""
msg:
  description: The printed lines, the headline first, then the table's header, rule and one line per problem.
  returned: always
  type: list
  elements: str
  sample:
    - "preflight: 2 problem(s) on 1 of 2 node(s): node2; every node stops"
    - "node  | check  | value                                                  | fix ...     | runbook"
action:
  description: C(go) (no problem), C(exclude) (the nodes with a problem are left out) or C(stop) (every node stops).
  returned: always
  type: str
  sample: exclude
problem_nodes:
  description: The nodes with a problem, those that left the play before the table included.
  returned: always
  type: list
  elements: str
  sample: [node2]
fail:
  description: The hosts still in the play that the next tasks must fail.
  returned: always
  type: list
  elements: str
  sample: [node2]
go_on:
  description: The hosts that go on (none when every node stops).
  returned: always
  type: list
  elements: str
  sample: [node1]
messages:
  description:
    - The failure message of each host of RV(fail), by host (its problems with their fixes and runbooks, then what
      the run does).
  returned: always
  type: dict
rows:
  description: The table's rows, C([node, check, value, fix, runbook path]) per problem.
  returned: always
  type: list
  elements: list
problems:
  description: How many problems the table holds.
  returned: always
  type: int
"""
