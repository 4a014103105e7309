"""Cron schedules → queued runs (trigger `schedule`).

Rules (docs/qinglong-compat.md explains them to operators):

* Times are computed in the container's time zone (TZ, else /etc/localtime)
  with its DST rules (cronsim's Debian-cron semantics: a time skipped by a
  spring-forward fires right after the gap, a repeated hour fires once for
  fixed-time jobs), 5 fields or QingLong's 6 with a leading seconds field.
* Per task the database keeps the last due time the scheduler consumed
  (`task_schedule_state.last_due_ms`). Consuming a tick — creating its run,
  or recording why it was skipped — and moving that cursor commit in ONE
  transaction, after re-reading the cursor inside it: a worker killed at any
  instant, or a second Scheduler on the same database, never fires a tick twice.
* A tick is due when it lies after max(cursor, the task's last change) and at
  or before now. Ticks before the task's last change (creation, edit, enable)
  never fire, so disabling and re-enabling a task does not replay the time it
  was off, and a disabled task never fires. An interval (`@every 6h`,
  interval.py) ticks on a grid anchored at the task's last change: the anchor is
  in the database, so a restart neither moves the grid nor fires a tick twice.
* No replay storm: however many ticks passed while no worker ran, a task fires
  at most once when the scheduler looks again — for the latest due tick —
  and its `run.scheduled` event carries `catch_up: 1`.
* The task's overlap policy (runtime/overlap.py) decides a tick that meets an
  active run: `skip` (and `queue` with a run already waiting) → no run; the
  tick is consumed and a `schedule.skipped` event (due time, reason) goes on
  the blocking run. `replace` cancels the active runs in the tick's commit.
  `allow` tasks never pile up more than one queued run per task the same way.
* No busy polling: the loop sleeps until the earliest next due time across
  enabled tasks, at most MAX_SLEEP_S, and `wake()` re-reads at once after a
  task changed.
* Fleet mode (PostgreSQL, runtime/leader.py): only the holder of the scheduler
  lease runs rounds. Each tick transaction first checks the lease in itself
  (`fleet_leases.holds_in`, FOR SHARE: a stale leader's transaction fires
  nothing), and the cursor re-read locks the task's cursor row
  (db/schedule.last_due), so even two nodes that both believe they lead fire a
  tick once — SQLite's single writer gave that for free. A node that gains the
  lease runs a round at once: what fell due meanwhile fires once (the catch-up
  rule above). `@boot` runs stay per node start (`fire_boot`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from .. import failpoints, taskform
from ..clock import now_ms
from ..cron import first_due_after_any, last_due_any
from ..db import errors, events, policies, rows, runs, schedule, tasks
from ..db.interface import Database, Tx
from ..launch.executor import Prepared
from ..model import NewEvent, Overlap, Task, Trigger
from . import overlap
from .dispatcher import Dispatcher
from .leader import Leader
from .loop import PeriodicLoop

log = logging.getLogger("qledge.scheduler")

MAX_SLEEP_S = 60.0
MAX_FIRES_PER_ROUND = 256
FIRES_PER_TX = 16
MAX_SKIP_EVENTS = 100  # schedule.skipped events recorded per blocking run
LATE_MS = 60_000  # a tick fired later than this counts as a catch-up
WAKE_SLACK_S = 0.005  # timers may fire a hair early: look just after the due time


class _NotLeader(Exception):
    """The lease check failed inside a tick transaction: roll it back."""


class Outcome:
    FIRED = "fired"
    SKIPPED = "skipped"
    NOT_DUE = "not_due"


def _key(task: Task) -> str:
    return "\n".join([task.tz or "", str(task.updated_at_ms), *task.schedules])


def _since(task: Task, last_due_ms: int | None) -> int:
    return max(last_due_ms if last_due_ms is not None else task.updated_at_ms,
               task.updated_at_ms)


def random_delay_ms(task: Task, max_s: int) -> int:
    """QingLong's RandomDelay for a scheduled run: up to max_s seconds, for the plain
    `task <path>` form only (not `now`, `desi`, `conc` or a plain command)."""
    if max_s <= 0 or not taskform.is_task_form(task.command):
        return 0
    try:
        form = taskform.parse(task.command)
    except taskform.TaskFormError:
        return 0  # refused at spawn, with its reason, without waiting first
    if not form.delayable:
        return 0
    return secrets.randbelow(max_s * 1000) + 1


class Scheduler:
    def __init__(self, db: Database, *, on_queued: Callable[[], None] = lambda: None,
                 clock: Callable[[], int] = now_ms, max_sleep_s: float = MAX_SLEEP_S,
                 stop_timeout_s: float = 5.0, dispatcher: Dispatcher | None = None,
                 random_delay_s: int = 0,
                 on_replaced: Callable[[], None] = lambda: None,
                 leader: Leader | None = None,
                 tell_peers: Callable[[], None] | None = None) -> None:
        self.db = db
        # Fleet mode: ticks only while this node holds the scheduler lease (None, or
        # SQLite's Leader: always, as before).
        self.leader = leader
        self.not_leader_rounds = 0  # rounds skipped, or tick transactions rolled back
        self.random_delay_s = random_delay_s
        self.on_queued = on_queued
        # Overlap `replace` committed cancel intents: have their drivers signal now.
        self.on_replaced = on_replaced
        self.replaced = 0
        # With a dispatcher, a tick whose run can start now also does spawn step 1
        # in the tick's own commit (dispatcher.admit_new).
        self.dispatcher = dispatcher
        self.clock = clock
        self.fired = 0
        self.skipped = 0
        self.rounds = 0
        # How late the most overdue tick of the last round fired (GET /metrics).
        self.lag_ms = 0
        self.next_due_ms: int | None = None
        # task id -> (schedules+zone, since, first due after since): cron arithmetic only
        # on change
        self._first_due: dict[str, tuple[str, int, int | None]] = {}
        # Fleet mode: tells the other nodes' schedulers that a schedule changed.
        self.tell_peers = tell_peers
        # Sleeps until the next due tick (at most max_sleep_s); wake() re-reads at once.
        self.loop = PeriodicLoop("scheduler", max_sleep_s, self._round_then_sleep,
                                 stop_timeout_s)
        if leader is not None:
            leader.on_change(self._leadership)

    # -- lifecycle -----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.loop.running

    def start(self) -> None:
        self.loop.start()
        self.loop.poke()  # the first round at once: ticks due while nobody ran

    def wake(self) -> None:
        """A task was created/changed/enabled: re-read schedules now — here, and in a
        fleet on every node (the leader fires; the change may have come to another)."""
        self.loop.poke()
        if self.tell_peers is not None:
            self.tell_peers()

    def poke(self) -> None:
        """Re-read schedules now, this node only (a peer said a task changed)."""
        self.loop.poke()

    async def stop(self) -> None:
        """Let a running round finish within the bound, then cancel it."""
        await self.loop.stop()

    def _leadership(self, leading: bool) -> None:
        if leading:  # fire what fell due while another node led, or none did
            self.loop.poke()

    def _leads(self) -> bool:
        return self.leader is None or self.leader.is_leader

    async def _round_then_sleep(self) -> float | None:
        next_ms = await self.round()
        if next_ms is None:
            return None
        return (next_ms - self.clock()) / 1000 + WAKE_SLACK_S

    # -- one round -----------------------------------------------------------------

    async def round(self) -> int | None:
        """Fire every due tick; returns the earliest next due time (ms) or None."""
        if not self._leads():
            # Another node fires the ticks; gaining the lease pokes this loop.
            self.not_leader_rounds += 1
            self.next_due_ms = None
            return None
        now = self.clock()
        async with self.db.read() as tx:
            scheduled = await schedule.scheduled_tasks(tx)
        due: list[str] = []
        lag = 0
        next_ms: int | None = None
        cache: dict[str, tuple[str, int, int | None]] = {}
        for task, last in scheduled:
            since = _since(task, last)
            key = _key(task)
            hit = self._first_due.get(task.id)
            if hit is not None and hit[0] == key and hit[1] == since:
                first = hit[2]
            else:
                first = first_due_after_any(task.schedules, since, task.tz,
                                            task.updated_at_ms)
            cache[task.id] = (key, since, first)
            if first is None:
                continue
            if first <= now:
                due.append(task.id)
                lag = max(lag, now - first)
            elif next_ms is None or first < next_ms:
                next_ms = first
        queued = 0
        batch = due[:MAX_FIRES_PER_ROUND]
        for start in range(0, len(batch), FIRES_PER_TX):
            # Several ticks per transaction (one fsync), each in its own savepoint.
            results: list[tuple[str, int | None]] = []
            prepared: list[Prepared] = []
            try:
                async with self.db.write() as tx:
                    await self._check_lease(tx)
                    await self._fire_batch(tx, batch[start:start + FIRES_PER_TX], now,
                                           results, prepared)
                    if results:  # drills: a leader killed at a tick
                        failpoints.hit("scheduler.before_commit")
                if results:
                    failpoints.hit("scheduler.after_commit")
            except _NotLeader:
                # Lost the lease (or it ran out) since the round began: nothing of
                # this transaction is written; the new leader fires these ticks.
                self.not_leader_rounds += 1
                log.warning("schedule: not the scheduler leader any more; ticks left to it")
                next_ms = None
                break
            if self.dispatcher is not None:
                for p in prepared:
                    self.dispatcher.launch_soon(p)
            for outcome, nxt in results:  # committed: count them
                if outcome == Outcome.FIRED:
                    queued += 1
                    self.fired += 1
                elif outcome == Outcome.SKIPPED:
                    self.skipped += 1
                if nxt is not None and (next_ms is None or nxt < next_ms):
                    next_ms = nxt
        self._first_due = cache  # tasks no longer scheduled drop out
        if len(due) > MAX_FIRES_PER_ROUND:
            next_ms = now  # more are due: another round right away
        self.rounds += 1
        self.lag_ms = lag
        self.next_due_ms = next_ms
        if queued:
            self.on_queued()
        if self.replaced:
            self.replaced = 0
            self.on_replaced()
        return next_ms

    async def _check_lease(self, tx: Tx) -> None:
        """Fleet mode: this transaction fires ticks only under the lease it checks."""
        if self.leader is not None and not await self.leader.holds_in(tx):
            raise _NotLeader

    async def _fire_batch(self, tx: Tx, task_ids: list[str], now: int,
                          results: list[tuple[str, int | None]],
                          prepared: list[Prepared]) -> None:
        for task_id in task_ids:
            mine: list[Prepared] = []  # kept only if its savepoint is released
            try:
                async with tx.savepoint():
                    results.append(await self.fire(tx, task_id, now, mine))
            except errors.Transient:
                raise  # the database's, not this task's: the round is retried
            except Exception:
                # This task only (a value the schedule code cannot take, say): the
                # other ticks of the batch and of the round still fire.
                log.exception("schedule: task %s not fired this round", task_id)
                continue
            prepared.extend(mine)

    async def fire_boot(self, start_id: str, node_name: str = "") -> int:
        """`@boot`: once per appliance start, after recovery (Runtime.start). `start_id`
        names the start (lifecycle.appliance_start_id); the runs and the claim commit
        together, so a kill before the commit leaves them to the respawned worker and
        one after it never repeats them. The overlap policy applies as for a tick."""
        now = self.clock()
        created = 0
        async with self.db.write() as tx:
            if not await policies.claim_boot(tx, start_id, node_name):
                return 0
            for task_id in await policies.boot_task_ids(tx):
                task = await tasks.get_task(tx, task_id)
                made = await overlap.create_run(tx, task, Trigger.SCHEDULE, now, first=[
                    NewEvent(type="run.scheduled", data={
                        "scheduled_for_ms": now, "late_ms": 0, "catch_up": 0,
                        "at_boot": 1})])
                decision = made.decision
                if decision.blocking is not None:
                    await events.append_events(tx, decision.blocking, [NewEvent(
                        type="schedule.skipped", data={"scheduled_for_ms": now,
                                                       "reason": decision.skip_reason,
                                                       "catch_up": 0})], now)
                    continue
                self.replaced += len(decision.replaced)
                created += 1
        if created:
            log.info("schedule: %d @boot run(s) for this start", created)
            self.on_queued()
        if self.replaced:
            self.replaced = 0
            self.on_replaced()
        return created

    async def fire(self, tx: Tx, task_id: str, now: int,
                   prepared: list[Prepared] | None = None) -> tuple[str, int | None]:
        """Decide and commit one task's due tick inside the caller's write transaction.

        Returns the outcome and the task's next due time after this tick; an attempt
        prepared for the new run is appended to `prepared` (launch after commit).
        """
        try:
            task = await tasks.get_task(tx, task_id)
        except rows.NotFound:
            return Outcome.NOT_DUE, None
        schedules = task.schedules
        if not task.enabled or not schedules:
            return Outcome.NOT_DUE, None
        # Re-read under the write lock (PostgreSQL: the cursor row's lock, across nodes).
        last = await schedule.lock_cursor(tx, task.id)
        anchor = task.updated_at_ms  # an interval's grid (cron ignores it)
        first = first_due_after_any(schedules, _since(task, last), task.tz, anchor)
        if first is None or first > now:
            return Outcome.NOT_DUE, first
        due = last_due_any(schedules, now, task.tz, anchor)
        if due is None or due < first:
            due = first
        nxt = first_due_after_any(schedules, due, task.tz, anchor)
        await schedule.record_due(tx, task.id, due, now)
        catch_up = int(due != first or now - due > LATE_MS)
        decision = None
        if task.overlap is Overlap.ALLOW:
            decision = overlap.Decision(skip_reason="queued_run",
                                        blocking=await runs.queued_run_of_task(tx, task.id))
        delay_ms = 0
        if decision is None or decision.blocking is None:
            delay_ms = random_delay_ms(task, self.random_delay_s)
        made = await overlap.create_run(tx, task, Trigger.SCHEDULE, now, decision=decision,
                                        not_before_ms=now + delay_ms if delay_ms else None)
        decision, run = made.decision, made.run
        blocking, reason = decision.blocking, decision.skip_reason
        if run is None:
            assert blocking is not None  # the policy's reason for skipping
            # Bounded: an every-second schedule beside a day-long run must not grow its
            # event list without limit (the tick is consumed either way).
            if await events.count_events(tx, blocking.id, "schedule.skipped") < MAX_SKIP_EVENTS:
                await events.append_events(tx, blocking, [NewEvent(
                    type="schedule.skipped",
                    data={"scheduled_for_ms": due, "reason": reason, "catch_up": catch_up})],
                    now)
            log.debug("schedule: task %d tick %d skipped (%s run %s)", task.num, due, reason,
                      blocking.id)
            return Outcome.SKIPPED, nxt
        if decision.replaced:
            self.replaced += len(decision.replaced)
        await events.append_events(tx, run, [NewEvent(
            type="run.scheduled",
            data={"scheduled_for_ms": due, "late_ms": now - due, "catch_up": catch_up})], now)
        if self.dispatcher is not None and prepared is not None and not delay_ms:
            ready = await self.dispatcher.admit_new(tx, run, task)
            if ready is not None:
                prepared.append(ready)
        if catch_up:
            log.info("schedule: task %d catch-up run %s for tick %d (%d ms late)", task.num,
                     run.id, due, now - due)
        else:
            log.debug("schedule: task %d run %s for tick %d", task.num, run.id, due)
        return Outcome.FIRED, nxt
