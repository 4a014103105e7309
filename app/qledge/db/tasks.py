"""SQL of tasks: create, read, list, search (QingLong's cron list), update, delete."""

from __future__ import annotations

from typing import Any

import msgspec

from ..model import CHAIN_FIELDS, Task
from . import dialect
from .interface import Tx
from .rows import NotFound, like_pattern, task_from_row

_json = msgspec.json.Encoder()

# The columns a create or an update may set, in the order INSERT names them: the SQL's
# column names come from here, never from a caller's keys (a key that is none of these
# is refused by name before any SQL is built).
WRITABLE = ("name", "command", "schedule", "timeout_s", "env_json", "enabled", "concurrency",
            "labels_json", "keep_runs", "keep_days", "keep_background", "overlap", "retries",
            "retry_delay_s", "retry_on_json", "on_success_json", "on_failure_json",
            "on_finish_json", "extra_schedules_json", "tz", "placement_node",
            "placement_labels_json", "hidden")


class UnknownTaskField(ValueError):
    """A caller passed a field no task column holds (a bug: the API decodes strictly)."""


def _task_values(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields as column values, keyed by the names in WRITABLE only."""
    out = dict(fields)
    if "env" in out:
        out["env_json"] = _json.encode(out.pop("env")).decode()
    if "labels" in out:
        out["labels_json"] = _json.encode(out.pop("labels")).decode()
    # `overlap` supersedes `concurrency`; the two columns stay in step (forbid <=> not
    # allow) whichever one the caller set.
    if "overlap" in out:
        out["overlap"] = str(out["overlap"])
        out["concurrency"] = "allow" if out["overlap"] == "allow" else "forbid"
    elif "concurrency" in out:
        out["concurrency"] = str(out["concurrency"])
        out["overlap"] = "allow" if out["concurrency"] == "allow" else "skip"
    if "extra_schedules" in out:
        out["extra_schedules_json"] = _json.encode(out.pop("extra_schedules")).decode()
    for field in CHAIN_FIELDS:
        if field in out:
            out[f"{field}_json"] = _json.encode(list(dict.fromkeys(out.pop(field)))).decode()
    if "placement_labels" in out:
        # No labels is NULL (no requirement, no bytes per row), as rows._labels reads it.
        labels = list(dict.fromkeys(out.pop("placement_labels") or []))
        out["placement_labels_json"] = _json.encode(labels).decode() if labels else None
    if "retry_on" in out:
        out["retry_on_json"] = _json.encode(sorted(set(out.pop("retry_on")))).decode()
    if "enabled" in out:
        out["enabled"] = int(bool(out["enabled"]))
    if "keep_background" in out:
        out["keep_background"] = int(bool(out["keep_background"]))
    if "hidden" in out:
        out["hidden"] = int(bool(out["hidden"]))
    unknown = sorted(set(out) - set(WRITABLE))
    if unknown:
        raise UnknownTaskField(f"not a task field: {', '.join(unknown)}")
    return {column: out[column] for column in WRITABLE if column in out}


async def create_task(tx: Tx, task_id: str, fields: dict[str, Any], now_ms: int) -> Task:
    values = _task_values(fields)
    columns = [c for c in WRITABLE if c in values]  # the rest keep their defaults
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


async def list_tasks(tx: Tx, *, after_num: int = 0, limit: int = 100,
                     hidden: bool = False) -> list[Task]:
    """A page of tasks; hidden ones (the panel's debug runs) only with `hidden`."""
    shown = "" if hidden else " AND hidden = 0"
    rows = await tx.all(
        f"SELECT * FROM tasks WHERE num > ?{shown} ORDER BY num LIMIT ?",  # noqa: S608
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


async def update_task(tx: Tx, task_id: str, fields: dict[str, Any], now_ms: int) -> Task:
    values = _task_values(fields)
    if values:
        sets = ", ".join(f"{c} = :{c}" for c in WRITABLE if c in values)
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
