"""The variables a launch gets besides the task's own (launch/executor.py Environments).

Built before the executor from what it reads: the installed packages (runtime/
dependencies.py), the enabled envs (db/envs.py), a subscription pull's spec
(runtime/subscriptions.py `pull_env`) and the key of the scripts' notify credential.
"""

from __future__ import annotations

from pathlib import Path

from ..db import envs
from ..db.interface import Tx
from ..model import Run, Task
from ..notifications import rules as notify
from .dependencies import Dependencies
from .subscriptions import pull_env


class TaskEnvironment:
    def __init__(self, *, dependencies: Dependencies, work_dir: Path, host: str, port: int,
                 notify_key: bytes) -> None:
        """`host`/`port`: where this worker listens (a task's notify.py posts there);
        `notify_key`: the scripts' per-attempt credentials' key (empty: none handed out)."""
        self.dependencies = dependencies
        self.work_dir = work_dir
        self.host = host
        self.port = port
        self.notify_key = notify_key

    async def global_env(self, tx: Tx) -> dict[str, str]:
        """The installed packages' PATH/NODE_PATH (docs/dependencies.md), then the
        enabled QingLong envs (same name joined with '&'; a PATH among them wins)."""
        return {**self.dependencies.env, **await envs.global_env(tx)}

    async def task_env(self, tx: Tx, task: Task, run: Run) -> dict[str, str]:
        """One launch's own variables: a subscription pull's spec, a dependency job."""
        return {**await pull_env(tx, task, self.work_dir),
                **await self.dependencies.job_env(tx, task, run)}

    def run_env(self, attempt_id: str) -> dict[str, str]:
        """What a task's notify.py / sendNotify.js need: where to post, and a
        credential good only for notifying while this attempt runs. Not QLEDGE_*:
        a qledge started from a task must not read them as settings."""
        if not self.notify_key:
            return {}
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host  # noqa: S104
        if ":" in host:
            host = f"[{host}]"
        return {"QL_NOTIFY_URL": f"http://{host}:{self.port}/notify",
                "QL_NOTIFY_TOKEN": notify.script_token(self.notify_key, attempt_id)}
