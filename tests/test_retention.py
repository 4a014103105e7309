"""Retention: policy maths, run deletion (rows in one transaction, files after commit,
crash in between), the logs size cap, database upkeep and the auto-vacuum migration."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from qledge import failpoints, ids, transitions
from qledge.db import attempts, journal, migrate, runs, tasks, upkeep
from qledge.db import retention_queries as q
from qledge.db.sqlite import Database
from qledge.launch import logs
from qledge.model import TERMINAL_RUN, RunStatus, Trigger
from qledge.runtime.diskwatch import DiskWatch
from qledge.runtime.retention import (
    CAP_TARGET,
    DAY_MS,
    LogFacts,
    Policy,
    Retention,
    cap_excess,
    evict_oldest,
    policy_for,
    verdict,
)
from qledge.settings import Profile, Settings
from qledge.tasks.writable import TaskFields, task_fields

from support import killed_mid_vacuum

NOW = 1_800_000_000_000
T = RunStatus


# -- policy maths (pure) ---------------------------------------------------------

class RunFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A run as the policy sees it (the round reads the same facts by SQL)."""

    id: str
    status: RunStatus
    finished_at_ms: int


def select_runs(runs_newest_first: Sequence[RunFacts], policy: Policy,
                now: int) -> list[tuple[str, str]]:
    """(run id, why) for every run of one task the policy deletes; active runs never.

    The reference the tests hold the SQL round to: the same `verdict`, ranked over
    the terminal runs in Python (production ranks them in SQL, retention_queries)."""
    out: list[tuple[str, str]] = []
    rank = 0
    for run in runs_newest_first:
        if run.status not in TERMINAL_RUN:
            continue
        rank += 1
        why = verdict(rank, run.finished_at_ms, policy, now)
        if why is not None:
            out.append((run.id, why))
    return out


def _runs(*specs: tuple[RunStatus, float]) -> list[RunFacts]:
    """Newest first: (status, age in days)."""
    return [RunFacts(id=f"r{i}", status=s, finished_at_ms=int(NOW - age * DAY_MS))
            for i, (s, age) in enumerate(specs)]


def test_last_n_keeps_the_newest_terminal_runs() -> None:
    runs = _runs(*[(T.SUCCEEDED, i) for i in range(10)])
    gone = select_runs(runs, Policy(keep_runs=3, keep_days=0), NOW)
    assert gone == [(f"r{i}", "KEEP_RUNS") for i in range(3, 10)]


def test_age_deletes_old_runs_but_keeps_the_newest_terminal_one() -> None:
    runs = _runs((T.FAILED, 30), (T.SUCCEEDED, 31), (T.SUCCEEDED, 6.9), (T.LOST, 7.1))
    gone = select_runs(runs, Policy(keep_runs=0, keep_days=7), NOW)
    # r0 is 30 days old but it is the task's newest result: kept
    assert gone == [("r1", "KEEP_DAYS"), ("r3", "KEEP_DAYS")]


def test_both_limits_apply_and_zero_means_no_limit() -> None:
    runs = _runs(*[(T.SUCCEEDED, i) for i in range(6)])
    both = dict(select_runs(runs, Policy(keep_runs=4, keep_days=2), NOW))
    assert both == {"r3": "KEEP_DAYS", "r4": "KEEP_RUNS", "r5": "KEEP_RUNS"}
    assert select_runs(runs, Policy(keep_runs=0, keep_days=0), NOW) == []


def test_active_runs_are_never_touched_nor_counted() -> None:
    runs = _runs((T.RUNNING, 100), (T.QUEUED, 100), (T.SUCCEEDED, 100), (T.SUCCEEDED, 100),
                 (T.QUEUED, 100), (T.FAILED, 100))
    gone = select_runs(runs, Policy(keep_runs=1, keep_days=1), NOW)
    assert [g for g, _ in gone] == ["r3", "r5"]  # r2 = newest terminal, kept
    for status in (T.QUEUED, T.RUNNING):
        assert select_runs(_runs(*[(status, 999)] * 5), Policy(keep_runs=1, keep_days=1),
                           NOW) == []


def test_rank_one_is_always_kept() -> None:
    assert verdict(1, 0, Policy(keep_runs=1, keep_days=1), NOW) is None
    assert verdict(2, NOW, Policy(keep_runs=1, keep_days=0), NOW) == "KEEP_RUNS"


def test_task_overrides_win_over_the_profile() -> None:
    edge = Settings().profile_limits
    assert policy_for(None, None, edge) == Policy(keep_runs=edge.keep_runs_per_task,
                                                  keep_days=edge.keep_days)
    assert policy_for(0, 3, edge) == Policy(keep_runs=0, keep_days=3)


