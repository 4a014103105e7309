"""Dependencies: their operations, the queues, the job a run gets, and the packages'
environment for every task (docs/dependencies.md).

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
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from .. import ids
from ..clock import now_ms
from ..db import dependencies as deps
from ..db import rows, runs, tasks
from ..db.interface import Tx
from ..dependencies import dirs
from ..dependencies.spec import ECOSYSTEMS, ENV_NAME, Ecosystem, Job, package, status
from ..launch.executor import BASE_PATH
from ..model import Overlap, Run, Task, Trigger
from .loop import PeriodicLoop

if TYPE_CHECKING:
    from .lifecycle import Runtime

log = logging.getLogger("qledge.dependencies")
LABEL = "dependencies"
REFRESH_S = 300.0  # the tasks' PATH/NODE_PATH are re-read at least this often
LINUX = ("system packages cannot be installed: the container runs unprivileged and"
         " its root filesystem is the image's. Build them into the image instead"
         " (EXTRA_PACKAGES, docs/dependencies.md, 'System packages')")
NO_NPM = ("node packages need the image's -node variant: this image has no npm"
          " (docs/image.md)")
# A derived status that keeps a package in the folder or has a run pending.
HELD = frozenset({"installed", "queued", "installing", "removing"})


class Unavailable(Exception):
    """This kind of package cannot be installed on this appliance (the message says
    what to do instead)."""


class StillInstalled(Exception):
    """Refused: forgetting a package that is installed or has a run pending."""


def queue_command(eco: str) -> str:
    # -I: the work dir (writable by every task) is not on sys.path, PYTHON* are ignored
    # (runtime/subscriptions.py, `pull_command`).
    return f"{shlex.quote(sys.executable)} -I -m qledge deps apply {eco}"


def queue_task_fields(eco: str, timeout_s: int) -> dict[str, Any]:
    return {"name": f"dependencies: {eco}", "command": queue_command(eco), "schedule": None,
            "enabled": True, "timeout_s": timeout_s, "overlap": Overlap.QUEUE,
            "labels": [LABEL], "retries": 0, "env": {}}


def npm_available() -> bool:
    return shutil.which("npm", path=BASE_PATH) is not None


def check_ecosystem(eco: str) -> Ecosystem:
    if eco == "linux":
        raise Unavailable(LINUX)
    if eco == "node" and not npm_available():
        raise Unavailable(NO_NPM)
    if eco not in ECOSYSTEMS:
        raise Unavailable(f"unknown type {eco[:20]!r}: python, node or linux")
    return "python" if eco == "python" else "node"


def derived_status(dep: deps.Dependency) -> str:
    return status(dep.action, dep.run_status or dep.last_result)


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
            changed = {k: v for k, v in fields.items() if getattr(task, k) != v}
            return await tasks.update_task(tx, task.id, changed, now_ms()) if changed else task
    task = await tasks.create_task(tx, ids.uuid7(), fields, now_ms())
    await deps.set_task(tx, eco, task.id)
    return task


async def queue_in(rt: Runtime, tx: Tx, eco: str, dep_ids: Iterable[str], action: str) -> str:
    """`queue_job`, and the dispatcher woken once the transaction commits."""
    run_id = await queue_job(tx, eco, dep_ids, action, rt.settings.deps_timeout_s)
    tx.on_commit(rt.kick)
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


# -- operations ------------------------------------------------------------------------

class Queued(msgspec.Struct, frozen=True, kw_only=True):
    items: list[deps.Dependency]
    run_ids: list[str]


async def add(rt: Runtime, eco: str, specs: list[str], remark: str | None = None) -> Queued:
    """Declare packages and queue their install (one run); SpecError for a bad spec."""
    kind = check_ecosystem(eco)
    for spec in specs:
        package(kind, spec)  # every spec checked before anything is written
    async with rt.db.write() as tx:
        dep_ids = await deps.declare(tx, kind, specs, now_ms(), remark=remark)
        run_id = await queue_in(rt, tx, kind, dep_ids, "install")
        items = await deps.by_ids(tx, dep_ids)
    return Queued(items=items, run_ids=[run_id])


async def act(rt: Runtime, dep_ids: list[str], action: str) -> Queued:
    """Reinstall (`install`) or remove these packages: one run per ecosystem."""
    async with rt.db.write() as tx:
        found = await deps.by_ids(tx, dep_ids)
        by_eco: dict[str, list[str]] = {}
        for dep in found:
            by_eco.setdefault(dep.type, []).append(dep.id)
        if action == "install":
            for eco in by_eco:
                check_ecosystem(eco)
        run_ids = [await queue_in(rt, tx, eco, group, action)
                   for eco, group in by_eco.items()]
        items = await deps.by_ids(tx, dep_ids)
    return Queued(items=items, run_ids=run_ids)


async def change(rt: Runtime, dep_id: str, spec: str, remark: str | None) -> Queued:
    """A new spec for a package (QingLong's PUT): saved, then installed."""
    async with rt.db.write() as tx:
        dep = await deps.get(tx, dep_id)
        pkg = package(check_ecosystem(dep.type), spec)
        if await deps.name_taken(tx, dep.type, pkg.name, dep.id):
            raise StillInstalled(f"{pkg.name} is declared already (another entry)")
        await deps.set_spec(tx, dep.id, pkg.spec, remark, now_ms())
        run_id = await queue_in(rt, tx, dep.type, [dep.id], "install")
        items = await deps.by_ids(tx, [dep.id])
    return Queued(items=items, run_ids=[run_id])


async def rebuild(rt: Runtime, eco: str) -> str:
    """Rebuild an ecosystem's folder from the packages declared and installed."""
    kind = check_ecosystem(eco)
    async with rt.db.write() as tx:
        rows_ = await deps.installed(tx, kind)
        return await queue_in(rt, tx, kind, [d.id for d in rows_], "rebuild")


async def forget(rt: Runtime, dep_ids: list[str]) -> None:
    """Drop rows that hold nothing (removed, failed, cancelled): StillInstalled else."""
    async with rt.db.write() as tx:
        for dep in await deps.by_ids(tx, dep_ids):
            if derived_status(dep) in HELD:
                raise StillInstalled(f"{dep.name} is {derived_status(dep)}: remove it first")
        await deps.forget(tx, dep_ids)


async def cancel(rt: Runtime, dep_ids: list[str]) -> list[str]:
    """Cancel the active runs of these packages (a run may hold other packages too)."""
    from ..operations import cancel_run
    from .cancellation import RunTerminal

    async with rt.db.read() as tx:
        found = await deps.by_ids(tx, dep_ids)
    cancelled = []
    for run_id in dict.fromkeys(d.last_run_id for d in found if d.run_status in
                                ("queued", "running") and d.last_run_id):
        try:
            await cancel_run(rt, run_id)
        except (RunTerminal, rows.Conflict):
            continue
        cancelled.append(run_id)
    return cancelled


# -- the runs' jobs, their ends, the tasks' environment --------------------------------

class Dependencies:
    """The job of each queue run, the terminal memo, and the packages' env cache."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.env: dict[str, str] = {}
        self.loop = PeriodicLoop("dependencies", REFRESH_S, self.refresh)
        rt.db.on_terminal(self.on_terminal)

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
        self.env = await asyncio.to_thread(dirs.task_env, self.rt.settings.work_path,
                                           BASE_PATH)
        return None

    async def align_tasks(self) -> None:
        """The queue tasks' system fields as this version writes them (an earlier
        version's command gets no job, `job_env`); a deleted one is made when needed."""
        async with self.rt.db.write() as tx:
            for eco in ECOSYSTEMS:
                task_id = await deps.task_of(tx, eco)
                if task_id is None:
                    continue
                try:
                    await tasks.get_task(tx, task_id)
                except rows.NotFound:
                    continue
                await _queue_task(tx, eco, self.rt.settings.deps_timeout_s)

    async def _repair_at_start(self, eco: Ecosystem) -> None:
        """Queue a visible rebuild when the folder no longer holds what is declared: a
        venv of another Python (an image upgrade), a change cut short, a folder gone.
        Not when a job waits (it repairs first) nor after a failed rebuild (no loop)."""
        if eco == "node" and not npm_available():
            return
        async with self.rt.db.read() as tx:
            declared = await deps.installed(tx, eco)
            newest = await deps.newest_job(tx, eco)
        if newest is not None and (newest[2] in ("queued", "running") or (
                newest[1] == "rebuild" and newest[2] != "succeeded")):
            return
        work = self.rt.settings.work_path
        reason = await asyncio.to_thread(_needs_rebuild, work, eco, bool(declared))
        if not reason:
            return
        log.warning("rebuilding the %s dependencies: %s", eco, reason)
        async with self.rt.db.write() as tx:
            await queue_in(self.rt, tx, eco, [d.id for d in declared], "rebuild")

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
        s = self.rt.settings
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


# -- what the API shows beside the rows -------------------------------------------------

async def installed_versions(rt: Runtime, items: list[deps.Dependency]
                             ) -> dict[str, str | None]:
    """{row id: the version found in its folder, or None}: read from the folders, so
    a package that a rebuild left out or a wiped volume lost shows as missing."""
    work = rt.settings.work_path

    def read() -> dict[str, str | None]:
        py = dirs.python_versions(work) if any(d.type == "python" for d in items) else {}
        return {d.id: py.get(d.name) if d.type == "python" else dirs.node_version(work, d.name)
                for d in items}

    return await asyncio.to_thread(read)


async def environments(rt: Runtime) -> dict[str, Any]:
    work = rt.settings.work_path

    def read() -> dict[str, Any]:
        check = dirs.check_venv(work)
        major, minor = dirs.this_python()
        return {
            "python": {"state": check.state, "reason": check.reason,
                       "python": f"{major}.{minor}", "changing": dirs.changing(work, "python"),
                       "task_id": None},
            "node": {"available": npm_available(),
                     "state": "ok" if dirs.node_modules(work).is_dir() else "absent",
                     "changing": dirs.changing(work, "node"), "task_id": None},
        }

    out = await asyncio.to_thread(read)
    async with rt.db.read() as tx:
        for eco in ECOSYSTEMS:
            out[eco]["task_id"] = await deps.task_of(tx, eco)
    return out


def mirrors(rt: Runtime) -> dict[str, Any]:
    from ..dependencies.spec import redact_url

    s = rt.settings
    return {"pip_index_url": redact_url(s.pip_index_url) or None,
            "pip_extra_index_urls": [redact_url(u) for u in s.pip_extra_index_urls.split()],
            "npm_registry": redact_url(s.npm_registry) or None,
            "timeout_s": s.deps_timeout_s}
