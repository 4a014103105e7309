"""Dependencies: the queues, the job a run gets, and the packages' environment for
every task (docs/dependencies.md; the add/act/change/rebuild/forget/cancel operations
are operations/dependencies.py).

Each ecosystem has one queue: a task (`dependencies: python`, label `dependencies`,
command `qledge deps apply python`, overlap `queue`, so the dispatcher starts one of
its runs at a time, oldest first). Adding, reinstalling or removing packages points
their rows at a run of that queue — the newest queued one if it does the same thing,
else a new run — in one transaction. At spawn time the worker hands the run its job
(`job_env`): the specs of the rows that still point at it, and the declared list a
repair rebuilds from. The transaction that ends the run records its end on those rows
(`on_terminal`), and a package's status is derived from that run.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from .. import ids
from ..clock import now_ms
from ..db import dependencies as deps
from ..db import rows, runs, tasks
from ..db.interface import Database, Tx
from ..dependencies import dirs
from ..dependencies.spec import ECOSYSTEMS, ENV_NAME, Ecosystem, Job
from ..launch.executor import BASE_PATH
from ..model import Overlap, Run, Task, Trigger
from ..settings import Settings
from ..tasks.writable import TaskFields, changed_from, is_empty
from .loop import PeriodicLoop

log = logging.getLogger("qledge.dependencies")
LABEL = "dependencies"
REFRESH_S = 300.0  # the tasks' PATH/NODE_PATH are re-read at least this often
def queue_command(eco: str) -> str:
    # -I: the work dir (writable by every task) is not on sys.path, PYTHON* are ignored
    # (runtime/subscriptions.py, `pull_command`).
    return f"{shlex.quote(sys.executable)} -I -m qledge deps apply {eco}"


def queue_task_fields(eco: str, timeout_s: int) -> TaskFields:
    return TaskFields(name=f"dependencies: {eco}", command=queue_command(eco), schedule=None,
                      enabled=True, timeout_s=timeout_s, overlap=Overlap.QUEUE,
                      labels=[LABEL], retries=0, env={})


def npm_available() -> bool:
    return shutil.which("npm", path=BASE_PATH) is not None


# -- the queues ------------------------------------------------------------------------

async def _queue_task(tx: Tx, eco: str, timeout_s: int) -> Task:
    """The ecosystem's queue task, in step with the settings (recreated if deleted)."""
    fields = queue_task_fields(eco, timeout_s)
    task_id = await deps.task_of(tx, eco)
    if task_id is not None:
        try:
            task = await tasks.get_task(tx, task_id)
        except rows.NotFound:
            pass
        else:
            changed = changed_from(task, fields)
            return task if is_empty(changed) else await tasks.update_task(
                tx, task.id, changed, now_ms())
    task = await tasks.create_task(tx, ids.uuid7(), fields, now_ms())
    await deps.set_task(tx, eco, task.id)
    return task


async def queue_in(tx: Tx, eco: str, dep_ids: Iterable[str], action: str, *,
                   timeout_s: int, kick: Callable[[], None]) -> str:
    """`queue_job`, and the dispatcher woken (`kick`) once the transaction commits."""
    run_id = await queue_job(tx, eco, dep_ids, action, timeout_s)
    tx.on_commit(kick)
    return run_id


async def queue_job(tx: Tx, eco: str, dep_ids: Iterable[str], action: str,
                    timeout_s: int) -> str:
    """Point these rows at a run of the ecosystem's queue that does `action` (install,
    remove or rebuild), inside the caller's transaction; the run's id. The newest job of
    the queue is reused while it waits and does the same; a later wish for a package
    thus always lands in a run that starts after the earlier one (the latest wins)."""
    now = now_ms()
    newest = await deps.newest_job(tx, eco)
    if newest is not None and newest[2] == "queued" and newest[1] == action:
        run_id = newest[0]
    else:
        task = await _queue_task(tx, eco, timeout_s)
        run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.MANUAL, now)
        await deps.add_job(tx, run.id, eco, action)
        run_id = run.id
    await deps.point(tx, dep_ids, "remove" if action == "remove" else "install", run_id, now)
    return run_id


# -- the runs' jobs, their ends, the tasks' environment --------------------------------

