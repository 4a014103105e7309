"""Per-task run policies: retries (transitions.retry_or_end, db/policies.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec

from qledge import transitions
from qledge.db import attempts as db_attempts
from qledge.db import events as db_events
from qledge.db import runs as db_runs
from qledge.db import tasks as db_tasks
from qledge.db.sqlite import Tx
from qledge.model import (
    Attempt,
    AttemptStatus,
    CancelReason,
    Run,
    RunStatus,
    Trigger,
)
from qledge.operations import create_task, trigger
from qledge.runtime.lifecycle import Runtime
from qledge.tasks.writable import task_fields
from qledge.transitions import RetryPolicy, retry_delay_ms, retry_or_end

replace = msgspec.structs.replace


def _run(**kw: Any) -> Run:
    base = dict(id="r1", task_id="t1", trigger=Trigger.MANUAL, status=RunStatus.RUNNING,
                version=3, event_seq=4, cancel_reason=None, cancel_requested_at_ms=None,
                created_at_ms=1, started_at_ms=2, finished_at_ms=None, exit_code=None,
                reason_code=None)
    return Run(**{**base, **kw})


def _attempt(no: int = 1, **kw: Any) -> Attempt:
    base = dict(id=f"a{no}", run_id="r1", attempt_no=no, executor_type="local_process",
                runtime_owner="n", status=AttemptStatus.RUNNING, callback_token_hash=b"h",
                callback_sequence=1, log_path="x/a.log", pid=10,
                proc_start_time=5, boot_id="b", exit_code=None, reason_code=None,
                created_at_ms=2, started_at_ms=2, finished_at_ms=None,
                deadline_at_ms=1000)
    return Attempt(**{**base, **kw})


POLICY = RetryPolicy(retries=2, delay_s=10, on=frozenset({"failed", "lost"}))


def test_a_failed_attempt_with_attempts_left_queues_the_run_again() -> None:
    tr = transitions.complete(_run(), _attempt(1), exit_code=3, finished_at_ms=500)
    out = retry_or_end(tr, POLICY, now_ms=1000, rand=0.5)
    assert out.run.status is RunStatus.QUEUED and out.run.version == tr.run.version
    assert out.run.not_before_ms == 1000 + 11_000  # 10 s + half of the 20 % jitter
    assert (out.run.exit_code, out.run.reason_code, out.run.finished_at_ms) == (None, None, None)
    assert out.attempt is not None and out.attempt.status is AttemptStatus.FAILED
    kinds = [(e.type, e.data) for e in out.events]
    assert kinds[0][0] == "attempt.finished"
    assert kinds[1] == ("run.retry_scheduled", {
        "attempt_no": 1, "status": "failed", "reason_code": "EXITED", "delay_ms": 11_000,
        "not_before_ms": 12_000})
    assert "run.finished" not in [k for k, _ in kinds]


def test_the_last_attempt_ends_the_run() -> None:
    tr = transitions.complete(_run(), _attempt(3), exit_code=3, finished_at_ms=500)
    assert retry_or_end(tr, POLICY, now_ms=1000, rand=0.0) is tr


def test_success_cancel_and_unlisted_outcomes_never_retry() -> None:
    ok = transitions.complete(_run(), _attempt(1), exit_code=0, finished_at_ms=500)
    assert retry_or_end(ok, POLICY, 1000, 0.0) is ok
    user = _run(cancel_reason=CancelReason.USER, cancel_requested_at_ms=100)
    cancelled = transitions.complete(user, _attempt(1), exit_code=143, finished_at_ms=500)
    assert cancelled.run.status is RunStatus.CANCELLED
    everything = RetryPolicy(retries=5, delay_s=1,
                             on=frozenset({"failed", "lost", "timed_out", "cancelled"}))
    assert retry_or_end(cancelled, everything, 1000, 0.0) is cancelled
    # a lost attempt of a run a person cancelled stays final too
    lost = transitions.without_receipt(user, _attempt(1, status=AttemptStatus.PREPARING),
                                       transitions.Reason.SPAWN_FAILED, 600)
    assert lost.run.status is RunStatus.LOST
    assert retry_or_end(lost, everything, 1000, 0.0) is lost
    timeout = _run(cancel_reason=CancelReason.TIMEOUT, cancel_requested_at_ms=1000)
    timed_out = transitions.complete(timeout, _attempt(1), exit_code=143, finished_at_ms=1200)
    assert timed_out.run.status is RunStatus.TIMED_OUT
    assert retry_or_end(timed_out, POLICY, 1300, 0.0) is timed_out  # not in retry_on


def test_a_timed_out_attempt_retries_when_listed_and_the_deadline_intent_is_cleared() -> None:
    timeout = _run(cancel_reason=CancelReason.TIMEOUT, cancel_requested_at_ms=1000)
    tr = transitions.complete(timeout, _attempt(1), exit_code=143, finished_at_ms=1200)
    policy = replace(POLICY, on=frozenset({"timed_out"}))
    out = retry_or_end(tr, policy, 1300, 0.0)
    assert out.run.status is RunStatus.QUEUED
    assert (out.run.cancel_reason, out.run.cancel_requested_at_ms) == (None, None)


def test_backoff_doubles_is_capped_and_jitter_only_adds() -> None:
    p = RetryPolicy(retries=10, delay_s=30, on=frozenset({"failed"}))
    assert [retry_delay_ms(p, n, 0.0) for n in (1, 2, 3)] == [30_000, 60_000, 120_000]
    assert retry_delay_ms(p, 10, 0.0) == 30_000 * 512
    assert retry_delay_ms(replace(p, delay_s=3600), 4, 0.0) == transitions.MAX_RETRY_DELAY_MS
    day = replace(p, delay_s=86400)  # a first delay above the cap is kept, not cut
    assert retry_delay_ms(day, 1, 0.0) == retry_delay_ms(day, 5, 0.0) == 86_400_000
    assert retry_delay_ms(p, 2, 0.999) == 60_000 + int(60_000 * 0.2 * 0.999)


def test_a_retry_attempt_does_not_start_the_run_twice() -> None:
    queued = _run(status=RunStatus.QUEUED, started_at_ms=2)
    att = _attempt(2, status=AttemptStatus.PREPARING, started_at_ms=None)
    tr = transitions.attempt_started(queued, att, pid=9, start_time=1, boot_id="b", now_ms=50)
    assert [e.type for e in tr.events] == ["attempt.started"]
    first = transitions.attempt_started(_run(status=RunStatus.QUEUED, started_at_ms=None),
                                        _attempt(1, status=AttemptStatus.PREPARING),
                                        pid=9, start_time=1, boot_id="b", now_ms=50)
    assert [e.type for e in first.events] == ["attempt.started", "run.started"]


# -- with the real launcher ---------------------------------------------------------------




def fails_until(counter: Path, succeeds_at: int, then: str = "") -> str:
    """A command that fails until its `succeeds_at`-th run (counted in a file)."""
    return (f'n=$(cat "{counter}" 2>/dev/null || echo 0); n=$((n+1)); echo "$n" > "{counter}";'
            f' echo "attempt $n"; {then} [ "$n" -ge {succeeds_at} ]')


async def terminal(rt: Runtime, run_id: str, timeout: float = 30.0) -> Run:
    for _ in range(int(timeout / 0.05)):
        async with rt.db.read() as tx:
            run = await db_runs.get_run(tx, run_id)
        if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} not terminal")


async def test_fails_twice_then_succeeds_with_three_attempts_and_one_end(
        rt: Runtime, tmp_path: Path) -> None:
    ends: list[str] = []

    async def listener(tx: Tx, old: Run, new: Run, now: int) -> None:
        ends.append(new.status.value)

    rt.db.on_terminal(listener)
    task = await create_task(rt, task_fields({
        "name": "flaky", "command": fails_until(rt.settings.work_path / "n", 3), "env": {},
        "labels": [], "retries": 3, "retry_delay_s": 1, "retry_on": ["failed"]}))
    run = await trigger(rt, task.id, Trigger.API)
    done = await terminal(rt, run.id)
    async with rt.db.read() as tx:
        attempts = await db_attempts.attempts_of_run(tx, run.id)
        events = await db_events.list_events(tx, run.id)
    assert done.status is RunStatus.SUCCEEDED and done.exit_code == 0
    assert [(a.attempt_no, a.status.value) for a in attempts] == [
        (1, "failed"), (2, "failed"), (3, "succeeded")]
    assert ends == ["succeeded"]
    kinds = [e.type for e in events]
    assert kinds.count("run.finished") == 1 and kinds[-1] == "run.finished"
    assert kinds.count("run.started") == 1 and kinds.count("attempt.finished") == 3
    retries = [e for e in events if e.type == "run.retry_scheduled"]
    assert [(e.data["attempt_no"], e.data["status"]) for e in retries] == [
        (1, "failed"), (2, "failed")]
    # backoff honoured: 1 s, then 2 s, from the end of the attempt before
    for before, after, base in ((attempts[0], attempts[1], 1000), (attempts[1], attempts[2], 2000)):
        assert before.finished_at_ms is not None
        assert after.created_at_ms >= before.finished_at_ms + base, (before, after)
    assert done.not_before_ms is not None  # the last wait stays on record


async def test_a_run_cancelled_during_its_backoff_wait_ends_cancelled(
        rt: Runtime, tmp_path: Path) -> None:
    task = await create_task(rt, task_fields({
        "name": "flaky", "command": "exit 1", "env": {}, "labels": [],
        "retries": 2, "retry_delay_s": 30}))
    run = await trigger(rt, task.id, Trigger.API)
    for _ in range(400):
        async with rt.db.read() as tx:
            current = await db_runs.get_run(tx, run.id)
        if current.not_before_ms is not None:
            break
        await asyncio.sleep(0.05)
    assert current.status is RunStatus.QUEUED
    await rt.cancellation.request(run.id, CancelReason.USER)
    done = await terminal(rt, run.id)
    async with rt.db.read() as tx:
        attempts = await db_attempts.attempts_of_run(tx, run.id)
    assert done.status is RunStatus.CANCELLED and len(attempts) == 1


async def test_retry_fields_are_stored(rt: Runtime) -> None:
    task = await create_task(rt, task_fields({
        "name": "x", "command": "true", "env": {}, "labels": [], "retries": 4,
        "retry_delay_s": 5, "retry_on": ["lost", "timed_out", "lost"]}))
    assert (task.retries, task.retry_delay_s, task.retry_on) == (4, 5, ["lost", "timed_out"])
    async with rt.db.read() as tx:
        assert await db_tasks.get_task(tx, task.id) == task
