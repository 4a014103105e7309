"""Per-task run policies read inside the transaction that applies them (docs/tasks.md).

`runs.apply` asks `retry_or_end` before it writes a transition that would end a
run: the decision (transitions.retry_or_end, pure) and its persisted backoff
commit together with the attempt's result, so a worker killed at any instant
neither loses nor doubles a retry.
"""

from __future__ import annotations

import random

import msgspec

from ..transitions import RetryPolicy, Transition
from ..transitions import retry_or_end as _retry_or_end
from . import dialect
from .interface import Tx


async def retry_policy(tx: Tx, task_id: str) -> RetryPolicy:
    row = await tx.one(
        "SELECT retries, retry_delay_s, retry_on_json FROM tasks WHERE id = ?", (task_id,))
    if row is None or not row["retries"]:
        return RetryPolicy()
    on = msgspec.json.decode(row["retry_on_json"], type=list[str])
    return RetryPolicy(retries=row["retries"], delay_s=row["retry_delay_s"], on=frozenset(on))


async def retry_or_end(tx: Tx, transition: Transition, now_ms: int) -> Transition:
    policy = await retry_policy(tx, transition.run.task_id)
    if not policy.retries:
        return transition
    return _retry_or_end(transition, policy, now_ms, random.random())


async def chain_edges(tx: Tx) -> dict[str, set[str]]:
    """Every task's downstream task ids (all three lists together), for the cycle check."""
    rows = await tx.all(
        "SELECT id, on_success_json, on_failure_json, on_finish_json FROM tasks"
        " WHERE on_success_json != '[]' OR on_failure_json != '[]' OR on_finish_json != '[]'")
    edges: dict[str, set[str]] = {}
    for r in rows:
        edges[r["id"]] = {t for col in ("on_success_json", "on_failure_json", "on_finish_json")
                          for t in msgspec.json.decode(r[col], type=list[str])}
    return edges


async def claim_boot(tx: Tx, start_id: str, node_name: str = "") -> bool:
    """True once per appliance start: the caller creates the @boot runs in this same
    transaction, so a worker killed before its commit leaves the claim to the next one.

    PostgreSQL: per node, in this node's `nodes` row (its registration creates it; no
    row yet, no claim). SQLite: the `node` singleton."""
    if tx.dialect == dialect.POSTGRESQL:
        return await tx.execute(
            "UPDATE nodes SET boot_fired_for = ? WHERE name = ?"
            " AND boot_fired_for IS DISTINCT FROM ?", (start_id, node_name, start_id)) == 1
    return await tx.execute(
        "UPDATE node SET boot_fired_for = ? WHERE singleton = 1"
        " AND boot_fired_for IS DISTINCT FROM ?", (start_id, start_id)) == 1


async def boot_task_ids(tx: Tx) -> list[str]:
    """Enabled tasks with @boot as their schedule or among their extra schedules."""
    extra = dialect.each_text(tx.dialect, "extra_schedules_json")
    rows = await tx.all(
        "SELECT id FROM tasks WHERE enabled = 1 AND (schedule = '@boot'"  # noqa: S608
        f" OR EXISTS (SELECT 1 FROM {extra} WHERE value = '@boot'))"
        " ORDER BY num")
    return [str(r["id"]) for r in rows]
