"""Operations on notification channels and rules, and a script's message: the writes
behind /api/v1/notifications and POST /notify (the HTTP layer only decodes and encodes;
operations/tasks.py holds those on tasks and runs)."""

from __future__ import annotations

from ..clock import now_ms
from ..db import attempts, runs
from ..db import notifications as q
from ..model import ACTIVE_ATTEMPT
from ..notifications import rules as notify
from ..runtime.lifecycle import Runtime

# A script's send() calls per attempt; a loop in a script must not flood a phone.
MAX_SCRIPT_SENDS = 20


class DuplicateName(Exception):
    pass


class RunFinished(Exception):
    pass


class TooMany(Exception):
    pass


async def add_channel(rt: Runtime, name: str, url: str, enabled: bool) -> q.Channel:
    async with rt.db.write() as tx:
        if await q.channel_named(tx, name):
            raise DuplicateName(name)
        return await q.add_channel(tx, name, url, enabled, now_ms())


async def update_channel(rt: Runtime, channel_id: str, fields: dict[str, object]
                         ) -> q.Channel:
    """Raises q.NotFound, DuplicateName."""
    async with rt.db.write() as tx:
        other = await q.channel_named(tx, str(fields["name"])) if "name" in fields else None
        if other is not None and other.id != channel_id:
            raise DuplicateName(str(fields["name"]))
        return await q.update_channel(tx, channel_id, fields, now_ms())


async def delete_channel(rt: Runtime, channel_id: str) -> None:
    async with rt.db.write() as tx:
        await q.delete_channel(tx, channel_id, now_ms())


async def set_global_rules(rt: Runtime, rules: notify.Rules) -> None:
    async with rt.db.write() as tx:
        await q.set_rules(tx, q.GLOBAL, rules, now_ms())


async def set_task_rules(rt: Runtime, task_id: str, patch: notify.RulesPatch | None) -> None:
    """`patch` None removes the override. Raises q.NotFound for an unknown task."""
    async with rt.db.write() as tx:
        if patch is not None and await q.task_brief(tx, task_id) is None:
            raise q.NotFound(task_id)
        await q.set_rules(tx, task_id, patch, now_ms())


async def set_settings(rt: Runtime, patch: notify.Settings) -> notify.Settings:
    """The fields `patch` names replace the stored ones; `base_url` "" clears it."""
    async with rt.db.write() as tx:
        old = await q.settings(tx)
        new = notify.Settings(
            language=patch.language or old.language,
            base_url=old.base_url if patch.base_url is None else patch.base_url or None)
        await q.set_settings(tx, new, now_ms())
        return new


async def script_message(rt: Runtime, attempt_id: str, title: str, content: str,
                         sent_so_far: int) -> int:
    """Queue a running attempt's message; returns how many deliveries were queued.
    Raises RunFinished once the attempt is over, TooMany past the per-attempt cap."""
    async with rt.db.write() as tx:
        attempt = await attempts.find_attempt(tx, attempt_id)
        if attempt is None or attempt.status not in ACTIVE_ATTEMPT:
            raise RunFinished(attempt_id)
        if sent_so_far >= MAX_SCRIPT_SENDS:
            raise TooMany(attempt_id)
        run = await runs.get_run(tx, attempt.run_id)
        return await rt.notifier.enqueue(tx, kind="script", title=title, body=content,
                                         run_id=run.id, task_id=run.task_id)
