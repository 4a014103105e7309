"""Fencing on the completion side (docs/contract.md §5, "Fencing"): a receipt from an
epoch a takeover ended is refused COMPLETION_STALE_EPOCH and recorded, never applied.

On a real PostgreSQL (tests/_pg.py) with the `nodes` row and the attempt's `node_epoch`
written by SQL here (registration and the claim are built elsewhere), and on SQLite,
where attempts carry no epoch and nothing changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest

from qledge import failpoints, ids, transitions
from qledge.db import attempts, epochs, events, journal, migrate_pg, pg, runs, tasks
from qledge.db.sqlite import Database
from qledge.http.runs import attempt_view
from qledge.launch.unrecorded import Unrecorded
from qledge.model import Attempt, Reason, Trigger
from qledge.receipts.codec import Receipt, encode, new_token, token_hash
from qledge.receipts.store import ReceiptStore
from qledge.runtime.completion import CompletionService, Outcome, Rejection
from qledge.runtime.consumer import Consumed, Consumer
from qledge.runtime.reaper import Reaper
from qledge.settings import Settings
from qledge.tasks.writable import TaskFields

NODE = "01a22c6f-dc91-7024-a839-591fbcd14500"
TERMINAL = ("attempt.finished", "run.finished")


class World:
    def __init__(self, db: Any, receipts: ReceiptStore) -> None:
        self.db = db
        self.receipts = receipts
        self.completion = CompletionService(db, NODE)
        self.consumer = Consumer(db, receipts, self.completion,
                                 Reaper(db, receipts, window_s=60.0))

    async def attempt(self, *, epoch: int | None, started: bool = True
                      ) -> tuple[Attempt, str]:
        """A running attempt of NODE (`started=False`: still `preparing`, its identity
        not written); `epoch`: the one it was claimed under (fleet)."""
        token = new_token()
        async with self.db.write() as tx:
            task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
                name="t", command="true", env={}, labels=[]), 1)
            run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.MANUAL, 2)
            run = await runs.apply(tx, run, transitions.attempt_prepared(run), 3)
            attempt_id = ids.uuid7()
            att = await attempts.prepare_attempt(
                tx, run, attempt_id=attempt_id, owner=NODE, executor_type="local_process",
                token_hash=token_hash(token), deadline_at_ms=None,
                log_path=f"{attempt_id[-2:]}/{attempt_id}.log",
                receipt_path=self.receipts.relative_path(attempt_id), now_ms=3)
            run = await runs.get_run(tx, run.id)
            if started:
                await runs.apply(tx, run, transitions.attempt_started(
                    run, att, pid=1, start_time=1, boot_id="b", now_ms=4), 4)
            if epoch is not None:
                await tx.execute("UPDATE run_attempts SET node_epoch = ? WHERE id = ?",
                                 (epoch, attempt_id))
            att = await attempts.get_attempt(tx, attempt_id)
        return att, token

    async def register(self, epoch: int) -> None:
        async with self.db.write() as tx:
            await tx.execute(
                "INSERT INTO nodes (name, node_id, incarnation, epoch, state, labels_json,"
                " url, version, heartbeat_at_ms, lease_expires_at_ms, registered_at_ms)"
                " VALUES ('garage-pi', ?, 'inc-1', ?, 'live', '[]', 'http://pi:5800', 'v',"
                " 1, 60001, 1)", (NODE, epoch))

    async def take_over(self, att: Attempt | None = None) -> None:
        """The control side: the epoch moves; then (when given) the attempt is `lost`."""
        async with self.db.write() as tx:
            await tx.execute("UPDATE nodes SET epoch = epoch + 1, state = 'expired'"
                             " WHERE node_id = ?", (NODE,))
        if att is not None:
            got = await self.completion.without_receipt(att.id, Reason.NODE_LEASE_EXPIRED)
            assert (got.outcome, got.status) == (Outcome.APPLIED, "lost")

    def receipt(self, att: Attempt, token: str, /, **changes: object) -> Receipt:
        r = Receipt(schema_version=1, run_id=att.run_id, attempt_id=att.id,
                    callback_sequence=1, token=token, started_at_ms=10, finished_at_ms=20,
                    exit_code=0)
        return msgspec.structs.replace(r, **changes)

    async def read(self, att: Attempt) -> tuple[Any, Attempt, list[Any]]:
        async with self.db.read() as tx:
            return (await runs.get_run(tx, att.run_id), await attempts.get_attempt(tx, att.id),
                    await events.list_events(tx, att.run_id))


@pytest.fixture
async def pgworld(pg_dsn: str, conf: Settings) -> AsyncIterator[World]:
    await migrate_pg.apply(pg_dsn)
    db = pg.Database(pg_dsn)
    await db.open()
    failpoints.configure("")
    try:
        yield World(db, ReceiptStore(conf.receipts_path))
    finally:
        await db.close()


@pytest.fixture
async def liteworld(db: Database, conf: Settings) -> World:
    failpoints.configure("")
    return World(db, ReceiptStore(conf.receipts_path))


def _late(evs: list[Any]) -> list[Any]:
    return [(e.type, e.data) for e in evs if e.type == "attempt.late_receipt"]


async def test_the_same_epoch_applies(pgworld: World) -> None:
    await pgworld.register(epoch=4)
    att, token = await pgworld.attempt(epoch=4)
    got = await pgworld.completion.complete(pgworld.receipt(att, token, exit_code=3))
    assert (got.outcome, got.status) == (Outcome.APPLIED, "failed")
    run, a, evs = await pgworld.read(att)
    assert (run.status.value, a.exit_code, a.late_exit_code, _late(evs)) == (
        "failed", 3, None, [])


async def test_a_moved_epoch_refuses_an_active_attempt_and_records_it(pgworld: World) -> None:
    await pgworld.register(epoch=1)
    att, token = await pgworld.attempt(epoch=1)
    await pgworld.take_over()  # committed; its pages have not decided the attempt yet
    got = await pgworld.completion.complete(pgworld.receipt(att, token, exit_code=7))
    assert (got.outcome, got.reason) == (Outcome.REJECTED, Rejection.STALE_EPOCH.value)
    run, a, evs = await pgworld.read(att)
    # Not applied: still running, no exit code, no terminal event — only the record.
    assert (run.status.value, a.status.value, a.exit_code) == ("running", "running", None)
    assert (a.late_exit_code, a.late_finished_at_ms) == (7, 20)
    assert [e.type for e in evs if e.type in TERMINAL] == []
    assert _late(evs) == [("attempt.late_receipt", {"exit_code": 7, "epoch": 1})]
    # The takeover's pages then decide it, once.
    got = await pgworld.completion.without_receipt(att.id, Reason.NODE_LEASE_EXPIRED)
    assert got.status == "lost"
    run, a, evs = await pgworld.read(att)
    assert (run.status.value, run.reason_code) == ("lost", "NODE_LEASE_EXPIRED")
    assert [e.type for e in evs if e.type in TERMINAL] == list(TERMINAL)


async def test_a_receipt_after_the_takeover_decided_is_late_not_already_terminal(
        pgworld: World) -> None:
    await pgworld.register(epoch=2)
    att, token = await pgworld.attempt(epoch=2)
    await pgworld.take_over(att)
    receipt = pgworld.receipt(att, token, exit_code=0, finished_at_ms=25)
    got = await pgworld.completion.complete(receipt)
    assert (got.outcome, got.reason) == (Outcome.REJECTED, Rejection.STALE_EPOCH.value)
    run, a, evs = await pgworld.read(att)
    assert (run.status.value, run.reason_code, run.exit_code) == ("lost", "NODE_LEASE_EXPIRED",
                                                                  None)
    assert (a.status.value, a.exit_code, a.late_exit_code, a.late_finished_at_ms) == (
        "lost", None, 0, 25)
    assert [e.type for e in evs].count("run.finished") == 1
    assert [e.type for e in evs].count("attempt.finished") == 1
    assert _late(evs) == [("attempt.late_receipt", {"exit_code": 0, "epoch": 2})]
    view = attempt_view(a)  # GET /api/v1/runs/{id}: the late receipt beside the decision
    assert (view["status"], view["exit_code"], view["late_exit_code"],
            view["late_finished_at_ms"]) == ("lost", None, 0, 25)
    # A second delivery (even one claiming other facts) records nothing new.
    again = await pgworld.completion.complete(msgspec.structs.replace(receipt, exit_code=9))
    assert again.reason == Rejection.STALE_EPOCH.value
    assert await pgworld.read(att) == (run, a, evs)


async def test_a_late_receipt_writes_the_identity_held_in_memory_in_its_commit(
        pgworld: World) -> None:
    """Spawned within the identity grace, decided `lost` by a takeover before the
    identity was written: the late receipt's commit writes the identity the worker
    still holds, whatever the grace timer does after (the fleet drill's frozen node)."""
    await pgworld.register(epoch=3)
    att, token = await pgworld.attempt(epoch=3, started=False)
    assert (att.status.value, att.pid) == ("preparing", None)
    await pgworld.take_over(att)  # the control side's decision: it has no identity
    _, a, _ = await pgworld.read(att)
    assert (a.status.value, a.pid) == ("lost", None)
    pgworld.completion.identities.add(Unrecorded(
        attempt_id=att.id, pid=4321, start_time=99, boot_id="boot-x", spawned_at_ms=3))
    got = await pgworld.completion.complete(pgworld.receipt(att, token, exit_code=143))
    assert got.reason == Rejection.STALE_EPOCH.value
    run, a, evs = await pgworld.read(att)
    assert (run.status.value, a.status.value, a.exit_code) == ("lost", "lost", None)
    assert (a.late_exit_code, a.pid, a.proc_start_time, a.boot_id) == (143, 4321, 99,
                                                                        "boot-x")
    assert att.id not in pgworld.completion.identities  # written: memory lets it go
    assert _late(evs) == [("attempt.late_receipt", {"exit_code": 143, "epoch": 3})]
    # Without a held identity the late receipt records its facts alone.
    other, token2 = await pgworld.attempt(epoch=4, started=False)
    await pgworld.take_over(other)
    await pgworld.completion.complete(pgworld.receipt(other, token2, exit_code=1))
    _, b, _ = await pgworld.read(other)
    assert (b.late_exit_code, b.pid) == (1, None)


async def test_an_owner_without_a_nodes_row_is_stale(pgworld: World) -> None:
    att, token = await pgworld.attempt(epoch=1)
    got = await pgworld.completion.complete(pgworld.receipt(att, token))
    assert got.reason == Rejection.STALE_EPOCH.value
    _, a, _ = await pgworld.read(att)
    assert (a.status.value, a.late_exit_code) == ("running", 0)


async def test_an_applied_receipt_replayed_after_a_takeover_is_already_terminal(
        pgworld: World) -> None:
    await pgworld.register(epoch=1)
    att, token = await pgworld.attempt(epoch=1)
    assert (await pgworld.completion.complete(pgworld.receipt(att, token))).outcome is (
        Outcome.APPLIED)
    await pgworld.take_over()
    got = await pgworld.completion.complete(pgworld.receipt(att, token))
    assert (got.outcome, got.status) == (Outcome.ALREADY_TERMINAL, "succeeded")
    _, a, evs = await pgworld.read(att)
    assert (a.late_exit_code, _late(evs)) == (None, [])


async def test_the_token_check_comes_before_the_epoch(pgworld: World) -> None:
    await pgworld.register(epoch=1)
    att, _ = await pgworld.attempt(epoch=1)
    await pgworld.take_over(att)
    got = await pgworld.completion.complete(pgworld.receipt(att, new_token()))
    assert got.reason == Rejection.BAD_TOKEN.value
    _, a, evs = await pgworld.read(att)
    assert (a.late_exit_code, _late(evs)) == (None, [])


async def test_the_epoch_read_holds_off_a_takeover_until_the_completion_commits(
        pgworld: World, pg_dsn: str) -> None:
    await pgworld.register(epoch=1)
    other = await asyncpg.connect(pg_dsn)
    try:
        await other.execute("SET lock_timeout = '200ms'")
        async with pgworld.db.write() as tx:
            assert await epochs.current_epoch(tx, NODE) == 1
            with pytest.raises(asyncpg.exceptions.LockNotAvailableError):
                await other.execute("UPDATE nodes SET epoch = epoch + 1 WHERE node_id = $1",
                                    NODE)
        await other.execute("UPDATE nodes SET epoch = epoch + 1 WHERE node_id = $1", NODE)
    finally:
        await other.close()
    async with pgworld.db.write() as tx:  # FOR SHARE: a write transaction's read
        assert await epochs.current_epoch(tx, NODE) == 2
        assert await epochs.current_epoch(tx, ids.uuid7()) is None


async def test_the_consumer_quarantines_a_stale_receipt_with_its_late_record(
        pgworld: World) -> None:
    await pgworld.register(epoch=3)
    att, token = await pgworld.attempt(epoch=3)
    await pgworld.take_over(att)
    shard = pgworld.receipts.ensure_shard(att.id)
    await asyncio.to_thread((shard / f"{att.id}.json").write_bytes,
                            encode(pgworld.receipt(att, token, exit_code=0)))
    assert await pgworld.consumer.consume(att.id) is Consumed.QUARANTINED
    run, a, evs = await pgworld.read(att)
    assert (run.status.value, a.status.value, a.late_exit_code, a.late_finished_at_ms) == (
        "lost", "lost", 0, 20)
    assert _late(evs) == [("attempt.late_receipt", {"exit_code": 0, "epoch": 3})]
    assert [e.type for e in evs].count("run.finished") == 1
    async with pgworld.db.read() as tx:
        rows = [r for r in await journal.journal_page(tx, "", 100) if r.attempt_id == att.id]
    assert [(r.state, r.reason_code) for r in rows] == [
        ("quarantined", Rejection.STALE_EPOCH.value)]
    assert pgworld.receipts.read(att.id) is None
    assert (pgworld.receipts.root / ".quarantine" / att.id[-2:] / f"{att.id}.json").exists()


async def test_a_stale_receipt_two_consumers_read_at_once_is_reported_once(
        pgworld: World, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 41: the exit watcher's fast path and a supervision round may both read a
    late receipt before either moves it; both are refused, both quarantine it. The
    second finds it moved: one move, one warning, one count."""
    await pgworld.register(epoch=3)
    att, token = await pgworld.attempt(epoch=3)
    await pgworld.take_over(att)
    shard = pgworld.receipts.ensure_shard(att.id)
    await asyncio.to_thread((shard / f"{att.id}.json").write_bytes,
                            encode(pgworld.receipt(att, token, exit_code=0)))
    caplog.set_level(logging.WARNING, logger="qledge.consumer")
    assert await pgworld.consumer.consume(att.id) is Consumed.QUARANTINED
    # The second consumer: refused like the first, its quarantine comes after the move.
    assert await pgworld.consumer.quarantine(att.id, Rejection.STALE_EPOCH.value) is (
        Consumed.QUARANTINED)
    said = [r for r in caplog.records if att.id in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert pgworld.consumer.quarantined == 1
    _, _, evs = await pgworld.read(att)
    assert _late(evs) == [("attempt.late_receipt", {"exit_code": 0, "epoch": 3})]


async def test_sqlite_attempts_carry_no_epoch_and_nothing_changes(liteworld: World) -> None:
    att, token = await liteworld.attempt(epoch=None)
    assert att.node_epoch is None
    got = await liteworld.completion.complete(liteworld.receipt(att, token, exit_code=0))
    assert (got.outcome, got.status) == (Outcome.APPLIED, "succeeded")
    # A receipt after a `lost` decision answers already_terminal, as before fleet mode.
    lost, token2 = await liteworld.attempt(epoch=None)
    await liteworld.completion.without_receipt(lost.id, Reason.PROCESS_EXITED_WITHOUT_RECEIPT)
    got = await liteworld.completion.complete(liteworld.receipt(lost, token2))
    assert (got.outcome, got.status) == (Outcome.ALREADY_TERMINAL, "lost")
    _, a, evs = await liteworld.read(lost)
    assert (a.late_exit_code, a.late_finished_at_ms, _late(evs)) == (None, None, [])
    assert (attempt_view(a)["late_exit_code"], attempt_view(a)["late_finished_at_ms"]) == (
        None, None)
