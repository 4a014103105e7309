"""SQL of envs (QingLong's environment variables) and the global env a task spawns with.

Env values are secrets: nothing here logs them, and the only reader that
hands them to a process is `global_env` (the spawn environment).
"""

from __future__ import annotations

from typing import Any

import msgspec

from . import dialect
from .interface import Row, Tx
from .rows import NotFound, like_pattern

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


def _env(row: Row) -> EnvVar:
    return EnvVar(
        id=row["id"], num=row["num"], name=row["name"], value=row["value"],
        remarks=row["remarks"], enabled=bool(row["enabled"]), position=row["position"],
        created_at_ms=row["created_at_ms"], updated_at_ms=row["updated_at_ms"])


async def list_envs(tx: Tx, search: str = "") -> list[EnvVar]:
    if search:
        like = like_pattern(search)
        where = " OR ".join(dialect.like(tx.dialect, c, ":q")
                            for c in ("name", "value", "remarks"))
        rows = await tx.all(
            f"SELECT * FROM envs WHERE {where} ORDER BY position DESC, num",  # noqa: S608
            {"q": like})
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
    in_nums = dialect.in_list(tx.dialect, "num", len(nums))
    rows = await tx.all(
        f"SELECT * FROM envs WHERE {in_nums} ORDER BY position DESC, num",  # noqa: S608
        dialect.in_params(tx.dialect, nums))
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


async def move_env(tx: Tx, env_id: str, up: bool, now_ms: int) -> EnvVar:
    """Swap `env_id` with its neighbour in the list's order (position DESC, num); at an
    end nothing moves. Equal positions (imported rows) first get distinct ones."""
    rows = await tx.all("SELECT id, position FROM envs ORDER BY position DESC, num")
    order = [r["id"] for r in rows]
    if env_id not in order:
        raise NotFound("env")
    i = order.index(env_id)
    j = i - 1 if up else i + 1
    if 0 <= j < len(order):
        positions = [int(r["position"]) for r in rows]
        if len(set(positions)) != len(positions):
            positions = [ENV_INIT_POSITION - k * ENV_STEP_POSITION for k in range(len(order))]
        order[i], order[j] = order[j], order[i]
        for k, (row, moved) in enumerate(zip(rows, order, strict=True)):
            if row["id"] != moved or positions[k] != int(row["position"]):
                await tx.execute("UPDATE envs SET position = ? WHERE id = ?", (positions[k], moved))
        await tx.execute("UPDATE envs SET updated_at_ms = ? WHERE id = ?", (now_ms, env_id))
    return await get_env(tx, env_id)


async def require_envs(tx: Tx, env_ids: list[str]) -> None:
    """NotFound unless every one of these envs exists."""
    if not env_ids:
        return
    in_ids = dialect.in_list(tx.dialect, "id", len(env_ids))
    row = await tx.one(f"SELECT COUNT(*) AS n FROM envs WHERE {in_ids}",  # noqa: S608
                       dialect.in_params(tx.dialect, env_ids))
    if row is None or int(row["n"]) != len(set(env_ids)):
        raise NotFound("env")


async def delete_envs(tx: Tx, env_ids: list[str]) -> int:
    if not env_ids:
        return 0
    in_ids = dialect.in_list(tx.dialect, "id", len(env_ids))
    return await tx.execute(f"DELETE FROM envs WHERE {in_ids}",  # noqa: S608
                            dialect.in_params(tx.dialect, env_ids))


async def set_envs_enabled(tx: Tx, env_ids: list[str], enabled: bool, now_ms: int) -> int:
    if not env_ids:
        return 0
    in_ids = dialect.in_list(tx.dialect, "id", len(env_ids))
    return await tx.execute(
        f"UPDATE envs SET enabled = ?, updated_at_ms = ? WHERE {in_ids}"  # noqa: S608
        " AND enabled != ?",
        [int(enabled), now_ms, *dialect.in_params(tx.dialect, env_ids), int(enabled)])


async def rename_envs(tx: Tx, env_ids: list[str], name: str, now_ms: int) -> int:
    """Every listed env gets `name` (QingLong's PUT /envs/name); returns how many."""
    if not env_ids:
        return 0
    in_ids = dialect.in_list(tx.dialect, "id", len(env_ids))
    return await tx.execute(
        f"UPDATE envs SET name = ?, updated_at_ms = ? WHERE {in_ids}",  # noqa: S608
        [name, now_ms, *dialect.in_params(tx.dialect, env_ids)])


async def global_env(tx: Tx) -> dict[str, str]:
    """Enabled envs for a task's spawn environment; same-name values joined with '&'."""
    rows = await tx.all(
        "SELECT name, value FROM envs WHERE enabled = 1 ORDER BY position DESC, num")
    grouped: dict[str, list[str]] = {}
    for r in rows:
        grouped.setdefault(r["name"], []).append(r["value"])
    return {name: "&".join(values) for name, values in grouped.items()}
