"""Typed repository functions: every SQL string of the run model lives here.

Functions take an open `Tx` from `Database.write()`/`read()` and return
msgspec Structs. State changes go through `apply()`, which writes a pure
`Transition` with compare-and-set on the run's version.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from ..model import (
    ACTIVE_ATTEMPT,
    CHAIN_FIELDS,
    TERMINAL_RUN,
    Attempt,
    AttemptStatus,
    CancelReason,
    Concurrency,
    Event,
    NewEvent,
    Overlap,
    Run,
    RunStatus,
    Task,
    Trigger,
)
from ..transitions import Transition
from . import policies
from . import statuses as st
from .connection import Tx

_json = msgspec.json.Encoder()
_ACTIVE_RUN = st.active_run()
_QUEUED = st.is_("status", RunStatus.QUEUED)
_ACTIVE_ATTEMPT = st.active_attempt()
_A_ACTIVE = st.active_attempt("a.status")
_A_RUNNING = st.is_("a.status", AttemptStatus.RUNNING)


class Conflict(Exception):
    """Compare-and-set lost: the row changed since it was read."""


class NotFound(Exception):
    pass


def _task(row: sqlite3.Row) -> Task:
    return Task(
        id=row["id"], num=row["num"], name=row["name"], command=row["command"],
        schedule=row["schedule"], timeout_s=row["timeout_s"],
        env=msgspec.json.decode(row["env_json"], type=dict[str, str]),
        enabled=bool(row["enabled"]), concurrency=Concurrency(row["concurrency"]),
        labels=msgspec.json.decode(row["labels_json"], type=list[str]),
        created_at_ms=row["created_at_ms"], updated_at_ms=row["updated_at_ms"],
        version=row["version"], keep_runs=row["keep_runs"], keep_days=row["keep_days"],
        keep_background=bool(row["keep_background"]), overlap=Overlap(row["overlap"]),
        retries=row["retries"], retry_delay_s=row["retry_delay_s"],
        retry_on=msgspec.json.decode(row["retry_on_json"], type=list[str]),
        **{f: msgspec.json.decode(row[f"{f}_json"], type=list[str]) for f in CHAIN_FIELDS},
        extra_schedules=msgspec.json.decode(row["extra_schedules_json"], type=list[str]),
        tz=row["tz"],
    )


def _run(row: sqlite3.Row) -> Run:
    return Run(
        id=row["id"], task_id=row["task_id"], trigger=Trigger(row["trigger"]),
        status=RunStatus(row["status"]), version=row["version"], event_seq=row["event_seq"],
        cancel_reason=CancelReason(row["cancel_reason"]) if row["cancel_reason"] else None,
        cancel_requested_at_ms=row["cancel_requested_at_ms"],
        created_at_ms=row["created_at_ms"], started_at_ms=row["started_at_ms"],
        finished_at_ms=row["finished_at_ms"], exit_code=row["exit_code"],
        reason_code=row["reason_code"], not_before_ms=row["not_before_ms"],
        parent_run_id=row["parent_run_id"], conc_index=row["conc_index"],
    )


run_from_row = _run  # for the noun modules beside this one (db/conc_runs.py)


def _attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(
        id=row["id"], run_id=row["run_id"], attempt_no=row["attempt_no"],
        executor_type=row["executor_type"], runtime_owner=row["runtime_owner"],
        status=AttemptStatus(row["status"]), callback_token_hash=row["callback_token_hash"],
        callback_sequence=row["callback_sequence"], log_artifact_id=row["log_artifact_id"],
        log_path=row["log_path"], pid=row["pid"], proc_start_time=row["proc_start_time"],
        boot_id=row["boot_id"], exit_code=row["exit_code"], reason_code=row["reason_code"],
        created_at_ms=row["created_at_ms"], started_at_ms=row["started_at_ms"],
        finished_at_ms=row["finished_at_ms"], deadline_at_ms=row["deadline_at_ms"],
        log_bytes_at_exit=row["log_bytes_at_exit"],
    )


# -- node identity ---------------------------------------------------------------

async def ensure_node_id(tx: Tx, candidate: str, now_ms: int) -> str:
    """The node id generated once and kept forever (the runtime owner of attempts)."""
    await tx.execute(
        "INSERT OR IGNORE INTO node (singleton, node_id, created_at_ms) VALUES (1, ?, ?)",
        (candidate, now_ms),
    )
    row = await tx.one("SELECT node_id FROM node WHERE singleton = 1")
    assert row is not None
    return str(row["node_id"])


# -- tasks -----------------------------------------------------------------------

_TASK_COLUMNS = ("name", "command", "schedule", "timeout_s", "env", "enabled", "concurrency",
                 "labels", "keep_runs", "keep_days", "keep_background", "overlap", "retries",
                 "retry_delay_s", "retry_on", *CHAIN_FIELDS, "extra_schedules", "tz")


def _task_values(fields: dict[str, Any]) -> dict[str, Any]:
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
    if "retry_on" in out:
        out["retry_on_json"] = _json.encode(sorted(set(out.pop("retry_on")))).decode()
    if "enabled" in out:
        out["enabled"] = int(bool(out["enabled"]))
    if "keep_background" in out:
        out["keep_background"] = int(bool(out["keep_background"]))
    return out


async def create_task(tx: Tx, task_id: str, fields: dict[str, Any], now_ms: int) -> Task:
    values = _task_values(fields)
    values.update(id=task_id, created_at_ms=now_ms, updated_at_ms=now_ms)
    cols = ", ".join(values)
    marks = ", ".join(f":{c}" for c in values)
    await tx.execute(f"INSERT INTO tasks ({cols}) VALUES ({marks})", values)  # noqa: S608
    return await get_task(tx, task_id)


async def get_task(tx: Tx, task_id: str) -> Task:
    row = await tx.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
    if row is None:
        raise NotFound("task")
    return _task(row)


async def get_task_by_num(tx: Tx, num: int) -> Task:
    row = await tx.one("SELECT * FROM tasks WHERE num = ?", (num,))
    if row is None:
        raise NotFound("task")
    return _task(row)


async def list_tasks(
    tx: Tx, *, after_num: int = 0, limit: int = 100, search: str = ""
) -> list[Task]:
    if search:
        like = f"%{search}%"
        rows = await tx.all(
            "SELECT * FROM tasks WHERE num > ? AND (name LIKE ? OR command LIKE ?)"
            " ORDER BY num LIMIT ?", (after_num, like, like, limit))
    else:
        rows = await tx.all(
            "SELECT * FROM tasks WHERE num > ? ORDER BY num LIMIT ?", (after_num, limit))
    return [_task(r) for r in rows]


async def count_tasks(tx: Tx, search: str = "") -> int:
    like = f"%{search}%"
    row = await tx.one(
        "SELECT COUNT(*) AS n FROM tasks WHERE ? = '' OR name LIKE ? OR command LIKE ?",
        (search, like, like))
    return int(row["n"]) if row else 0


async def update_task(tx: Tx, task_id: str, fields: dict[str, Any], now_ms: int) -> Task:
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
        "SELECT l.relative_path FROM log_artifacts l JOIN run_attempts a"
        " ON a.log_artifact_id = l.id JOIN runs r ON r.id = a.run_id WHERE r.task_id = ?",
        (task_id,))
    ids = [r["log_artifact_id"] for r in await tx.all(
        "SELECT a.log_artifact_id FROM run_attempts a JOIN runs r ON r.id = a.run_id"
        " WHERE r.task_id = ?", (task_id,))]
    await tx.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
    for art in ids:
        await tx.execute("DELETE FROM log_artifacts WHERE id = ?", (art,))
    paths = [str(r["relative_path"]) for r in logs]
    for rel in paths:
        await tx.execute(
            "INSERT OR IGNORE INTO file_deletions (volume, relative_path, created_at_ms)"
            " VALUES ('logs', ?, ?)", (rel, now_ms))
    return paths


async def tasks_by_ids(tx: Tx, task_ids: list[str]) -> dict[str, Task]:
    if not task_ids:
        return {}
    marks = ",".join("?" * len(task_ids))
    rows = await tx.all(f"SELECT * FROM tasks WHERE id IN ({marks})", task_ids)  # noqa: S608
    return {r["id"]: _task(r) for r in rows}


# -- runs ------------------------------------------------------------------------

async def create_run(tx: Tx, run_id: str, task_id: str, trigger: Trigger, now_ms: int,
                     not_before_ms: int | None = None) -> Run:
    """A queued run; with `not_before_ms` the dispatcher leaves it until that time
    (and a `run.created` event that says so)."""
    await tx.execute(
        "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, not_before_ms)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (run_id, task_id, trigger.value, RunStatus.QUEUED.value, now_ms, not_before_ms))
    run = await get_run(tx, run_id)
    data: dict[str, str | int | None] = {"trigger": trigger.value}
    if not_before_ms is not None:
        data["not_before_ms"] = not_before_ms
    await append_events(tx, run, [NewEvent(type="run.created", data=data)], now_ms)
    return await get_run(tx, run_id)


async def get_run(tx: Tx, run_id: str) -> Run:
    row = await tx.one("SELECT * FROM runs WHERE id = ?", (run_id,))
    if row is None:
        raise NotFound("run")
    return _run(row)


async def active_run_of_task(tx: Tx, task_id: str) -> Run | None:
    row = await tx.one(
        f"SELECT * FROM runs WHERE task_id = ? AND {_ACTIVE_RUN}"  # noqa: S608
        " ORDER BY id LIMIT 1", (task_id,))
    return _run(row) if row else None


async def list_runs(
    tx: Tx, *, task_id: str | None, status: str | None, before: str | None, limit: int
) -> list[Run]:
    """Newest first; `before` is the last id of the previous page (ids sort by time)."""
    clauses, params = [], []
    if task_id:
        clauses.append("task_id = ?")
        params.append(task_id)
    if status:
        clauses.append("status = ?")
        params.append(status)
    if before:
        clauses.append("id < ?")
        params.append(before)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = await tx.all(
        f"SELECT * FROM runs {where} ORDER BY id DESC LIMIT ?", [*params, limit])  # noqa: S608
    return [_run(r) for r in rows]


async def latest_runs_by_task(tx: Tx, task_ids: list[str]) -> dict[str, Run]:
    out: dict[str, Run] = {}
    for tid in task_ids:
        row = await tx.one(
            "SELECT * FROM runs WHERE task_id = ? ORDER BY id DESC LIMIT 1", (tid,))
        if row:
            out[tid] = _run(row)
    return out


async def queued_runs(tx: Tx, limit: int, now_ms: int) -> list[Run]:
    """Queued runs that may start now (no not-before time, or one that has passed)."""
    rows = await tx.all(
        f"SELECT * FROM runs WHERE {_QUEUED}"  # noqa: S608
        " AND (not_before_ms IS NULL OR not_before_ms <= ?) ORDER BY id LIMIT ?",
        (now_ms, limit))
    return [_run(r) for r in rows]


async def next_not_before(tx: Tx, now_ms: int) -> int | None:
    """The earliest not-before time of a queued run still waiting for it."""
    row = await tx.one(
        f"SELECT MIN(not_before_ms) AS at FROM runs WHERE {_QUEUED}"  # noqa: S608
        " AND not_before_ms > ?", (now_ms,))
    return None if row is None or row["at"] is None else int(row["at"])


# Active attempts are spelled like the WHERE of the partial index attempts_active
# (db/statuses.py): SQLite uses a partial index only when the query implies it.
async def count_active_attempts(tx: Tx, owner: str) -> int:
    row = await tx.one(
        "SELECT COUNT(*) AS n FROM run_attempts WHERE runtime_owner = ?"  # noqa: S608
        f" AND {_ACTIVE_ATTEMPT}", (owner,))
    return int(row["n"]) if row else 0


async def run_has_active_attempt(tx: Tx, run_id: str) -> bool:
    row = await tx.one(
        f"SELECT 1 FROM run_attempts WHERE run_id = ? AND {_ACTIVE_ATTEMPT}"  # noqa: S608
        " LIMIT 1", (run_id,))
    return row is not None


async def task_has_running_attempt(tx: Tx, task_id: str) -> bool:
    row = await tx.one(
        "SELECT 1 FROM run_attempts a JOIN runs r ON r.id = a.run_id"  # noqa: S608
        f" WHERE r.task_id = ? AND {_A_ACTIVE} LIMIT 1", (task_id,))
    return row is not None


# -- events ----------------------------------------------------------------------

async def append_events(tx: Tx, run: Run, events: list[NewEvent], now_ms: int) -> None:
    """Append in order with the run's next sequence numbers (caller holds the write tx)."""
    if not events:
        return
    # Take the sequence inside this transaction: signal events append without a
    # version bump, so a Run read earlier may carry a stale event_seq.
    row = await tx.one("UPDATE runs SET event_seq = event_seq + ? WHERE id = ?"
                       " RETURNING event_seq", (len(events), run.id))
    last = int(row["event_seq"]) if row else run.event_seq + len(events)
    await _insert_events(tx, run.id, last, events, now_ms)


