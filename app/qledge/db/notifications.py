"""SQL of notifications: channels, rules and the outbox (docs/notifications.md)."""

from __future__ import annotations

import msgspec

from .. import ids
from ..model import RunStatus
from ..notifications.rules import Rules, RulesPatch, Settings
from . import statuses as st
from .interface import Row, Tx

_CANCELLED = st.is_("status", RunStatus.CANCELLED)

GLOBAL = ""
# The kinds the per-channel rate limit applies to: a run's message and a script's
# send(). A sign-in or disk-pressure message is rare and always goes out; a digest
# is what the limit sends instead.
LIMITED_KINDS = ("run", "script")
DIGEST = "digest"


class Channel(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    url: str  # a secret: never in a response after creation, an event or a log
    enabled: bool
    created_at_ms: int
    updated_at_ms: int


class Message(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    channel_id: str
    kind: str
    run_id: str | None
    task_id: str | None
    title: str
    body: str
    log_lines: int
    state: str
    tries: int
    due_at_ms: int
    next_at_ms: int
    created_at_ms: int
    done_at_ms: int | None
    last_error: str | None
    notify_type: str = "info"
    held_at_ms: int | None = None
    digest_id: str | None = None


class NotFound(Exception):
    pass


def _channel(row: Row) -> Channel:
    r: dict[str, object] = dict(row)
    r["enabled"] = bool(r["enabled"])
    return msgspec.convert(r, Channel)


async def channels(tx: Tx, *, enabled_only: bool = False) -> list[Channel]:
    rows = await tx.all("SELECT * FROM notify_channels WHERE enabled >= ?"
                        " ORDER BY created_at_ms, id", (int(enabled_only),))
    return [_channel(r) for r in rows]


async def channel(tx: Tx, channel_id: str) -> Channel:
    row = await tx.one("SELECT * FROM notify_channels WHERE id = ?", (channel_id,))
    if row is None:
        raise NotFound(channel_id)
    return _channel(row)


async def channel_named(tx: Tx, name: str) -> Channel | None:
    row = await tx.one("SELECT * FROM notify_channels WHERE name = ?", (name,))
    return _channel(row) if row else None


async def add_channel(tx: Tx, name: str, url: str, enabled: bool, now_ms: int) -> Channel:
    ch = Channel(id=ids.uuid7(), name=name, url=url, enabled=enabled, created_at_ms=now_ms,
                 updated_at_ms=now_ms)
    await tx.execute(
        "INSERT INTO notify_channels (id, name, url, enabled, created_at_ms, updated_at_ms)"
        " VALUES (?, ?, ?, ?, ?, ?)", (ch.id, name, url, int(enabled), now_ms, now_ms))
    return ch


async def update_channel(tx: Tx, channel_id: str, fields: dict[str, object],
                         now_ms: int) -> Channel:
    old = await channel(tx, channel_id)
    new = msgspec.structs.replace(old, **fields, updated_at_ms=now_ms)
    await tx.execute(
        "UPDATE notify_channels SET name = ?, url = ?, enabled = ?, updated_at_ms = ?"
        " WHERE id = ?", (new.name, new.url, int(new.enabled), now_ms, channel_id))
    return new


async def delete_channel(tx: Tx, channel_id: str, now_ms: int) -> None:
    if not await tx.execute("DELETE FROM notify_channels WHERE id = ?", (channel_id,)):
        raise NotFound(channel_id)
    await tx.execute(
        "UPDATE notify_outbox SET state = 'given_up', done_at_ms = ?,"
        " last_error = 'channel deleted' WHERE channel_id = ? AND state = 'pending'",
        (now_ms, channel_id))


# -- rules ---------------------------------------------------------------------

async def global_rules(tx: Tx) -> Rules:
    row = await tx.one("SELECT rules_json FROM notify_rules WHERE scope = ?", (GLOBAL,))
    return msgspec.json.decode(row[0], type=Rules) if row else Rules()


async def task_rules(tx: Tx, task_id: str) -> RulesPatch | None:
    row = await tx.one("SELECT rules_json FROM notify_rules WHERE scope = ?", (task_id,))
    return msgspec.json.decode(row[0], type=RulesPatch) if row else None


async def all_task_rules(tx: Tx) -> dict[str, RulesPatch]:
    # A deleted task's override is left behind (task deletion knows nothing of it)
    # and ignored here.
    rows = await tx.all("SELECT scope, rules_json FROM notify_rules"
                        " WHERE scope IN (SELECT id FROM tasks)")
    return {r[0]: msgspec.json.decode(r[1], type=RulesPatch) for r in rows}


async def set_rules(tx: Tx, scope: str, rules: Rules | RulesPatch | None, now_ms: int) -> None:
    if rules is None:
        await tx.execute("DELETE FROM notify_rules WHERE scope = ?", (scope,))
        return
    await tx.execute(
        "INSERT INTO notify_rules (scope, rules_json, updated_at_ms) VALUES (?, ?, ?)"
        " ON CONFLICT (scope) DO UPDATE SET rules_json = excluded.rules_json,"
        " updated_at_ms = excluded.updated_at_ms",
        (scope, msgspec.json.encode(rules).decode(), now_ms))


# -- the outbox ----------------------------------------------------------------

async def enqueue(tx: Tx, *, channel_ids: list[str], kind: str, run_id: str | None,
                  task_id: str | None, title: str, body: str, log_lines: int, due_at_ms: int,
                  now_ms: int, notify_type: str = "info") -> list[str]:
    out = []
    for channel_id in channel_ids:
        mid = ids.uuid7()
        await tx.execute(
            "INSERT INTO notify_outbox (id, channel_id, kind, run_id, task_id, title, body,"
            " log_lines, state, due_at_ms, next_at_ms, created_at_ms, notify_type)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
            (mid, channel_id, kind, run_id, task_id, title, body, log_lines, due_at_ms,
             due_at_ms, now_ms, notify_type))
        out.append(mid)
    return out


async def due(tx: Tx, now_ms: int, limit: int) -> list[Message]:
    rows = await tx.all(
        "SELECT * FROM notify_outbox WHERE state = 'pending' AND next_at_ms <= ?"
        " ORDER BY next_at_ms, id LIMIT ?", (now_ms, limit))
    return [msgspec.convert(dict(r), Message) for r in rows]


async def next_due_ms(tx: Tx) -> int | None:
    row = await tx.one("SELECT MIN(next_at_ms) FROM notify_outbox WHERE state = 'pending'")
    return None if row is None or row[0] is None else int(row[0])


async def mark_sent(tx: Tx, message_id: str, now_ms: int) -> None:
    await tx.execute(
        "UPDATE notify_outbox SET state = 'sent', tries = tries + 1, done_at_ms = ?,"
        " last_error = NULL WHERE id = ? AND state = 'pending'", (now_ms, message_id))


async def mark_failed(tx: Tx, message_id: str, error: str, next_at_ms: int | None,
                      now_ms: int) -> None:
    """`next_at_ms` None: given up."""
    if next_at_ms is None:
        await tx.execute(
            "UPDATE notify_outbox SET state = 'given_up', tries = tries + 1, done_at_ms = ?,"
            " last_error = ? WHERE id = ? AND state = 'pending'", (now_ms, error, message_id))
    else:
        await tx.execute(
            "UPDATE notify_outbox SET tries = tries + 1, next_at_ms = ?, last_error = ?"
            " WHERE id = ? AND state = 'pending'", (next_at_ms, error, message_id))


async def recent(tx: Tx, limit: int, *, run_id: str | None = None) -> list[Message]:
    if run_id is not None:
        rows = await tx.all("SELECT * FROM notify_outbox WHERE run_id = ?"
                            " ORDER BY created_at_ms DESC, id DESC LIMIT ?", (run_id, limit))
    else:
        rows = await tx.all("SELECT * FROM notify_outbox ORDER BY created_at_ms DESC, id DESC"
                            " LIMIT ?", (limit,))
    return [msgspec.convert(dict(r), Message) for r in rows]


async def counts(tx: Tx) -> dict[str, int]:
    """By state; `held` (pending, waiting for a digest) and `digested` (sent inside
    one) are counted apart from pending and sent."""
    rows = await tx.all(
        "SELECT CASE WHEN digest_id IS NOT NULL THEN 'digested'"
        " WHEN state = 'pending' AND held_at_ms IS NOT NULL THEN 'held' ELSE state END,"
        " COUNT(*) FROM notify_outbox GROUP BY 1")
    out = {"pending": 0, "sent": 0, "given_up": 0, "held": 0, "digested": 0}
    out.update({r[0]: int(r[1]) for r in rows})
    return out


async def prune(tx: Tx, before_ms: int, limit: int) -> int:
    """Finished rows older than `before_ms`, a bounded page at a time."""
    return await tx.execute(
        "DELETE FROM notify_outbox WHERE id IN (SELECT id FROM notify_outbox"
        " WHERE state != 'pending' AND created_at_ms < ? ORDER BY created_at_ms LIMIT ?)",
        (before_ms, limit))


# -- the rate limit and its digest (runtime/notifier.py) -----------------------------

async def get_message(tx: Tx, message_id: str) -> Message:
    row = await tx.one("SELECT * FROM notify_outbox WHERE id = ?", (message_id,))
    if row is None:
        raise NotFound(message_id)
    return msgspec.convert(dict(row), Message)


async def sent_since(tx: Tx, since_ms: int) -> dict[str, tuple[int, int]]:
    """Per channel: (how many limited messages were sent on their own since
    `since_ms`, the earliest of their send times)."""
    kinds = ", ".join("?" * len(LIMITED_KINDS))
    rows = await tx.all(
        "SELECT channel_id, COUNT(*), MIN(done_at_ms) FROM notify_outbox"  # noqa: S608
        f" WHERE state = 'sent' AND digest_id IS NULL AND kind IN ({kinds})"
        " AND done_at_ms >= ? GROUP BY channel_id", (*LIMITED_KINDS, since_ms))
    return {str(r[0]): (int(r[1]), int(r[2])) for r in rows}


async def hold(tx: Tx, message_id: str, now_ms: int, until_ms: int) -> None:
    """Held by the rate limit: it waits for its channel's digest at `until_ms`."""
    await tx.execute(
        "UPDATE notify_outbox SET held_at_ms = ?, next_at_ms = ? WHERE id = ?"
        " AND state = 'pending'", (now_ms, until_ms, message_id))


async def held(tx: Tx, channel_id: str) -> list[Message]:
    """Every row its channel's rate limit holds, due or not, oldest first."""
    rows = await tx.all(
        "SELECT * FROM notify_outbox WHERE channel_id = ? AND state = 'pending'"
        " AND held_at_ms IS NOT NULL ORDER BY created_at_ms, id", (channel_id,))
    return [msgspec.convert(dict(r), Message) for r in rows]


async def digested(tx: Tx, message_ids: list[str], digest_id: str, now_ms: int) -> None:
    """The held rows went into the digest `digest_id`: kept, marked, never sent alone."""
    for mid in message_ids:
        await tx.execute(
            "UPDATE notify_outbox SET state = 'sent', digest_id = ?, done_at_ms = ?"
            " WHERE id = ? AND state = 'pending'", (digest_id, now_ms, mid))


# -- the settings ----------------------------------------------------------------------

async def settings(tx: Tx) -> Settings:
    row = await tx.one("SELECT settings_json FROM notify_settings WHERE id = 1")
    return msgspec.json.decode(row[0], type=Settings) if row else Settings()


async def set_settings(tx: Tx, value: Settings, now_ms: int) -> None:
    await tx.execute(
        "INSERT INTO notify_settings (id, settings_json, updated_at_ms) VALUES (1, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET settings_json = excluded.settings_json,"
        " updated_at_ms = excluded.updated_at_ms",
        (msgspec.json.encode(value).decode(), now_ms))


# -- what a terminal run's message needs -----------------------------------------

async def task_brief(tx: Tx, task_id: str) -> tuple[str, int] | None:
    row = await tx.one("SELECT name, num FROM tasks WHERE id = ?", (task_id,))
    return (str(row[0]), int(row[1])) if row else None


async def task_hidden(tx: Tx, task_id: str) -> bool:
    """A hidden task is the panel's debug Run of a script (docs/scripts.md#run)."""
    row = await tx.one("SELECT hidden FROM tasks WHERE id = ?", (task_id,))
    return bool(row and row[0])


async def failures_before(tx: Tx, task_id: str, run_id: str, limit: int) -> int:
    """Leading failures among the task's earlier terminal runs (newest first),
    cancelled ones skipped, counted up to `limit`."""
    rows = await tx.all(
        "SELECT status FROM runs WHERE task_id = ? AND id != ?"  # noqa: S608
        f" AND finished_at_ms IS NOT NULL AND NOT {_CANCELLED}"
        " ORDER BY finished_at_ms DESC, id DESC LIMIT ?",
        (task_id, run_id, limit))
    n = 0
    for r in rows:
        if r[0] == RunStatus.SUCCEEDED.value:
            break
        n += 1
    return n


async def attempt_started_before(tx: Tx, run_id: str, before_ms: int) -> bool:
    """Did this run's last attempt start before `before_ms` (i.e. under an earlier worker)?"""
    row = await tx.one(
        "SELECT created_at_ms FROM run_attempts WHERE run_id = ?"
        " ORDER BY attempt_no DESC LIMIT 1", (run_id,))
    return row is not None and int(row[0]) < before_ms


async def last_log_path(tx: Tx, run_id: str) -> str | None:
    row = await tx.one("SELECT log_path FROM run_attempts WHERE run_id = ?"
                       " ORDER BY attempt_no DESC LIMIT 1", (run_id,))
    return str(row[0]) if row else None
