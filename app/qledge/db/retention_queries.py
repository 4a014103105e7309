"""SQL of the bounded-disk side (docs/retention.md): retention, log eviction, upkeep.

Every function takes an open `Tx` (or the `Database` for the two maintenance
pragmas that must run outside a transaction) and stays within the limits its
caller passes; none of them lists a directory.
"""

from __future__ import annotations

import msgspec

from ..model import NewEvent, RunStatus
from . import dialect, sqlite
from . import statuses as st
from .events import append_events, last_event_type
from .interface import Database, Row, Tx
from .runs import get_run

_R_TERMINAL = st.terminal_run("r.status")
_A_TERMINAL = st.terminal_attempt("a.status")
# Active attempts, spelled as db/statuses.py does.
_A_ACTIVE = st.active_attempt("a.status")
_R_RUNNING = st.is_("r.status", RunStatus.RUNNING)
_R_QUEUED = st.is_("r.status", RunStatus.QUEUED)
# A `task … conc` child stays while its parent is active: the parent's result is
# computed from all its children when the last one ends (docs/tasks.md).
_NO_ACTIVE_PARENT = ("({parent} IS NULL OR NOT EXISTS (SELECT 1 FROM runs p"  # noqa: S608
                     f" WHERE p.id = {{parent}} AND {st.active_run('p.status')}))")
LOGS = "logs"


def volume(tx: Tx, owner: str) -> str:
    """The `file_deletions` volume of a log written by node `owner`: a fleet's logs are
    on the disk of the node that ran the attempt, and only that node may unlink them
    (docs/fleet.md); the embedded SQLite has one node and one volume."""
    return LOGS if tx.dialect == dialect.SQLITE else f"{LOGS}@{owner}"


def _owned(owner: str | None, column: str = "a.runtime_owner") -> tuple[str, tuple[str, ...]]:
    """A node's own logs in a fleet (`owner` = its node id); None: all (one node)."""
    return ("", ()) if owner is None else (f" AND {column} = ?", (owner,))


# -- run policy ------------------------------------------------------------------

class TaskPolicy(msgspec.Struct, frozen=True, kw_only=True):
    num: int
    id: str
    keep_runs: int | None
    keep_days: int | None


