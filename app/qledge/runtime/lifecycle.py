"""The Runtime: opens the store, recovers, then starts and stops every loop explicitly.

Start order: database (db/backend.py: the embedded SQLite, or PostgreSQL in fleet
mode) → node id → every collaborator, complete when made (`_build`; none is changed
afterwards: tests/test_architecture.py) → fleet registration → start-up reconciler
(before /readyz turns 200) → cancellation, dispatcher, scheduler and the loops. Stop
order is the reverse, each within a bound; running launchers are left alone (they
don't depend on this process). docs/architecture.md, "Start-up and wiring".
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

from .. import __version__, ids
from ..clock import now_ms
from ..db import attempts, backend, journal, runs
from ..launch import identity, isolation, logs
from ..launch.executor import LocalExecutor, SpawnResult, executor_settings
from ..launch.fileio import FilePool
from ..launch.unrecorded import Identities
from ..limits import SWEEP_BATCH, UNBOUNDED
from ..node import Node, default_name, labels_of
from ..receipts.store import ReceiptStore
from ..scripts import ship as shipped_scripts
from ..settings import Settings, redact_dsn
from . import chains, conc
from .cancellation import CANCEL_CHANNEL, Cancellation
from .completion import CompletionService, Outcome
from .consumer import Consumed, Consumer
from .dependencies import Dependencies
from .dispatcher import Dispatcher
from .fleet import Fleet
from .leader import Leader
from .loop import PeriodicLoop, settle
from .metrics import Live, Metrics
from .notifier import NOTIFY_CHANNEL, Notifier
from .reaper import JournalRetention, Reaper
from .reconciler import Reconciler, RoundReport
from .retention import DiskKeeper
from .scheduler import Scheduler
from .subscriptions import Syncer
from .supervisor import Supervisor
from .taskenv import TaskEnvironment
from .watcher import ExitWatcher

log = logging.getLogger("qledge.runtime")
# Fleet mode: a task's schedule changed (LISTEN/NOTIFY; the leader re-reads).
SCHEDULE_CHANNEL = "qledge_schedule"


def appliance_start_id(boot_id: str) -> str:
    """This start of the appliance: the supervisor (our parent) on this boot, with its
    start time. supervisord respawning a killed worker keeps it, so `@boot` tasks do
    not run again; restarting the container (or the machine) changes it."""
    ppid = os.getppid()
    return f"{boot_id}:{ppid}:{identity.start_time(ppid) or 0}"


def read_boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


class Runtime:
    def __init__(self, settings: Settings, *, notify_key: bytes = b"",
                 boot_id: str | None = None, start_id: str | None = None) -> None:
        """`notify_key`: the key of the scripts' per-attempt notify credentials (create_app
        derives it from the admin token; empty: no credential is handed out).
        `boot_id` is for tests that simulate a reboot (the power-cut drills), `start_id`
        for tests that simulate an appliance restart (@boot): the product never passes
        them and always reads the kernel's / its supervisor's.

        Only what needs no database is made here; every collaborator is made, complete,
        in start() once this node's id is known (no attribute is set on one afterwards;
        tests/test_architecture.py checks)."""
        self.settings = settings
        self.profile = settings.profile_limits
        self.notify_key = notify_key
        self.db = backend.database(settings)
        # Fleet mode: the node's lease (runtime/fleet.py, from start()); on SQLite none.
        self.fleet: Fleet | None = None
        # A `task … conc` parent finishes in the commit of its last child's result.
        self.db.on_terminal(conc.on_terminal)
        # Chains: downstream runs commit with their upstream run's end (runtime/chains.py).
        self.db.on_terminal(chains.listener(self.kick, self._sweep_cancels))
        self.node_id = ""
        self.incarnation = ids.uuid7()
        self.boot_id = boot_id if boot_id is not None else read_boot_id()
        self.start_id = start_id if start_id is not None else appliance_start_id(self.boot_id)
        self.started_at_ms = now_ms()
        self.ready = False
        self.startup_report: RoundReport | None = None
        self._finishing: set[asyncio.Task[None]] = set()
        self.log_streams = 0
        # User-reachable file work (log reads and tails): its own bounded threads,
        # never the default executor the runtime's own file work needs.
        self.files = FilePool()

    # -- start / stop ------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        work_dir = s.work_path
        # Tasks inherit the worker's cwd (posix_spawn has no chdir action).
        os.chdir(work_dir)
        await asyncio.to_thread(shipped_scripts.ship, s.scripts_path, work_dir)
        await self.db.open()
        self.node_id = await self._node_id()
        self._build(s, work_dir)
        if self.fleet is not None:
            # Registered (and this node's epoch known) before recovery and before any
            # claim: every attempt prepared from here carries the epoch.
            await self.fleet.register()
        log.info("runtime starting node=%s incarnation=%s profile=%s name=%s database=%s",
                 self.node_id, self.incarnation, self.profile.name, self.node.name,
                 redact_dsn(s.database_url) if s.fleet else "embedded SQLite")
        self.startup_report = await self.reconciler.startup(
            page_size=max(self.profile.page_size, 64))
        log.info("start-up recovery: %s", self.startup_report.counts)
        # Deadlines that expired while no worker was running fire before anything else.
        await self.cancellation.expire_deadlines(UNBOUNDED)
        await self.cancellation.start()
        # Before any run starts: the system tasks' commands as this version hands
        # credentials to (an earlier version's would get none).
        await self.subscriptions.align_tasks()
        await self.dependencies.align_tasks()
        self.dispatcher.start()
        if self.fleet is not None:
            # A run queued on any node wakes every dispatcher (NOTIFY on commit).
            self.db.listen(runs.QUEUED_CHANNEL, self.kick)
            self.db.listen(CANCEL_CHANNEL, self._sweep_cancels)
            self.db.listen(NOTIFY_CHANNEL, self.notifier.loop.poke)
        # @boot runs: recovery has finished; once per appliance start, not per worker.
        await self.scheduler.fire_boot(self.start_id, self.node.name)
        if self.fleet is not None:
            self.db.listen(SCHEDULE_CHANNEL, self.scheduler.poke)
        self.leader.start()
        self.scheduler.start()
        self.supervision.start()
        if self.fleet is not None:
            self.fleet.start()
        self.disk.start()
        self.subscriptions.start()
        await self.dependencies.start()
        self.notifier.start()
        self.ready = True

    async def _node_id(self) -> str:
        if self.settings.fleet:
            # A shared database cannot keep one node's identity: its state dir does.
            return await asyncio.to_thread(backend.fleet_node_id, self.settings.data_path)
        async with self.db.write() as tx:
            return await attempts.ensure_node_id(tx, ids.uuid7(), now_ms())

    def _build(self, s: Settings, work_dir: Path) -> None:
        """Every collaborator, each complete when made: what it needs is made before it.

        Two signals reach objects made later, through this Runtime's own methods, because
        their producers and consumers genuinely need each other: `kick` (a run was
        queued: the dispatcher, which needs the executor, which needs the dependencies'
        env, which queue runs) and `_sweep_cancels` (the cancellation side, which has
        the executor record its pending identities before a sweep, while the executor
        asks for a sweep when a cancel landed during a spawn)."""
        # This node as the fleet sees it; one value shared by every component (the
        # fleet's lease code sets its epoch). On SQLite a fleet of one, no epoch.
        name = s.node_name or default_name()
        self.node = Node(name=name, labels=labels_of(name, s.node_labels),
                         url=s.node_url or node_url(s.host, s.port), node_id=self.node_id,
                         fleet=s.fleet)
        # The scheduler's lease (one node fires the ticks and sends notifications); on
        # SQLite the one node always leads.
        self.leader = Leader(self.db, self.node, s, incarnation=self.incarnation)
        # Their terminal listeners are registered here: before start-up recovery, so
        # results recovered then count and notify too.
        self.metrics = Metrics(self.db)
        self.notifier = Notifier(
            self.db, logs_root=s.logs_path, base_url=s.notify_base_url,
            interval_s=s.notify_interval_s, retry_base_s=s.notify_retry_base_s,
            max_tries=s.notify_max_tries, max_age_s=s.notify_max_age_s,
            started_at_ms=self.started_at_ms, leader=self.leader)
        # Fleet mode: this node's files only (receipts, logs): they are on its disk.
        owner = self.node_id if s.fleet else None
        self.isolation = isolation.decide(s)
        self.dependencies = Dependencies(self.db, s, self.kick)
        self.receipts = ReceiptStore(s.receipts_path)
        # Launcher identities waiting for their result's commit (launch/unrecorded.py).
        self.identities = Identities()
        if s.fleet:
            self.fleet = Fleet(self.db, self.node, s, self.incarnation, __version__,
                               boot_id=self.boot_id, kill_grace_s=self.profile.kill_grace_s,
                               wake=self.kick, unrecorded=self._unrecorded)
        self.completion = CompletionService(self.db, self.node_id, self.identities)
        self.reaper = Reaper(self.db, self.receipts, self.profile.group_commit_s)
        retention = JournalRetention(self.profile.journal_retention_s, self.reaper)
        self.consumer = Consumer(self.db, self.receipts, self.completion, self.reaper)
        self.watcher = ExitWatcher(self._exited)
        self.executor = LocalExecutor(
            executor_settings(s, self.profile, launcher=s.launcher or default_launcher(),
                              node_id=self.node_id, boot_id=self.boot_id),
            db=self.db, receipts=self.receipts, isolation=self.isolation,
            env=TaskEnvironment(dependencies=self.dependencies, work_dir=work_dir,
                                host=s.host, port=s.port, notify_key=self.notify_key),
            identities=self.identities, node=self.node, journal_cutoff=retention.cutoff,
            on_cancelling=self._sweep_cancels)
        self.cancellation = Cancellation(
            db=self.db, node_id=self.node_id, incarnation=self.incarnation,
            boot_id=self.boot_id, profile=self.profile, completion=self.completion,
            record_first=self.executor.before_sweep)
        self.reconciler = Reconciler(
            db=self.db, consumer=self.consumer, completion=self.completion,
            node_id=self.node_id, boot_id=self.boot_id,
            profile=self.profile, reattach=self._reattach,
            in_flight=self._in_flight, journal_owner=owner)
        # Bounded disk: retention rounds, and no new attempt under disk pressure.
        self.disk = DiskKeeper(db=self.db, settings=s, profile=self.profile,
                               wake_dispatcher=self.kick, leader=self.leader, owner=owner,
                               on_pressure=self.notifier.pressure_changed)
        self.dispatcher = Dispatcher(self.db, self.executor, self.node_id,
                                     self.profile.max_concurrent_attempts, self._spawned,
                                     may_spawn=self.disk.may_spawn, node=self.node)
        self.supervisor = Supervisor(
            db=self.db, consumer=self.consumer, reconciler=self.reconciler,
            receipts=self.receipts, node_id=self.node_id, boot_id=self.boot_id,
            profile=self.profile, retention=retention,
            on_expired=self.cancellation.expire_deadlines, watching=self.watcher.watching,
            journal_owner=owner)
        self.supervision = PeriodicLoop("supervisor", self.profile.round_interval_s,
                                        self._supervise)
        # Fleet mode: the leader queues its ticks' runs and every node may claim them
        # (NOTIFY); it does not start them itself, or it would run every scheduled run.
        # A schedule changed here is told to the other nodes (the leader may be another).
        self.scheduler = Scheduler(
            self.db, on_queued=self.kick, dispatcher=None if s.fleet else self.dispatcher,
            random_delay_s=s.random_delay_s, on_replaced=self._sweep_cancels,
            leader=self.leader, tell_peers=self._tell_schedule_changed if s.fleet else None)
        # A sync's changed schedules wake the scheduler.
        self.subscriptions = Syncer(self.db, work_dir, self.remove_logs, self.scheduler.wake)

    async def stop(self) -> None:
        self.ready = False
        if self.settings.shutdown_policy == "cancel":
            await self.cancellation.cancel_all_for_shutdown(
                self.settings.shutdown_drain_s, lambda a: a in self.executor.in_flight)
        await self.scheduler.stop()
        await self.subscriptions.stop()
        await self.dependencies.stop()
        await self.notifier.stop()
        await self.supervision.stop()
        await self.disk.stop()
        # Handed over at once rather than after the lease runs out.
        await self.leader.stop()
        if self.fleet is not None:
            await self.fleet.stop()
        await self.dispatcher.stop()
        await self.executor.stop()
        await self.cancellation.stop()
        await settle(self._finishing, 5.0)
        await self.reaper.stop()
        self.watcher.close()
        self.files.close()
        await self.db.close()

    # -- attempts ----------------------------------------------------------------

    def _spawned(self, result: SpawnResult) -> None:
        self.watcher.watch(result.attempt.id, result.pidfd)
        self.cancellation.track(result.attempt)
        if result.cancelling:
            # Cancelled while it was being spawned: signal it now, not at the next
            # supervision round.
            self._sweep_cancels()

    def _unrecorded(self, attempt_id: str) -> identity.Identity | None:
        held = self.identities.get(attempt_id)
        return None if held is None else identity.Identity(
            pid=held.pid, start_time=held.start_time, boot_id=held.boot_id)

    def _in_flight(self, attempt_id: str) -> bool:
        """Being spawned, watched, or with its identity in memory: not the reconciler's."""
        return (attempt_id in self.executor.in_flight or self.watcher.watching(attempt_id)
                or attempt_id in self.identities)

    def _reattach(self, attempt_id: str, pidfd: int) -> None:
        self.watcher.watch(attempt_id, pidfd)

    def _exited(self, attempt_id: str) -> None:
        task = asyncio.create_task(self._finish(attempt_id), name=f"finish:{attempt_id}")
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _finish(self, attempt_id: str) -> None:
        """The live fast path: the launcher exited; its receipt is already published."""
        try:
            got = await self.consumer.consume(attempt_id)
            delay = 0.1
            while got is Consumed.RETRY and delay < 5:
                await asyncio.sleep(delay)
                delay *= 3
                got = await self.consumer.consume(attempt_id)
            if got in (Consumed.MISSING, Consumed.QUARANTINED):
                await asyncio.sleep(self.profile.publish_grace_ms / 1000)
                got = await self.consumer.consume(attempt_id)
                if got in (Consumed.MISSING, Consumed.QUARANTINED):
                    from ..model import Reason

                    # The launcher is reaped and published nothing: none will come.
                    result = await self.completion.without_receipt(
                        attempt_id, Reason.PROCESS_EXITED_WITHOUT_RECEIPT,
                        settled=got is Consumed.MISSING)
                    if result.outcome is Outcome.APPLIED:
                        # (Not when the supervisor consumed the receipt meanwhile: after
                        # the database was away, the fast path's retries may outlast it.)
                        log.warning("attempt %s exited without a receipt: %s", attempt_id,
                                    result.status)
        except Exception:
            log.exception("completing attempt %s failed; the supervisor will retry", attempt_id)
        finally:
            self.cancellation.untrack(attempt_id)
            self.dispatcher.wake()

    async def _supervise(self) -> None:
        await self.supervisor.round()
        self.dispatcher.wake()

    def _sweep_cancels(self) -> None:
        """Cancel intents committed by a tick (overlap `replace`): drive them now, not at
        the next supervision round (which would find them too)."""
        task = asyncio.create_task(self.cancellation.sweep(SWEEP_BATCH), name="sweep-cancels")
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    def _tell_schedule_changed(self) -> None:
        """A schedule changed on this node (committed): the leader may be another."""
        task = asyncio.create_task(self._notify(SCHEDULE_CHANNEL), name="notify-schedule")
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _notify(self, channel: str) -> None:
        try:
            async with self.db.write(durable=False) as tx:
                await tx.notify(channel)
        except Exception:  # the peers' periodic rounds find it (at most a minute)
            log.warning("could not notify the other nodes on %s", channel)

    def live_metrics(self) -> Live:
        """The in-memory counters a scrape shows beside the database's gauges."""
        report = self.startup_report
        return Live(fleet=self.node.fleet, db_path=self.settings.db_path,
                    scheduler_lag_ms=self.scheduler.lag_ms,
                    disk_pressure=self.disk.disk.pressure, started_at_ms=self.started_at_ms,
                    receipts_consumed=self.consumer.consumed,
                    receipts_quarantined=self.consumer.quarantined,
                    notify_sent=self.notifier.sent, notify_send_failures=self.notifier.failures,
                    recovery=dict(report.counts) if report else {})

    def kick(self) -> None:
        """A run was queued: let the dispatcher look."""
        self.dispatcher.wake()

    # -- housekeeping ------------------------------------------------------------

    async def remove_logs(self, relative_paths: list[str]) -> None:
        """Delete log files after their rows are gone (task deletion), in a thread.

        Their `file_deletions` rows stay until a retention round sees them gone."""
        await asyncio.to_thread(self._remove_logs, relative_paths)

    def _remove_logs(self, relative_paths: list[str]) -> None:
        for rel in relative_paths:
            try:
                logs.remove(self.settings.logs_path, rel)
            except (OSError, logs.LogPathError) as exc:
                log.warning("could not remove a log file: %s", type(exc).__name__)

    async def report(self) -> dict[str, object]:
        async with self.db.read() as tx:
            backlog = await journal.journal_counts(tx)
        last = self.supervisor.last or self.startup_report
        return {
            "profile": self.profile.name,
            "node_id": self.node_id,
            "node": {"name": self.node.name, "labels": list(self.node.labels),
                     "url": self.node.url, "fleet": self.node.fleet,
                     "epoch": self.node.epoch, "fenced": self.node.fenced},
            "backend": "postgresql" if self.node.fleet else "sqlite",
            "fleet": None if self.fleet is None else self.fleet.report(),
            "scheduler_leader": self.leader.is_leader,
            "incarnation": self.incarnation,
            "uptime_s": (now_ms() - self.started_at_ms) // 1000,
            "ready": self.ready,
            "watched_attempts": len(self.watcher),
            "journal": backlog,
            "journal_backlog": backlog.get("active", 0),
            "startup_recovery": _report(self.startup_report),
            "last_round": _report(last),
            "rounds": self.supervision.rounds,
            "log_streams": self.log_streams,
            "file_reads": self.files.stats(),
            "task_isolation": self.isolation.report(),
            # Results committed without their own fsync (docs/storage.md): receipts
            # kept until one covers them, and the fsyncs paid when none came along.
            # Spawn step 4: identity commits of their own, identities still in memory.
            "identities": {"commits": self.executor.identity_commits,
                           "pending": len(self.identities)},
            "durability": {"commits": self.db.commit_seq, "durable": self.db.durable_seq,
                           "receipts_awaiting_fsync": self.reaper.waiting,
                           "receipts_reaped": self.reaper.removed,
                           "forced_syncs": self.reaper.forced_syncs},
            **await self.disk.report(),
        }


def _report(r: RoundReport | None) -> dict[str, object] | None:
    if r is None:
        return None
    return {"kind": r.kind, "started_at_ms": r.started_at_ms, "finished_at_ms": r.finished_at_ms,
            "examined": r.examined, "counts": dict(r.counts)}


def node_url(host: str, port: int) -> str:
    """Where the other nodes reach this one when node_url is not set: the host name
    when listening on every address, else the address listened on."""
    if host in ("0.0.0.0", "", "::"):  # noqa: S104
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def default_launcher() -> str:
    here = Path(__file__).resolve().parents[3]
    for candidate in ("/usr/local/bin/ql-launch",
                      str(here / "build" / "launcher" / os.uname().machine / "ql-launch")):
        if os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("ql-launch not found: set QLEDGE_LAUNCHER")
