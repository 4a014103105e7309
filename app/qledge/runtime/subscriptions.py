"""Subscriptions: their pull task, and keeping tasks in step (docs/subscriptions.md;
the create/update/delete/pull operations are operations/subscriptions.py).

A pull is a run of the subscription's own task (`qledge subscription pull <id>`),
so it has a log, a receipt and an exit code like any run. The worker hands it its
spec — with the credential — in the environment of that one launch (`pull_env`);
the task row never holds it. When a pull run ends, the transaction that records its
result also marks the subscription due (`on_terminal`), so a worker killed right
after still keeps the tasks in step when it comes back (`Syncer.start` runs a round).
A sync reads the scripts folder (off the loop) and creates, updates, disables or
deletes the subscription's tasks in one transaction.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .. import ids
from ..clock import now_ms
from ..db import rows, runs, tasks
from ..db import subscriptions as subs
from ..db.interface import Database, Tx
from ..fs import confined
from ..model import Concurrency, Run, RunStatus, Task
from ..scripts import meta as script_meta
from ..subscriptions.spec import (
    ENV_NAME,
    MANIFEST_MAX_BYTES,
    MANIFEST_SUFFIX,
    PullSpec,
    encode,
    script_shape,
)
from ..tasks.writable import TaskFields, changed_from, is_empty
from .loop import PeriodicLoop

log = logging.getLogger("qledge.subscriptions")
STAGING = ".subscriptions"  # beside scripts/ in the work dir: renames stay on one fs
SYNC_INTERVAL_S = 60.0
PULL_GRACE_S = 30  # the pull task's timeout beyond caps.timeout_s (its own alarm first)
MAX_LISTED = 200  # paths listed per kind in a sync result


def pull_command(sub_id: str) -> str:
    # -I (isolated): no PYTHON* variables, no user site, and not the working directory
    # (the work dir, which every task can write) first on sys.path — else a task's
    # `work/qledge/__main__.py` would run in place of the pull, with its secret.
    return f"{shlex.quote(sys.executable)} -I -m qledge subscription pull {sub_id}"


def pull_task_fields(sub: subs.Subscription) -> TaskFields:
    return TaskFields(name=f"subscription: {sub.name}"[:200], command=pull_command(sub.id),
                      schedule=sub.schedule, enabled=sub.enabled,
                      timeout_s=sub.caps.timeout_s + PULL_GRACE_S,
                      concurrency=Concurrency.FORBID, labels=["subscription"], env={})


async def task_or_none(tx: Tx, task_id: str) -> Task | None:
    try:
        return await tasks.get_task(tx, task_id)
    except rows.NotFound:
        return None


# -- the pull's environment, and the end of a pull ------------------------------------

def spec_of(sub: subs.Subscription, secret: str | None, work_dir: Path) -> PullSpec:
    return PullSpec(
        id=sub.id, type=sub.type, url=sub.url, branch=sub.branch, alias=sub.alias,
        whitelist=sub.whitelist, blacklist=sub.blacklist, dependences=sub.dependences,
        extensions=tuple(sub.extensions), sub_before=sub.sub_before, sub_after=sub.sub_after,
        username=sub.username, secret=secret, scripts_dir=str(work_dir / "scripts"),
        staging_dir=str(work_dir / STAGING), caps=sub.caps)


async def pull_env(tx: Tx, task: Task, work_dir: Path) -> dict[str, str]:
    """{ENV_NAME: spec} for a subscription's pull task; {} for any other task — and
    for that task too once its command or env is not exactly the system's (both
    APIs refuse such edits, `operations.SystemTask`; this holds for rows changed
    before that, or any other way): else the edited command gets the secret."""
    if "subscription" not in task.labels or task.env:
        return {}
    sub = await subs.by_pull_task(tx, task.id)
    if sub is None or task.command != pull_command(sub.id):
        return {}
    spec = spec_of(sub, await subs.secret_of(tx, sub.id), work_dir)
    return {ENV_NAME: encode(spec)}


class Syncer:
    """The pull task's environment, the terminal listener, and the sync loop."""

    def __init__(self, db: Database, work_dir: Path,
                 remove_logs: Callable[[list[str]], Awaitable[None]],
                 wake_scheduler: Callable[[], None]) -> None:
        self.db = db
        self.work_dir = work_dir
        self.remove_logs = remove_logs  # a sync's deleted tasks' logs, after its commit
        self.wake_scheduler = wake_scheduler  # their schedules changed
        self.loop = PeriodicLoop("subscriptions", SYNC_INTERVAL_S, self.round)
        db.on_terminal(self.on_terminal)

    async def align_tasks(self) -> None:
        """At start-up: every pull task's system fields as this version writes them (a
        command from an earlier version gets no spec, `pull_env`). A deleted pull task
        stays deleted until the subscription is updated or pulled."""
        async with self.db.write() as tx:
            for sub in await subs.list_all(tx, limit=100_000):
                if sub.pull_task_id is None:
                    continue
                task = await task_or_none(tx, sub.pull_task_id)
                if task is None:
                    continue
                changed = changed_from(task, pull_task_fields(sub))
                if not is_empty(changed):
                    await tasks.update_task(tx, task.id, changed, now_ms())

    def start(self) -> None:
        self.loop.start()
        self.loop.poke()  # syncs left due by a worker that stopped

    async def stop(self) -> None:
        await self.loop.stop()

    async def on_terminal(self, tx: Tx, old: Run, new: Run, now: int) -> None:
        sub = await subs.by_pull_task(tx, new.task_id)
        if sub is None:
            return
        await subs.mark_pulled(tx, sub.id, new.id)
        tx.on_commit(self.loop.poke)

    async def round(self) -> float | None:
        async with self.db.read() as tx:
            due = await subs.sync_due(tx)
        for sub in due:
            assert sub.sync_run_id is not None
            try:
                await self.sync(sub, sub.sync_run_id)
            except Exception:
                log.exception("keeping the tasks of subscription %s in step failed", sub.id)
        return None

    async def sync(self, sub: subs.Subscription, run_id: str) -> dict[str, Any]:
        async with self.db.read() as tx:
            run = await runs.get_run(tx, run_id)
        result: dict[str, Any] = {"run_id": run_id, "status": str(run.status),
                                  "exit_code": run.exit_code, "at_ms": now_ms()}
        if run.status is RunStatus.SUCCEEDED:
            folder = self.work_dir / "scripts" / sub.alias
            found = await asyncio.to_thread(
                scan, folder, sub, manifest_path(self.work_dir, sub.alias))
            if found is None:
                result["error"] = f"scripts/{sub.alias}/ could not be read"
            else:
                result.update(await self._apply(sub, found))
        paths: list[str] = result.pop("_logs", [])
        async with self.db.write() as tx:
            await subs.synced(tx, sub.id, run_id, result)
        await self.remove_logs(paths)
        self.wake_scheduler()
        return result

    async def _apply(self, sub: subs.Subscription,
                     found: dict[str, script_meta.ScriptMeta]) -> dict[str, Any]:
        added: list[str] = []
        changed: list[str] = []
        removed: list[str] = []
        kept: list[str] = []
        skipped: list[str] = []
        # Every script that has no task after this pull, with why (docs/subscriptions.md
        # "The pull's result"): a header without a schedule and no default schedule,
        # auto-add turned off, or a task its user deleted (a pull never brings one back).
        no_task: list[dict[str, str]] = []
        logs: list[str] = []
        now = now_ms()
        async with self.db.write() as tx:
            links = await subs.links(tx, sub.id)
            commands = {p: script_meta.task_command(f"{sub.alias}/{p}") for p in found}
            existing = await subs.task_ids_by_command(
                tx, [commands[p] for p in found if p not in links])
            for path, meta in sorted(found.items()):
                schedule = meta.schedule or sub.default_schedule
                link = links.get(path)
                if link is None:
                    adopt = existing.get(commands[path])
                    if adopt is not None:
                        # A task the user made by hand: linked, its values left alone.
                        task = await tasks.get_task(tx, adopt)
                        await subs.put_link(tx, sub.id, subs.Link(
                            path=path, task_id=adopt, applied_schedule=task.schedule,
                            applied_name=task.name, disabled_by_pull=False))
                        kept.append(path)
                        continue
                    if not sub.auto_add:
                        no_task.append({"path": path, "reason": "auto_add_off"})
                        continue
                    if schedule is None:
                        skipped.append(path)
                        no_task.append({"path": path, "reason": "no_schedule"})
                        continue
                    task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
                        name=meta.name, command=commands[path], schedule=schedule,
                        labels=[f"sub:{sub.alias}"[:100]]), now)
                    await subs.put_link(tx, sub.id, subs.Link(
                        path=path, task_id=task.id, applied_schedule=schedule,
                        applied_name=meta.name, disabled_by_pull=False))
                    added.append(path)
                    continue
                if link.task_id is None:
                    # Its user deleted the task: a pull does not bring it back.
                    no_task.append({"path": path, "reason": "task_deleted"})
                    continue
                current = await task_or_none(tx, link.task_id)
                if current is None:
                    await subs.put_link(tx, sub.id, subs.Link(
                        path=path, task_id=None, applied_schedule=link.applied_schedule,
                        applied_name=link.applied_name, disabled_by_pull=False))
                    no_task.append({"path": path, "reason": "task_deleted"})
                    continue
                update: dict[str, Any] = {}
                edited = (current.schedule != link.applied_schedule
                          or current.name != link.applied_name)
                if edited:
                    kept.append(path)
                else:
                    if schedule is not None and schedule != current.schedule:
                        update["schedule"] = schedule
                    if meta.name != current.name:
                        update["name"] = meta.name
                if link.disabled_by_pull and not current.enabled:
                    update["enabled"] = True  # the script is back
                if update:
                    current = await tasks.update_task(tx, current.id, TaskFields(**update),
                                                      now)
                    changed.append(path)
                if update or link.disabled_by_pull:
                    await subs.put_link(tx, sub.id, subs.Link(
                        path=path, task_id=current.id,
                        applied_schedule=link.applied_schedule if edited else current.schedule,
                        applied_name=link.applied_name if edited else current.name,
                        disabled_by_pull=False))
            for path, link in sorted(links.items()):
                if path in found:
                    continue
                gone = await task_or_none(tx, link.task_id) if link.task_id else None
                if gone is None or not sub.auto_delete:
                    if gone is None:
                        await subs.drop_link(tx, sub.id, path)
                    continue
                active = await runs.active_run_of_task(tx, gone.id)
                if sub.vanished == "delete" and active is None:
                    logs += await tasks.delete_task(tx, gone.id, now)
                    await subs.drop_link(tx, sub.id, path)
                    removed.append(path)
                elif gone.enabled:
                    await tasks.update_task(tx, gone.id, TaskFields(enabled=False), now)
                    await subs.put_link(tx, sub.id, subs.Link(
                        path=path, task_id=gone.id, applied_schedule=link.applied_schedule,
                        applied_name=link.applied_name, disabled_by_pull=True))
                    removed.append(path)
        return {"scripts": len(found), "added": added[:MAX_LISTED],
                "changed": changed[:MAX_LISTED], "removed": removed[:MAX_LISTED],
                "kept_user_edits": kept[:MAX_LISTED], "no_schedule": skipped[:MAX_LISTED],
                "no_task": no_task[:MAX_LISTED], "no_task_count": len(no_task), "_logs": logs}


