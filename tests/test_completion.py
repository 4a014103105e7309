"""The one door: CompletionService + receipt consumer, with crash windows."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from qledge import failpoints, ids, transitions
from qledge.db import attempts, events, journal, runs, tasks
from qledge.db.sqlite import Database
from qledge.model import Attempt, CancelReason, Trigger
from qledge.receipts.codec import Receipt, encode, new_token, token_hash
from qledge.receipts.store import ReceiptStore
from qledge.runtime.completion import CompletionService, Outcome
from qledge.runtime.consumer import Consumed, Consumer
from qledge.runtime.reaper import Reaper
from qledge.settings import PROFILES, Settings
from qledge.tasks.writable import TaskFields

# The reconciler waits no publish grace for a receipt in these tests.
NO_GRACE = msgspec.structs.replace(PROFILES["edge"], publish_grace_ms=0)

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

NODE = "01a22c6f-dc91-7024-a839-591fbcd14500"


class World:
    def __init__(self, db: Database, receipts: ReceiptStore) -> None:
        self.db = db
        self.receipts = receipts
        self.completion = CompletionService(db, NODE)
        self.reaper = Reaper(db, receipts, window_s=60.0)
        self.consumer = Consumer(db, receipts, self.completion, self.reaper)

    async def attempt(self, *, owner: str = NODE, executor: str = "local_process",
                      deadline: int | None = None) -> tuple[Attempt, str]:
        token = new_token()
        async with self.db.write() as tx:
            task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
                name="t", command="true", env={}, labels=[]), 1)
            run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.MANUAL, 2)
            attempt_id = ids.uuid7()
            att = await attempts.prepare_attempt(
                tx, run, attempt_id=attempt_id, owner=owner, executor_type=executor,
                token_hash=token_hash(token), deadline_at_ms=deadline,
                log_path=f"{attempt_id[-2:]}/{attempt_id}.log",
                receipt_path=self.receipts.relative_path(attempt_id), now_ms=3)
            run = await runs.get_run(tx, run.id)
            tr = transitions.attempt_started(run, att, pid=1, start_time=1, boot_id="b",
                                             now_ms=4)
            await runs.apply(tx, run, tr, 4)
            att = await attempts.get_attempt(tx, attempt_id)
        return att, token

    def receipt(self, att: Attempt, token: str, /, **changes: object) -> Receipt:
        r = Receipt(schema_version=1, run_id=att.run_id, attempt_id=att.id, callback_sequence=1,
                    token=token, started_at_ms=10, finished_at_ms=20, exit_code=0)
        return msgspec.structs.replace(r, **changes)

    def publish(self, att: Attempt, data: bytes) -> None:
        shard = self.receipts.ensure_shard(att.id)
        (shard / f"{att.id}.json").write_bytes(data)

    async def state(self, att: Attempt) -> tuple[str, str, int | None, list[str]]:
        async with self.db.read() as tx:
            run = await runs.get_run(tx, att.run_id)
            a = await attempts.get_attempt(tx, att.id)
            evs = [e.type for e in await events.list_events(tx, att.run_id)]
        terminal = [e for e in evs if e in ("attempt.finished", "run.finished")]
        return run.status.value, a.status.value, a.exit_code, terminal

    async def journal_state(self, att: Attempt) -> str | None:
        async with self.db.read() as tx:
            rows = await journal.journal_page(tx, "", 1000)
        return next((r.state for r in rows if r.attempt_id == att.id), None)


@pytest.fixture
async def world(db: Database, conf: Settings) -> AsyncIterator[World]:
    failpoints.configure("")
    yield World(db, ReceiptStore(conf.receipts_path))
    failpoints.configure("")


async def test_applied_once_then_already_terminal(world: World) -> None:
    att, token = await world.attempt()
    result = await world.completion.complete(world.receipt(att, token, exit_code=5))
    assert (result.outcome, result.status) == (Outcome.APPLIED, "failed")
    again = await world.completion.complete(world.receipt(att, token, exit_code=5))
    assert again.outcome is Outcome.ALREADY_TERMINAL
    assert await world.state(att) == ("failed", "failed", 5, ["attempt.finished", "run.finished"])


@pytest.mark.parametrize("case", ["token", "sequence", "run", "owner", "executor", "unknown"])
async def test_rejections_change_nothing(world: World, case: str) -> None:
    kwargs: dict[str, object] = {}
    if case == "owner":
        kwargs["owner"] = ids.uuid7()
    if case == "executor":
        kwargs["executor"] = "docker"
    att, token = await world.attempt(**kwargs)  # type: ignore[arg-type]
    changes: dict[str, object] = {
        "token": {"token": new_token()}, "sequence": {"callback_sequence": 2},
        "run": {"run_id": ids.uuid7()}, "unknown": {"attempt_id": ids.uuid7()},
    }.get(case, {})
    before = await world.state(att)
    result = await world.completion.complete(world.receipt(att, token, **changes))
    assert result.outcome is Outcome.REJECTED and result.reason
    assert await world.state(att) == before == ("running", "running", None, [])


async def test_consumer_quarantines_deterministic_rejection(world: World) -> None:
    att, _ = await world.attempt()
    world.publish(att, encode(world.receipt(att, new_token())))  # wrong token
    assert await world.consumer.consume(att.id) is Consumed.QUARANTINED
    assert await world.state(att) == ("running", "running", None, [])
    assert await world.journal_state(att) == "quarantined"
    assert world.receipts.read(att.id) is None
    assert (world.receipts.root / ".quarantine" / att.id[-2:] / f"{att.id}.json").exists()


async def test_consumer_quarantines_malformed_bytes(world: World) -> None:
    att, token = await world.attempt()
    good = encode(world.receipt(att, token)).decode()
    world.publish(att, good.replace('"exitCode":0', '"exitCode":0,"exitCode":0').encode())
    assert await world.consumer.consume(att.id) is Consumed.QUARANTINED
    assert await world.state(att) == ("running", "running", None, [])


async def test_receipt_of_other_attempt_in_file_is_quarantined(world: World) -> None:
    att, _ = await world.attempt()
    other, other_token = await world.attempt()
    world.publish(att, encode(world.receipt(other, other_token)))
    assert await world.consumer.consume(att.id) is Consumed.QUARANTINED
    assert await world.state(other) == ("running", "running", None, [])


async def test_crash_after_commit_before_delete_replays_into_already_terminal(
        world: World) -> None:
    att, token = await world.attempt()
    world.publish(att, encode(world.receipt(att, token, exit_code=0)))
    failpoints.configure("consumer.after_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        await world.consumer.consume(att.id)
    assert world.receipts.read(att.id) is not None  # committed, not deleted
    failpoints.configure("")
    assert await world.consumer.consume(att.id) is Consumed.ALREADY_TERMINAL
    # The result rests on a deferred commit: the receipt waits for the next fsync.
    assert world.db.durable_seq < world.db.commit_seq
    assert world.receipts.read(att.id) is not None and world.reaper.holds(att.id)
    await world.reaper.drain()
    assert world.db.durable_seq == world.db.commit_seq
    assert world.receipts.read(att.id) is None
    assert await world.state(att) == ("succeeded", "succeeded", 0,
                                      ["attempt.finished", "run.finished"])


async def test_crash_before_commit_replays_once(world: World) -> None:
    att, token = await world.attempt()
    world.publish(att, encode(world.receipt(att, token, exit_code=9)))
    failpoints.configure("consumer.before_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        await world.consumer.consume(att.id)
    assert await world.state(att) == ("running", "running", None, [])
    failpoints.configure("")
    assert await world.consumer.consume(att.id) is Consumed.APPLIED
    await world.reaper.drain()
    assert await world.consumer.consume(att.id) is Consumed.MISSING
    assert await world.state(att) == ("failed", "failed", 9, ["attempt.finished", "run.finished"])


async def test_batch_consumes_each_in_its_own_savepoint(world: World) -> None:
    atts = [await world.attempt() for _ in range(5)]
    for n, (att, token) in enumerate(atts):
        world.publish(att, encode(world.receipt(att, token, exit_code=n)))
    results = await world.consumer.consume_many([a.id for a, _ in atts])
    assert set(results.values()) == {Consumed.APPLIED}
    for n, (att, _) in enumerate(atts):
        assert (await world.state(att))[2] == n


async def _cancel(world: World, att: Attempt, reason: CancelReason, at_ms: int) -> None:
    async with world.db.write() as tx:
        run = await runs.get_run(tx, att.run_id)
        tr = transitions.request_cancel(run, reason, at_ms)
        assert tr is not None
        await runs.apply(tx, run, tr, at_ms)


async def test_committed_user_intent_wins_over_a_later_receipt(world: World) -> None:
    att, token = await world.attempt()
    await _cancel(world, att, CancelReason.USER, 15)
    result = await world.completion.complete(world.receipt(att, token, exit_code=0,
                                                           finished_at_ms=20))
    assert result.status == "cancelled"
    assert await world.state(att) == ("cancelled", "cancelled", 0,
                                      ["attempt.finished", "run.finished"])


async def test_receipt_finished_before_the_intent_keeps_its_result(world: World) -> None:
    att, token = await world.attempt()
    await _cancel(world, att, CancelReason.USER, 50)
    result = await world.completion.complete(world.receipt(att, token, exit_code=0,
                                                           finished_at_ms=20))
    assert result.status == "succeeded"


async def test_timeout_intent_and_deadline(world: World) -> None:
    late, token = await world.attempt(deadline=15)
    await _cancel(world, late, CancelReason.TIMEOUT, 16)
    r = await world.completion.complete(world.receipt(late, token, finished_at_ms=20))
    assert r.status == "timed_out"
    early, token2 = await world.attempt(deadline=30)
    await _cancel(world, early, CancelReason.TIMEOUT, 31)
    r = await world.completion.complete(world.receipt(early, token2, finished_at_ms=20))
    assert r.status == "succeeded"


async def test_no_receipt_is_lost_unless_an_intent_decides(world: World) -> None:
    from qledge.model import Reason

    att, _ = await world.attempt()
    r = await world.completion.without_receipt(att.id, Reason.PROCESS_EXITED_WITHOUT_RECEIPT)
    assert r.status == "lost"
    killed, _ = await world.attempt(deadline=1)
    await _cancel(world, killed, CancelReason.TIMEOUT, 5)
    r = await world.completion.without_receipt(killed.id, Reason.PROCESS_EXITED_WITHOUT_RECEIPT)
    assert r.status == "timed_out"
    assert await world.state(killed) == ("timed_out", "timed_out", None,
                                         ["attempt.finished", "run.finished"])


# -- the journal: settled in the consuming commit (docs/storage.md) --------------------


async def _journal_row(world: World, att: Attempt) -> tuple[str, int | None] | None:
    async with world.db.read() as tx:
        row = await tx.one("SELECT receipt_state, receipt_settled_at_ms FROM run_attempts"
                           " WHERE id = ? AND receipt_state IS NOT NULL", (att.id,))
    return None if row is None else (str(row["receipt_state"]), row["receipt_settled_at_ms"])


async def test_consumption_settles_the_journal_row_in_the_same_commit(world: World) -> None:
    att, token = await world.attempt()
    world.publish(att, encode(world.receipt(att, token)))
    commits = world.db.commit_seq
    assert await world.consumer.consume(att.id) is Consumed.APPLIED
    assert world.db.commit_seq == commits + 1  # no extra transaction for the bookkeeping
    state, settled = await _journal_row(world, att)  # type: ignore[misc]
    assert state == "pending" and settled is not None
    # A settled row needs no file work: the paged journal pass no longer sees it.
    assert await world.journal_state(att) is None


async def test_startup_rechecks_settled_rows_whose_receipt_came_back(world: World) -> None:
    from qledge.runtime.reconciler import Reconciler

    att, token = await world.attempt()
    data = encode(world.receipt(att, token, exit_code=4))
    world.publish(att, data)
    assert await world.consumer.consume(att.id) is Consumed.APPLIED
    await world.reaper.drain()
    assert world.receipts.read(att.id) is None
    # A power cut forgot the unlink (or the worker died before its reaper ran).
    world.publish(att, data)
    reconciler = Reconciler(db=world.db, consumer=world.consumer, completion=world.completion,
                            node_id=NODE, boot_id="b", profile=NO_GRACE,
                            reattach=lambda a, fd: None, in_flight=lambda a: False)
    report = await reconciler.startup()
    assert report.counts.get("late_receipt_already_terminal") == 1
    await world.reaper.drain()
    assert world.receipts.read(att.id) is None
    assert await world.state(att) == ("failed", "failed", 4, ["attempt.finished", "run.finished"])


async def test_startup_looks_once_at_every_receipt_of_a_terminal_attempt(world: World) -> None:
    """One start-up pass covers settled rows (a consumed receipt back on disk) and the
    others of terminal attempts (a receipt that came after the attempt was decided
    without it), and skips what its own active pass has just consumed."""
    from qledge.model import Reason
    from qledge.runtime.reconciler import Reconciler

    settled, token = await world.attempt()
    data = encode(world.receipt(settled, token, exit_code=4))
    world.publish(settled, data)
    assert await world.consumer.consume(settled.id) is Consumed.APPLIED
    await world.reaper.drain()
    world.publish(settled, data)  # a power cut forgot the unlink
    late, late_token = await world.attempt()
    await world.completion.without_receipt(late.id, Reason.PROCESS_EXITED_WITHOUT_RECEIPT)
    world.publish(late, encode(world.receipt(late, late_token, exit_code=9)))
    active, active_token = await world.attempt()
    world.publish(active, encode(world.receipt(active, active_token, exit_code=0)))

    reconciler = Reconciler(db=world.db, consumer=world.consumer, completion=world.completion,
                            node_id=NODE, boot_id="b", profile=NO_GRACE,
                            reattach=lambda a, fd: None, in_flight=lambda a: False)
    report = await reconciler.startup()
    # The active attempt's receipt is consumed by the active pass only, not again.
    assert report.counts == {"receipt_applied": 1, "late_receipt_already_terminal": 2}
    await world.reaper.drain()
    for att in (settled, late, active):
        assert world.receipts.read(att.id) is None
    assert (await world.state(late))[:3] == ("lost", "lost", None)
    assert (await world.state(active))[:3] == ("succeeded", "succeeded", 0)


async def test_a_receipt_that_cannot_be_deleted_unsettles_its_row(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    att, token = await world.attempt()
    world.publish(att, encode(world.receipt(att, token)))
    assert await world.consumer.consume(att.id) is Consumed.APPLIED

    def refuse(attempt_id: str) -> bool:
        raise PermissionError(13, "refused by the test")

    monkeypatch.setattr(world.receipts, "remove", refuse)
    await world.reaper.drain()
    assert world.receipts.read(att.id) is not None
    assert await _journal_row(world, att) == ("pending", None)
    assert await world.journal_state(att) == "pending"  # back with the file checks
