"""Durability classes of the writer and the receipt reaper (docs/storage.md).

fsyncs are counted for real: a small program drives the Database under
`strace -f -e trace=fsync,fdatasync`, with marker syscalls between steps.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from _pg import Cluster, pg_bindir
from qledge import ids
from qledge.db import attempts, errors, pg, tasks
from qledge.db.sqlite import Database
from qledge.receipts.store import ReceiptStore
from qledge.runtime.reaper import Reaper
from qledge.settings import Settings
from qledge.tasks.writable import TaskFields

from support import ROOT, free_port, unavailable

_PROGRAM = textwrap.dedent("""
    import asyncio, os, sys
    sys.path.insert(0, sys.argv[2])
    from qledge.db import migrate
    from qledge.db.sqlite import Database

    def mark(name):
        os.access("/__mark_" + name, os.F_OK)

    async def main(path):
        migrate.apply(path)
        db = Database(path, readers=1)
        await db.open()
        async def put(durable):
            async with db.write(durable=durable) as tx:
                await tx.execute("INSERT INTO storage_settings (name, value) VALUES (?, 'x')",
                                 (os.urandom(8).hex(),))
        await put(True)  # a fresh WAL's first commit also syncs its header: not counted
        mark("durable"); await put(True)
        mark("deferred"); await put(False); await put(False)
        mark("sync"); await db.sync()
        mark("sync_again"); await db.sync()
        mark("back_to_durable"); await put(True)
        mark("end")
        await db.close()

    asyncio.run(main(sys.argv[1]))
