# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of instinct.finetune.finetune_watch: one task that follows a job to its end
on every node.

The task runs once (``run_once``) and reaches each rank's node itself, as a task delegated to that
node would: the node's variables in the play (``VariableManager.get_vars`` with the play and the
task, as ``delegate_to`` gets them), its connection plugin and options, its become settings and its
Python. Each connection is made once and reused every round. A round reads one running rank with
instinct.finetune.finetune_job_status waiting up to the interval (it returns as soon as that rank
ends), then every other rank without waiting, at most ``forks`` at a time in threads; the pure
``watch_decision`` (module_utils/jobstate.py) then decides for the whole job, and every rank still
running is stopped when one died, was lost or the job stalled. So a job of any node count is watched
by one Ansible worker; the loop in one task keeps the play at a constant depth and the controller at
a constant memory however many rounds the job takes (a task that included itself once per round
died of recursion after about 246 rounds).

With ``launcher: slurm`` the job is one Slurm batch job for every node: each rank's read runs
finetune_job_status with ``launcher: slurm`` (squeue and sacct on the node), and stopping every rank
is one ``scancel JOBID`` run through ``ansible.legacy.command`` on ``slurm_controller`` (the first
rank unless another inventory host is named), reached as the ranks are. A rank whose job waits for
an allocation reads as running with ``slurm.phase`` pending: its progress line says ``pending``
with Slurm's reason, and it reports no idle time, so a job waiting for nodes is never stalled.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import contextvars
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ansible import constants as C
from ansible import context
from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleValueOmittedError
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.playbook.play_context import PlayContext
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import become_loader, connection_loader
from ansible.template import Templar
from ansible.utils.display import Display

from ansible_collections.instinct.finetune.plugins.module_utils.jobstate import (
    first_read_failure,
    stall_message,
    watch_decision,
    watch_entry,
    watch_waiter,
)
from ansible_collections.instinct.finetune.plugins.module_utils.slurm import (
    SlurmError,
    parse_sbatch_parsable,
    scancel_argv,
    scancel_found_nothing,
)
from ansible_collections.instinct.finetune.plugins.module_utils.slurm_jobstate import pending_lines

display = Display()

STATUS_MODULE = "instinct.finetune.finetune_job_status"
STOP_MODULE = "ansible.legacy.systemd_service"
RUNBOOK = "docs/runbooks/finetune-job.md"
# Under Slurm: every rank stopped at once by one scancel of the job.
COMMAND_MODULE = "ansible.legacy.command"
SLURM_RUNBOOK = "docs/runbooks/slurm.md"
# What a rank's last read returns of finetune_job_status's result: its return values.
LEFT_OUT = frozenset(("changed", "failed", "invocation", "warnings", "deprecations"))


def _at(stall):
    """The wall time of the last step, on the controller's clock."""
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(time.time() - stall["idle_seconds"]))


def _slurm_lines(lines, ranks, board, last):
    """The round's progress lines, a rank whose Slurm job waits for an allocation saying so with
    Slurm's reason (``pending (Resources)``) from its last good read."""
    reports = {host: (board.get(host) or {}).get("report") for host in ranks}
    return pending_lines(lines, ranks, reports, {host: (last.get(host) or {}).get("slurm") for host in ranks})


def _plugin_options(plugin, plugin_type, variables, templar, task_keys):
    """A shell or become plugin's options from the node's variables (TaskExecutor._set_plugin_options)."""
    options = {}
    for name in C.config.get_plugin_vars(plugin_type, plugin._load_name):
        if name in variables:
            with contextlib.suppress(AnsibleValueOmittedError):
                options[name] = templar.template(variables[name])
    plugin.set_options(task_keys=task_keys, var_options=options)


def _node_variables(task, host_name):
    """The node's Host and its variables for this task: its inventory and facts, the play's and the
    role's (VariableManager.get_delegated_vars_and_hostname)."""
    variable_manager = task.get_variable_manager()
    # The inventory's Host object: the variable manager holds the inventory it reads hosts from.
    host = variable_manager._inventory.get_host(host_name)
    if host is None:
        raise AnsibleError(f"{host_name} is a rank of the job but not a host of the inventory")
    variables = variable_manager.get_vars(play=task.get_play(), host=host, task=task, include_hostvars=True)
    # Interpreter discovery records the node's Python in these facts for the next rounds.
    variables["ansible_facts"] = dict(variables.get("ansible_facts") or {})
    return host, variables


