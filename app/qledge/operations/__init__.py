"""Operations: the one home both APIs, the CLI, the importer, the benches and the
drills call to change state (docs/architecture.md).

Each operation opens its transaction, makes the checks that belong to the change
(an active run, the kernel's environment limits), and does the follow-ups after
the commit (waking the scheduler or the dispatcher, unlinking deleted logs). The
HTTP layer decodes a request and validates its fields (`http/inputs.py`), calls
one of these, and encodes the answer; nothing here knows about HTTP. Errors are
named exceptions, mapped to responses in `http/errors.py`. The long-lived engine
they hand work to (dispatcher, scheduler, cancellation, sync loop) is runtime/.

Tasks, runs, envs and apps are re-exported here (`operations.trigger(...)`); the
notification, script-run, subscription and dependency operations are imported
by their module (`from qledge.operations import notifications`).
"""

from .apps import NameTaken, WrongCredentials, create_app, delete_app, issue_app_token
from .envs import create_envs, delete_envs, move_env, rename_envs, set_envs_enabled, update_env
from .tasks import (
    ActiveRun,
    Started,
    SystemTask,
    cancel_run,
    create_task,
    delete_tasks,
    set_tasks_enabled,
    start_run,
    stop_task,
    task_for_command,
    trigger,
    update_task,
)

__all__ = [
    "ActiveRun", "NameTaken", "Started", "SystemTask", "WrongCredentials", "cancel_run",
    "create_app", "create_envs", "create_task", "delete_app", "delete_envs", "delete_tasks",
    "issue_app_token", "move_env", "rename_envs", "set_envs_enabled", "set_tasks_enabled",
    "start_run", "stop_task", "task_for_command", "trigger", "update_env", "update_task",
]