""")


def _fsyncs_between_marks(tmp_path: Path) -> dict[str, int]:
    strace = shutil.which("strace")
    if strace is None:
        unavailable("strace is not installed (scripts/bootstrap installs it)")
    prog = tmp_path / "prog.py"
    prog.write_text(_PROGRAM)
    trace = tmp_path / "trace.txt"
    subprocess.run([strace, "-f", "-qq", "-o", str(trace), "-e",
                    "trace=fsync,fdatasync,access,faccessat,faccessat2", sys.executable,
                    str(prog), str(tmp_path / "q.sqlite3"), str(ROOT / "app")],
                   check=True, timeout=60)
    counts: dict[str, int] = {}
    current = None
    for line in trace.read_text().splitlines():
        if "/__mark_" in line:
            current = line.split("/__mark_", 1)[1].split('"', 1)[0]
            counts[current] = 0
        elif current is not None and ("fsync(" in line or "fdatasync(" in line):
            counts[current] += 1
    return counts


def test_durable_commits_fsync_deferred_ones_do_not(tmp_path: Path) -> None:
    counts = _fsyncs_between_marks(tmp_path)
    assert counts["durable"] == 1, counts  # the WAL, before COMMIT returns
    assert counts["deferred"] == 0, counts  # two commits, written but not synced
    assert counts["sync"] == 1, counts  # one fdatasync covers both
    assert counts["sync_again"] == 0, counts  # nothing new to make durable
    assert counts["back_to_durable"] == 1, counts


async def _put(db: Database, *, durable: bool) -> None:
    """A commit that changes a row (it writes WAL frames)."""
    async with db.write(durable=durable) as tx:
        await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="t", command="true", env={}, labels=[],
            concurrency="allow"), 1)


async def test_a_durable_transaction_that_changed_nothing_makes_nothing_durable(
        db: Database) -> None:
    """SQLite writes no frame, and so fsyncs nothing, for a commit without changes
    (a dispatcher pass that found no free slot): the deferred commits before it
    are still only in the page cache and must not be reported durable."""
    async with db.write(durable=True) as tx:
        await attempts.ensure_node_id(tx, ids.uuid7(), 1)  # the node row, once
    await _put(db, durable=False)
    deferred = db.commit_seq
    async with db.write(durable=True) as tx:
        await attempts.ensure_node_id(tx, ids.uuid7(), 1)  # INSERT OR IGNORE: no change
    assert db.durable_seq < deferred
    await _put(db, durable=True)  # one that does write: its fsync covers them all
    assert db.durable_seq == db.commit_seq


async def test_durable_seq_follows_commits_and_syncs(db: Database) -> None:
    base = db.commit_seq
    await _put(db, durable=False)
    assert (db.commit_seq, db.durable_seq) == (base + 1, base)
    waiter = asyncio.create_task(db.wait_durable(base + 1))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await _put(db, durable=True)  # a later durable commit covers the earlier one
    await asyncio.wait_for(waiter, 1)
    assert db.durable_seq == db.commit_seq == base + 2
    await _put(db, durable=False)
    await db.sync()
    assert db.durable_seq == db.commit_seq


def _receipt(receipts: ReceiptStore, attempt_id: str) -> Path:
    shard = receipts.ensure_shard(attempt_id)
    path = shard / f"{attempt_id}.json"
    path.write_text("{}")
    return path


async def test_reaper_waits_for_the_next_durable_commit(db: Database, conf: Settings) -> None:
    receipts = ReceiptStore(conf.receipts_path)
    reaper = Reaper(db, receipts, window_s=30.0)
    attempt_id = ids.uuid7()
    path = _receipt(receipts, attempt_id)
    await _put(db, durable=False)  # the consuming commit, deferred
    reaper.remove_after(db.commit_seq, [attempt_id], 0)
    await asyncio.sleep(0.1)
    assert path.exists() and reaper.holds(attempt_id)  # not durable yet: kept
    await _put(db, durable=True)  # e.g. the next attempt's spawn step 1
    for _ in range(100):
        if not path.exists():
            break
        await asyncio.sleep(0.01)
    assert not path.exists() and not reaper.holds(attempt_id)
    assert (reaper.removed, reaper.forced_syncs) == (1, 0)
    await reaper.stop()


async def test_reaper_pays_one_sync_when_nothing_else_commits(db: Database,
                                                              conf: Settings) -> None:
    receipts = ReceiptStore(conf.receipts_path)
    reaper = Reaper(db, receipts, window_s=0.2)
    a, b = ids.uuid7(), ids.uuid7()
    paths = [_receipt(receipts, a), _receipt(receipts, b)]
    await _put(db, durable=False)
    reaper.remove_after(db.commit_seq, [a], 0)
    await _put(db, durable=False)
    reaper.remove_after(db.commit_seq, [b], 0)
    syncs = db.syncs
    for _ in range(200):
        if not any(p.exists() for p in paths):
            break
        await asyncio.sleep(0.01)
    assert not any(p.exists() for p in paths)
    assert reaper.forced_syncs == 1 and db.syncs == syncs + 1  # one fsync for both
    assert db.durable_seq == db.commit_seq
    await reaper.stop()


async def test_reaper_stop_syncs_then_deletes(db: Database, conf: Settings) -> None:
    receipts = ReceiptStore(conf.receipts_path)
    reaper = Reaper(db, receipts, window_s=60.0)
    attempt_id = ids.uuid7()
    path = _receipt(receipts, attempt_id)
    await _put(db, durable=False)
    reaper.remove_after(db.commit_seq, [attempt_id], 0)
    await reaper.stop()
    assert not path.exists() and db.durable_seq == db.commit_seq


# -- a PostgreSQL server that crashes ------------------------------------------------------


@pytest.fixture
def crashing() -> Iterator[Cluster]:
    """A server of this test's own (it is crashed), whose WAL writer waits 10 s: a
    deferred commit is on disk only once a synchronous one flushes after it."""
    cluster = Cluster(pg_bindir(), free_port(), settings={"wal_writer_delay": "10s"})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_dsn(crashing: Cluster) -> str:
    """In this module `pgdb` (tests/_pg.py) opens its database on that server."""
    return crashing.dsn


async def _retrying(step: Callable[[], Awaitable[None]]) -> None:
    """`step()` until the writer has reconnected to the restarted server."""
    for _ in range(50):
        try:
            await step()
            return
        except errors.PgTransient:
            await asyncio.sleep(0.1)
    raise AssertionError("the writer never reconnected")


async def _task_count(db: pg.Database) -> int:
    async with db.read() as tx:
        row = await tx.one("SELECT count(*) FROM tasks")
    assert row is not None
    return int(row[0])


async def test_a_receipt_consumed_by_a_commit_a_server_crash_lost_is_kept(
        pgdb: pg.Database, crashing: Cluster, conf: Settings) -> None:
    db = pgdb
    receipts = ReceiptStore(conf.receipts_path)
    reaper = Reaper(db, receipts, window_s=60.0)  # nothing forces a flush on its own
    await _put(db, durable=True)
    durable = db.commit_seq
    before = ids.uuid7()
    kept = _receipt(receipts, before)
    await _put(db, durable=False)  # the consuming commit: acknowledged, not flushed
    reaper.remove_after(db.commit_seq, [before], 0)
    in_doubt = db.commit_seq
    assert await _task_count(db) == 2
    crashing.crash()
    crashing.start_again()
    # The server came back without the deferred commit; a flush now (drain's sync)
    # covers nothing it lost, so the receipt stays: the proof of that result.
    await _retrying(reaper.drain)
    assert await _task_count(db) == 1
    assert db.durable_seq >= in_doubt  # "durable" as far as a flush can say
    assert db.proven(durable) and not db.proven(in_doubt)
    assert kept.exists() and not reaper.holds(before) and reaper.removed == 0
    # Commits on the restarted server are proven by a flush as before.
    after = ids.uuid7()
    gone = _receipt(receipts, after)
    await _put(db, durable=False)
    reaper.remove_after(db.commit_seq, [after], 0)
    await reaper.stop()
    assert db.proven(db.commit_seq) and not gone.exists() and kept.exists()
    assert reaper.removed == 1
