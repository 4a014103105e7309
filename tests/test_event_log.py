"""Events stored with their run (db/_event_log.py, migration 0020): the compact log reads
back what was appended, the history of runs from before the migration reads back
unchanged, and a kill at any write of the migration leaves the old or the new schema."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from qledge import ids
from qledge.db import _event_log, events, migrate, runs
from qledge.db.sqlite import Database
from qledge.model import Event, NewEvent, RunStatus
from qledge.transitions import Transition
from test_migrate import _legacy_db, _seed

from support import ROOT, unavailable


def test_the_log_reads_back_every_kind_of_event() -> None:
    a1, a2 = ids.uuid7(), ids.uuid7()
    appended = [
        [NewEvent(type="run.created", data={"trigger": "api"})],
        [NewEvent(type="attempt.created", attempt_id=a1)],
        [NewEvent(type="attempt.started", attempt_id=a1, data={"pid": 4_000_000}),
         NewEvent(type="run.started", attempt_id=a1)],
        [NewEvent(type="some.future_type", attempt_id="not-a-uuid",
                  data={"new_key": "free text", "status": "succeeded", "n": -5,
                        "big": 2**62, "none": None, "reason_code": "EXITED"})],
        [NewEvent(type="attempt.finished", attempt_id=a2,
                  data={"status": "failed", "exit_code": 3, "reason_code": "NOT_LISTED"})],
    ]
    created, log, expected = 1_700_000_000_000, b"", []
    for i, batch in enumerate(appended):
        at = created + i * 1000 - 7  # before created too: any integer
        log += _event_log.encode(batch, created, at, {a1: 1})
        expected += [Event(run_id="r", seq=len(expected) + 1 + j, type=e.type, at_ms=at,
                           attempt_id=e.attempt_id, data=e.data) for j, e in enumerate(batch)]
    assert _event_log.decode("r", log, len(expected), 1, created, {1: a1}) == expected
    # A listed attempt costs one byte; six typical events stay far below a page's cell.
    typical = _event_log.encode(
        [e for batch in appended[:3] for e in batch], created, created + 100_000, {a1: 1})
    assert len(typical) < 48
    with pytest.raises(_event_log.CorruptEventLog):
        _event_log.decode("r", log[:-3], len(expected), 1, created, {1: a1})
    with pytest.raises(_event_log.CorruptEventLog):  # attempt 1 unknown to the reader
        _event_log.decode("r", log, len(expected), 1, created, {})


def _legacy_events(db: Path) -> dict[str, list[Event]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    out: dict[str, list[Event]] = {}
    for r in conn.execute("SELECT * FROM run_events ORDER BY run_id, seq"):
        out.setdefault(r["run_id"], []).append(Event(
            run_id=r["run_id"], seq=r["seq"], type=r["type"], at_ms=r["at_ms"],
            attempt_id=r["attempt_id"],
            data=msgspec.json.decode(r["data_json"], type=dict[str, str | int | None])))
    conn.close()
    return out


async def _read_all(db: Path) -> dict[str, list[Event]]:
    database = Database(db)
    await database.open()
    try:
        async with database.read() as tx:
            run_ids = [r["id"] for r in await tx.all("SELECT id FROM runs ORDER BY id")]
            return {rid: await events.list_events(tx, rid) for rid in run_ids}
    finally:
        await database.close()


async def test_runs_from_before_keep_their_history_and_go_on_numbering(tmp_path: Path) -> None:
    db = _legacy_db(tmp_path, upto=19)
    _seed(db, runs=12)
    before = _legacy_events(db)
    # 0021 (attempt journal), 0022 and later too
    assert migrate.apply(db) == [m.version for m in migrate.bundled() if m.version >= 20]
    assert await _read_all(db) == before
    database = Database(db)
    await database.open()
    try:
        async with database.write() as tx:
            run = await runs.get_run(tx, "r00002")  # running, two events in run_events
            assert run.status is RunStatus.RUNNING and run.event_seq == 2
            new = msgspec.structs.replace(run, version=run.version + 1)
            await runs.apply(tx, run, Transition(run=new, attempt=None, events=[
                NewEvent(type="run.cancel_requested", data={"reason": "user"}),
                NewEvent(type="run.held", attempt_id="a00002")]), 500)
        async with database.read() as tx:
            got = await events.list_events(tx, "r00002")
            assert got[:2] == before["r00002"]
            assert [(e.seq, e.type, e.at_ms, e.attempt_id) for e in got[2:]] == [
                (3, "run.cancel_requested", 500, None), (4, "run.held", 500, "a00002")]
            assert await events.list_events(tx, "r00002", after_seq=1, limit=2) == got[1:3]
            assert await events.count_events(tx, "r00002", "ev2") == 1
            assert await events.count_events(tx, "r00002", "run.held") == 1
            assert await events.last_event_type(tx, "r00002") == "run.held"
            assert await events.last_event_type(tx, "r00003") == "ev2"  # untouched
            assert (await runs.get_run(tx, "r00002")).event_seq == 4
            assert await tx.one("SELECT COUNT(*) AS n FROM run_events WHERE run_id = ?",
                                ("r00002",)) is not None
    finally:
        await database.close()


_CHILD = "import sys; from pathlib import Path; from qledge.db import migrate;" \
         " migrate.apply(Path(sys.argv[1]))"


def _migrate_in_child(db: Path, kill_at: int = 0) -> int:
    """migrate.apply in a child under strace; returns the count of its pwrite64s to the
    database and its WAL, or SIGKILLs it instead of the `kill_at`-th."""
    strace = shutil.which("strace")
    if strace is None:
        unavailable("strace is not installed (scripts/bootstrap installs it)")
    trace = Path(f"{db}.strace")
    cmd = [strace, "-f", "-qq", "-o", str(trace), "-P", str(db), "-P", f"{db}-wal",
           "-e", "trace=pwrite64"]
    if kill_at:
        cmd += ["-e", f"inject=pwrite64:signal=SIGKILL:when={kill_at}"]
    done = subprocess.run([*cmd, sys.executable, "-c", _CHILD, str(db)],
                          env={"PYTHONPATH": str(ROOT / "app"), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    if kill_at:
        assert done.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), done.stderr
        return 0
    assert done.returncode == 0, done.stderr
    return sum(" pwrite64(" in line for line in trace.read_text().splitlines())


def _state(db: Path) -> tuple[bool, bool]:
    conn = sqlite3.connect(db)
    try:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
        applied = conn.execute("SELECT 1 FROM schema_migrations WHERE version = 20").fetchone()
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return {"event_log", "event_base"} <= cols, applied is not None
    finally:
        conn.close()


def _copy(db: Path, to: Path) -> Path:
    for suffix in ("", "-wal"):
        if Path(f"{db}{suffix}").exists():
            shutil.copyfile(f"{db}{suffix}", f"{to}{suffix}")
    return to


@pytest.mark.slow
async def test_a_kill_at_any_write_of_the_migration_leaves_old_or_new(tmp_path: Path) -> None:
    db = _legacy_db(tmp_path, upto=19)  # converted to 1 KiB pages: no VACUUM below
    _seed(db, runs=8)
    before = _legacy_events(db)
    writes = _migrate_in_child(_copy(db, tmp_path / "full.db"))
    assert writes >= 2
    assert _state(tmp_path / "full.db") == (True, True)
    seen = set()
    for k in range(1, writes + 1):
        copy = _copy(db, tmp_path / f"k{k}.db")
        _migrate_in_child(copy, kill_at=k)
        state = _state(copy)
        assert state in ((False, False), (True, True)), (k, state)  # never a mix
        seen.add(state)
        migrate.apply(copy)  # the next start finishes it
        assert _state(copy) == (True, True)
        assert await _read_all(copy) == before, k
    # a kill before the commit frame keeps the old schema; after it (the checkpoint at
    # close), the new one
    assert seen == {(False, False), (True, True)}, (writes, seen)