class RunCandidate(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    rank: int  # 1 = the task's newest terminal run
    finished_at_ms: int


async def tasks_page(tx: Tx, after_num: int, limit: int) -> list[TaskPolicy]:
    rows = await tx.all(
        "SELECT num, id, keep_runs, keep_days FROM tasks WHERE num > ? ORDER BY num LIMIT ?",
        (after_num, limit))
    return [TaskPolicy(num=r["num"], id=r["id"], keep_runs=r["keep_runs"],
                       keep_days=r["keep_days"]) for r in rows]


async def run_candidates(tx: Tx, task_id: str, keep_n: int, cutoff_ms: int,
                         limit: int) -> list[RunCandidate]:
    """Terminal runs of one task past the policy's bounds, oldest first.

    Rank counts every terminal run of the task (newest = 1). A pre-filter only:
    `retention.verdict` decides. Runs with an active attempt or a receipt-journal
    entry (the supervisor still owns that evidence) are left for a later round.
    """
    rows = await tx.all(
        "SELECT c.id, c.rank, c.fin FROM (SELECT r.id, r.parent_run_id,"  # noqa: S608
        " COALESCE(r.finished_at_ms, r.created_at_ms) AS fin,"
        " ROW_NUMBER() OVER (ORDER BY r.id DESC) AS rank"
        f" FROM runs r WHERE r.task_id = ? AND {_R_TERMINAL}) AS c"
        " WHERE c.rank > 1 AND (c.rank > ? OR c.fin < ?)"
        " AND NOT EXISTS (SELECT 1 FROM run_attempts a WHERE a.run_id = c.id"
        f"   AND ({_A_ACTIVE} OR a.receipt_state IS NOT NULL))"
        f" AND {_NO_ACTIVE_PARENT.format(parent='c.parent_run_id')}"
        " ORDER BY c.id LIMIT ?", (task_id, keep_n, cutoff_ms, limit))
    return [RunCandidate(id=r["id"], rank=r["rank"], finished_at_ms=r["fin"]) for r in rows]


class Deleted(msgspec.Struct, kw_only=True):
    runs: int = 0
    attempts: int = 0
    log_paths: list[str] = []
    run_ids: list[str] = []


async def delete_runs(tx: Tx, run_ids: list[str], now_ms: int,
                      owner: str | None = None) -> Deleted:
    """Delete terminal runs with their attempts (and their logs' rows), events and leases.

    One transaction (the caller's). The log files are queued in `file_deletions`
    in the same transaction and unlinked only after commit: `log_paths` are the ones
    the caller may unlink now — in a fleet only its own (`owner`), the others wait in
    their node's volume of the queue.
    """
    if not run_ids:
        return Deleted()
    in_runs = dialect.in_list(tx.dialect, "r.id", len(run_ids))
    rows = await tx.all(
        f"SELECT r.id FROM runs r WHERE {in_runs}"  # noqa: S608
        f" AND {_NO_ACTIVE_PARENT.format(parent='r.parent_run_id')}"
        f" AND {_R_TERMINAL} AND NOT EXISTS (SELECT 1 FROM run_attempts a"
        f"   WHERE a.run_id = r.id AND ({_A_ACTIVE} OR a.receipt_state IS NOT NULL))",
        dialect.in_params(tx.dialect, run_ids))
    ids = [str(r["id"]) for r in rows]
    if not ids:
        return Deleted()
    arts = await tx.all(
        "SELECT a.log_path, a.log_evicted_at_ms, a.runtime_owner FROM run_attempts a"  # noqa: S608
        f" WHERE {dialect.in_list(tx.dialect, 'a.run_id', len(ids))}",
        dialect.in_params(tx.dialect, ids))
    # run_attempts go with their runs (ON DELETE CASCADE), their logs' columns with them.
    deleted = await tx.execute(
        f"DELETE FROM runs WHERE {dialect.in_list(tx.dialect, 'id', len(ids))}",  # noqa: S608
        dialect.in_params(tx.dialect, ids))
    live = [a for a in arts if a["log_evicted_at_ms"] is None]
    for a in live:
        await enqueue_deletions(tx, [str(a["log_path"])], now_ms,
                                volume(tx, str(a["runtime_owner"])))
    paths = [str(a["log_path"]) for a in live
             if owner is None or a["runtime_owner"] == owner]
    return Deleted(runs=deleted, attempts=len(arts), log_paths=paths, run_ids=ids)


# -- files deleted after commit -------------------------------------------------

async def enqueue_deletions(tx: Tx, relative_paths: list[str], now_ms: int,
                            vol: str = LOGS) -> None:
    """Record log files to unlink after this transaction commits (crash-safe)."""
    for rel in relative_paths:
        await tx.execute(
            "INSERT INTO file_deletions (volume, relative_path, created_at_ms)"
            " VALUES (?, ?, ?) ON CONFLICT DO NOTHING", (vol, rel, now_ms))


async def pending_deletions(tx: Tx, limit: int, vol: str = LOGS) -> list[str]:
    rows = await tx.all(
        "SELECT relative_path FROM file_deletions WHERE volume = ? ORDER BY created_at_ms,"
        " relative_path LIMIT ?", (vol, limit))
    return [str(r["relative_path"]) for r in rows]


async def forget_deletions(tx: Tx, relative_paths: list[str], vol: str = LOGS) -> None:
    for rel in relative_paths:
        await tx.execute("DELETE FROM file_deletions WHERE volume = ? AND relative_path = ?",
                         (vol, rel))


async def count_pending_deletions(tx: Tx, vol: str | None = None) -> int:
    if vol is None:
        row = await tx.one("SELECT COUNT(*) AS n FROM file_deletions")
    else:
        row = await tx.one("SELECT COUNT(*) AS n FROM file_deletions WHERE volume = ?", (vol,))
    return int(row["n"]) if row else 0


# -- log sizes and eviction ------------------------------------------------------

class LogRow(msgspec.Struct, frozen=True, kw_only=True):
    id: str  # the attempt whose row holds the log (migration 0021): `set_sizes` takes it
    attempt_id: str
    relative_path: str
    size_bytes: int | None
    newest: bool = False  # of its task's newest terminal run


# The log is columns of its attempt's row (migration 0021), read through run_attempts'
# primary key: no new index on the spawn path, where each would cost a page write per
# attempt on the card; the scans are bounded by the retention policy itself.
_LOG_SELECT = (
    "SELECT a.id, a.id AS attempt_id, a.log_path AS relative_path,"
    " a.log_size_bytes AS size_bytes FROM run_attempts a"
)


async def unsized_logs(tx: Tx, limit: int, owner: str | None = None) -> list[LogRow]:
    """Logs of terminal attempts whose final size has not been measured yet."""
    mine, by = _owned(owner)
    rows = await tx.all(
        f"{_LOG_SELECT} WHERE {_A_TERMINAL} AND a.log_size_bytes IS NULL"
        f" AND a.log_evicted_at_ms IS NULL{mine} ORDER BY a.id LIMIT ?", (*by, limit))
    return [_log(r) for r in rows]


async def set_sizes(tx: Tx, sizes: list[tuple[str, int]]) -> None:
    for attempt_id, size in sizes:
        await tx.execute("UPDATE run_attempts SET log_size_bytes = ? WHERE id = ?",
                         (size, attempt_id))


async def active_logs(tx: Tx, limit: int, owner: str | None = None) -> list[str]:
    # Through the running runs (runs_active, then each one's attempts by run_id: no
    # index of active attempts since migration 0022). No ORDER BY: the caller sums
    # their sizes, so the order is of no use. An older version's orphan (an active
    # attempt under a run not `running`) is not counted: start-up ends or adopts it.
    mine, by = _owned(owner)
    rows = await tx.all(
        "SELECT a.log_path AS relative_path FROM runs r"  # noqa: S608
        f" {dialect.ordered_join(tx.dialect)} run_attempts a"
        f" ON a.run_id = r.id WHERE {_R_RUNNING} AND {_A_ACTIVE}{mine} LIMIT ?",
        (*by, limit))
    return [str(r["relative_path"]) for r in rows]


class LogTotals(msgspec.Struct, frozen=True, kw_only=True):
    live: int  # log files that should exist (not evicted, run not deleted)
    sized_bytes: int  # sum of the measured (terminal) ones
    unsized: int  # not measured yet: active attempts and the newest terminal ones


async def log_totals(tx: Tx, owner: str | None = None) -> LogTotals:
    mine, by = _owned(owner, "runtime_owner")
    row = await tx.one(
        "SELECT COUNT(*) AS live, COALESCE(SUM(log_size_bytes), 0) AS bytes,"  # noqa: S608
        " SUM(CASE WHEN log_size_bytes IS NULL THEN 1 ELSE 0 END) AS unsized FROM run_attempts"
        f" WHERE log_evicted_at_ms IS NULL{mine}", by)
    if row is None:
        return LogTotals(live=0, sized_bytes=0, unsized=0)
    return LogTotals(live=int(row["live"]), sized_bytes=int(row["bytes"]),
                     unsized=int(row["unsized"] or 0))


# A run is its task's newest finished one when no newer run of the task is terminal
# (runs_task: task_id, id — a few steps, the next run is usually terminal already).
_NEWER_TERMINAL = (
    "EXISTS (SELECT 1 FROM runs n WHERE n.task_id = r.task_id AND n.id > r.id"  # noqa: S608
    f" AND {st.terminal_run('n.status')})"
)


async def eviction_candidates(tx: Tx, after_attempt: str, limit: int, *,
                              keep_newest: bool = True, owner: str | None = None
                              ) -> list[LogRow]:
    """Logs of terminal attempts that still exist, oldest attempt first (UUIDv7 ids).

    `keep_newest`: not the logs of each task's newest terminal run (only a critically
    full disk may take those); otherwise they come too, flagged `newest`.
    """
    only_older = f" AND {_NEWER_TERMINAL}" if keep_newest else ""
    sql = ("SELECT a.id, a.id AS attempt_id, a.log_path AS relative_path,"  # noqa: S608
           " a.log_size_bytes AS size_bytes,"
           f" NOT {_NEWER_TERMINAL} AS newest FROM run_attempts a JOIN runs r ON r.id = a.run_id"
           f" WHERE a.id > ? AND {_A_TERMINAL} AND a.log_evicted_at_ms IS NULL"
           f"{only_older}{_owned(owner)[0]} ORDER BY a.id LIMIT ?")
    rows = await tx.all(sql, (after_attempt, *_owned(owner)[1], limit))
    return [_log(r, newest=bool(r["newest"])) for r in rows]


async def evict_logs(tx: Tx, attempt_ids: list[str], reason: str,
                     now_ms: int, vol: str = LOGS) -> list[tuple[str, str]]:
    """Mark these attempts' logs evicted and queue their files: (attempt id, path) of each.

    Re-checked inside the transaction: a log of an active attempt is never evicted.
    """
    if not attempt_ids:
        return []
    rows = await tx.all(
        f"{_LOG_SELECT} WHERE {dialect.in_list(tx.dialect, 'a.id', len(attempt_ids))}"
        f" AND {_A_TERMINAL} AND a.log_evicted_at_ms IS NULL",
        dialect.in_params(tx.dialect, attempt_ids))
    for r in rows:
        await tx.execute(
            "UPDATE run_attempts SET log_evicted_at_ms = ?, log_evicted_reason = ? WHERE id = ?",
            (now_ms, reason, r["id"]))
    evicted = [(str(r["attempt_id"]), str(r["relative_path"])) for r in rows]
    await enqueue_deletions(tx, [path for _, path in evicted], now_ms, vol)
    return evicted


async def log_eviction(tx: Tx, relative_path: str) -> tuple[str, int] | None:
    """(reason, evicted_at_ms) when this log was evicted, for the log API.

    There is no index on the path (it would cost a page write per attempt); the
    path is `<shard>/<attempt id>.log`, so the lookup goes through the attempt's
    primary key and checks the path on its row.
    """
    attempt_id = relative_path.rpartition("/")[2].removesuffix(".log")
    row = await tx.one(
        "SELECT log_evicted_reason, log_evicted_at_ms FROM run_attempts WHERE id = ?"
        " AND log_path = ? AND log_evicted_at_ms IS NOT NULL",
        (attempt_id, relative_path))
    if row is None:
        return None
    return str(row["log_evicted_reason"]), int(row["log_evicted_at_ms"])


def _log(row: Row, *, newest: bool = False) -> LogRow:
    return LogRow(id=row["id"], attempt_id=row["attempt_id"],
                  relative_path=row["relative_path"], size_bytes=row["size_bytes"],
                  newest=newest)


# -- runs held under disk pressure ----------------------------------------------

async def unheld_queued_runs(tx: Tx, limit: int) -> list[str]:
    """Queued runs whose latest event is not already `run.held` (one event per run).
    Walks the queued runs (the runs_active index) a page at a time: the latest event
    is read from each run's own row."""
    out: list[str] = []
    after = ""
    while len(out) < limit:
        page = await tx.all(
            f"SELECT r.id FROM runs r WHERE {_R_QUEUED} AND r.id > ?"  # noqa: S608
            " ORDER BY r.id LIMIT ?", (after, max(limit, 32)))
        for r in page:
            if len(out) < limit and await last_event_type(tx, r["id"]) != "run.held":
                out.append(str(r["id"]))
        if len(page) < max(limit, 32):
            break
        after = str(page[-1]["id"])
    return out


async def mark_held(tx: Tx, run_id: str, data: dict[str, str | int | None],
                    now_ms: int) -> bool:
    run = await get_run(tx, run_id)
    if run.status is not RunStatus.QUEUED:
        return False
    if await last_event_type(tx, run.id) == "run.held":
        return False
    await append_events(tx, run, [NewEvent(type="run.held", data=data)], now_ms)
    return True


# -- counts and database upkeep --------------------------------------------------

async def count_runs(tx: Tx) -> int:
    row = await tx.one("SELECT COUNT(*) AS n FROM runs")
    return int(row["n"]) if row else 0


class DbStats(msgspec.Struct, frozen=True, kw_only=True):
    page_size: int
    page_count: int
    freelist_pages: int
    auto_vacuum: int  # 0 none, 1 full, 2 incremental


async def db_stats(tx: Tx) -> DbStats:
    """The database's size in pages. PostgreSQL: the whole database (this node's share
    of a server it does not own); no free-list or auto-vacuum of ours (autovacuum is
    the server's), so retention never vacuums there."""
    if tx.dialect == dialect.POSTGRESQL:
        row = await tx.one("SELECT current_setting('block_size')::bigint AS size,"
                           " pg_database_size(current_database()) AS bytes")
        size = int(row["size"]) if row is not None else 8192
        total = int(row["bytes"]) if row is not None else 0
        return DbStats(page_size=size, page_count=total // size, freelist_pages=0,
                       auto_vacuum=0)
    values = []
    for pragma in ("page_size", "page_count", "freelist_count", "auto_vacuum"):
        row = await tx.one(f"PRAGMA {pragma}")
        values.append(int(row[0]) if row is not None else 0)
    return DbStats(page_size=values[0], page_count=values[1], freelist_pages=values[2],
                   auto_vacuum=values[3])


def _embedded(db: Database) -> sqlite.Database:
    """WAL checkpoints and incremental vacuum are SQLite's upkeep (a PostgreSQL server
    does its own): the caller checked the dialect first."""
    if not isinstance(db, sqlite.Database):
        raise TypeError(f"SQLite upkeep on a {type(db).__name__}")
    return db


async def checkpoint_wal(db: Database) -> tuple[int, int, int]:
    """PRAGMA wal_checkpoint(TRUNCATE) on the writer: (busy, wal frames, checkpointed)."""
    rows = await _embedded(db).maintenance("PRAGMA wal_checkpoint(TRUNCATE)")
    if not rows:
        return 0, 0, 0
    busy, frames, done = (int(v) for v in tuple(rows[0]))
    return busy, frames, done


async def incremental_vacuum(db: Database, pages: int) -> None:
    """Return up to `pages` free pages to the filesystem (auto_vacuum=INCREMENTAL)."""
    await _embedded(db).maintenance(f"PRAGMA incremental_vacuum({int(pages)})", rows=False)