def _node_play_context(base, task, host, variables, templar):
    """The play context of the node (TaskExecutor._execute_internal): ``base`` (the play's and the
    command line's), then the task's keywords and the node's connection variables."""
    play_context = base.set_task_and_variable_override(task=task, variables=variables, templar=templar)
    play_context.post_validate(templar=templar)
    if not play_context.remote_addr:
        play_context.remote_addr = host.address
    return play_context


def _node_connection(task, host_name, variables, templar, play_context):
    """The node's connection plugin with its become plugin (TaskExecutor._get_connection and
    _set_become_plugin): ansible_connection, else the task's; ansible_become and
    ansible_become_method, else the task's."""
    if variables.get("ansible_connection") is not None:
        name = templar.template(variables["ansible_connection"])
    else:
        name = task.connection
    play_context.connection = name
    connection = connection_loader.get(name, play_context, new_stdin=None, task_uuid=task._uuid,
                                       ansible_playbook_pid=to_text(os.getppid()))  # fmt: skip
    if not connection:
        raise AnsibleError(f"the connection plugin '{name}' was not found")
    if (connection.supports_persistence and C.USE_PERSISTENT_CONNECTIONS) or connection.force_persistence:
        raise AnsibleError(f"the watch does not reach nodes over a persistent connection ('{name}')")
    if variables.get("ansible_become") is not None:
        become = boolean(templar.template(variables["ansible_become"]))
    else:
        become = task.become
    plugin = None
    if become:
        method = variables.get("ansible_become_method")
        method = templar.template(method) if method else task.become_method
        plugin = become_loader.get(method)
        if not plugin:
            raise AnsibleError(f"the become method '{method}' was not found")
    connection.set_become_plugin(plugin)
    if plugin:
        if getattr(plugin, "require_tty", False) and not getattr(connection, "has_tty", False):
            raise AnsibleError(f"the '{name}' connection has no TTY, which the become method '{plugin.name}' needs")
        play_context.set_become_plugin(plugin.name)
    play_context.set_attributes_from_plugin(connection)
    return connection


def _set_node_options(task, connection, variables, templar, play_context):
    """The options of the node's connection, shell and become plugins from its variables and the
    task's keywords (TaskExecutor._set_connection_options)."""
    task_keys = task.dump_attrs()
    # The task's timeout is not the connection's; its retries are not the connection's.
    task_keys["timeout"] = play_context.timeout
    if play_context.password:
        task_keys["password"] = play_context.password
    del task_keys["retries"]
    var_options = connection._resolve_option_variables(variables, templar)
    connection.set_options(task_keys=task_keys, var_options=var_options)
    _plugin_options(connection._shell, "shell", variables, templar, task_keys)
    if connection.become is not None:
        if play_context.become_pass:
            task_keys["become_pass"] = play_context.become_pass
        _plugin_options(connection.become, "become", variables, templar, task_keys)
        for option in ("become_user", "become_flags", "become_exe", "become_pass"):
            with contextlib.suppress(KeyError):  # a become plugin without that option
                setattr(play_context, option, connection.become.get_option(option))
        play_context.prompt = connection.become.prompt