async def _insert_events(tx: Tx, run_id: str, last_seq: int, events: list[NewEvent],
                         now_ms: int) -> None:
    """One INSERT for the events numbered up to last_seq (one statement, one hand-off
    to the database thread, however many events)."""
    first = last_seq - len(events) + 1
    params: list[object] = []
    for i, ev in enumerate(events):
        params += [run_id, first + i, ev.type, now_ms, ev.attempt_id,
                   _json.encode(ev.data).decode()]
    rows = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(events))
    await tx.execute(
        "INSERT INTO run_events (run_id, seq, type, at_ms, attempt_id, data_json)"  # noqa: S608
        f" VALUES {rows}", params)


async def list_events(tx: Tx, run_id: str, after_seq: int = 0, limit: int = 500) -> list[Event]:
    rows = await tx.all(
        "SELECT * FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (run_id, after_seq, limit))
    return [
        Event(run_id=r["run_id"], seq=r["seq"], type=r["type"], at_ms=r["at_ms"],
              attempt_id=r["attempt_id"],
              data=msgspec.json.decode(r["data_json"], type=dict[str, str | int | None]))
        for r in rows
    ]


# -- attempts --------------------------------------------------------------------

_ATTEMPT_SELECT = (
    "SELECT a.*, l.relative_path AS log_path FROM run_attempts a"
    " JOIN log_artifacts l ON l.id = a.log_artifact_id"
)


async def prepare_attempt(
    tx: Tx, run: Run, *, attempt_id: str, owner: str, executor_type: str, token_hash: bytes,
    deadline_at_ms: int | None, log_artifact_id: str, log_path: str, receipt_path: str,
    now_ms: int,
) -> Attempt:
    """Spawn step 1 (docs/contract.md §3): attempt, log artifact, token hash, deadline and
    journal row together."""
    row = await tx.one(
        "SELECT COALESCE(MAX(attempt_no), 0) AS n FROM run_attempts WHERE run_id = ?", (run.id,))
    attempt_no = int(row["n"]) + 1 if row else 1
    await tx.execute(
        "INSERT INTO log_artifacts (id, relative_path, created_at_ms) VALUES (?, ?, ?)",
        (log_artifact_id, log_path, now_ms))
    await tx.execute(
        "INSERT INTO run_attempts (id, run_id, attempt_no, executor_type, runtime_owner, status,"
        " callback_token_hash, callback_sequence, log_artifact_id, created_at_ms,"
        " deadline_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (attempt_id, run.id, attempt_no, executor_type, owner, AttemptStatus.PREPARING.value,
         token_hash, 1,
         log_artifact_id, now_ms, deadline_at_ms))
    await journal_register(tx, attempt_id, receipt_path, now_ms)
    await append_events(tx, run, [NewEvent(type="attempt.created", attempt_id=attempt_id)],
                        now_ms)
    return await get_attempt(tx, attempt_id)


