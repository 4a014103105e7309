"""SQL of attempts: the node that owns them, spawn step 1, reads, and the pages that
recovery, the reaper and admission walk.

Active attempts are found through their runs (migration 0022): an active attempt's
run is always `running` (from spawn step 1, the commit that creates the attempt, to the
commit that ends it), so the pages below read the running runs from the partial index
runs_active (the run status `running` is one term of its WHERE, db/statuses.py: SQLite
uses a partial index only when the query implies it) and reach each one's attempts by
the (run_id, attempt_no) index. No index of active attempts is kept (3 WAL frames per
attempt). An older version's leftovers are not on that path — an active attempt under
a terminal run (a cancel that raced the spawn) or under a queued one (prepared before
the run was `running` at step 1): `orphan_attempts` finds them by a scan, at start-up
only, whose recovery ends or adopts them (docs/recovery.md).
"""

from __future__ import annotations

from ..model import Attempt, AttemptStatus, NewEvent, Run, RunStatus
from . import dialect
from . import statuses as st
from .events import append_events
from .interface import Tx
from .rows import ATTEMPT_SELECT, NotFound, attempt_from_row

_ACTIVE_ATTEMPT = st.active_attempt()
_A_ACTIVE = st.active_attempt("a.status")
_A_RUNNING = st.is_("a.status", AttemptStatus.RUNNING)
_R_RUNNING = st.is_("r.status", RunStatus.RUNNING)
# Running runs first (SQLite's CROSS JOIN keeps that order: dialect.ordered_join), each
# one's attempts by run_id.
_THROUGH_ACTIVE_RUNS = {
    d: f"SELECT a.* FROM runs r {dialect.ordered_join(d)} run_attempts a"  # noqa: S608
       f" ON a.run_id = r.id WHERE {_R_RUNNING}"
    for d in (dialect.SQLITE, dialect.POSTGRESQL)}


async def ensure_node_id(tx: Tx, candidate: str, now_ms: int) -> str:
    """The node id generated once and kept forever (the runtime owner of attempts)."""
    await tx.execute(
        "INSERT INTO node (singleton, node_id, created_at_ms) VALUES (1, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (candidate, now_ms),
    )
    row = await tx.one("SELECT node_id FROM node WHERE singleton = 1")
    assert row is not None
    return str(row["node_id"])


async def prepare_attempt(
    tx: Tx, run: Run, *, attempt_id: str, owner: str, executor_type: str, token_hash: bytes,
    deadline_at_ms: int | None, log_path: str, receipt_path: str, now_ms: int,
    node_epoch: int | None = None, spawn_boot_id: str | None = None,
) -> Attempt:
    """Spawn step 1 (docs/contract.md §3): attempt, log path, token hash, deadline and
    journal entry together, in one row (migration 0021); `node_epoch` is the owner's
    lease epoch on PostgreSQL (docs/fleet.md, "Fencing"), None on SQLite;
    `spawn_boot_id` the machine's boot id, durable with the rest (migration 0024): what
    tells recovery that an unconfirmed spawn predates a reboot."""
    row = await tx.one(
        "SELECT COALESCE(MAX(attempt_no), 0) AS n FROM run_attempts WHERE run_id = ?", (run.id,))
    attempt_no = int(row["n"]) + 1 if row else 1
    await tx.execute(
        "INSERT INTO run_attempts (id, run_id, attempt_no, executor_type, runtime_owner, status,"
        " callback_token_hash, callback_sequence, created_at_ms, deadline_at_ms, log_path,"
        " receipt_state, receipt_path, receipt_created_at_ms, receipt_updated_at_ms,"
        " node_epoch, spawn_boot_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
        (attempt_id, run.id, attempt_no, executor_type, owner, AttemptStatus.PREPARING.value,
         token_hash, 1, now_ms, deadline_at_ms, log_path, receipt_path, now_ms, now_ms,
         node_epoch, spawn_boot_id))
    await append_events(tx, run, [NewEvent(type="attempt.created", attempt_id=attempt_id)],
                        now_ms, {attempt_id: attempt_no})
    return await get_attempt(tx, attempt_id)


async def get_attempt(tx: Tx, attempt_id: str) -> Attempt:
    row = await tx.one(f"{ATTEMPT_SELECT} WHERE a.id = ?", (attempt_id,))
    if row is None:
        raise NotFound("attempt")
    return attempt_from_row(row)


async def find_attempt(tx: Tx, attempt_id: str) -> Attempt | None:
    row = await tx.one(f"{ATTEMPT_SELECT} WHERE a.id = ?", (attempt_id,))
    return attempt_from_row(row) if row else None


