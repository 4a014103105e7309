"""Per-task run policies read inside the transaction that applies them (docs/tasks.md).

`store.apply` asks `retry_or_end` before it writes a transition that would end a
run: the decision (transitions.retry_or_end, pure) and its persisted backoff
commit together with the attempt's result, so a worker killed at any instant
neither loses nor doubles a retry.
"""

from __future__ import annotations

import random

import msgspec

from ..transitions import RetryPolicy, Transition
from ..transitions import retry_or_end as _retry_or_end
from .connection import Tx


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