async def get_attempt(tx: Tx, attempt_id: str) -> Attempt:
    row = await tx.one(f"{_ATTEMPT_SELECT} WHERE a.id = ?", (attempt_id,))
    if row is None:
        raise NotFound("attempt")
    return _attempt(row)


async def find_attempt(tx: Tx, attempt_id: str) -> Attempt | None:
    row = await tx.one(f"{_ATTEMPT_SELECT} WHERE a.id = ?", (attempt_id,))
    return _attempt(row) if row else None


async def attempts_of_run(tx: Tx, run_id: str) -> list[Attempt]:
    rows = await tx.all(f"{_ATTEMPT_SELECT} WHERE a.run_id = ? ORDER BY a.attempt_no", (run_id,))
    return [_attempt(r) for r in rows]


async def active_attempts_page(tx: Tx, owner: str, after_id: str, limit: int) -> list[Attempt]:
    """A stable cursor over this node's active attempts (recovery never lists directories)."""
    rows = await tx.all(
        f"{_ATTEMPT_SELECT} WHERE a.runtime_owner = ? AND {_A_ACTIVE}"
        " AND a.id > ? ORDER BY a.id LIMIT ?", (owner, after_id, limit))
    return [_attempt(r) for r in rows]


async def expired_attempts(tx: Tx, owner: str, now_ms: int, limit: int) -> list[Attempt]:
    rows = await tx.all(
        f"{_ATTEMPT_SELECT} WHERE a.runtime_owner = ? AND {_A_RUNNING}"
        " AND a.deadline_at_ms IS NOT NULL AND a.deadline_at_ms <= ? ORDER BY a.deadline_at_ms"
        " LIMIT ?", (owner, now_ms, limit))
    return [_attempt(r) for r in rows]


