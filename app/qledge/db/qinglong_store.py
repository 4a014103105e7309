"""SQL of the QingLong-facing pieces: envs, OpenAPI apps/tokens, schedule state, cron views.

Env values are secrets: nothing here logs them, and the only reader that
hands them to a process is `global_env` (the spawn environment).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from ..model import ACTIVE_ATTEMPT, Run, RunStatus, Task
from . import statuses as st
from .connection import Tx
from .store import NotFound, _run, _task

_json = msgspec.json.Encoder()

# QingLong's position scheme: new envs go below the lowest existing one.
ENV_INIT_POSITION = 4_500_000_000_000_000
ENV_STEP_POSITION = 10_000_000_000


class EnvVar(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    num: int
    name: str
    value: str
    remarks: str
    enabled: bool
    position: int
    created_at_ms: int
    updated_at_ms: int


class App(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    client_id: str
    scopes: list[str]
    created_at_ms: int
    live_tokens: int = 0


class TokenGrant(msgspec.Struct, frozen=True, kw_only=True):
    app_id: str
    app_name: str
    scopes: list[str]
    expires_at_ms: int


def _env(row: sqlite3.Row) -> EnvVar:
    return EnvVar(
        id=row["id"], num=row["num"], name=row["name"], value=row["value"],
        remarks=row["remarks"], enabled=bool(row["enabled"]), position=row["position"],
        created_at_ms=row["created_at_ms"], updated_at_ms=row["updated_at_ms"])


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# -- envs ------------------------------------------------------------------------

async def list_envs(tx: Tx, search: str = "") -> list[EnvVar]:
    if search:
        like = _like(search)
        rows = await tx.all(
            "SELECT * FROM envs WHERE name LIKE :q ESCAPE '\\' OR value LIKE :q ESCAPE '\\'"
            " OR remarks LIKE :q ESCAPE '\\' ORDER BY position DESC, num", {"q": like})
    else:
        rows = await tx.all("SELECT * FROM envs ORDER BY position DESC, num")
    return [_env(r) for r in rows]


async def get_env(tx: Tx, env_id: str) -> EnvVar:
    row = await tx.one("SELECT * FROM envs WHERE id = ?", (env_id,))
    if row is None:
        raise NotFound("env")
    return _env(row)


async def envs_by_nums(tx: Tx, nums: list[int]) -> list[EnvVar]:
    if not nums:
        return []
    marks = ",".join("?" * len(nums))
    rows = await tx.all(
        f"SELECT * FROM envs WHERE num IN ({marks}) ORDER BY position DESC, num",  # noqa: S608
        nums)
    return [_env(r) for r in rows]


async def create_env(tx: Tx, env_id: str, fields: dict[str, Any], now_ms: int) -> EnvVar:
    row = await tx.one("SELECT MIN(position) AS p FROM envs")
    lowest = row["p"] if row is not None and row["p"] is not None else ENV_INIT_POSITION
    await tx.execute(
        "INSERT INTO envs (id, name, value, remarks, enabled, position, created_at_ms,"
        " updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (env_id, fields["name"], fields["value"], fields.get("remarks") or "",
         int(bool(fields.get("enabled", True))), int(lowest) - ENV_STEP_POSITION, now_ms,
         now_ms))
    return await get_env(tx, env_id)


_ENV_COLUMNS = ("name", "value", "remarks", "enabled")


async def update_env(tx: Tx, env_id: str, fields: dict[str, Any], now_ms: int) -> EnvVar:
    values = {k: v for k, v in fields.items() if k in _ENV_COLUMNS}
    if "enabled" in values:
        values["enabled"] = int(bool(values["enabled"]))
    if "remarks" in values and values["remarks"] is None:
        values["remarks"] = ""
    if values:
        sets = ", ".join(f"{c} = :{c}" for c in values)
        values.update(id=env_id, now=now_ms)
        changed = await tx.execute(
            f"UPDATE envs SET {sets}, updated_at_ms = :now WHERE id = :id", values)  # noqa: S608
        if not changed:
            raise NotFound("env")
    return await get_env(tx, env_id)


async def require_envs(tx: Tx, env_ids: list[str]) -> None:
    """NotFound unless every one of these envs exists."""
    if not env_ids:
        return
    marks = ",".join("?" * len(env_ids))
    row = await tx.one(
        f"SELECT COUNT(*) AS n FROM envs WHERE id IN ({marks})", env_ids)  # noqa: S608
    if row is None or int(row["n"]) != len(set(env_ids)):
        raise NotFound("env")


async def delete_envs(tx: Tx, env_ids: list[str]) -> int:
    if not env_ids:
        return 0
    marks = ",".join("?" * len(env_ids))
    return await tx.execute(f"DELETE FROM envs WHERE id IN ({marks})", env_ids)  # noqa: S608


async def set_envs_enabled(tx: Tx, env_ids: list[str], enabled: bool, now_ms: int) -> int:
    if not env_ids:
        return 0
    marks = ",".join("?" * len(env_ids))
    return await tx.execute(
        f"UPDATE envs SET enabled = ?, updated_at_ms = ? WHERE id IN ({marks})"  # noqa: S608
        " AND enabled != ?", [int(enabled), now_ms, *env_ids, int(enabled)])


async def rename_envs(tx: Tx, env_ids: list[str], name: str, now_ms: int) -> int:
    """Every listed env gets `name` (QingLong's PUT /envs/name); returns how many."""
    if not env_ids:
        return 0
    marks = ",".join("?" * len(env_ids))
    return await tx.execute(
        f"UPDATE envs SET name = ?, updated_at_ms = ? WHERE id IN ({marks})",  # noqa: S608
        [name, now_ms, *env_ids])


async def task_envs(tx: Tx) -> list[tuple[int, str, dict[str, str]]]:
    """(num, name, env) of every task with an env of its own (the size check of a
    changed global env, http/envs.py)."""
    rows = await tx.all("SELECT num, name, env_json FROM tasks WHERE env_json != '{}'")
    return [(r["num"], r["name"], msgspec.json.decode(r["env_json"], type=dict[str, str]))
            for r in rows]


async def global_env(tx: Tx) -> dict[str, str]:
    """Enabled envs for a task's spawn environment; same-name values joined with '&'."""
    rows = await tx.all(
        "SELECT name, value FROM envs WHERE enabled = 1 ORDER BY position DESC, num")
    grouped: dict[str, list[str]] = {}
    for r in rows:
        grouped.setdefault(r["name"], []).append(r["value"])
    return {name: "&".join(values) for name, values in grouped.items()}


# -- apps and tokens ---------------------------------------------------------------

def _app(row: sqlite3.Row) -> App:
    keys = row.keys()
    return App(id=row["id"], name=row["name"], client_id=row["client_id"],
               scopes=msgspec.json.decode(row["scopes_json"], type=list[str]),
               created_at_ms=row["created_at_ms"],
               live_tokens=int(row["live_tokens"] or 0) if "live_tokens" in keys else 0)


async def create_app(tx: Tx, *, app_id: str, name: str, client_id: str, secret_hash: bytes,
                     scopes: list[str], now_ms: int) -> App:
    await tx.execute(
        "INSERT INTO apps (id, name, client_id, secret_hash, scopes_json, created_at_ms)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (app_id, name, client_id, secret_hash, _json.encode(scopes).decode(), now_ms))
    return await get_app(tx, app_id, now_ms)


async def app_name_taken(tx: Tx, name: str) -> bool:
    return await tx.one("SELECT 1 FROM apps WHERE name = ?", (name,)) is not None


async def get_app(tx: Tx, app_id: str, now_ms: int) -> App:
    row = await tx.one(
        "SELECT a.*, (SELECT COUNT(*) FROM app_tokens t WHERE t.app_id = a.id"
        " AND t.expires_at_ms > ?) AS live_tokens FROM apps a WHERE a.id = ?", (now_ms, app_id))
    if row is None:
        raise NotFound("app")
    return _app(row)


async def list_apps(tx: Tx, now_ms: int) -> list[App]:
    rows = await tx.all(
        "SELECT a.*, (SELECT COUNT(*) FROM app_tokens t WHERE t.app_id = a.id"
        " AND t.expires_at_ms > ?) AS live_tokens FROM apps a ORDER BY a.created_at_ms, a.id",
        (now_ms,))
    return [_app(r) for r in rows]


async def delete_app(tx: Tx, app_id: str) -> None:
    """Deleting the app revokes its tokens (ON DELETE CASCADE)."""
    if not await tx.execute("DELETE FROM apps WHERE id = ?", (app_id,)):
        raise NotFound("app")


async def app_secret(tx: Tx, client_id: str) -> tuple[str, bytes] | None:
    """(app id, secret hash) for a client id; the caller compares in constant time."""
    row = await tx.one("SELECT id, secret_hash FROM apps WHERE client_id = ?", (client_id,))
    return (str(row["id"]), bytes(row["secret_hash"])) if row else None


async def issue_token(tx: Tx, app_id: str, token_hash: bytes, expires_at_ms: int, now_ms: int,
                      keep: int) -> None:
    """Store a new token hash; drop expired ones and all but the newest `keep` live ones."""
    await tx.execute("DELETE FROM app_tokens WHERE app_id = ? AND expires_at_ms <= ?",
                     (app_id, now_ms))
    await tx.execute(
        "INSERT INTO app_tokens (token_hash, app_id, created_at_ms, expires_at_ms)"
        " VALUES (?, ?, ?, ?)", (token_hash, app_id, now_ms, expires_at_ms))
    await tx.execute(
        "DELETE FROM app_tokens WHERE app_id = ? AND token_hash NOT IN (SELECT token_hash"
        " FROM app_tokens WHERE app_id = ? ORDER BY created_at_ms DESC, rowid DESC LIMIT ?)",
        (app_id, app_id, keep))


async def token_grant(tx: Tx, token_hash: bytes) -> TokenGrant | None:
    row = await tx.one(
        "SELECT t.app_id, t.expires_at_ms, a.name, a.scopes_json FROM app_tokens t"
        " JOIN apps a ON a.id = t.app_id WHERE t.token_hash = ?", (token_hash,))
    if row is None:
        return None
    return TokenGrant(app_id=row["app_id"], app_name=row["name"],
                      scopes=msgspec.json.decode(row["scopes_json"], type=list[str]),
                      expires_at_ms=row["expires_at_ms"])


# -- schedule state ----------------------------------------------------------------

async def scheduled_tasks(tx: Tx) -> list[tuple[Task, int | None]]:
    """Every enabled task with a schedule, with the last due time already consumed."""
    rows = await tx.all(
        "SELECT t.*, s.last_due_ms AS _last_due_ms FROM tasks t"
        " LEFT JOIN task_schedule_state s ON s.task_id = t.id"
        " WHERE t.enabled = 1 AND (t.schedule IS NOT NULL OR t.extra_schedules_json != '[]')"
        " ORDER BY t.num")
    return [(_task(r), r["_last_due_ms"]) for r in rows]


async def last_due(tx: Tx, task_id: str) -> int | None:
    row = await tx.one("SELECT last_due_ms FROM task_schedule_state WHERE task_id = ?",
                       (task_id,))
    return int(row["last_due_ms"]) if row else None


async def record_due(tx: Tx, task_id: str, due_ms: int, now_ms: int) -> None:
    await tx.execute(
        "INSERT INTO task_schedule_state (task_id, last_due_ms, updated_at_ms) VALUES (?, ?, ?)"
        " ON CONFLICT (task_id) DO UPDATE SET last_due_ms = excluded.last_due_ms,"
        " updated_at_ms = excluded.updated_at_ms", (task_id, due_ms, now_ms))


async def count_events(tx: Tx, run_id: str, event_type: str) -> int:
    row = await tx.one("SELECT COUNT(*) AS n FROM run_events WHERE run_id = ? AND type = ?",
                       (run_id, event_type))
    return int(row["n"]) if row else 0


async def queued_run_of_task(tx: Tx, task_id: str) -> Run | None:
    row = await tx.one(
        f"SELECT * FROM runs WHERE task_id = ? AND {st.is_('status', RunStatus.QUEUED)}"  # noqa: S608
        " ORDER BY id LIMIT 1", (task_id,))
    return _run(row) if row else None


# -- QingLong cron views -----------------------------------------------------------

_SEARCH_COLUMNS = {"name": "name", "command": "command", "schedule": "schedule",
                   "label": "labels_json"}


async def search_tasks(tx: Tx, search: str, offset: int, limit: int) -> tuple[list[Task], int]:
    """QingLong's list: `searchValue` matches name/command/schedule/labels, or one of them
    with a `name:`/`command:`/`schedule:`/`label:` prefix. Enabled first, newest first."""
    where, params = "", {}
    if search:
        column, sep, rest = search.partition(":")
        if sep and column in _SEARCH_COLUMNS:
            where = f"WHERE {_SEARCH_COLUMNS[column]} LIKE :q ESCAPE '\\'"
            params["q"] = _like(rest)
        else:
            where = ("WHERE name LIKE :q ESCAPE '\\' OR command LIKE :q ESCAPE '\\'"
                     " OR schedule LIKE :q ESCAPE '\\' OR labels_json LIKE :q ESCAPE '\\'")
            params["q"] = _like(search)
    total_row = await tx.one(f"SELECT COUNT(*) AS n FROM tasks {where}", params)  # noqa: S608
    rows = await tx.all(
        f"SELECT * FROM tasks {where} ORDER BY enabled DESC, num DESC"  # noqa: S608
        " LIMIT :limit OFFSET :offset", {**params, "limit": limit, "offset": offset})
    return [_task(r) for r in rows], int(total_row["n"]) if total_row else 0


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What QingLong shows about a cron's runs: its state, last start/duration, log, pid."""

    running: bool = False
    queued: bool = False
    last_started_at_ms: int | None = None
    last_duration_ms: int | None = None
    log_path: str | None = None
    pid: int | None = None
    latest_run_id: str | None = None
    latest_status: str | None = None


async def run_summaries(tx: Tx, task_ids: list[str]) -> dict[str, RunSummary]:
    if not task_ids:
        return {}
    ids_json = _json.encode(task_ids).decode()
    # Spelled like the WHERE of the partial index runs_active (db/statuses.py).
    active = await tx.all(
        "SELECT task_id, status, COUNT(*) AS n FROM runs"  # noqa: S608
        f" WHERE {st.active_run()}"
        " AND task_id IN (SELECT value FROM json_each(?)) GROUP BY task_id, status",
        (ids_json,))
    flags: dict[str, set[str]] = {}
    for r in active:
        flags.setdefault(r["task_id"], set()).add(r["status"])
    latest = await tx.all(
        "SELECT r.task_id, r.id, r.status, r.started_at_ms, r.created_at_ms,"
        " l.relative_path"
        " FROM json_each(?) j"
        " JOIN runs r ON r.id = (SELECT id FROM runs WHERE task_id = j.value"
        "   ORDER BY id DESC LIMIT 1)"
        " LEFT JOIN run_attempts a ON a.id = (SELECT id FROM run_attempts WHERE run_id = r.id"
        "   ORDER BY attempt_no DESC LIMIT 1)"
        " LEFT JOIN log_artifacts l ON l.id = a.log_artifact_id", (ids_json,))
    finished = await tx.all(
        "SELECT r.task_id, r.started_at_ms, r.finished_at_ms FROM json_each(?) j"
        " JOIN runs r ON r.id = (SELECT id FROM runs WHERE task_id = j.value"
        "   AND started_at_ms IS NOT NULL AND finished_at_ms IS NOT NULL"
        "   ORDER BY id DESC LIMIT 1)", (ids_json,))
    durations = {r["task_id"]: max(0, r["finished_at_ms"] - r["started_at_ms"])
                 for r in finished}
    pids = {r["task_id"]: r["pid"] for r in await tx.all(
        "SELECT r.task_id, a.pid FROM runs r JOIN run_attempts a ON a.run_id = r.id"  # noqa: S608
        f" WHERE {st.is_('r.status', RunStatus.RUNNING)} AND {st.in_('a.status', ACTIVE_ATTEMPT)}"
        " AND a.pid IS NOT NULL AND r.task_id IN (SELECT value FROM json_each(?))"
        " ORDER BY a.id", (ids_json,))}
    out: dict[str, RunSummary] = {}
    for r in latest:
        tid = r["task_id"]
        out[tid] = RunSummary(
            running=RunStatus.RUNNING in flags.get(tid, set()),
            queued=RunStatus.QUEUED in flags.get(tid, set()),
            last_started_at_ms=r["started_at_ms"] or r["created_at_ms"],
            last_duration_ms=durations.get(tid), log_path=r["relative_path"],
            pid=pids.get(tid), latest_run_id=r["id"], latest_status=r["status"])
    return out


async def active_runs_of_task(tx: Tx, task_id: str) -> list[Run]:
    rows = await tx.all(
        f"SELECT * FROM runs WHERE task_id = ? AND {st.active_run()} ORDER BY id",  # noqa: S608
        (task_id,))
    return [_run(r) for r in rows]