def scan(folder: Path, sub: subs.Subscription, manifest: Path
         ) -> dict[str, script_meta.ScriptMeta] | None:
    """{path below the alias: header facts} of the scripts (not dependence files) in
    `folder` — read through directory fds, never following a link; None if unreadable.
    Which files are scripts the pull decided (its manifest): the worker never runs a
    subscription's patterns, which could take exponential time in `re`."""
    listed: set[str] | None = None
    if sub.type != "file":
        listed = read_manifest(manifest)
        if listed is None:
            return None
    suffixes = tuple(f".{e}" for e in sub.extensions)
    out: dict[str, script_meta.ScriptMeta] = {}
    try:
        root = confined.open_root(folder)
    except confined.ScriptError:
        return None
    try:
        _scan(root, "", sub, out, depth=0, is_script=lambda p: listed is None or (
            p in listed and script_shape(p, suffixes)))
    except (OSError, confined.ScriptError):
        return None
    finally:
        os.close(root)
    return out


def manifest_path(work: Path, alias: str) -> Path:
    return work / STAGING / f"{alias}{MANIFEST_SUFFIX}"


def read_manifest(path: Path) -> set[str] | None:
    """The script paths the last pull wrote (None: missing or unreadable). The work dir
    is the tasks': opened without following a link, its size bounded."""
    try:
        parent = confined.open_root(path.parent)
    except confined.ScriptError:
        return None
    try:
        fd, _ = confined.open_file(parent, path.name, path.name)
        try:
            data = confined.read_all(fd, MANIFEST_MAX_BYTES, path.name)
        finally:
            os.close(fd)
    except (OSError, confined.ScriptError):
        return None
    finally:
        os.close(parent)
    return set(data.decode("utf-8", "replace").splitlines())


def _scan(dfd: int, rel: str, sub: subs.Subscription,
          out: dict[str, script_meta.ScriptMeta], depth: int,
          is_script: Callable[[str], bool]) -> None:
    if depth > 32:
        return
    for entry in sorted(os.listdir(dfd)):
        path = f"{rel}{entry}"
        st = confined.lstat_at(dfd, entry)
        if st is None:
            continue
        kind = confined.kind(st.st_mode)
        if kind == "directory":
            with confined.folder(dfd, (entry,)) as child:
                _scan(child, f"{path}/", sub, out, depth + 1, is_script)
        elif kind == "file" and len(out) < sub.caps.files and is_script(path):
            fd, _ = confined.open_file(dfd, entry, path)
            try:
                head = os.read(fd, script_meta.MAX_SCAN)
            finally:
                os.close(fd)
            out[path] = script_meta.parse(head.decode("utf-8", "replace"),
                                          f"{sub.alias}/{path}")