def test_size_cap_evicts_oldest_first_with_mixed_sizes() -> None:
    logs_ = [LogFacts(id="a", size_bytes=500), LogFacts(id="b", size_bytes=10),
             LogFacts(id="c", size_bytes=3000, active=True), LogFacts(id="d", size_bytes=700),
             LogFacts(id="e", size_bytes=40)]
    # strictly oldest first: a small old log goes before a big newer one
    assert [x.id for x in evict_oldest(logs_, 505)] == ["a", "b"]
    assert [x.id for x in evict_oldest(logs_, 511)] == ["a", "b", "d"]  # c is active
    assert [x.id for x in evict_oldest(logs_, 10**9)] == ["a", "b", "d", "e"]
    assert evict_oldest(logs_, 0) == []
    assert cap_excess(1000, 1000) == 0
    assert cap_excess(1001, 1000) == 1001 - int(1000 * CAP_TARGET)
    assert cap_excess(10**12, 0) == 0  # no cap


# -- helpers: real rows through the store and transitions -------------------------

def _profile(**changes: object) -> Profile:
    return msgspec.structs.replace(Settings().profile_limits, **changes)


def _retention(db: Database, conf: Settings, profile: Profile,
               disk: DiskWatch | None = None) -> Retention:
    disk = disk or DiskWatch({"logs": conf.logs_path}, low_water_mb=0, low_water_pct=0)
    return Retention(db=db, logs_root=conf.logs_path, db_path=conf.db_path, profile=profile,
                     disk=disk)


async def _task(db: Database, **fields: object) -> str:
    async with db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), task_fields({
            "name": "t", "command": "true", "env": {}, "labels": [], **fields}), 1)
    return task.id


async def _run(db: Database, conf: Settings, task_id: str, *, status: str = "succeeded",
               finished_at_ms: int | None = None, log_bytes: int = 100,
               keep_journal: bool = False) -> tuple[str, str]:
    """A run with one attempt and a log file; terminal unless status is queued/running.
    With `finished_at_ms` it all happened then (a run never finishes before it began)."""
    now = int(time.time() * 1000) if finished_at_ms is None else finished_at_ms
    async with db.write() as tx:
        run = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, now)
        if status == "queued":
            return run.id, ""
        aid = ids.uuid7()
        att = await attempts.prepare_attempt(
            tx, run, attempt_id=aid, owner="n1", executor_type="local_process",
            token_hash=b"h", deadline_at_ms=None,
            log_path=logs.relative_path(aid), receipt_path=f"{aid[-2:]}/{aid}.json",
            now_ms=now)
        run = await runs.get_run(tx, run.id)
        tr = transitions.attempt_started(run, att, pid=1, start_time=1, boot_id="b", now_ms=now)
        await runs.apply(tx, run, tr, now)
        if status != "running":
            run = await runs.get_run(tx, run.id)
            att = await attempts.get_attempt(tx, aid)
            tr = transitions.complete(run, att, exit_code=0 if status == "succeeded" else 1,
                                      finished_at_ms=finished_at_ms or now)
            await runs.apply(tx, run, tr, now)
            if not keep_journal:  # what the supervisor does after the journal retention
                await journal.journal_delete(tx, aid)
    fd, _ = logs.create(conf.logs_path, aid)
    os.write(fd, b"x" * log_bytes)
    os.close(fd)
    return run.id, aid


def _log_file(conf: Settings, aid: str) -> Path:
    return conf.logs_path / logs.relative_path(aid)


