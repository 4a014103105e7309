"""Subscriptions and the tasks their pulls keep in step (SQL only; docs/subscriptions.md).

`Subscription` never carries the credential: only `secret_of` reads it, for the
pull's own environment. Listings and API answers say whether one is set.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..subscriptions.spec import Caps
from . import dialect
from .interface import Row, Tx
from .rows import NotFound, like_pattern

_json = msgspec.json.Encoder()


class Subscription(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    num: int  # the integer id of QingLong's /open/subscriptions
    name: str
    type: str
    url: str
    branch: str | None
    alias: str
    schedule: str | None
    default_schedule: str | None
    whitelist: str
    blacklist: str
    dependences: str
    extensions: list[str]
    auto_add: bool
    auto_delete: bool
    vanished: str
    sub_before: str
    sub_after: str
    enabled: bool
    username: str | None
    has_secret: bool
    caps: Caps
    pull_task_id: str | None
    sync_run_id: str | None
    last_run_id: str | None
    last_sync: dict[str, Any] | None
    created_at_ms: int
    updated_at_ms: int
    version: int


class Link(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    task_id: str | None
    applied_schedule: str | None
    applied_name: str
    disabled_by_pull: bool


def _sub(row: Row) -> Subscription:
    last = row["last_sync_json"]
    return Subscription(
        id=row["id"], num=row["num"], name=row["name"], type=row["type"], url=row["url"],
        branch=row["branch"], alias=row["alias"], schedule=row["schedule"],
        default_schedule=row["default_schedule"], whitelist=row["whitelist"],
        blacklist=row["blacklist"], dependences=row["dependences"],
        extensions=msgspec.json.decode(row["extensions_json"], type=list[str]),
        auto_add=bool(row["auto_add"]), auto_delete=bool(row["auto_delete"]),
        vanished=row["vanished"], sub_before=row["sub_before"], sub_after=row["sub_after"],
        enabled=bool(row["enabled"]), username=row["username"],
        has_secret=row["secret"] is not None,
        caps=msgspec.json.decode(row["caps_json"], type=Caps),
        pull_task_id=row["pull_task_id"], sync_run_id=row["sync_run_id"],
        last_run_id=row["last_run_id"],
        last_sync=msgspec.json.decode(last) if last else None,
        created_at_ms=row["created_at_ms"], updated_at_ms=row["updated_at_ms"],
        version=row["version"])


def _values(fields: dict[str, Any]) -> dict[str, Any]:
    out = dict(fields)
    if "extensions" in out:
        out["extensions_json"] = _json.encode(list(out.pop("extensions"))).decode()
    if "caps" in out:
        out["caps_json"] = _json.encode(out.pop("caps")).decode()
    for flag in ("auto_add", "auto_delete", "enabled"):
        if flag in out:
            out[flag] = int(bool(out[flag]))
    return out


async def create(tx: Tx, sub_id: str, fields: dict[str, Any], now_ms: int) -> Subscription:
    values = _values(fields)
    values.update(id=sub_id, created_at_ms=now_ms, updated_at_ms=now_ms)
    values.setdefault("caps_json", _json.encode(Caps()).decode())
    cols = ", ".join(values)
    marks = ", ".join(f":{c}" for c in values)
    await tx.execute(f"INSERT INTO subscriptions ({cols}) VALUES ({marks})", values)  # noqa: S608
    return await get(tx, sub_id)


async def get(tx: Tx, sub_id: str) -> Subscription:
    row = await tx.one("SELECT * FROM subscriptions WHERE id = ?", (sub_id,))
    if row is None:
        raise NotFound("subscription")
    return _sub(row)


async def alias_taken(tx: Tx, alias: str, other_than: str = "") -> bool:
    row = await tx.one("SELECT 1 FROM subscriptions WHERE alias = ? AND id != ?",
                       (alias, other_than))
    return row is not None


async def list_all(tx: Tx, limit: int = 1000) -> list[Subscription]:
    rows = await tx.all("SELECT * FROM subscriptions ORDER BY created_at_ms, id LIMIT ?",
                        (limit,))
    return [_sub(r) for r in rows]


async def by_nums(tx: Tx, nums: list[int]) -> dict[int, Subscription]:
    found: dict[int, Subscription] = {}
    for i in range(0, len(nums), 500):
        chunk = nums[i:i + 500]
        in_nums = dialect.in_list(tx.dialect, "num", len(chunk))
        rows = await tx.all(f"SELECT * FROM subscriptions WHERE {in_nums}",  # noqa: S608
                            dialect.in_params(tx.dialect, chunk))
        found.update((r["num"], _sub(r)) for r in rows)
    return found


async def search(tx: Tx, text: str, limit: int = 1000) -> list[Subscription]:
    """QingLong's list: name or URL containing `text` (all without it), enabled first,
    newest first."""
    where = " OR ".join(dialect.like(tx.dialect, c, ":q") for c in ("name", "url"))
    rows = await tx.all(
        f"SELECT * FROM subscriptions WHERE {where}"  # noqa: S608
        " ORDER BY enabled DESC, created_at_ms DESC, num DESC LIMIT :n",
        {"q": like_pattern(text), "n": limit})
    return [_sub(r) for r in rows]


async def update(tx: Tx, sub_id: str, fields: dict[str, Any], now_ms: int) -> Subscription:
    values = _values(fields)
    if values:
        sets = ", ".join(f"{c} = :{c}" for c in values)
        values.update(id=sub_id, now=now_ms)
        changed = await tx.execute(
            f"UPDATE subscriptions SET {sets}, updated_at_ms = :now,"  # noqa: S608
            " version = version + 1 WHERE id = :id", values)
        if not changed:
            raise NotFound("subscription")
    return await get(tx, sub_id)


async def delete(tx: Tx, sub_id: str) -> None:
    if not await tx.execute("DELETE FROM subscriptions WHERE id = ?", (sub_id,)):
        raise NotFound("subscription")


async def secret_of(tx: Tx, sub_id: str) -> str | None:
    """The credential, for the pull's environment only (never an API answer)."""
    row = await tx.one("SELECT secret FROM subscriptions WHERE id = ?", (sub_id,))
    return None if row is None else row["secret"]


