"""SQL of runs: create, read, list, the queue, the state writes of `apply`, and
QingLong's per-task run summaries.

State changes go through `apply()`, which writes a pure `Transition` with
compare-and-set on the run's version.
"""

from __future__ import annotations

import msgspec

from .. import transitions
from ..model import ACTIVE_ATTEMPT, TERMINAL_RUN, NewEvent, Reason, Run, RunStatus, Trigger
from ..node import Node
from ..transitions import Transition
from . import dialect, events, policies
from . import statuses as st
from .attempts import run_has_active_attempt
from .events import append_events
from .interface import Tx
from .rows import Conflict, NotFound, run_from_row

_json = msgspec.json.Encoder()
_ACTIVE_RUN = st.active_run()
_QUEUED = st.is_("status", RunStatus.QUEUED)
# The channel a node LISTENs on for queued runs (PostgreSQL; docs/fleet.md, "The
# claim"): delivered on commit, dropped with a rollback, one per transaction.
QUEUED_CHANNEL = "qledge_queued"
# apply's run UPDATE, per dialect (the event-log append differs: events.APPEND_SET).
_APPLY = {
    d: "UPDATE runs SET status = ?, version = ?, cancel_reason = ?, cancel_requested_at_ms = ?,"  # noqa: S608
       " started_at_ms = ?, finished_at_ms = ?, exit_code = ?, reason_code = ?,"
       f" not_before_ms = ?, event_seq = event_seq + ?, {append}"
       " WHERE id = ? AND version = ?"
    for d, append in events.APPEND_SET.items()}


async def create_run(tx: Tx, run_id: str, task_id: str, trigger: Trigger, now_ms: int,
                     not_before_ms: int | None = None) -> Run:
    """A queued run; with `not_before_ms` the dispatcher leaves it until that time
    (and a `run.created` event that says so).

    The run takes the task's placement as it is now: editing the task later never
    moves a queued run (scalar subqueries, so a missing task is still the foreign
    key's error)."""
    await tx.execute(
        "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, not_before_ms,"
        " placement_node, placement_labels_json) VALUES (?, ?, ?, ?, ?, ?,"
        " (SELECT placement_node FROM tasks WHERE id = ?),"
        " (SELECT placement_labels_json FROM tasks WHERE id = ?))",
        (run_id, task_id, trigger.value, RunStatus.QUEUED.value, now_ms, not_before_ms,
         task_id, task_id))
    await notify_queued(tx)
    run = await get_run(tx, run_id)
    data: dict[str, str | int | None] = {"trigger": trigger.value}
    if not_before_ms is not None:
        data["not_before_ms"] = not_before_ms
    await append_events(tx, run, [NewEvent(type="run.created", data=data)], now_ms)
    return await get_run(tx, run_id)


async def notify_queued(tx: Tx) -> None:
    """Wake every node's dispatcher when this transaction commits (fleet mode: the
    other nodes cannot see this node's queue otherwise; on SQLite nobody listens —
    the one node's own callers wake it)."""
    await tx.notify(QUEUED_CHANNEL)


async def get_run(tx: Tx, run_id: str) -> Run:
    row = await tx.one("SELECT * FROM runs WHERE id = ?", (run_id,))
    if row is None:
        raise NotFound("run")
    return run_from_row(row)


async def active_runs_of_task(tx: Tx, task_id: str, limit: int | None = None) -> list[Run]:
    """Oldest first; all of them when `limit` is None (then the query has no LIMIT: a
    negative LIMIT means "none" on SQLite only)."""
    sql = f"SELECT * FROM runs WHERE task_id = ? AND {_ACTIVE_RUN} ORDER BY id"  # noqa: S608
    if limit is None:
        rows = await tx.all(sql, (task_id,))
    else:
        rows = await tx.all(f"{sql} LIMIT ?", (task_id, limit))
    return [run_from_row(r) for r in rows]


async def active_run_of_task(tx: Tx, task_id: str) -> Run | None:
    """The oldest active run of the task, if any (what a `forbid` task waits on)."""
    found = await active_runs_of_task(tx, task_id, limit=1)
    return found[0] if found else None


async def queued_run_of_task(tx: Tx, task_id: str) -> Run | None:
    row = await tx.one(
        f"SELECT * FROM runs WHERE task_id = ? AND {_QUEUED}"  # noqa: S608
        " ORDER BY id LIMIT 1", (task_id,))
    return run_from_row(row) if row else None


