"""SQL of tasks: create, read, list, search (QingLong's cron list), update, delete."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..model import Concurrency, Overlap, Task
from ..tasks.writable import UNSET, TaskFields
from . import dialect
from .interface import Tx
from .rows import NotFound, like_pattern, task_from_row

_json = msgspec.json.Encoder()


def _encoded(value: list[str] | dict[str, str]) -> str:
    return _json.encode(value).decode()


def _unique(value: list[str]) -> str:
    return _encoded(list(dict.fromkeys(value)))


def _placement_labels(value: list[str]) -> str | None:
    # No labels is NULL (no requirement, no bytes per row), as rows._labels reads it.
    labels = list(dict.fromkeys(value))
    return _encoded(labels) if labels else None


def _flag(value: bool) -> int:
    return int(bool(value))


def _same(value: Any) -> Any:
    return value


# Each field of TaskFields, its column and how its value is stored, in the order INSERT
# names them: the SQL's column names come from here, never from a caller's keys
# (tests/test_db_tasks.py checks this list against TaskFields and the table).
COLUMNS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("name", "name", _same), ("command", "command", _same), ("schedule", "schedule", _same),
    ("timeout_s", "timeout_s", _same), ("env", "env_json", _encoded),
    ("enabled", "enabled", _flag), ("concurrency", "concurrency", str),
    ("labels", "labels_json", _encoded), ("keep_runs", "keep_runs", _same),
    ("keep_days", "keep_days", _same), ("keep_background", "keep_background", _flag),
    ("overlap", "overlap", str), ("retries", "retries", _same),
    ("retry_delay_s", "retry_delay_s", _same),
    ("retry_on", "retry_on_json", lambda v: _encoded(sorted(set(v)))),
    ("on_success", "on_success_json", _unique), ("on_failure", "on_failure_json", _unique),
    ("on_finish", "on_finish_json", _unique),
    ("extra_schedules", "extra_schedules_json", _encoded), ("tz", "tz", _same),
    ("placement_node", "placement_node", _same),
    ("placement_labels", "placement_labels_json", _placement_labels),
    ("hidden", "hidden", _flag),
)
WRITABLE = tuple(column for _, column, _ in COLUMNS)


def _task_values(fields: TaskFields) -> dict[str, Any]:
    """The fields set, as column values keyed by their column (in COLUMNS' order)."""
    if fields.overlap is not UNSET:
        # `overlap` supersedes `concurrency`; the two columns stay in step (forbid <=>
        # not allow) whichever one the caller set.
        concurrency = Concurrency.ALLOW if fields.overlap == Overlap.ALLOW \
            else Concurrency.FORBID
        fields = msgspec.structs.replace(fields, concurrency=concurrency)
    elif fields.concurrency is not UNSET:
        fields = msgspec.structs.replace(
            fields, overlap=Overlap.ALLOW if fields.concurrency == Concurrency.ALLOW
            else Overlap.SKIP)
    values: dict[str, Any] = {}
    for field, column, store in COLUMNS:
        value = getattr(fields, field)
        if value is not UNSET:
            values[column] = store(value)
    return values


async def create_task(tx: Tx, task_id: str, fields: TaskFields, now_ms: int) -> Task:
    values = _task_values(fields)
    columns = list(values)  # the rest keep their defaults
    values.update(id=task_id, created_at_ms=now_ms, updated_at_ms=now_ms)
    cols = ", ".join(["id", *columns, "created_at_ms", "updated_at_ms"])
    marks = ", ".join(f":{c}" for c in ["id", *columns, "created_at_ms", "updated_at_ms"])
    await tx.execute(f"INSERT INTO tasks ({cols}) VALUES ({marks})", values)  # noqa: S608
    return await get_task(tx, task_id)


async def get_task(tx: Tx, task_id: str) -> Task:
    row = await tx.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
    if row is None:
        raise NotFound("task")
    return task_from_row(row)


async def get_task_by_num(tx: Tx, num: int) -> Task:
    row = await tx.one("SELECT * FROM tasks WHERE num = ?", (num,))
    if row is None:
        raise NotFound("task")
    return task_from_row(row)


async def task_by_command(tx: Tx, command: str, hidden: bool = False) -> Task | None:
    """The oldest task, hidden or not, whose command is exactly `command`
    (operations/script_runs.py)."""
    row = await tx.one(
        "SELECT * FROM tasks WHERE command = ? AND hidden = ? ORDER BY num LIMIT 1",
        (command, int(hidden)))
    return task_from_row(row) if row is not None else None


# A task the appliance made for itself: a subscription's pull, or a dependency queue
# (labels ["dependencies"], name "dependencies: <ecosystem>"; runtime/dependencies.py),
# or the scheduled backup (db/backup_schedule.py).
INTERNAL = ("(EXISTS (SELECT 1 FROM subscriptions s WHERE s.pull_task_id = t.id)"
            " OR (t.labels_json = '[\"dependencies\"]' AND t.name LIKE 'dependencies: %')"
            " OR (t.labels_json = '[\"backup\"]' AND t.name = 'backup: scheduled'))")


async def list_tasks(tx: Tx, *, after_num: int = 0, limit: int = 100,
                     hidden: bool = False, internal: bool = True) -> list[Task]:
    """A page of tasks; hidden ones (the panel's debug runs) only with `hidden`, the
    appliance's own (INTERNAL) unless not `internal` (the panel's pickers)."""
    shown = "" if hidden else " AND hidden = 0"
    if not internal:
        shown += f" AND NOT {INTERNAL}"
    rows = await tx.all(
        f"SELECT * FROM tasks t WHERE num > ?{shown} ORDER BY num LIMIT ?",  # noqa: S608
        (after_num, limit))
    return [task_from_row(r) for r in rows]


_SEARCH_COLUMNS = {"name": "name", "command": "command", "schedule": "schedule",
                   "label": "labels_json"}


async def search_tasks(tx: Tx, search: str, offset: int, limit: int) -> tuple[list[Task], int]:
    """QingLong's list: `searchValue` matches name/command/schedule/labels, or one of them
    with a `name:`/`command:`/`schedule:`/`label:` prefix. Enabled first, newest first."""
    where, params = "WHERE hidden = 0", {}
    if search:
        column, sep, rest = search.partition(":")
        if sep and column in _SEARCH_COLUMNS:
            where += f" AND {dialect.like(tx.dialect, _SEARCH_COLUMNS[column], ':q')}"
            params["q"] = like_pattern(rest)
        else:
            where += " AND (" + " OR ".join(
                dialect.like(tx.dialect, c, ":q")
                for c in ("name", "command", "schedule", "labels_json")) + ")"
            params["q"] = like_pattern(search)
    total_row = await tx.one(f"SELECT COUNT(*) AS n FROM tasks {where}", params)  # noqa: S608
    rows = await tx.all(
        f"SELECT * FROM tasks {where} ORDER BY enabled DESC, num DESC"  # noqa: S608
        " LIMIT :limit OFFSET :offset", {**params, "limit": limit, "offset": offset})
    return [task_from_row(r) for r in rows], int(total_row["n"]) if total_row else 0


async def task_envs(tx: Tx) -> list[tuple[int, str, dict[str, str]]]:
    """(num, name, env) of every task with an env of its own (the size check of a
    changed global env, http/envs.py)."""
    rows = await tx.all("SELECT num, name, env_json FROM tasks WHERE env_json != '{}'")
    return [(r["num"], r["name"], msgspec.json.decode(r["env_json"], type=dict[str, str]))
            for r in rows]


async def update_task(tx: Tx, task_id: str, fields: TaskFields, now_ms: int) -> Task:
    values = _task_values(fields)
    if values:
        sets = ", ".join(f"{c} = :{c}" for c in values)
        values.update(id=task_id, now=now_ms)
        changed = await tx.execute(
            f"UPDATE tasks SET {sets}, updated_at_ms = :now, version = version + 1"  # noqa: S608
            " WHERE id = :id", values)
        if not changed:
            raise NotFound("task")
    return await get_task(tx, task_id)


async def delete_task(tx: Tx, task_id: str, now_ms: int = 0) -> list[str]:
    """Delete a task and its (terminal) runs; returns their log paths for removal after commit.

    The paths are also queued in `file_deletions` in this transaction, so a crash
    before the unlink leaves no orphan: the next retention round removes them.
    """
    await get_task(tx, task_id)
    logs = await tx.all(
        "SELECT a.log_path, a.runtime_owner FROM run_attempts a JOIN runs r ON r.id = a.run_id"
        " WHERE r.task_id = ?", (task_id,))
    # Its runs and their attempts (with their logs' columns) go by ON DELETE CASCADE.
    await tx.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
    paths = [str(r["log_path"]) for r in logs]
    for r in logs:
        # A fleet node unlinks only its own logs: each is queued for its owner's disk.
        vol = "logs" if tx.dialect == "sqlite" else f"logs@{r['runtime_owner']}"
        await tx.execute(
            "INSERT INTO file_deletions (volume, relative_path, created_at_ms)"
            " VALUES (?, ?, ?) ON CONFLICT DO NOTHING", (vol, str(r["log_path"]), now_ms))
    return paths


async def tasks_by_ids(tx: Tx, task_ids: list[str]) -> dict[str, Task]:
    if not task_ids:
        return {}
    in_ids = dialect.in_list(tx.dialect, "id", len(task_ids))
    rows = await tx.all(f"SELECT * FROM tasks WHERE {in_ids}",  # noqa: S608
                        dialect.in_params(tx.dialect, task_ids))
    return {r["id"]: task_from_row(r) for r in rows}
