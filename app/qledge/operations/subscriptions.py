"""Subscription operations: create, update, delete, stop and pull now — each with
its pull task, in one transaction (docs/subscriptions.md; the sync loop that keeps a
subscription's tasks in step is runtime/subscriptions.py)."""

from __future__ import annotations

import asyncio
import os
from typing import Any
from urllib.parse import urlsplit

from .. import ids
from ..clock import now_ms
from ..db import runs, tasks
from ..db import subscriptions as subs
from ..db.interface import Tx
from ..model import Run, Trigger
from ..runtime.lifecycle import Runtime
from ..runtime.subscriptions import pull_task_fields, task_or_none
from ..tasks.writable import changed_from, is_empty
from .tasks import ActiveRun, stop_task, trigger


class PullBusy(Exception):
    """Refused: the subscription's pull is already queued or running."""


class AliasTaken(Exception):
    """Refused: another subscription has this alias, or scripts/<alias> exists already
    (a pull replaces that folder whole: it must be the subscription's own)."""


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


async def create(rt: Runtime, fields: dict[str, Any]) -> subs.Subscription:
    """A new subscription and its pull task, in one transaction (fields validated)."""
    sub_id = ids.uuid7()
    folder = rt.settings.work_path / "scripts" / fields["alias"]
    async with rt.db.write() as tx:
        if await subs.alias_taken(tx, fields["alias"]):
            raise AliasTaken(f"alias {fields['alias']!r} is taken by another subscription")
        if await asyncio.to_thread(os.path.lexists, folder):
            raise AliasTaken(f"scripts/{fields['alias']}/ exists already and is not a "
                             "subscription's: a pull would replace it")
        sub = await subs.create(tx, sub_id, fields, now_ms())
        task = await tasks.create_task(tx, ids.uuid7(), pull_task_fields(sub), now_ms())
        sub = await subs.update(tx, sub_id, {"pull_task_id": task.id}, now_ms())
    rt.scheduler.wake()
    return sub


async def update(rt: Runtime, sub_id: str, fields: dict[str, Any]) -> subs.Subscription:
    """Change a subscription (fields validated). A credential is bound to the origin
    (scheme, host, port) it was given for: a URL to another origin drops it unless the
    same update gives one again — else whoever may edit the URL could send it anywhere."""
    async with rt.db.write() as tx:
        if "url" in fields and "secret" not in fields:
            current = await subs.get(tx, sub_id)
            if origin(fields["url"]) != origin(current.url):
                fields = {**fields, "secret": None}
        sub = await subs.update(tx, sub_id, fields, now_ms())
        sub = await _ensure_pull_task(tx, sub)
    rt.scheduler.wake()
    return sub


async def delete(rt: Runtime, *sub_ids: str) -> None:
    """The subscriptions and their pull tasks, all or none (refused while a pull is
    active); the tasks they created and their scripts folders stay (the user's now)."""
    now = now_ms()
    paths: list[str] = []
    async with rt.db.write() as tx:
        for sub_id in sub_ids:
            sub = await subs.get(tx, sub_id)
            if sub.pull_task_id is not None and await task_or_none(tx, sub.pull_task_id):
                active = await runs.active_run_of_task(tx, sub.pull_task_id)
                if active is not None:
                    task = await tasks.get_task(tx, sub.pull_task_id)
                    raise ActiveRun(f"the pull of subscription {sub.name!r} is active; "
                                    "cancel it first", task=task, run_id=active.id)
                paths += await tasks.delete_task(tx, sub.pull_task_id, now)
            await subs.delete(tx, sub_id)
    await rt.remove_logs(paths)
    rt.scheduler.wake()


async def stop(rt: Runtime, sub_id: str) -> None:
    """Cancel the subscription's active pull, if any (the scripts stay as they were)."""
    async with rt.db.read() as tx:
        sub = await subs.get(tx, sub_id)
    if sub.pull_task_id is not None:
        await stop_task(rt, sub.pull_task_id)


async def pull_now(rt: Runtime, sub_id: str) -> Run:
    """Queue a pull (the subscription's task, recreated if its user deleted it)."""
    async with rt.db.write() as tx:
        sub = await _ensure_pull_task(tx, await subs.get(tx, sub_id))
    assert sub.pull_task_id is not None
    try:
        return await trigger(rt, sub.pull_task_id, Trigger.MANUAL)
    except ActiveRun as exc:
        raise PullBusy("a pull of this subscription is already queued or running") from exc


async def _ensure_pull_task(tx: Tx, sub: subs.Subscription) -> subs.Subscription:
    """The pull task in step with the subscription (its user may have deleted it)."""
    fields = pull_task_fields(sub)
    if sub.pull_task_id is not None:
        task = await task_or_none(tx, sub.pull_task_id)
        if task is not None:
            changed = changed_from(task, fields)
            if not is_empty(changed):
                await tasks.update_task(tx, task.id, changed, now_ms())
            return sub
    task = await tasks.create_task(tx, ids.uuid7(), fields, now_ms())
    return await subs.update(tx, sub.id, {"pull_task_id": task.id}, now_ms())