class _Rank(ActionBase):
    """One rank's node, reached as a task delegated to it would reach it (see ``open``)."""

    def run(self, tmp=None, task_vars=None):
        raise NotImplementedError("the watch calls call() of each rank")

    @classmethod
    def open(cls, task, loader, lockfd, host_name, passwords):
        """The rank's node with its own connection, following ansible-core 2.19's TaskExecutor for a
        task with ``delegate_to``. ``task`` is the watch's task, ``lockfd`` its play context's
        connection lock, ``passwords`` those of the command line (-k, -K), which a node's own variables
        override as they would for its own task. The module runs with the node's variables and the
        connection's (ansible_python_interpreter included), as the executor hands them to a task."""
        host, variables = _node_variables(task, host_name)
        templar = Templar(loader=loader, variables=variables)
        base = PlayContext(play=task.get_play(), passwords=passwords, connection_lockfd=lockfd)
        play_context = _node_play_context(base, task, host, variables, templar)
        connection = _node_connection(task, host_name, variables, templar, play_context)
        _set_node_options(task, connection, variables, templar, play_context)
        module_vars = dict(variables)
        connection.update_vars(module_vars)
        connection._play_context = play_context.set_task_and_variable_override(
            task=task, variables=module_vars, templar=templar
        )
        rank = cls(task=task, connection=connection, play_context=play_context, loader=loader,
                   templar=Templar(loader=loader, variables=module_vars), shared_loader_obj=None)  # fmt: skip
        rank.host = host_name
        rank.module_vars = module_vars
        return rank

    def call(self, module, args):
        """The module's result on the node; a node that cannot be reached or an error before the module
        ran reads as ``unreachable`` or ``failed`` with the reason, never as an exception."""
        try:
            result = self._execute_module(module, module_args=args, task_vars=self.module_vars)
        except AnsibleConnectionFailure as err:
            return {"unreachable": True, "msg": to_text(err)}
        except AnsibleError as err:
            return {"failed": True, "msg": to_text(err)}
        return {key: value for key, value in result.items() if not key.startswith("_") and key != "ansible_facts"}

    def close(self):
        """Remove the node's temporary folder, if one is left, and close the connection."""
        with contextlib.suppress(AnsibleError):
            self.cleanup(force=True)
        self._connection.close()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("job", "ranks", "status", "interval", "timeout", "stall_minutes", "launcher",
                             "slurm_job_id", "slurm_controller", "scancel", "slurm_job_name",
                             "slurm_user"))  # fmt: skip

    def _passwords(self, task_vars):
        """The passwords given on the command line (-k, -K). The task's play context holds them unless
        the variables of the host the task runs for replaced them (then a node without its own gets
        none, rather than another node's)."""
        become = getattr(self._connection, "become", None)
        become_vars = [name for name in C.config.get_plugin_vars("become", become._load_name)
                       if "pass" in name] if become else []  # fmt: skip
        own_conn_pass = any(name in task_vars for name in C.MAGIC_VARIABLE_MAPPING["password"])
        own_become_pass = any(name in task_vars for name in become_vars)
        return {
            "conn_pass": "" if own_conn_pass else self._play_context.password,
            "become_pass": "" if own_become_pass else self._play_context.become_pass,
        }

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validated, args = self.validate_argument_spec(
            argument_spec={
                "job": {"type": "str", "required": True},
                "ranks": {"type": "list", "elements": "str", "required": True},
                "status": {"type": "dict", "required": True},
                "interval": {"type": "int", "default": 60},
                "timeout": {"type": "float", "required": True},
                "stall_minutes": {"type": "float", "default": 0},
                "launcher": {"type": "str", "choices": ["systemd", "slurm"], "default": "systemd"},
                "slurm_job_id": {"type": "str"},
                "slurm_controller": {"type": "str", "default": ""},
                "scancel": {"type": "str", "default": "scancel"},
                "slurm_job_name": {"type": "str", "default": ""},
                "slurm_user": {"type": "str", "default": ""},
            },
            required_if=[("launcher", "slurm", ("slurm_job_id",))],
        )
        job, ranks, status = args["job"], args["ranks"], args["status"]
        needed = "slurm_job_id_file" if args["launcher"] == "slurm" else "unit"
        missing = [host for host in ranks if not isinstance(status.get(host), dict) or not status[host].get(needed)]
        if not ranks or missing:
            result.update(failed=True, msg=(
                f"{task_vars['inventory_hostname']}: watching job {job} needs the status options of every rank: "
                f"{'no ranks given' if not ranks else 'none for ' + ', '.join(missing)} (status has "
                f"{', '.join(sorted(status)) or 'none'}). Give status as a mapping of each rank's host to its "
                f"finetune_job_status options, {needed} included. See {RUNBOOK}"))  # fmt: skip
            return result
        slurm = None
        if args["launcher"] == "slurm":
            slurm, refused = self._slurm_job(args, task_vars)
            if refused:
                result.update(failed=True, msg=refused)
                return result
        passwords = self._passwords(task_vars)
        opened = {}
        try:
            for host in ranks + ([slurm["controller"]] if slurm and slurm["controller"] not in ranks else []):
                try:
                    opened[host] = _Rank.open(self._task, self._loader, self._play_context.connection_lockfd, host,
                                              passwords)  # fmt: skip
                except AnsibleError as err:
                    result.update(failed=True, msg=(
                        f"{host}: the watch of job {job} cannot reach this node as its own tasks do: {to_text(err)}. "
                        f"Fix the node's connection settings in the inventory. See {RUNBOOK}"))  # fmt: skip
                    return result
            # Reads and stops of the other ranks run at most forks at a time: the number of
            # connections this run was told it may hold at once.
            forks = int(context.CLIARGS.get("forks") or C.DEFAULT_FORKS)
            with ThreadPoolExecutor(max_workers=max(1, min(forks, len(ranks)))) as pool:
                result.update(self._watch(args, opened, pool, slurm))
        finally:
            for rank in opened.values():
                rank.close()
        return result

    @staticmethod
    def _slurm_job(args, task_vars):
        """The Slurm job to watch, ``{"job_id", "controller"}``, or why the watch refuses it."""
        job, ranks, status = args["job"], args["ranks"], args["status"]
        where = task_vars["inventory_hostname"]
        try:
            parsed = parse_sbatch_parsable(args["slurm_job_id"])
        except SlurmError as err:
            parsed, why = None, str(err)
        else:
            why = "it is empty"
        if parsed is None:
            return None, (
                f"{where}: watching job {job} through Slurm needs slurm_job_id, the id sbatch --parsable printed "
                f"when the job was submitted, but {why}. See {SLURM_RUNBOOK}")  # fmt: skip
        other = [host for host in ranks if status[host].get("launcher", "slurm") != "slurm"]
        if other:
            return None, (
                f"{where}: watching job {job} through Slurm, but the status options of {', '.join(other)} say "
                f"launcher {status[other[0]]['launcher']}. Give every rank launcher slurm, or none. "
                f"See {RUNBOOK}")  # fmt: skip
        controller = args["slurm_controller"] or ranks[0]
        return {"job_id": parsed["job_id"], "controller": controller, "cancelled": False, "changed": False}, ""

    @staticmethod
    def _cancel(args, opened, slurm):
        """One scancel of the job on its controller host, once in the watch: every rank on every node
        stops, and the next rounds read them ending. Records in ``slurm`` that it ran and whether it
        changed something; returns why it failed ("" when it did not)."""
        if slurm["cancelled"]:
            return ""
        slurm["cancelled"] = True
        argv = scancel_argv(slurm["job_id"], args["scancel"], name=args["slurm_job_name"], user=args["slurm_user"])
        host = slurm["controller"]
        answer = opened[host].call(COMMAND_MODULE, {"argv": argv})
        slurm["changed"] = bool(answer.get("changed"))
        if answer.get("failed") or answer.get("unreachable") or answer.get("rc", 0) != 0:
            if not answer.get("unreachable") and scancel_found_nothing(answer.get("stderr")):
                # The job ended before the scancel (srun ends it when a rank fails): the next rounds
                # read how every rank ended.
                slurm["changed"] = False
                return ""
            said = (answer.get("stderr") or answer.get("msg") or answer.get("stdout") or "no output").strip()
            return (
                f"{host}: cancelling Slurm job {slurm['job_id']} of job {args['job']} ({' '.join(argv)}) failed: "
                f"{said}. Cancel it by hand (scancel {slurm['job_id']}) where Slurm's commands reach its "
                f"controller. See {SLURM_RUNBOOK}")  # fmt: skip
        return ""

    def _watch(self, args, opened, pool, slurm=None):  # noqa: PLR0912, PLR0915 - the rounds' loop, both launchers
        job, ranks, status = args["job"], args["ranks"], args["status"]
        interval = max(args["interval"], 0)
        stall_seconds = args["stall_minutes"] * 60
        # A rank the watch cannot read for this long is lost (jobstate.watch_entry).
        lost_after = 3 * interval + 120
        since = time.time()
        deadline = time.monotonic() + args["timeout"]

        def each(hosts, call):
            # The worker's context (Ansible's deferred warnings) in every thread.
            futures = {host: pool.submit(contextvars.copy_context().run, call, host) for host in hosts}
            return {host: future.result() for host, future in futures.items()}

        def read(host, wait=0):
            launcher = {"launcher": "slurm"} if slurm else {}
            return opened[host].call(STATUS_MODULE, dict(status[host], wait_seconds=int(wait), **launcher))

        board = {}
        last = {}
        rounds = 0
        stopped = False
        stall = None
        first_failed = []
        while True:
            rounds += 1
            left = max(deadline - time.monotonic(), 0)
            waiter = watch_waiter(ranks, board)
            reads = {}
            if waiter:
                reads[waiter] = read(waiter, min(interval, left))
            elif rounds > 1:
                time.sleep(min(interval, left))
            reads.update(each([host for host in ranks if host != waiter], read))
            refused = first_read_failure(board, reads, ranks)
            if refused:
                host, msg = refused
                return {"failed": True, "msg": (
                    f"{host}: the watch of job {job} could not read this node's rank: {msg}. Nothing was "
                    f"stopped; fix the cause and run the playbook again, which re-attaches to the running job. "
                    f"See {RUNBOOK}")}  # fmt: skip
            now = time.time()
            for host in ranks:
                board[host] = watch_entry(board.get(host), reads[host], now, since, lost_after)
                if not reads[host].get("failed") and not reads[host].get("unreachable"):
                    last[host] = {key: value for key, value in reads[host].items() if key not in LEFT_OUT}
            round_ = watch_decision(board, ranks, stall_seconds, stall)
            stall = round_["stall"]
            first_failed = first_failed or round_["failed"]
            if slurm:
                round_["lines"] = _slurm_lines(round_["lines"], ranks, board, last)
            display.display(f"job {job}, round {rounds}:\n  " + "\n  ".join(round_["lines"]))
            if round_["stop"] and slurm:
                # One scancel stops every rank (once: the next rounds read them ending).
                refused = self._cancel(args, opened, slurm)
                stopped = stopped or slurm["changed"]
                if refused:
                    return {"failed": True, "changed": stopped, "msg": refused}
            elif round_["stop"]:
                # A rank that died, was lost or hung leaves the others waiting in their next collective.
                stops = each(round_["stop"], lambda host: opened[host].call(
                    STOP_MODULE, {"name": status[host]["unit"], "state": "stopped"}))  # fmt: skip
                stopped = stopped or any(stop.get("changed") for stop in stops.values())
                for host, stop in stops.items():
                    if stop.get("failed"):
                        return {"failed": True, "changed": stopped, "msg": (
                            f"{host}: stopping {status[host]['unit']} of job {job} failed: {stop.get('msg')}. Stop "
                            f"it by hand (systemctl stop {status[host]['unit']}). See {RUNBOOK}")}  # fmt: skip
                # Not over: the next round reads the stopped ranks, at once since they ended.
            if round_["over"] or time.monotonic() >= deadline:
                break
        by_host = {}
        for host in ranks:
            entry = board[host]
            by_host[host] = dict(last.get(host) or {}, state=(entry["report"] or {}).get("state", "starting"),
                                 read_error=entry["error"])  # fmt: skip
        return {
            "changed": stopped,
            "rounds": rounds,
            "lines": round_["lines"],
            "first_failed": first_failed,
            "stall": stall,
            "stall_message": stall_message(stall, job, stall_seconds, _at(stall)) if stall else "",
            "timed_out": bool(round_["running"]) and time.monotonic() >= deadline,
            "by_host": by_host,
        }
