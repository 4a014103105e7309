"""The Runtime: opens the store, recovers, then starts and stops every loop explicitly.

Start order: database (db/backend.py: the embedded SQLite, or PostgreSQL in fleet
mode) → node id → receipts volume → start-up reconciler
(before /readyz turns 200) → exit watcher, dispatcher, supervisor,
cancellation, scheduler. Stop order is the reverse, each within a bound;
running launchers are left alone (they don't depend on this process).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

from .. import __version__, ids
from ..clock import now_ms
from ..db import attempts, backend, envs, journal, runs
from ..db.interface import Tx
from ..launch import identity, isolation, logs
from ..launch.executor import LocalExecutor, SpawnResult
from ..launch.fileio import FilePool
from ..launch.unrecorded import Identities
from ..limits import SWEEP_BATCH, UNBOUNDED
from ..model import Run, Task
from ..node import Node, default_name, labels_of
from ..notifications import rules as notify
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
from .reaper import Reaper
from .reconciler import Reconciler, RoundReport
from .retention import DiskKeeper
from .scheduler import Scheduler
from .subscriptions import Syncer
from .supervisor import Supervisor
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
    def __init__(self, settings: Settings, *, boot_id: str | None = None,
                 start_id: str | None = None) -> None:
        """`boot_id` is for tests that simulate a reboot (the power-cut drills), `start_id`
        for tests that simulate an appliance restart (@boot): the product never passes
        them and always reads the kernel's / its supervisor's."""
        self.settings = settings
        self.profile = settings.profile_limits
        self.db = backend.database(settings)
        # This node as the fleet sees it; one value shared by every component (the
        # fleet's lease code sets its epoch). On SQLite a fleet of one, no epoch.
        name = settings.node_name or default_name()
        self.node = Node(name=name, labels=labels_of(name, settings.node_labels),
                         url=settings.node_url or node_url(settings.host, settings.port),
                         fleet=settings.fleet)
        # Fleet mode: the node's lease (runtime/fleet.py, from start()) and the
        # scheduler's (one node fires the ticks and sends notifications); on SQLite the
        # one node always leads and has no lease.
        self.fleet: Fleet | None = None
        # A `task … conc` parent finishes in the commit of its last child's result.
        self.db.on_terminal(conc.on_terminal)
        # Chains: downstream runs commit with their upstream run's end (runtime/chains.py).
        self.db.on_terminal(chains.listener(self.kick, self._sweep_cancels))
        self.node_id = ""
        self.incarnation = ids.uuid7()
        self.leader = Leader(self.db, self.node, settings, incarnation=self.incarnation)
        self.boot_id = boot_id if boot_id is not None else read_boot_id()
        self.start_id = start_id if start_id is not None else appliance_start_id(self.boot_id)
        self.started_at_ms = now_ms()
        self.ready = False
        self.startup_report: RoundReport | None = None
        # Enabled QingLong envs (same name joined with '&'); a task's own env wins.
        self.global_env = envs.global_env
        self._finishing: set[asyncio.Task[None]] = set()
        self.log_streams = 0
        # User-reachable file work (log reads and tails): its own bounded threads,
        # never the default executor the runtime's own file work needs.
        self.files = FilePool()
        # The key of the scripts' per-attempt notify credentials (create_app sets it
        # from the admin token; empty: no credential is handed out).
        self.notify_key = b""
        # Their terminal listeners are registered once, here: before start-up recovery,
        # so results recovered then count and notify too.
        self.metrics = Metrics(self.db)
        self.notifier = Notifier(
            self.db, logs_root=settings.logs_path, base_url=settings.notify_base_url,
            interval_s=settings.notify_interval_s,
            retry_base_s=settings.notify_retry_base_s,
            max_tries=settings.notify_max_tries, max_age_s=settings.notify_max_age_s,
            started_at_ms=self.started_at_ms, leader=self.leader)

    # -- start / stop ------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        work_dir = s.work_path
        # Tasks inherit the worker's cwd (posix_spawn has no chdir action).
        os.chdir(work_dir)
        await asyncio.to_thread(shipped_scripts.ship, s.scripts_path, work_dir)
        await self.db.open()
        if s.fleet:
            # A shared database cannot keep one node's identity: its state dir does.
            self.node_id = await asyncio.to_thread(backend.fleet_node_id, s.data_path)
        else:
            async with self.db.write() as tx:
                self.node_id = await attempts.ensure_node_id(tx, ids.uuid7(), now_ms())
        self.node.node_id = self.node_id
        if s.fleet:
            # Registered (and this node's epoch known) before recovery and before any
            # claim: every attempt prepared from here carries the epoch.
            self.fleet = Fleet(self.db, self.node, s, self.incarnation, __version__,
                               boot_id=self.boot_id, kill_grace_s=self.profile.kill_grace_s,
                               wake=self.kick)
            await self.fleet.register()
        # Fleet mode: this node's files only (receipts, logs): they are on its disk.
        owner = self.node_id if s.fleet else None
        self.isolation = isolation.decide(s)
        # The scheduler is built further down: the wake looks it up when a sync ends.
        self.subscriptions = Syncer(self.db, s.work_path, self.remove_logs,
                                    lambda: self.scheduler.wake())
        self.dependencies = Dependencies(self.db, self.settings, self.kick)
        self.receipts = ReceiptStore(s.receipts_path)
        # Launcher identities waiting for their result's commit (launch/unrecorded.py).
        self.identities = Identities()
        if self.fleet is not None:
            self.fleet.unrecorded = self._unrecorded
        self.completion = CompletionService(self.db, self.node_id, self.identities)
        self.reaper = Reaper(self.db, self.receipts, self.profile.group_commit_s)
        self.consumer = Consumer(self.db, self.receipts, self.completion, self.reaper)
        self.watcher = ExitWatcher(self._exited)
        self.executor = LocalExecutor(
            db=self.db, receipts=self.receipts, logs_root=s.logs_path, work_dir=work_dir,
            launcher=s.launcher or default_launcher(), node_id=self.node_id,
            boot_id=self.boot_id, global_env=self._env, isolation=self.isolation,
            scripts_dir=s.scripts_path, task_env=self._task_env,
            run_env=self._run_env, identity_grace_s=self.profile.identity_grace_s,
            identities=self.identities, on_cancelling=self._sweep_cancels,
            journal_cutoff=lambda now: self.supervisor.journal_cutoff(now), node=self.node)
        self.cancellation = Cancellation(
            db=self.db, node_id=self.node_id, incarnation=self.incarnation,
            boot_id=self.boot_id, kill_grace_s=self.profile.kill_grace_s,
            completion=self.completion, record_first=self.executor.before_sweep)
        self.reconciler = Reconciler(
            db=self.db, consumer=self.consumer, completion=self.completion,
            node_id=self.node_id, boot_id=self.boot_id,
            publish_grace_ms=self.profile.publish_grace_ms, reattach=self._reattach,
            in_flight=lambda a: (a in self.executor.in_flight or self.watcher.watching(a)
                                 or a in self.identities),
            journal_owner=owner)
        # Bounded disk: retention rounds, and no new attempt under disk pressure.
        self.disk = DiskKeeper(db=self.db, settings=s, profile=self.profile,
                               wake_dispatcher=self.kick, leader=self.leader, owner=owner)
        self.disk.on_pressure = self.notifier.pressure_changed
        self.dispatcher = Dispatcher(self.db, self.executor, self.node_id,
                                     self.profile.max_concurrent_attempts, self._spawned,
                                     may_spawn=self.disk.may_spawn, node=self.node)
        self.supervisor = Supervisor(
            db=self.db, consumer=self.consumer, reconciler=self.reconciler,
            receipts=self.receipts, node_id=self.node_id, profile=self.profile,
            on_expired=self.cancellation.expire_deadlines)
        self.supervisor.journal_owner = owner
        self.supervisor.watching = self.watcher.watching
        self.supervisor.boot_id = self.boot_id
        self.supervision = PeriodicLoop("supervisor", self.profile.round_interval_s,
                                        self._supervise)
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
        # Fleet mode: the leader queues its ticks' runs and every node may claim them
        # (NOTIFY); it does not start them itself, or it would run every scheduled run.
        self.scheduler = Scheduler(self.db, on_queued=self.kick,
                                   dispatcher=None if s.fleet else self.dispatcher,
                                   random_delay_s=s.random_delay_s,
                                   on_replaced=self._sweep_cancels, leader=self.leader)
        # @boot runs: recovery has finished; once per appliance start, not per worker.
        await self.scheduler.fire_boot(self.start_id, self.node.name)
        if self.fleet is not None:
            self.scheduler.tell_peers = self._tell_schedule_changed
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

    async def _env(self, tx: Tx) -> dict[str, str]:
        """The installed packages' PATH/NODE_PATH (docs/dependencies.md), then the
        enabled envs (a PATH among them wins)."""
        return {**self.dependencies.env, **await self.global_env(tx)}

    async def _task_env(self, tx: Tx, task: Task, run: Run) -> dict[str, str]:
        """One launch's own variables: a subscription pull's spec, a dependency job."""
        return {**await self.subscriptions.pull_env(tx, task),
                **await self.dependencies.job_env(tx, task, run)}

    def _run_env(self, attempt_id: str) -> dict[str, str]:
        """What a task's notify.py / sendNotify.js need: where to post, and a
        credential good only for notifying while this attempt runs. Not QLEDGE_*:
        a qledge started from a task must not read them as settings."""
        if not self.notify_key:
            return {}
        host = self.settings.host
        host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # noqa: S104
        if ":" in host:
            host = f"[{host}]"
        return {"QL_NOTIFY_URL": f"http://{host}:{self.settings.port}/notify",
                "QL_NOTIFY_TOKEN": notify.script_token(self.notify_key, attempt_id)}

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