async def apply(tx: Tx, old: Run, transition: Transition, now_ms: int) -> Run:
    """Write a transition with CAS on the run version; raises Conflict if it moved.

    An attempt's end that would end the run becomes a retry when the task's policy
    says so (db/policies.py): the returned run is what was written."""
    if (transition.attempt is not None and transition.run.status in TERMINAL_RUN
            and old.status not in TERMINAL_RUN):
        transition = await policies.retry_or_end(tx, transition, now_ms)
    new = transition.run
    # The event numbers are taken by the same statement (RETURNING): a completion
    # is a handful of statements, each a hand-off to the database thread.
    row = await tx.one(
        "UPDATE runs SET status = ?, version = ?, cancel_reason = ?, cancel_requested_at_ms = ?,"
        " started_at_ms = ?, finished_at_ms = ?, exit_code = ?, reason_code = ?,"
        " not_before_ms = ?, event_seq = event_seq + ? WHERE id = ? AND version = ?"
        " RETURNING event_seq",
        (new.status.value, new.version, new.cancel_reason.value if new.cancel_reason else None,
         new.cancel_requested_at_ms, new.started_at_ms, new.finished_at_ms, new.exit_code,
         new.reason_code, new.not_before_ms, len(transition.events), old.id, old.version))
    if row is None:
        raise Conflict(f"run {old.id} version {old.version}")
    att = transition.attempt
    if att is not None:
        await tx.execute(
            "UPDATE run_attempts SET status = ?, pid = ?, proc_start_time = ?, boot_id = ?,"
            " exit_code = ?, reason_code = ?, started_at_ms = ?, finished_at_ms = ?,"
            " callback_sequence = ?, log_bytes_at_exit = ? WHERE id = ?",
            (att.status.value, att.pid, att.proc_start_time, att.boot_id, att.exit_code,
             att.reason_code, att.started_at_ms, att.finished_at_ms, att.callback_sequence,
             att.log_bytes_at_exit, att.id))
        if att.status not in ACTIVE_ATTEMPT:
            await journal_mark_terminal(tx, att.id, now_ms)
    if transition.events:
        await _insert_events(tx, old.id, int(row["event_seq"]), transition.events, now_ms)
    if new.status in TERMINAL_RUN and old.status not in TERMINAL_RUN:
        for listener in tx.terminal_listeners:
            await listener(tx, old, new, now_ms)
    return new


