"""Pure state transitions of runs and attempts.

Each function takes the current Structs and returns the next ones plus the
events to append, or raises `InvalidTransition`. The store applies a
transition with compare-and-set on `Run.version`, so two writers that start
from the same version can never both win.
"""

from __future__ import annotations

import msgspec

from .model import (
    ACTIVE_ATTEMPT,
    RETRYABLE,
    TERMINAL_RUN,
    Attempt,
    AttemptStatus,
    CancelReason,
    NewEvent,
    Reason,
    Run,
    RunStatus,
)

replace = msgspec.structs.replace


class InvalidTransition(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class Transition(msgspec.Struct, frozen=True, kw_only=True):
    run: Run
    attempt: Attempt | None
    events: list[NewEvent]


def _bump(run: Run, **changes: object) -> Run:
    return replace(run, version=run.version + 1, **changes)


def _require_active(run: Run) -> None:
    if run.status in TERMINAL_RUN:
        raise InvalidTransition("RUN_TERMINAL")


def attempt_prepared(run: Run) -> Transition:
    """Spawn step 1: the run is `running` from the commit that creates its attempt.

    From then on a launcher may exist before its identity is recorded, so nothing may
    read the run as "nothing started": a cancel commits its intent and the attempt's
    end decides (docs/recovery.md). `started_at_ms` and `run.started` stay with the
    launcher's identity (attempt_started); `attempt.created` is the event of this step.
    """
    _require_active(run)
    if run.status is not RunStatus.QUEUED:
        raise InvalidTransition("RUN_NOT_QUEUED")
    return Transition(run=_bump(run, status=RunStatus.RUNNING), attempt=None, events=[])


def attempt_started(
    run: Run, attempt: Attempt, *, pid: int, start_time: int, boot_id: str, now_ms: int
) -> Transition:
    """The launcher runs and its durable identity is known.

    The run is `running` since step 1; a `queued` one is an attempt prepared before
    that was so (a database from an earlier version), adopted at start-up."""
    _require_active(run)
    new_attempt = _identified(attempt, pid=pid, start_time=start_time, boot_id=boot_id,
                              now_ms=now_ms)
    new_run = _bump(run, status=RunStatus.RUNNING, started_at_ms=run.started_at_ms or now_ms)
    events = [NewEvent(type="attempt.started", attempt_id=attempt.id, data={"pid": pid})]
    if run.started_at_ms is None:
        # Once per run: a retry's attempt starts the attempt, not the run again.
        events.append(NewEvent(type="run.started", attempt_id=attempt.id))
    return Transition(run=new_run, attempt=new_attempt, events=events)


def orphan_started(
    run: Run, attempt: Attempt, *, pid: int, start_time: int, boot_id: str, now_ms: int
) -> Transition:
    """Adoption of a launcher whose run had already ended while its attempt was still
    `preparing` (a cancel that raced the spawn, before step 1 made the run `running`).

    The run's result is final and stays; the attempt records the identity so that the
    launcher is watched and stopped by the run's committed intent, never left running
    unrecorded — its receipt then settles the attempt (orphan ends, below)."""
    if run.status not in TERMINAL_RUN:
        raise InvalidTransition("RUN_ACTIVE")
    new_attempt = _identified(attempt, pid=pid, start_time=start_time, boot_id=boot_id,
                              now_ms=now_ms)
    events = [NewEvent(type="attempt.started", attempt_id=attempt.id, data={"pid": pid})]
    return Transition(run=_bump(run), attempt=new_attempt, events=events)


def started_by_receipt(run: Run, attempt: Attempt, *, started_at_ms: int) -> Transition:
    """A launcher whose identity was never recorded — its worker died within the
    identity grace, or between the spawn and step 4 — tells in its receipt when its
    command started: the attempt, and the run on its first start, take that time (never
    before step 1). No pid is known, so no `attempt.started` (it names one); `run.started`
    as for any first start."""
    at = max(started_at_ms, attempt.created_at_ms)
    new_attempt = replace(attempt, started_at_ms=at)
    if run.status in TERMINAL_RUN:
        return Transition(run=_bump(run), attempt=new_attempt, events=[])
    events = ([] if run.started_at_ms is not None
              else [NewEvent(type="run.started", attempt_id=attempt.id)])
    return Transition(run=_bump(run, started_at_ms=run.started_at_ms or at),
                      attempt=new_attempt, events=events)


def _identified(attempt: Attempt, *, pid: int, start_time: int, boot_id: str,
                now_ms: int) -> Attempt:
    if attempt.status is not AttemptStatus.PREPARING:
        raise InvalidTransition("ATTEMPT_NOT_PREPARING")
    return replace(
        attempt, status=AttemptStatus.RUNNING, pid=pid, proc_start_time=start_time,
        boot_id=boot_id, started_at_ms=now_ms,
    )


def request_cancel(run: Run, reason: CancelReason, now_ms: int) -> Transition | None:
    """Commit the cancel intent; None when one is already committed (idempotent)."""
    _require_active(run)
    if run.cancel_reason is not None:
        return None
    new_run = _bump(run, cancel_reason=reason, cancel_requested_at_ms=now_ms)
    event = NewEvent(type="run.cancel_requested", data={"reason": reason.value})
    return Transition(run=new_run, attempt=None, events=[event])


def cancel_queued(run: Run, now_ms: int) -> Transition:
    """A run that never spawned ends `cancelled` (or `timed_out`) without a process.

    Only for a run with no active attempt: the callers go through
    `db.runs.end_if_queued`, which checks that in their transaction."""
    _require_active(run)
    if run.status is not RunStatus.QUEUED:
        raise InvalidTransition("RUN_NOT_QUEUED")
    reason = run.cancel_reason or CancelReason.USER
    status = RunStatus.TIMED_OUT if reason is CancelReason.TIMEOUT else RunStatus.CANCELLED
    new_run = _bump(
        run, status=status, finished_at_ms=now_ms,
        reason_code=Reason.CANCELLED_BEFORE_START.value,
    )
    data: dict[str, str | int | None] = {
        "status": status.value, "reason_code": Reason.CANCELLED_BEFORE_START.value,
    }
    return Transition(run=new_run, attempt=None, events=[NewEvent(type="run.finished", data=data)])


def refuse_queued(run: Run, reason: Reason, now_ms: int) -> Transition:
    """A run that cannot be prepared ends `failed` without a process or an attempt
    (the dispatcher's isolation of one bad run: runtime/dispatcher.py). Only for a run
    with no active attempt: the caller goes through `db.runs.fail_if_queued`."""
    _require_active(run)
    if run.status is not RunStatus.QUEUED:
        raise InvalidTransition("RUN_NOT_QUEUED")
    new_run = _bump(run, status=RunStatus.FAILED, finished_at_ms=now_ms,
                    reason_code=reason.value)
    data: dict[str, str | int | None] = {
        "status": RunStatus.FAILED.value, "reason_code": reason.value,
    }
    return Transition(run=new_run, attempt=None, events=[NewEvent(type="run.finished", data=data)])


def _intent_wins(run: Run, attempt: Attempt, finished_at_ms: int | None) -> bool:
    """The convergence rule of docs/recovery.md.

    A committed cancel intent decides the result, unless the receipt proves
    the command had already finished before the intent could apply: before the
    deadline (timeout) or before the intent was committed (user/policy/shutdown).
    """
    if run.cancel_reason is None:
        return False
    if finished_at_ms is None:
        return True
    if run.cancel_reason is CancelReason.TIMEOUT:
        cutoff = attempt.deadline_at_ms
    else:
        cutoff = run.cancel_requested_at_ms
    return cutoff is None or finished_at_ms >= cutoff


def _cancelled_status(run: Run) -> AttemptStatus:
    if run.cancel_reason is CancelReason.TIMEOUT:
        return AttemptStatus.TIMED_OUT
    return AttemptStatus.CANCELLED


def _finish(
    run: Run, attempt: Attempt, status: AttemptStatus, *, exit_code: int | None,
    reason: str, finished_at_ms: int, leftover_processes: int = 0,
) -> Transition:
    """The attempt and its run end together (attempt event first); an orphan — an
    attempt still active under a run that already ended — ends alone: the run keeps
    its result and its one `run.finished`, only its version moves (for the CAS)."""
    if attempt.status not in ACTIVE_ATTEMPT:
        raise InvalidTransition("ATTEMPT_TERMINAL")
    # Times from the launcher's clock never precede what the DB already committed.
    floor = max(attempt.started_at_ms or 0, attempt.created_at_ms)
    finished = max(finished_at_ms, floor)
    new_attempt = replace(
        attempt, status=status, exit_code=exit_code, reason_code=reason, finished_at_ms=finished
    )
    data: dict[str, str | int | None] = {
        "status": status.value, "exit_code": exit_code, "reason_code": reason,
    }
    if leftover_processes:
        # How many processes the launcher had to end after the command (a count only).
        data["leftover_processes"] = leftover_processes
    attempt_event = NewEvent(type="attempt.finished", attempt_id=attempt.id, data=data)
    if run.status in TERMINAL_RUN:
        return Transition(run=_bump(run), attempt=new_attempt, events=[attempt_event])
    new_run = _bump(
        run, status=RunStatus(status.value), exit_code=exit_code, reason_code=reason,
        finished_at_ms=finished,
    )
    return Transition(
        run=new_run,
        attempt=new_attempt,
        events=[attempt_event, NewEvent(type="run.finished", attempt_id=attempt.id, data=data)],
    )


def complete(
    run: Run, attempt: Attempt, *, exit_code: int, finished_at_ms: int,
    log_bytes: int | None = None, leftover_processes: int = 0,
) -> Transition:
    """A receipt's facts: exit code decides unless a committed intent wins."""
    if log_bytes is not None:
        attempt = replace(attempt, log_bytes_at_exit=log_bytes)
    if _intent_wins(run, attempt, finished_at_ms):
        reason = (Reason.TIMEOUT if run.cancel_reason is CancelReason.TIMEOUT
                  else Reason.CANCEL_REQUESTED)
        return _finish(run, attempt, _cancelled_status(run), exit_code=exit_code,
                       reason=reason.value, finished_at_ms=finished_at_ms,
                       leftover_processes=leftover_processes)
    status = AttemptStatus.SUCCEEDED if exit_code == 0 else AttemptStatus.FAILED
    return _finish(run, attempt, status, exit_code=exit_code, reason=Reason.EXITED.value,
                   finished_at_ms=finished_at_ms, leftover_processes=leftover_processes)


def without_receipt(
    run: Run, attempt: Attempt, reason: Reason, now_ms: int,
    *, status: AttemptStatus = AttemptStatus.LOST, message: str | None = None,
) -> Transition:
    """No receipt will ever come: `lost`/`blocked` — or the committed intent's result.

    A process killed for a cancel/timeout has no receipt by design; the intent,
    not the missing evidence, decides (and the exit code stays unknown).
    `message`: a fixed text explaining the reason (never a user's words).
    """
    if run.cancel_reason is not None and attempt.status is AttemptStatus.RUNNING:
        code = (Reason.TIMEOUT if run.cancel_reason is CancelReason.TIMEOUT
                else Reason.CANCEL_REQUESTED)
        return _finish(run, attempt, _cancelled_status(run), exit_code=None,
                       reason=code.value, finished_at_ms=now_ms)
    if run.status in TERMINAL_RUN and attempt.status is AttemptStatus.PREPARING:
        # An orphan never confirmed (docs/recovery.md): whatever the caller saw, the
        # reason is that its run had ended first.
        reason, status = Reason.RECOVERY_RUN_ALREADY_ENDED, AttemptStatus.LOST
    tr = _finish(run, attempt, status, exit_code=None, reason=reason.value,
                 finished_at_ms=now_ms)
    if message is None:
        return tr
    events = [replace(e, data={**e.data, "message": message}) for e in tr.events]
    return replace(tr, events=events)


def fan_out(run: Run, children: int, now_ms: int) -> Transition:
    """A `task … conc` run starts its child runs (created in the same transaction)
    instead of a process of its own: it is `running` until they are all terminal."""
    _require_active(run)
    if run.status is not RunStatus.QUEUED:
        raise InvalidTransition("RUN_NOT_QUEUED")
    new_run = _bump(run, status=RunStatus.RUNNING, started_at_ms=now_ms)
    return Transition(run=new_run, attempt=None,
                      events=[NewEvent(type="run.started", data={"children": children})])


def children_done(run: Run, children: list[Run], now_ms: int) -> Transition:
    """The parent's result once every child is terminal: succeeded only if all did.

    All succeeded decides even against a committed cancel (the children's
    receipts prove the work was done); otherwise a cancel intent makes the parent
    cancelled/timed_out, else it failed with the first unsuccessful child's exit
    code (None when that child has none).
    """
    _require_active(run)
    if run.status is not RunStatus.RUNNING:
        raise InvalidTransition("RUN_NOT_RUNNING")
    if any(c.status not in TERMINAL_RUN for c in children):
        raise InvalidTransition("CHILDREN_ACTIVE")
    failed = [c for c in children if c.status is not RunStatus.SUCCEEDED]
    exit_code: int | None = 0
    if not failed:
        status = RunStatus.SUCCEEDED
    elif run.cancel_reason is not None:
        status = (RunStatus.TIMED_OUT if run.cancel_reason is CancelReason.TIMEOUT
                  else RunStatus.CANCELLED)
        exit_code = None
    else:
        status = RunStatus.FAILED
        exit_code = failed[0].exit_code
    reason = Reason.CONC_CHILDREN.value
    new_run = _bump(run, status=status, exit_code=exit_code, reason_code=reason,
                    finished_at_ms=max(now_ms, run.started_at_ms or 0))
    data: dict[str, str | int | None] = {
        "status": status.value, "exit_code": exit_code, "reason_code": reason,
        "children": len(children), "children_succeeded": len(children) - len(failed)}
    return Transition(run=new_run, attempt=None,
                      events=[NewEvent(type="run.finished", data=data)])


# -- retries (docs/tasks.md) -----------------------------------------------------------

MAX_RETRY_DELAY_MS = 6 * 3600 * 1000  # the doubling stops here (or at retry_delay_s)
RETRY_JITTER = 0.2  # up to +20 % of the delay, so retries of many runs spread out


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    retries: int = 0
    delay_s: int = 10
    on: frozenset[str] = frozenset()


def retry_delay_ms(policy: RetryPolicy, attempt_no: int, rand: float) -> int:
    """The wait after attempt `attempt_no` failed: delay x 2^(n-1), capped, plus jitter
    (`rand` in [0, 1)); never shorter than the doubled delay, so the backoff holds."""
    first = policy.delay_s * 1000
    base: int = min(first << min(attempt_no - 1, 30), max(first, MAX_RETRY_DELAY_MS))
    return base + int(base * RETRY_JITTER * rand)


def _retryable(run: Run, attempt: Attempt, policy: RetryPolicy) -> bool:
    if attempt.attempt_no > policy.retries or run.status.value not in policy.on & RETRYABLE:
        return False
    # A person's (or the shutdown's, or a policy's) cancel is final; only the
    # attempt's own deadline may be retried.
    return run.cancel_reason is None or (
        run.cancel_reason is CancelReason.TIMEOUT and run.status is RunStatus.TIMED_OUT)


def retry_or_end(tr: Transition, policy: RetryPolicy, now_ms: int, rand: float) -> Transition:
    """An attempt's end that would end its run: back to `queued` with a persisted
    not-before time instead, when the policy has an attempt left for this outcome.

    The run is then not terminal, so nothing that waits for its end (terminal
    listeners, `run.finished`) sees this attempt's result; the attempt itself ends
    as it did (`attempt.finished`), and `run.retry_scheduled` says why and when.
    """
    run, attempt = tr.run, tr.attempt
    if attempt is None or run.status not in TERMINAL_RUN or not _retryable(run, attempt, policy):
        return tr
    delay = retry_delay_ms(policy, attempt.attempt_no, rand)
    queued = replace(
        run, status=RunStatus.QUEUED, finished_at_ms=None, exit_code=None, reason_code=None,
        cancel_reason=None, cancel_requested_at_ms=None, not_before_ms=now_ms + delay)
    data: dict[str, str | int | None] = {
        "attempt_no": attempt.attempt_no, "status": run.status.value,
        "reason_code": run.reason_code, "delay_ms": delay, "not_before_ms": now_ms + delay,
    }
    events = [e for e in tr.events if e.type != "run.finished"]
    events.append(NewEvent(type="run.retry_scheduled", attempt_id=attempt.id, data=data))
    return Transition(run=queued, attempt=attempt, events=events)