async def by_pull_task(tx: Tx, task_id: str) -> Subscription | None:
    row = await tx.one("SELECT * FROM subscriptions WHERE pull_task_id = ?", (task_id,))
    return None if row is None else _sub(row)


async def mark_pulled(tx: Tx, sub_id: str, run_id: str) -> None:
    """A pull run ended (inside the transaction that ends it): its tasks are due."""
    await tx.execute("UPDATE subscriptions SET sync_run_id = ?, last_run_id = ? WHERE id = ?",
                     (run_id, run_id, sub_id))


async def sync_due(tx: Tx, limit: int = 16) -> list[Subscription]:
    rows = await tx.all("SELECT * FROM subscriptions WHERE sync_run_id IS NOT NULL"
                        " ORDER BY id LIMIT ?", (limit,))
    return [_sub(r) for r in rows]


async def synced(tx: Tx, sub_id: str, run_id: str, result: dict[str, Any]) -> None:
    """The sync of `run_id` is done (a newer pull that ended meanwhile stays due)."""
    await tx.execute(
        "UPDATE subscriptions SET last_sync_json = ?,"
        " sync_run_id = CASE WHEN sync_run_id = ? THEN NULL ELSE sync_run_id END"
        " WHERE id = ?", (_json.encode(result).decode(), run_id, sub_id))


async def links(tx: Tx, sub_id: str) -> dict[str, Link]:
    rows = await tx.all("SELECT * FROM subscription_tasks WHERE subscription_id = ?",
                        (sub_id,))
    return {r["path"]: Link(path=r["path"], task_id=r["task_id"],
                            applied_schedule=r["applied_schedule"],
                            applied_name=r["applied_name"],
                            disabled_by_pull=bool(r["disabled_by_pull"])) for r in rows}


async def put_link(tx: Tx, sub_id: str, link: Link) -> None:
    await tx.execute(
        "INSERT INTO subscription_tasks (subscription_id, path, task_id, applied_schedule,"
        " applied_name, disabled_by_pull) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (subscription_id, path) DO UPDATE SET task_id = excluded.task_id,"
        " applied_schedule = excluded.applied_schedule, applied_name = excluded.applied_name,"
        " disabled_by_pull = excluded.disabled_by_pull",
        (sub_id, link.path, link.task_id, link.applied_schedule, link.applied_name,
         int(link.disabled_by_pull)))


async def drop_link(tx: Tx, sub_id: str, path: str) -> None:
    await tx.execute("DELETE FROM subscription_tasks WHERE subscription_id = ? AND path = ?",
                     (sub_id, path))


async def task_ids_by_command(tx: Tx, commands: list[str]) -> dict[str, str]:
    """{command: task id} of existing tasks running exactly these commands."""
    out: dict[str, str] = {}
    for i in range(0, len(commands), 500):
        chunk = commands[i:i + 500]
        in_commands = dialect.in_list(tx.dialect, "command", len(chunk))
        rows = await tx.all(
            f"SELECT id, command FROM tasks WHERE {in_commands} ORDER BY num",  # noqa: S608
            dialect.in_params(tx.dialect, chunk))
        for r in rows:
            out.setdefault(r["command"], r["id"])
    return out