# -- receipt journal -------------------------------------------------------------

class JournalRow(msgspec.Struct, frozen=True, kw_only=True):
    attempt_id: str
    state: str
    relative_path: str
    reason_code: str | None
    retention_since_ms: int | None
    attempt_status: AttemptStatus


async def journal_register(tx: Tx, attempt_id: str, receipt_path: str, now_ms: int) -> bool:
    """Idempotent: True when a row was created."""
    return await tx.execute(
        "INSERT OR IGNORE INTO receipt_journal (attempt_id, state, relative_path, created_at_ms,"
        " updated_at_ms) VALUES (?, 'pending', ?, ?, ?)",
        (attempt_id, receipt_path, now_ms, now_ms)) == 1


async def journal_quarantine(tx: Tx, attempt_id: str, reason: str, now_ms: int) -> None:
    await tx.execute(
        "UPDATE receipt_journal SET state = 'quarantined', reason_code = ?, updated_at_ms = ?,"
        " retention_since_ms = ?, settled_at_ms = NULL WHERE attempt_id = ?"
        " AND state = 'pending'", (reason, now_ms, now_ms, attempt_id))


async def journal_page(tx: Tx, after_id: str, limit: int) -> list[JournalRow]:
    """Rows that may still need file work: not settled (settled rows age out by
    `journal_age_out` alone, docs/storage.md)."""
    rows = await tx.all(
        "SELECT j.*, a.status AS attempt_status FROM receipt_journal j"
        " JOIN run_attempts a ON a.id = j.attempt_id WHERE j.attempt_id > ?"
        " AND j.settled_at_ms IS NULL ORDER BY j.attempt_id LIMIT ?", (after_id, limit))
    return [
        JournalRow(attempt_id=r["attempt_id"], state=r["state"],
                   relative_path=r["relative_path"], reason_code=r["reason_code"],
                   retention_since_ms=r["retention_since_ms"],
                   attempt_status=AttemptStatus(r["attempt_status"]))
        for r in rows
    ]