def _rows(conf: Settings, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(conf.db_path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _no_dangling_rows(conf: Settings) -> None:
    conn = sqlite3.connect(conf.db_path)
    try:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        for sql in (
            "SELECT COUNT(*) FROM run_attempts a LEFT JOIN runs r ON r.id = a.run_id"
            " WHERE r.id IS NULL",
            "SELECT COUNT(*) FROM run_events e LEFT JOIN runs r ON r.id = e.run_id"
            " WHERE r.id IS NULL",
            "SELECT COUNT(*) FROM cancel_leases c LEFT JOIN run_attempts a"
            " ON a.id = c.attempt_id WHERE a.id IS NULL",
        ):
            assert conn.execute(sql).fetchone()[0] == 0, sql
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


# -- run deletion ----------------------------------------------------------------

async def test_round_deletes_what_the_policy_says_rows_and_files(
        db: Database, conf: Settings) -> None:
    now = int(time.time() * 1000)
    capped = await _task(db)
    unlimited = await _task(db, keep_runs=0, keep_days=0)
    # the oldest run still has its receipt-journal row (the supervisor owns that evidence)
    with_journal = await _run(db, conf, capped, keep_journal=True,
                              finished_at_ms=now - 100 * 1000)
    made = []
    for i in range(8):
        made.append(await _run(db, conf, capped, finished_at_ms=now - (8 - i) * 1000))
    running = await _run(db, conf, capped, status="running")
    queued = await _run(db, conf, capped, status="queued")
    kept_elsewhere = [await _run(db, conf, unlimited) for _ in range(5)]

    retention = _retention(db, conf, _profile(keep_runs_per_task=3, keep_days=0))
    report = await retention.round()

    newest_first = [RunFacts(id=r, status=T.SUCCEEDED, finished_at_ms=0)
                    for r, _ in [*reversed(made), with_journal]]
    expected = {r for r, _ in select_runs(newest_first, Policy(keep_runs=3, keep_days=0), now)}
    assert expected == {r for r, _ in made[:5]} | {with_journal[0]}
    gone = expected - {with_journal[0]}  # not while its journal row exists
    left = {r for (r,) in _rows(conf, "SELECT id FROM runs")}
    assert not gone & left
    assert {running[0], queued[0], with_journal[0], *(r for r, _ in kept_elsewhere)} <= left
    assert len(left) == 1 + 8 + 2 + 5 - 5
    assert report.counts["runs_deleted"] == len(gone)
    # the deletion committed deferred: its files wait, queued, until an fsync covers it
    assert report.counts["files_waiting_for_fsync"] == len(gone)
    assert all(_log_file(conf, aid).exists() for _, aid in made)
    queued = {p for (p,) in _rows(conf, "SELECT relative_path FROM file_deletions")}
    assert queued == {logs.relative_path(aid) for r, aid in made if r in gone}
    _no_dangling_rows(conf)
    # another commit's fsync (here an explicit one) covers it: the next round unlinks
    await db.sync()
    report = await retention.round()
    assert report.counts["files_removed"] == len(gone)
    assert "syncs_for_files" not in report.counts
    for run_id, aid in made:
        assert (run_id in gone) != _log_file(conf, aid).exists()
    assert _log_file(conf, running[1]).exists()
    assert _rows(conf, "SELECT COUNT(*) FROM file_deletions") == [(0,)]
    _no_dangling_rows(conf)

    # the journal row ages out (supervisor) -> the next round takes that run too
    async with db.write() as tx:
        await journal.journal_delete(tx, with_journal[1])
    report = await retention.round()
    assert report.counts.get("runs_deleted") == 1
    await db.sync()
    await retention.round()
    assert not _log_file(conf, with_journal[1]).exists()


async def test_children_of_an_active_conc_parent_are_kept(
        db: Database, conf: Settings) -> None:
    """The parent's result is computed from all its children when the last one ends:
    retention must not take a finished child from under a running parent."""
    from qledge.db import conc_runs
    from qledge.model import CancelReason

    task_id = await _task(db)
    now = int(time.time() * 1000)
    async with db.write() as tx:
        parent = await runs.create_run(tx, ids.uuid7(), task_id, Trigger.API, now)
        parent = await runs.apply(tx, parent, transitions.fan_out(parent, 5, now), now)
        kids = [await conc_runs.create_child(tx, ids.uuid7(), parent, i, now)
                for i in range(1, 6)]
        for kid in kids[:4]:  # four end, the fifth is still queued
            tr = transitions.request_cancel(kid, CancelReason.USER, now)
            assert tr is not None
            kid = await runs.apply(tx, kid, tr, now)
            await runs.apply(tx, kid, transitions.cancel_queued(kid, now), now)
    retention = _retention(db, conf, _profile(keep_runs_per_task=1, keep_days=0))
    await retention.round()
    assert len(_rows(conf, "SELECT id FROM runs")) == 6
    async with db.write() as tx:  # the last child and the parent end
        kid = await runs.get_run(tx, kids[4].id)
        tr = transitions.request_cancel(kid, CancelReason.USER, now)
        assert tr is not None
        kid = await runs.apply(tx, kid, tr, now)
        await runs.apply(tx, kid, transitions.cancel_queued(kid, now), now)
        children = await conc_runs.children(tx, parent.id)
        parent = await runs.get_run(tx, parent.id)
        await runs.apply(tx, parent, transitions.children_done(parent, children, now), now)
    await retention.round()
    assert len(_rows(conf, "SELECT id FROM runs")) == 1  # now ordinary old runs
    _no_dangling_rows(conf)


async def test_round_deletes_runs_past_their_age_but_keeps_each_newest(
        db: Database, conf: Settings) -> None:
    """The age limit through the path production takes (Retention.round: the SQL
    pre-filter, then verdict): a task's own keep_days, the profile's when unset, 0 = none."""
    now = int(time.time() * 1000)

    async def runs(task: str, ages_days: list[float]) -> list[tuple[str, str]]:
        return [await _run(db, conf, task, finished_at_ms=int(now - age * DAY_MS))
                for age in ages_days]  # created in this order: the last is the newest

    own = await _task(db, keep_runs=0, keep_days=7)
    own_runs = await runs(own, [30, 10, 7.1, 6.9, 1, 20])  # the newest finished 20 days ago
    profiles = await _task(db, keep_runs=0)  # keep_days unset: the profile's 3
    profile_runs = await runs(profiles, [5, 4, 2, 0.5])
    unlimited = await _task(db, keep_runs=0, keep_days=0)
    unlimited_runs = await runs(unlimited, [100, 50])
    old_running = await _run(db, conf, own, status="running")

    retention = _retention(db, conf, _profile(keep_runs_per_task=0, keep_days=3))
    report = await retention.round()

    gone = [*own_runs[:3], *profile_runs[:2]]
    kept = [*own_runs[3:], *profile_runs[2:], *unlimited_runs, old_running]
    assert report.counts["runs_deleted"] == len(gone) == 5, report.counts
    assert {r for (r,) in _rows(conf, "SELECT id FROM runs")} == {r for r, _ in kept}
    await db.sync()
    assert "runs_deleted" not in (await retention.round()).counts  # files go, no runs
    assert not any(_log_file(conf, aid).exists() for _, aid in gone)
    assert all(_log_file(conf, aid).exists() for _, aid in kept)
    _no_dangling_rows(conf)
    assert "runs_deleted" not in (await retention.round()).counts  # nothing more is due


async def test_an_idle_appliance_syncs_once_per_interval_to_free_deleted_logs(
        db: Database, conf: Settings) -> None:
    """No other commit comes along to fsync a deferred deletion: after a retention
    interval the round pays one fsync itself, then unlinks; a durable commit in
    between makes that fsync unnecessary."""
    task = await _task(db, keep_runs=1, keep_days=0)
    made = [await _run(db, conf, task) for _ in range(3)]
    retention = _retention(db, conf, _profile(retention_interval_s=0.3))
    report = await retention.round()
    assert report.counts["runs_deleted"] == 2
    syncs = db.syncs
    report = await retention.round()  # at once: still waiting, no fsync paid
    assert report.counts.get("unlinks_waiting_for_fsync") == 1
    assert db.syncs == syncs and retention.syncs == 0
    assert all(_log_file(conf, aid).exists() for _, aid in made)
    await asyncio.sleep(0.35)
    report = await retention.round()  # an interval later: one fsync, then the files go
    assert report.counts["syncs_for_files"] == 1 and report.counts["files_removed"] == 2
    assert db.syncs == syncs + 1 and retention.syncs == 1
    assert [_log_file(conf, aid).exists() for _, aid in made] == [False, False, True]

    more = [await _run(db, conf, task) for _ in range(2)]  # durable commits (test helper)
    report = await retention.round()
    assert report.counts["runs_deleted"] == 2
    async with db.write() as tx:  # e.g. the next attempt's spawn step 1
        await tasks.create_task(tx, ids.uuid7(), TaskFields(name="u", command="true",
                                                  env={}, labels=[]), 1)
    await retention.round()
    assert retention.syncs == 1  # that commit's fsync covered the deletion
    assert not _log_file(conf, made[-1][1]).exists()
    assert not _log_file(conf, more[0][1]).exists() and _log_file(conf, more[1][1]).exists()


async def test_crash_between_commit_and_unlink_leaves_only_a_queued_orphan(
        db: Database, conf: Settings) -> None:
    task = await _task(db, keep_runs=1, keep_days=0)
    made = [await _run(db, conf, task) for _ in range(4)]
    failpoints.configure("retention.after_commit=raise-once")
    try:
        with pytest.raises(failpoints.FailpointError):
            await _retention(db, conf, _profile()).round()
    finally:
        failpoints.configure("")
    # rows are gone (one transaction), files are still there, each one queued
    assert {r for (r,) in _rows(conf, "SELECT id FROM runs")} == {made[-1][0]}
    _no_dangling_rows(conf)
    orphans = [_log_file(conf, aid) for _, aid in made[:-1]]
    assert all(p.exists() for p in orphans)
    queued = {p for (p,) in _rows(conf, "SELECT relative_path FROM file_deletions")}
    assert queued == {logs.relative_path(aid) for _, aid in made[:-1]}
    # a new worker (fresh Retention, reopened database) removes them, no directory listing
    await db.close()
    db2 = Database(conf.db_path)
    await db2.open()
    try:
        report = await _retention(db2, conf, _profile()).round()
    finally:
        await db2.close()
        await db.open()  # for the fixture's close
    assert report.counts["files_removed"] == 3
    assert not any(p.exists() for p in orphans)
    assert _log_file(conf, made[-1][1]).exists()
    assert _rows(conf, "SELECT COUNT(*) FROM file_deletions") == [(0,)]


def test_kill_between_commit_and_unlink_then_next_round_cleans(
        tmp_path: Path, conf: Settings) -> None:
    """The same window with a real process exit (os._exit, like kill -9 for the disk)."""
    import asyncio

    async def setup() -> list[tuple[str, str]]:
        database = Database(conf.db_path)
        await database.open()
        try:
            task = await _task(database, keep_runs=1, keep_days=0)
            return [await _run(database, conf, task) for _ in range(3)]
        finally:
            await database.close()

    migrate.apply(conf.db_path)
    made = asyncio.run(setup())
    script = tmp_path / "round.py"
    script.write_text(
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "import msgspec\n"
        "from qledge.db.sqlite import Database\n"
        "from qledge.runtime.diskwatch import DiskWatch\n"
        "from qledge.runtime.retention import Retention\n"
        "from qledge.settings import Settings\n"
        "db_path, logs_root = Path(sys.argv[1]), Path(sys.argv[2])\n"
        "async def main():\n"
        "    db = Database(db_path)\n"
        "    await db.open()\n"
        "    r = Retention(db=db, logs_root=logs_root, db_path=db_path,\n"
        "                  profile=Settings().profile_limits,\n"
        "                  disk=DiskWatch({}, low_water_mb=0, low_water_pct=0))\n"
        "    await r.round()\n"
        "asyncio.run(main())\n")
    env = {**os.environ, "QLTEST_FAILPOINTS": "retention.after_commit=exit",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "app")}
    res = subprocess.run([sys.executable, str(script), str(conf.db_path), str(conf.logs_path)],
                         env=env, capture_output=True, timeout=120)
    assert res.returncode == 86, res.stderr.decode()
    assert {r for (r,) in _rows(conf, "SELECT id FROM runs")} == {made[-1][0]}
    _no_dangling_rows(conf)
    assert all(_log_file(conf, aid).exists() for _, aid in made)

    async def again() -> dict[str, int]:
        database = Database(conf.db_path)
        await database.open()
        try:
            return (await _retention(database, conf, _profile()).round()).counts
        finally:
            await database.close()

    counts = asyncio.run(again())
    assert counts["files_removed"] == 2
    assert [_log_file(conf, aid).exists() for _, aid in made] == [False, False, True]
    assert _rows(conf, "SELECT COUNT(*) FROM file_deletions") == [(0,)]


async def test_task_deletion_queues_its_files(db: Database, conf: Settings) -> None:
    task = await _task(db)
    _, aid = await _run(db, conf, task)
    async with db.write() as tx:
        paths = await tasks.delete_task(tx, task, 5)
    # crash here (before the caller's unlink): the queue still knows the file
    assert paths == [logs.relative_path(aid)]
    assert _rows(conf, "SELECT relative_path FROM file_deletions") == [(paths[0],)]
    await _retention(db, conf, _profile()).round()
    assert not _log_file(conf, aid).exists()
    assert _rows(conf, "SELECT COUNT(*) FROM file_deletions") == [(0,)]


async def test_rounds_are_bounded_and_the_cursor_resumes(db: Database, conf: Settings) -> None:
    tasks = [await _task(db, keep_runs=1) for _ in range(5)]
    for t in tasks:
        for _ in range(4):
            await _run(db, conf, t)
    retention = _retention(db, conf, _profile(retention_pages=2, retention_page_size=2))
    per_round = []
    for _ in range(10):
        per_round.append((await retention.round()).counts.get("runs_deleted", 0))
        if _rows(conf, "SELECT COUNT(*) FROM runs") == [(5,)]:
            break
    assert max(per_round) <= 2 * 2
    assert sum(per_round) == 5 * 3
    assert _rows(conf, "SELECT COUNT(DISTINCT task_id) FROM runs") == [(5,)]


# -- logs size cap ---------------------------------------------------------------

async def test_size_cap_evicts_oldest_logs_and_keeps_the_runs(
        db: Database, conf: Settings) -> None:
    kib = 1024
    task = await _task(db, keep_runs=0, keep_days=0)
    sizes = [600 * kib, 300 * kib, 900 * kib, 200 * kib, 1200 * kib]
    made = [await _run(db, conf, task, log_bytes=n) for n in sizes]
    active = await _run(db, conf, task, status="running", log_bytes=512 * kib)
    retention = _retention(db, conf, _profile(logs_cap_mb=2))
    report = await retention.round()

    total = sum(sizes) + 512 * kib
    expected = evict_oldest(
        [LogFacts(id=aid, size_bytes=n) for (_, aid), n in zip(made, sizes, strict=True)],
        cap_excess(total, 2 << 20))
    gone = {x.id for x in expected}
    assert gone == {made[0][1], made[1][1], made[2][1], made[3][1]}
    assert report.counts["logs_evicted"] == len(gone)
    for _, aid in made:
        assert _log_file(conf, aid).exists() == (aid not in gone)
    assert _log_file(conf, active[1]).exists()  # active: never, even over the cap
    assert _rows(conf, "SELECT COUNT(*) FROM runs") == [(6,)]  # the runs stay
    async with db.read() as tx:
        for _, aid in made:
            ev = await q.log_eviction(tx, logs.relative_path(aid))
            assert (ev is not None and ev[0] == "SIZE_CAP") == (aid in gone)
    assert retention.logs_total_bytes == total - sum(x.size_bytes for x in expected)
    _no_dangling_rows(conf)
    # a run whose log was evicted can still be deleted by policy later: nothing to unlink twice
    async with db.write() as tx:
        await tx.execute("UPDATE tasks SET keep_runs = 1")
    report = await retention.round()
    assert report.counts.get("runs_deleted") == 4
    assert report.counts.get("files_removed", 0) == 0
    _no_dangling_rows(conf)


# -- database upkeep --------------------------------------------------------------

async def test_round_checkpoints_a_large_wal_and_vacuums_free_pages(
        db: Database, conf: Settings) -> None:
    task = await _task(db, keep_runs=0, keep_days=0)
    async with db.write() as tx:
        for i in range(3000):
            await tx.execute(
                "INSERT INTO run_events (run_id, seq, type, at_ms, data_json)"
                " SELECT id, ?, 'filler', 0, ? FROM runs LIMIT 1", (i + 10, "y" * 400))
            if i == 0:
                await runs.create_run(tx, ids.uuid7(), task, Trigger.API, 1)
    async with db.write() as tx:
        await tx.execute("DELETE FROM run_events WHERE type = 'filler'")
    wal = Path(f"{conf.db_path}-wal")
    assert wal.stat().st_size > 1 << 20
    async with db.read() as tx:
        before = await q.db_stats(tx)
    assert before.auto_vacuum == 2 and before.freelist_pages > 100
    retention = _retention(db, conf, _profile(wal_checkpoint_mb=1, vacuum_pages_per_round=64))
    report = await retention.round()
    assert report.counts["wal_checkpoints"] == 1
    assert report.counts["pages_vacuumed"] == 64
    assert retention.stats is not None
    assert retention.stats.freelist_pages == before.freelist_pages - 64
    # with 1 KiB pages a pointer-map page (one per ~200 pages) may go too
    assert before.page_count - 65 <= retention.stats.page_count <= before.page_count - 64
    for _ in range(200):  # bounded steps until the free list is a small share of the file
        if "pages_vacuumed" not in (await retention.round()).counts:
            break
    assert retention.stats.freelist_pages < max(64, retention.stats.page_count // 4)
    assert wal.stat().st_size < 1 << 20


# -- migration to incremental auto-vacuum ------------------------------------------

def _copy_migrations(dst: Path, upto: int) -> list[migrate.Migration]:
    dst.mkdir()
    for m in migrate.bundled()[:upto]:
        (dst / f"{m.version:04d}_{m.name}.sql").write_text(m.sql)
    return migrate.bundled(dst)


def _legacy_db(db: Path, migrations: list[migrate.Migration]) -> None:
    """A database as an older qledge created it (4 KiB pages, no auto-vacuum): a new
    file would get the wished page size and auto-vacuum mode before its first table."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA page_size=4096")
    conn.execute("PRAGMA journal_mode=WAL")  # writes page 1: both are fixed now
    conn.close()
    migrate.apply(db, migrations)


def _fill(db: Path, n: int, blob: int = 2000) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("INSERT INTO tasks (id, name, command, created_at_ms, updated_at_ms)"
                     " VALUES ('t1', 'task', 'true', 1, 1)")
        conn.executemany(
            "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, reason_code)"
            " VALUES (?, 't1', 'api', 'succeeded', 1, ?)",
            [(f"r{i:06d}", "z" * blob) for i in range(n)])
    conn.close()


def test_migration_converts_an_existing_database_to_incremental_auto_vacuum(
        tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    _legacy_db(db, _copy_migrations(tmp_path / "m", 5))
    _fill(db, 3000)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    conn.close()

    assert 6 in migrate.apply(db)
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 3000
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert upkeep.apply_storage_settings(conn) == "already applied"  # idempotent
    # freed pages go back to the filesystem in bounded steps
    conn.execute("DELETE FROM runs WHERE id < 'r002000'")
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert free > 500
    conn.executescript("PRAGMA incremental_vacuum(200)")  # steps to completion
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == free - 200
    # with 1 KiB pages a pointer-map page (one per ~200 pages) may go too
    assert pages - 202 <= conn.execute("PRAGMA page_count").fetchone()[0] <= pages - 200
    conn.close()
    assert migrate.apply(db) == []


@pytest.mark.slow
def test_auto_vacuum_conversion_is_crash_safe(tmp_path: Path) -> None:
    """kill -9 at two known points of the VACUUM (support.killed_mid_vacuum): the
    database is exactly the old one (no auto-vacuum, 4 KiB pages) with the migrations
    committed before it, and the next start converts it."""
    db = tmp_path / "q.db"
    _legacy_db(db, _copy_migrations(tmp_path / "m", 5))
    _fill(db, 5000, blob=1500)
    conn = sqlite3.connect(db)
    before = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
    conn.close()

    for name, path in killed_mid_vacuum(db).items():
        conn = sqlite3.connect(path, isolation_level=None)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok", name
        assert not Path(f"{path}-journal").exists(), name  # rolled back by that read
        killed = name != "full"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == (0 if killed else 2), name
        assert conn.execute("PRAGMA page_size").fetchone()[0] == (4096 if killed else 1024)
        assert conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == len(
            migrate.bundled())  # 0006 and 0007 committed before the VACUUM
        rows = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
        width = len(before[0])  # later migrations append columns, NULL for old rows
        assert [r[:width] for r in rows] == before, name
        assert {r[width:] for r in rows} <= {(None,) * (len(rows[0]) - width)}, name
        conn.close()
        assert migrate.apply(path) == []
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2, name
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 1024, name
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal", name
        rows = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
        assert [r[:width] for r in rows] == before, name
        conn.close()


# -- a card too full to record an eviction -------------------------------------------

async def test_disk_full_unlinks_finished_logs_first_and_marks_them_later(
        db: Database, conf: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from qledge.db import retention_queries

    class Full:
        """statvfs of a full filesystem (the same device as the logs root)."""

        def __call__(self, path: Path) -> object:
            class St:
                f_frsize, f_blocks, f_bfree, f_bavail = 4096, 25600, 10, 10

            return St()

    task = await _task(db, keep_runs=0, keep_days=0)
    made = [await _run(db, conf, task) for _ in range(3)]
    active = await _run(db, conf, task, status="running")
    disk = DiskWatch({"data": conf.data_path, "logs": conf.logs_path}, low_water_mb=10,
                     low_water_pct=0, critical_water_mb=16, statvfs=Full())
    retention = _retention(db, conf, _profile(), disk)

    async def no_room(*args: object, **kw: object) -> object:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(retention_queries, "evict_logs", no_room)
    report = await retention.round()
    assert report.counts["logs_unlinked_before_mark"] == 3
    assert not any(_log_file(conf, aid).exists() for _, aid in made)
    assert _log_file(conf, active[1]).exists()  # never an active attempt's log
    assert _rows(conf, "SELECT COUNT(*) FROM run_attempts WHERE log_evicted_at_ms IS NOT NULL") \
        == [(0,)]
    _no_dangling_rows(conf)
    monkeypatch.undo()
    report = await retention.round()  # room to write again: the marks follow
    assert report.counts["logs_evicted"] == 3
    # Critically full (40 KiB free): the task's newest log went too, under its own reason.
    assert _rows(conf, "SELECT log_evicted_reason, COUNT(*) FROM run_attempts WHERE"
                       " log_evicted_at_ms IS NOT NULL GROUP BY 1 ORDER BY 1") \
        == [("DISK_CRITICAL", 1), ("DISK_PRESSURE", 2)]
    assert _rows(conf, "SELECT COUNT(*) FROM file_deletions") == [(0,)]
    _no_dangling_rows(conf)


# -- per-task overrides through the API, figures in /api/v1/system -------------------

def test_task_retention_overrides_and_system_figures(client: object) -> None:
    c = client  # starlette TestClient
    task = c.post("/api/v1/tasks", json={"name": "t", "command": "true",  # type: ignore[attr-defined]
                                         "keep_runs": 5, "keep_days": 0}).json()
    assert (task["keep_runs"], task["keep_days"]) == (5, 0)
    patched = c.patch(f"/api/v1/tasks/{task['id']}",  # type: ignore[attr-defined]
                      json={"keep_runs": None, "keep_days": 3}).json()
    assert (patched["keep_runs"], patched["keep_days"]) == (None, 3)
    bad = c.post("/api/v1/tasks", json={"name": "t", "command": "true",  # type: ignore[attr-defined]
                                        "keep_runs": -1})
    assert bad.status_code == 422 and bad.json()["field"] == "keep_runs"
    system = c.get("/api/v1/system").json()  # type: ignore[attr-defined]
    assert system["pressure"]["state"] == "ok"
    assert set(system["volumes"]) == {"data", "receipts", "logs"}
    assert system["volumes"]["logs"]["free_bytes"] > 0
    ret = system["retention"]
    assert ret["runs_kept"] == 0 and ret["policy"]["logs_cap_mb"] == 256
    assert ret["next_round_at_ms"] is not None


# -- a round that stops at its caps is followed by a catch-up round -------------------

async def test_capped_rounds_catch_up_instead_of_waiting_the_interval(
        tmp_path: Path) -> None:
    from support import make_runtime

    rt = make_runtime(tmp_path / "state", retention_interval_s="600")
    conf = rt.settings
    # 29 runs to delete, 4 per round (1 page of 4): the edge profile's 64 per 120 s is
    # below a run rate of 120/min the same way.
    seed = Database(conf.db_path)
    await seed.open()
    task = await _task(seed, keep_runs=1)
    for _ in range(30):
        await _run(seed, conf, task)
    await seed.close()
    rt.profile = _profile(retention_pages=1, retention_page_size=4, retention_interval_s=600.0)
    await rt.start()
    try:
        # Far below the 600 s interval, with room for a loaded machine (2 cores, other
        # suites): one round per interval would take hours.
        deadline = time.monotonic() + 60
        while _rows(conf, "SELECT COUNT(*) FROM runs") != [(1,)]:
            assert time.monotonic() < deadline, _rows(conf, "SELECT COUNT(*) FROM runs")
            await asyncio.sleep(0.1)
        # 29 / 4 rounds, not one per 600 s (the last one counts once it has returned,
        # a moment after its commit deleted the last run).
        while rt.disk.loop.rounds < 8:
            assert time.monotonic() < deadline, rt.disk.loop.rounds
            await asyncio.sleep(0.05)
        last = rt.disk.retention.last
        assert last is not None and last.counts.get("runs_deleted", 0) <= 4
    finally:
        await rt.stop()
    _no_dangling_rows(conf)


async def test_a_round_reports_whether_work_is_left(db: Database, conf: Settings) -> None:
    task = await _task(db, keep_runs=1)
    for _ in range(9):
        await _run(db, conf, task)
    retention = _retention(db, conf, _profile(retention_pages=1, retention_page_size=4))
    reports = [await retention.round() for _ in range(3)]
    assert [r.counts.get("runs_deleted", 0) for r in reports] == [4, 4, 0]
    assert [r.more for r in reports] == [True, True, False]


async def test_size_cap_keeps_each_tasks_newest_log(db: Database, conf: Settings) -> None:
    task = await _task(db, keep_runs=0, keep_days=0)
    older, newest = [await _run(db, conf, task, log_bytes=1536 * 1024) for _ in range(2)]
    report = await _retention(db, conf, _profile(logs_cap_mb=1)).round()
    assert not _log_file(conf, older[1]).exists()
    # Over the cap still: the task's newest result keeps its log (only a critically
    # full disk may take it).
    assert _log_file(conf, newest[1]).exists()
    assert report.deleted == {"logs": {"SIZE_CAP": 1}}


async def test_many_tasks_with_nothing_to_delete_need_no_catch_up(
        db: Database, conf: Settings) -> None:
    for _ in range(10):
        await _run(db, conf, await _task(db, keep_runs=1))
    await _retention(db, conf, _profile()).round()  # every log measured already
    retention = _retention(db, conf, _profile(retention_pages=1, retention_page_size=4))
    report = await retention.round()  # 4 of 10 tasks looked at, nothing to delete
    assert report.counts == {}
    assert report.more is False