async def record_late_receipt(tx: Tx, run: Run, attempt: Attempt, *, exit_code: int,
                              finished_at_ms: int, now_ms: int) -> bool:
    """A receipt refused by its epoch (COMPLETION_STALE_EPOCH): its facts kept beside the
    decision it came too late for, never applied. The first delivery only writes them and
    the run event `attempt.late_receipt` (no status, no terminal event); a replay of the
    receipt finds them set and records nothing. True: recorded now."""
    if await tx.execute(
            "UPDATE run_attempts SET late_exit_code = ?, late_finished_at_ms = ?"
            " WHERE id = ? AND late_exit_code IS NULL AND late_finished_at_ms IS NULL",
            (exit_code, finished_at_ms, attempt.id)) != 1:
        return False
    # The epoch the receipt was written under (the attempt's), beside its exit code.
    # Never a command or output (docs/contract.md, events).
    await append_events(tx, run, [NewEvent(
        type="attempt.late_receipt", attempt_id=attempt.id,
        data={"exit_code": exit_code, "epoch": attempt.node_epoch})], now_ms,
        {attempt.id: attempt.attempt_no})
    return True


async def attempts_of_run(tx: Tx, run_id: str) -> list[Attempt]:
    rows = await tx.all(f"{ATTEMPT_SELECT} WHERE a.run_id = ? ORDER BY a.attempt_no", (run_id,))
    return [attempt_from_row(r) for r in rows]


async def count_active_attempts(tx: Tx, owner: str) -> int:
    row = await tx.one(
        "SELECT COUNT(*) AS n FROM runs r"  # noqa: S608
        f" {dialect.ordered_join(tx.dialect)} run_attempts a ON a.run_id = r.id"
        f" WHERE {_R_RUNNING} AND a.runtime_owner = ? AND {_A_ACTIVE}",
        (owner,))
    return int(row["n"]) if row else 0


async def run_has_active_attempt(tx: Tx, run_id: str) -> bool:
    row = await tx.one(
        f"SELECT 1 FROM run_attempts WHERE run_id = ? AND {_ACTIVE_ATTEMPT}"  # noqa: S608
        " LIMIT 1", (run_id,))
    return row is not None


async def active_attempts_page(tx: Tx, owner: str, after_id: str, limit: int) -> list[Attempt]:
    """A stable cursor over this node's active attempts (recovery never lists directories)."""
    rows = await tx.all(
        f"{_THROUGH_ACTIVE_RUNS[tx.dialect]} AND a.runtime_owner = ? AND {_A_ACTIVE}"
        " AND a.id > ? ORDER BY a.id LIMIT ?", (owner, after_id, limit))
    return [attempt_from_row(r) for r in rows]


async def expired_attempts(tx: Tx, owner: str, now_ms: int, limit: int) -> list[Attempt]:
    rows = await tx.all(
        f"{_THROUGH_ACTIVE_RUNS[tx.dialect]} AND a.runtime_owner = ? AND {_A_RUNNING}"
        " AND a.deadline_at_ms IS NOT NULL AND a.deadline_at_ms <= ? ORDER BY a.deadline_at_ms"
        " LIMIT ?", (owner, now_ms, limit))
    return [attempt_from_row(r) for r in rows]


async def attempts_without_journal(tx: Tx, owner: str, limit: int) -> list[Attempt]:
    rows = await tx.all(
        f"{_THROUGH_ACTIVE_RUNS[tx.dialect]} AND a.runtime_owner = ? AND {_A_ACTIVE}"
        " AND a.receipt_state IS NULL ORDER BY a.id LIMIT ?", (owner, limit))
    return [attempt_from_row(r) for r in rows]


async def orphan_attempts(tx: Tx, owner: str, after_id: str, limit: int) -> list[Attempt]:
    """Active attempts of this node whose run is not `running`: an older version's (a
    cancel that raced the spawn ended the run and stranded its attempt; an attempt
    prepared while its run stayed `queued`). None is made any more, and no index leads
    to them: one walk of run_attempts in id order (bounded by retention), read at
    start-up only (Reconciler.startup)."""
    rows = await tx.all(
        f"{ATTEMPT_SELECT} JOIN runs r ON r.id = a.run_id"
        f" WHERE a.runtime_owner = ? AND {_A_ACTIVE} AND NOT {_R_RUNNING}"
        " AND a.id > ? ORDER BY a.id LIMIT ?", (owner, after_id, limit))
    return [attempt_from_row(r) for r in rows]


async def task_has_running_attempt(tx: Tx, task_id: str) -> bool:
    row = await tx.one(
        "SELECT 1 FROM run_attempts a JOIN runs r ON r.id = a.run_id"  # noqa: S608
        f" WHERE r.task_id = ? AND {_A_ACTIVE} LIMIT 1", (task_id,))
    return row is not None