async def journal_mark_terminal(tx: Tx, attempt_id: str, now_ms: int) -> None:
    """Start the row's retention clock (the column holds 'terminal/quarantined since')."""
    await tx.execute(
        "UPDATE receipt_journal SET retention_since_ms = ? WHERE attempt_id = ?"
        " AND retention_since_ms IS NULL", (now_ms, attempt_id))


async def journal_reset_pending(tx: Tx, attempt_id: str, now_ms: int) -> None:
    """Quarantine purged while the attempt still runs: index its receipt again."""
    await tx.execute(
        "UPDATE receipt_journal SET state = 'pending', retention_since_ms = NULL,"
        " updated_at_ms = ? WHERE attempt_id = ?", (now_ms, attempt_id))


async def journal_delete(tx: Tx, attempt_id: str) -> None:
    await tx.execute("DELETE FROM receipt_journal WHERE attempt_id = ?", (attempt_id,))


async def journal_settle(tx: Tx, attempt_ids: list[str], now_ms: int) -> None:
    """These receipts' fate is settled with no file work left (consumed into their
    attempt's terminal state, or known never to come): the rows only age out now."""
    if attempt_ids:
        marks = ",".join("?" * len(attempt_ids))
        await tx.execute(
            f"UPDATE receipt_journal SET settled_at_ms = ? WHERE attempt_id IN ({marks})"  # noqa: S608
            " AND state = 'pending' AND settled_at_ms IS NULL", [now_ms, *attempt_ids])


async def journal_unsettle(tx: Tx, attempt_ids: list[str]) -> None:
    """A consumed receipt could not be deleted: back to the paged file checks."""
    if attempt_ids:
        marks = ",".join("?" * len(attempt_ids))
        await tx.execute(
            f"UPDATE receipt_journal SET settled_at_ms = NULL WHERE attempt_id IN ({marks})",  # noqa: S608
            attempt_ids)


async def journal_age_out(tx: Tx, settled_before_ms: int, limit: int) -> int:
    """Drop settled rows older than the cutoff, at most `limit`: one DELETE walking the
    primary key (oldest attempts first), whatever the backlog; no file is looked at.
    No index on purpose: the journal is small once it keeps up, an index costs WAL."""
    return await tx.execute(
        "DELETE FROM receipt_journal WHERE attempt_id IN (SELECT attempt_id"
        " FROM receipt_journal WHERE settled_at_ms <= ? AND state = 'pending'"
        " ORDER BY attempt_id LIMIT ?)", (settled_before_ms, limit))


async def journal_ended_page(tx: Tx, after_id: str, limit: int) -> list[str]:
    """Pending rows of terminal attempts, settled or not, by attempt id: the start-up
    look for their receipts (docs/recovery.md)."""
    rows = await tx.all(
        "SELECT j.attempt_id FROM receipt_journal j"  # noqa: S608
        " JOIN run_attempts a ON a.id = j.attempt_id"
        " WHERE j.attempt_id > ? AND j.state = 'pending'"
        f" AND NOT {_A_ACTIVE} ORDER BY j.attempt_id LIMIT ?",
        (after_id, limit))
    return [str(r["attempt_id"]) for r in rows]


async def journal_counts(tx: Tx) -> dict[str, int]:
    """active: awaiting a result; terminal: awaiting file checks, then ageing out;
    settled: ageing out, no file work left; quarantined: awaiting purge."""
    row = await tx.one(
        f"SELECT SUM({_A_ACTIVE}) AS active,"  # noqa: S608
        f" SUM(j.state = 'pending' AND NOT {_A_ACTIVE}"
        "     AND j.settled_at_ms IS NULL) AS terminal,"
        " SUM(j.settled_at_ms IS NOT NULL) AS settled,"
        " SUM(j.state = 'quarantined') AS quarantined"
        " FROM receipt_journal j JOIN run_attempts a ON a.id = j.attempt_id")
    if row is None:
        return {}
    return {k: int(row[k] or 0) for k in ("active", "terminal", "settled", "quarantined")}


async def attempts_without_journal(tx: Tx, owner: str, limit: int) -> list[Attempt]:
    rows = await tx.all(
        f"{_ATTEMPT_SELECT} LEFT JOIN receipt_journal j ON j.attempt_id = a.id"
        f" WHERE a.runtime_owner = ? AND {_A_ACTIVE}"
        " AND j.attempt_id IS NULL ORDER BY a.id LIMIT ?", (owner, limit))
    return [_attempt(r) for r in rows]
