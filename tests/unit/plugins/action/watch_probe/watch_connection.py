# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""A test's action plugin (tests/unit/plugins/action/test_finetune_watch.py, on ANSIBLE_ACTION_PLUGINS):
the connection settings of a node as ansible-core made them for the task's own host (``mode: own``),
or as instinct.finetune.finetune_watch makes them for each of ``hosts`` from one task (``mode:
ranks``). It connects to nothing: it reads the plugins' options."""

from ansible_collections.instinct.finetune.plugins.action.finetune_watch import ActionModule as Watch
from ansible_collections.instinct.finetune.plugins.action.finetune_watch import _Rank


def _options(plugin):
    """A plugin's options without its secrets."""
    return {key: value for key, value in plugin.get_options().items() if "pass" not in key}


def settings(connection, templar, variables, play_context):
    become = connection.become
    return {
        "connection": connection._load_name,
        "options": _options(connection),
        "shell": connection._shell._load_name,
        "shell_options": _options(connection._shell),
        "become": become.name if become else None,
        "become_options": _options(become) if become else None,
        "remote_addr": play_context.remote_addr,
        "remote_user": play_context.remote_user,
        "port": play_context.port,
        "python": templar.template(variables.get("ansible_python_interpreter")),
        "secrets": {"password": bool(play_context.password), "become_pass": bool(play_context.become_pass)},
    }


class ActionModule(Watch):
    _VALID_ARGS = frozenset(("mode", "hosts"))

    def run(self, tmp=None, task_vars=None):
        if self._task.args["mode"] == "own":
            return {"changed": False, "own": settings(self._connection, self._templar, task_vars, self._play_context)}
        passwords = self._passwords(task_vars)
        ranks = {}
        for host in self._task.args["hosts"]:
            rank = _Rank.open(self._task, self._loader, self._play_context.connection_lockfd, host, passwords)
            ranks[host] = settings(rank._connection, rank._templar, rank.module_vars, rank._play_context)
        return {"changed": False, "ranks": ranks}