def _filter(task_id: str | None, status: str | None) -> tuple[list[str], list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if task_id:
        clauses.append("task_id = ?")
        params.append(task_id)
    if status:
        clauses.append("status = ?")
        params.append(status)
    return clauses, params


async def list_runs(
    tx: Tx, *, task_id: str | None, status: str | None, before: str | None, limit: int,
    offset: int = 0,
) -> list[Run]:
    """Newest first; `before` is the last id of the previous page (ids sort by time);
    `offset` skips that many of the matching runs (numbered pages)."""
    clauses, params = _filter(task_id, status)
    if before:
        clauses.append("id < ?")
        params.append(before)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = await tx.all(
        f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ? OFFSET ?",  # noqa: S608
        [*params, limit, offset])
    return [run_from_row(r) for r in rows]


async def count_runs(tx: Tx, *, task_id: str | None, status: str | None) -> int:
    """How many runs match the filter of `list_runs` (the runs list's total)."""
    clauses, params = _filter(task_id, status)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    row = await tx.one(f"SELECT COUNT(*) AS n FROM runs {where}", params)  # noqa: S608
    return int(row["n"]) if row else 0


async def earlier_attempts(tx: Tx, run_ids: list[str]) -> dict[str, int]:
    """Per run, how many attempts came before its latest one (each ended without
    success: only a failed, timed-out or lost attempt is retried). Runs of one attempt
    are absent."""
    if not run_ids:
        return {}
    in_ids = dialect.in_list(tx.dialect, "run_id", len(run_ids))
    rows = await tx.all(
        f"SELECT run_id, COUNT(*) AS n FROM run_attempts WHERE {in_ids}"  # noqa: S608
        " GROUP BY run_id HAVING COUNT(*) > 1", dialect.in_params(tx.dialect, run_ids))
    return {str(r["run_id"]): int(r["n"]) - 1 for r in rows}


async def latest_runs_by_task(tx: Tx, task_ids: list[str]) -> dict[str, Run]:
    out: dict[str, Run] = {}
    for tid in task_ids:
        row = await tx.one(
            "SELECT * FROM runs WHERE task_id = ? ORDER BY id DESC LIMIT 1", (tid,))
        if row:
            out[tid] = run_from_row(row)
    return out


async def queued_runs(tx: Tx, limit: int, now_ms: int, node: Node | None = None) -> list[Run]:
    """Queued runs that may start now (no not-before time, or one that has passed);
    with `node`, only those whose placement it satisfies (node.allows, in SQL: a node
    never starves behind a page of runs meant for others)."""
    if node is None:
        rows = await tx.all(
            f"SELECT * FROM runs WHERE {_QUEUED}"  # noqa: S608
            " AND (not_before_ms IS NULL OR not_before_ms <= ?) ORDER BY id LIMIT ?",
            (now_ms, limit))
    else:
        rows = await tx.all(
            f"SELECT * FROM runs WHERE {_QUEUED}"  # noqa: S608
            " AND (not_before_ms IS NULL OR not_before_ms <= ?)"
            " AND (placement_node IS NULL OR placement_node = ?)"
            f" AND {dialect.labels_within(tx.dialect, 'placement_labels_json')}"
            " ORDER BY id LIMIT ?",
            (now_ms, node.name, _json.encode(list(node.labels)).decode(), limit))
    return [run_from_row(r) for r in rows]


async def next_not_before(tx: Tx, now_ms: int) -> int | None:
    """The earliest not-before time of a queued run still waiting for it."""
    row = await tx.one(
        f"SELECT MIN(not_before_ms) AS at FROM runs WHERE {_QUEUED}"  # noqa: S608
        " AND not_before_ms > ?", (now_ms,))
    return None if row is None or row["at"] is None else int(row["at"])


async def apply(tx: Tx, old: Run, transition: Transition, now_ms: int) -> Run:
    """Write a transition with CAS on the run version; raises Conflict if it moved.

    An attempt's end that would end the run becomes a retry when the task's policy
    says so (db/policies.py): the returned run is what was written."""
    if (transition.attempt is not None and transition.run.status in TERMINAL_RUN
            and old.status not in TERMINAL_RUN):
        transition = await policies.retry_or_end(tx, transition, now_ms)
    new = transition.run
    att = transition.attempt
    # One statement writes the run, appends its events to the row's log and numbers
    # them (docs/storage.md): a completion is a handful of statements and pages.
    log = events.encode(old, transition.events, now_ms,
                        {att.id: att.attempt_no} if att is not None else None)
    changed = await tx.execute(
        _APPLY[tx.dialect],
        (new.status.value, new.version, new.cancel_reason.value if new.cancel_reason else None,
         new.cancel_requested_at_ms, new.started_at_ms, new.finished_at_ms, new.exit_code,
         new.reason_code, new.not_before_ms, len(transition.events), log, old.id,
         old.version))
    if changed == 0:
        raise Conflict(f"run {old.id} version {old.version}")
    if new.status is RunStatus.QUEUED and old.status is not RunStatus.QUEUED:
        await notify_queued(tx)  # a retry queued again
    if att is not None:
        # An attempt that ends starts its journal entry's retention clock in the same
        # UPDATE (what journal.journal_mark_terminal does on its own).
        await tx.execute(
            "UPDATE run_attempts SET status = ?, pid = ?, proc_start_time = ?, boot_id = ?,"
            " exit_code = ?, reason_code = ?, started_at_ms = ?, finished_at_ms = ?,"
            " callback_sequence = ?, log_bytes_at_exit = ?,"
            " receipt_since_ms = CASE WHEN ? AND receipt_state IS NOT NULL"
            "   AND receipt_since_ms IS NULL THEN ? ELSE receipt_since_ms END WHERE id = ?",
            (att.status.value, att.pid, att.proc_start_time, att.boot_id, att.exit_code,
             att.reason_code, att.started_at_ms, att.finished_at_ms, att.callback_sequence,
             att.log_bytes_at_exit, att.status not in ACTIVE_ATTEMPT, now_ms, att.id))
    if new.status in TERMINAL_RUN and old.status not in TERMINAL_RUN:
        for listener in tx.terminal_listeners:
            await listener(tx, old, new, now_ms)
    return new


async def end_if_queued(tx: Tx, run: Run, now_ms: int) -> Run:
    """A cancel's second half: a `queued` run with its intent committed ends at once
    (`cancelled`/`timed_out`, CANCELLED_BEFORE_START) — only if no attempt of it is
    active. Spawn step 1 makes the run `running` in the commit that creates the
    attempt, so a `queued` run with an active attempt comes only from a database of an
    earlier version (the worker died between step 1 and the identity commit): nothing
    proves that no process started, so the attempt's end decides, as for a running
    run (docs/recovery.md)."""
    if run.status is not RunStatus.QUEUED or await run_has_active_attempt(tx, run.id):
        return run
    return await apply(tx, run, transitions.cancel_queued(run, now_ms), now_ms)


async def fail_if_queued(tx: Tx, run: Run, reason: Reason, now_ms: int) -> Run | None:
    """A queued run that cannot be prepared ends `failed` with `reason` (no process, no
    attempt); None when it moved on meanwhile (started, cancelled, has an attempt)."""
    run = await get_run(tx, run.id)
    if run.status is not RunStatus.QUEUED or await run_has_active_attempt(tx, run.id):
        return None
    return await apply(tx, run, transitions.refuse_queued(run, reason, now_ms), now_ms)


# -- QingLong's cron views ------------------------------------------------------------

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
    ids = dialect.each_text(tx.dialect)  # the task ids, one row each (column `value`)
    each = dialect.each_text(tx.dialect, "?", "j")
    # Spelled like the WHERE of the partial index runs_active (db/statuses.py).
    active = await tx.all(
        "SELECT task_id, status, COUNT(*) AS n FROM runs"  # noqa: S608
        f" WHERE {st.active_run()}"
        f" AND task_id IN (SELECT value FROM {ids}) GROUP BY task_id, status",
        (ids_json,))
    flags: dict[str, set[str]] = {}
    for r in active:
        flags.setdefault(r["task_id"], set()).add(r["status"])
    latest = await tx.all(
        "SELECT r.task_id, r.id, r.status, r.started_at_ms, r.created_at_ms,"  # noqa: S608
        " a.log_path AS relative_path"
        f" FROM {each}"
        " JOIN runs r ON r.id = (SELECT id FROM runs WHERE task_id = j.value"
        "   ORDER BY id DESC LIMIT 1)"
        " LEFT JOIN run_attempts a ON a.id = (SELECT id FROM run_attempts WHERE run_id = r.id"
        "   ORDER BY attempt_no DESC LIMIT 1)", (ids_json,))
    finished = await tx.all(
        f"SELECT r.task_id, r.started_at_ms, r.finished_at_ms FROM {each}"  # noqa: S608
        " JOIN runs r ON r.id = (SELECT id FROM runs WHERE task_id = j.value"
        "   AND started_at_ms IS NOT NULL AND finished_at_ms IS NOT NULL"
        "   ORDER BY id DESC LIMIT 1)", (ids_json,))
    durations = {r["task_id"]: max(0, r["finished_at_ms"] - r["started_at_ms"])
                 for r in finished}
    pids = {r["task_id"]: r["pid"] for r in await tx.all(
        "SELECT r.task_id, a.pid FROM runs r JOIN run_attempts a ON a.run_id = r.id"  # noqa: S608
        f" WHERE {st.is_('r.status', RunStatus.RUNNING)} AND {st.in_('a.status', ACTIVE_ATTEMPT)}"
        f" AND a.pid IS NOT NULL AND r.task_id IN (SELECT value FROM {ids})"
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