class Dependencies:
    """The job of each queue run, the terminal memo, and the packages' env cache."""

    def __init__(self, db: Database, settings: Settings, kick: Callable[[], None]) -> None:
        self.db = db
        self.settings = settings
        self.kick = kick  # the dispatcher's wake, after a commit that queued a run
        self.env: dict[str, str] = {}
        self.loop = PeriodicLoop("dependencies", REFRESH_S, self.refresh)
        db.on_terminal(self.on_terminal)

    async def start(self) -> None:
        await self.refresh()
        for eco in ECOSYSTEMS:
            try:
                await self._repair_at_start(eco)
            except Exception:
                log.exception("checking the %s dependencies failed", eco)
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()

    async def refresh(self) -> float | None:
        self.env = await asyncio.to_thread(dirs.task_env, self.settings.work_path,
                                           BASE_PATH)
        return None

    async def align_tasks(self) -> None:
        """The queue tasks' system fields as this version writes them (an earlier
        version's command gets no job, `job_env`); a deleted one is made when needed."""
        async with self.db.write() as tx:
            for eco in ECOSYSTEMS:
                task_id = await deps.task_of(tx, eco)
                if task_id is None:
                    continue
                try:
                    await tasks.get_task(tx, task_id)
                except rows.NotFound:
                    continue
                await _queue_task(tx, eco, self.settings.deps_timeout_s)

    async def _repair_at_start(self, eco: Ecosystem) -> None:
        """Queue a visible rebuild when the folder no longer holds what is declared: a
        venv of another Python (an image upgrade), a change cut short, a folder gone.
        Not when a job waits (it repairs first) nor after a failed rebuild (no loop)."""
        if eco == "node" and not npm_available():
            return
        async with self.db.read() as tx:
            declared = await deps.installed(tx, eco)
            newest = await deps.newest_job(tx, eco)
        if newest is not None and (newest[2] in ("queued", "running") or (
                newest[1] == "rebuild" and newest[2] != "succeeded")):
            return
        work = self.settings.work_path
        reason = await asyncio.to_thread(_needs_rebuild, work, eco, bool(declared))
        if not reason:
            return
        log.warning("rebuilding the %s dependencies: %s", eco, reason)
        async with self.db.write() as tx:
            await queue_in(tx, eco, [d.id for d in declared], "rebuild",
                           timeout_s=self.settings.deps_timeout_s, kick=self.kick)

    async def job_env(self, tx: Tx, task: Task, run: Run) -> dict[str, str]:
        """{ENV_NAME: job} for a run of a queue task; {} for any other task — and for
        that task too once its command or env is not exactly the system's (the job
        holds the mirrors' credentials; both APIs refuse such edits,
        `operations.SystemTask`). A run without a job (its task started by hand)
        repairs if needed and does nothing."""
        if LABEL not in task.labels or task.env:
            return {}
        eco = await deps.is_queue_task(tx, task.id)
        if eco is None or task.command != queue_command(eco):
            return {}
        action = await deps.job_action(tx, run.id) or "install"
        mine = await deps.of_run(tx, run.id)
        specs = [d.name if action == "remove" else d.spec for d in mine]
        declared = [d.spec for d in await deps.installed(tx, eco) if d.last_run_id != run.id]
        s = self.settings
        job = Job(run_id=run.id, ecosystem="python" if eco == "python" else "node",
                  action="remove" if action == "remove" else
                  "rebuild" if action == "rebuild" else "install",
                  specs=tuple(specs), declared=tuple(declared),
                  deps_dir=str(dirs.root(s.work_path)), pip_index_url=s.pip_index_url,
                  pip_extra_index_urls=tuple(s.pip_extra_index_urls.split()),
                  npm_registry=s.npm_registry)
        return {ENV_NAME: msgspec.json.encode(job).decode()}

    async def on_terminal(self, tx: Tx, old: Run, new: Run, now: int) -> None:
        if await deps.is_queue_task(tx, new.task_id) is None:
            return
        await deps.record_result(tx, new.id, str(new.status))
        tx.on_commit(self.loop.poke)  # the tasks' PATH/NODE_PATH may have changed


def _needs_rebuild(work: Path, eco: Ecosystem, declared: bool) -> str:
    if dirs.changing(work, eco):
        return "a change was cut short"
    if eco == "python":
        check = dirs.check_venv(work)
        if check.state in ("other_python", "broken"):
            return f"the Python environment is unusable: {check.reason}"
        if check.state == "absent" and declared:
            return "the Python environment is missing"
        return ""
    if declared and not dirs.node_modules(work).is_dir():
        return "node_modules is missing"
    return ""
