"""Helpers of the action plugins' tests."""

from unittest.mock import MagicMock


def mock_action(plugin, args, check_mode=False, delegate_to=None):
    """``plugin``'s ActionModule for a task with these options, run on a mock connection with no
    remote temporary folder; the loader, templar and the rest are mocks too."""
    task = MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check_mode
    task.delegate_to = delegate_to
    task.action = f"instinct.finetune.{plugin.__name__.rsplit('.', 1)[-1]}"
    connection = MagicMock()
    connection._shell.tmpdir = None
    return plugin.ActionModule(task, connection, MagicMock(), MagicMock(), MagicMock(), MagicMock())
