"""Operations on the global envs: each task's environment must still fit execve
after the change (launch/environment.py)."""

from __future__ import annotations

from typing import Any

from .. import ids
from ..clock import now_ms
from ..db import envs
from ..launch import environment
from ..runtime.lifecycle import Runtime


async def create_envs(rt: Runtime, items: list[dict[str, Any]]) -> list[envs.EnvVar]:
    """New envs in one transaction; every task's environment must still fit execve."""
    async with rt.db.write() as tx:
        created = [await envs.create_env(tx, ids.uuid7(), fields, now_ms())
                   for fields in items]
        await environment.verify(tx, rt.settings.work_path)
    return created


async def update_env(rt: Runtime, env_id: str, fields: dict[str, Any]) -> envs.EnvVar:
    async with rt.db.write() as tx:
        env = await envs.update_env(tx, env_id, fields, now_ms())
        await environment.verify(tx, rt.settings.work_path)
    return env


async def set_envs_enabled(rt: Runtime, env_ids: list[str], enabled: bool) -> None:
    """All or nothing: NotFound when one of them is gone."""
    async with rt.db.write() as tx:
        await envs.require_envs(tx, env_ids)
        await envs.set_envs_enabled(tx, env_ids, enabled, now_ms())
        if enabled:
            await environment.verify(tx, rt.settings.work_path)


async def rename_envs(rt: Runtime, env_ids: list[str], name: str) -> None:
    """Give every listed env one name (QingLong's PUT /envs/name)."""
    async with rt.db.write() as tx:
        await envs.require_envs(tx, env_ids)
        await envs.rename_envs(tx, env_ids, name, now_ms())
        await environment.verify(tx, rt.settings.work_path)


async def delete_envs(rt: Runtime, env_ids: list[str], *, missing_ok: bool = False) -> None:
    """Delete these envs; NotFound for an unknown one unless `missing_ok`."""
    async with rt.db.write() as tx:
        if not missing_ok:
            await envs.require_envs(tx, env_ids)
        await envs.delete_envs(tx, env_ids)


async def move_env(rt: Runtime, env_id: str, up: bool) -> envs.EnvVar:
    """One place up or down in the list (and in a same-name join's order)."""
    async with rt.db.write() as tx:
        return await envs.move_env(tx, env_id, up, now_ms())
