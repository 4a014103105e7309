"""A node's life in the fleet (PostgreSQL): its lease, fencing, and takeover of the dead.

docs/fleet.md, "Registration, lease, epoch" and "Fencing". `register()` runs at
start, after migrations and before recovery, and sets `node.epoch`. Then every
`node_heartbeat_s` one round:

1. heartbeat — a durable commit (it doubles as the node's `Database.sync()`); no row
   means another node took the lease over (or another machine registered the name):
   **fenced**. The node says so (log, `/readyz`), registers again (a new epoch) and
   deals with the launchers of its old epoch as `fenced_tasks` says: `stop` (TERM,
   then KILL after the kill grace; the epoch bump that fenced them is committed,
   which is what contract.md §7 asks before a signal) or `leave` (their receipts are
   refused COMPLETION_STALE_EPOCH and recorded). Every launcher of the old epoch is
   stopped, including one spawned within the identity grace just before the node lost
   the database: the takeover decided it `lost` with no pid, but this worker still
   holds its identity in memory, or finds it in /proc by its attempt id;
2. takeover of expired nodes — each in its own transaction, `SKIP LOCKED` on the row;
3. the stale attempts (an epoch below their owner's) decided `lost` with
   NODE_LEASE_EXPIRED, one transaction per page, retries by the task's policy. A page
   is found afresh each round, so a takeover interrupted mid-way is finished by the
   next round of any node.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from .. import transitions
from ..clock import now_ms
from ..db import errors, nodes, rows, runs
from ..db.interface import Database, Tx
from ..launch import identity
from ..model import Attempt, Reason
from ..node import Node
from ..settings import Settings, SettingsError
from .loop import PeriodicLoop, settle

log = logging.getLogger("qledge.fleet")

PAGE = 64
TAKEOVERS_PER_ROUND = 16


def check_settings(settings: Settings) -> None:
    """A lease must outlive a few missed heartbeats (a GC pause, a slow commit)."""
    if settings.node_heartbeat_s > settings.node_lease_s / 3:
        raise SettingsError(
            f"QLEDGE_NODE_HEARTBEAT_S ({settings.node_heartbeat_s:g}) must be at most a third"
            f" of QLEDGE_NODE_LEASE_S ({settings.node_lease_s:g}): a node would lose its"
            " lease after one or two missed heartbeats")


class Fleet:
    def __init__(self, db: Database, node: Node, settings: Settings, incarnation: str,
                 version: str, *, boot_id: str, kill_grace_s: float,
                 wake: Callable[[], None] | None = None,
                 unrecorded: Callable[[str], identity.Identity | None] = lambda a: None
                 ) -> None:
        """`wake`: called when runs may be claimable again (a retry queued by a takeover,
        this node registered again after a fence) — the dispatcher's kick. `unrecorded`:
        the identity a launcher of this worker has in memory only (spawned within the
        identity grace, launch/unrecorded.py), by attempt id."""
        check_settings(settings)
        self.db = db
        self.node = node
        self.incarnation = incarnation
        self.version = version
        self.boot_id = boot_id
        self.kill_grace_s = kill_grace_s
        self.fenced_tasks = settings.fenced_tasks
        self.lease_ms = int(settings.node_lease_s * 1000)
        self.wake = wake
        self.loop = PeriodicLoop("fleet", settings.node_heartbeat_s, self.round)
        self.skew_ms: int | None = None
        self.fencings = 0
        self.takeovers = 0
        self.decided_lost = 0
        self.signalled = 0
        # Monotonic time of the last heartbeat that kept the lease: the lease is lost
        # for this node once `node_lease_s` passed without one (the database may be
        # away, and another node may take it over any moment).
        self._held_since: float | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        self.unrecorded = unrecorded

    # -- lifecycle -----------------------------------------------------------------

    async def register(self) -> int:
        """Take this node's row (a new epoch unless a restart within the lease). At
        start: an own earlier epoch taken over meanwhile has its launchers handled."""
        got = await self._take_row()
        if got.taken_over_from is not None:
            log.warning("node %s: epoch %d was taken over while this node was away; its"
                        " attempts are lost (NODE_LEASE_EXPIRED)", self.node.name,
                        got.taken_over_from)
            self._fenced_launchers(got.taken_over_from, got.epoch)
        return got.epoch

    async def _take_row(self) -> nodes.Registered:
        async with self.db.write() as tx:
            got = await nodes.register(
                tx, name=self.node.name, node_id=self.node.node_id,
                incarnation=self.incarnation, labels=self.node.labels, url=self.node.url,
                version=self.version, lease_ms=self.lease_ms, local_ms=now_ms())
        self.node.epoch = got.epoch
        self.node.fenced = False
        self._held_since = time.monotonic()
        if got.displaced is not None:
            log.warning("node name %s was registered by another node id; it is fenced now"
                        " (two machines with one QLEDGE_NODE_NAME?)", self.node.name)
        log.info("node %s registered, epoch %d", self.node.name, got.epoch)
        return got

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        await settle(self._stopping, self.kill_grace_s + 5)

    # -- the round -------------------------------------------------------------------

    async def round(self) -> None:
        try:
            await self.heartbeat()
            await self.take_over_expired()
            await self.decide_stale()
        except errors.Transient as exc:
            # Nothing is decided without the database; the lease runs out on its own
            # (readiness follows `lease_held`). The next round tries again.
            log.warning("fleet round: database unavailable (%s)", type(exc).__name__)

    async def heartbeat(self) -> bool:
        """Extend the lease; False: fenced (and registered again, a new epoch)."""
        assert self.node.epoch is not None, "register() first"
        if self.node.fenced:  # an earlier re-register failed: try again
            await self._refence(self.node.epoch)
            return False
        async with self.db.write() as tx:
            skew = await nodes.heartbeat(tx, self.node.name, self.node.epoch, self.lease_ms,
                                         now_ms())
        if skew is not None:
            self.skew_ms = skew
            self._held_since = time.monotonic()
            return True
        old = self.node.epoch
        self.node.fenced = True  # no claim from here on (the dispatcher reads it)
        self.fencings += 1
        log.error("node %s fenced: epoch %d was taken over (lease expired or another node"
                  " took the name); registering again", self.node.name, old)
        await self._refence(old)
        return False

    async def _refence(self, old_epoch: int) -> None:
        """Register again after a fence; the launchers of every epoch from the one this
        node held up to the new one are handled once, here."""
        got = await self._take_row()
        self._fenced_launchers(old_epoch, got.epoch)
        if self.wake is not None:
            self.wake()

    async def take_over_expired(self) -> int:
        """Fence every node whose lease ran out (by the database's clock)."""
        async with self.db.read() as tx:
            expired = await nodes.expired_nodes(tx, self.node.name, TAKEOVERS_PER_ROUND)
        done = 0
        for name, epoch in expired:
            async with self.db.write() as tx:
                new = await nodes.takeover(tx, name, epoch)
            if new is not None:
                done += 1
                log.warning("node %s: lease expired, taken over (epoch %d -> %d); its"
                            " running attempts are lost", name, epoch, new)
        self.takeovers += done
        return done

    async def decide_stale(self) -> int:
        """Attempts of a fenced epoch → `lost` (NODE_LEASE_EXPIRED), a page per commit."""
        decided = 0
        while True:
            try:
                async with self.db.write() as tx:
                    page = await nodes.stale_attempts(tx, PAGE)
                    for attempt in page:
                        decided += await self._decide(tx, attempt)
            except errors.Transient:
                log.warning("deciding stale attempts: transient error, next round retries")
                break
            if len(page) < PAGE:
                break
        self.decided_lost += decided
        if decided and self.wake is not None:
            self.wake()  # retries may be queued
        return decided

    async def _decide(self, tx: Tx, attempt: Attempt) -> int:
        # The attempt row is locked (stale_attempts); the run may move under a cancel
        # request: that attempt alone is rolled back, the next round decides it.
        try:
            async with tx.savepoint():
                run = await runs.get_run(tx, attempt.run_id)
                tr = transitions.without_receipt(run, attempt, Reason.NODE_LEASE_EXPIRED,
                                                 now_ms())
                await runs.apply(tx, run, tr, now_ms())
        except rows.Conflict:
            return 0
        return 1

    # -- the launchers of a fenced epoch --------------------------------------------

    def _fenced_launchers(self, from_epoch: int, below_epoch: int) -> None:
        if self.fenced_tasks != "stop":
            log.warning("fenced_tasks=leave: launchers of epochs %d..%d run to their end;"
                        " their results will be recorded, not applied", from_epoch,
                        below_epoch - 1)
            return
        task = asyncio.create_task(self._stop_launchers(from_epoch, below_epoch),
                                   name="fleet:stop-fenced")
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stop_launchers(self, from_epoch: int, below_epoch: int) -> None:
        try:
            await self.stop_launchers(from_epoch, below_epoch)
        except errors.Transient:
            log.warning("fenced launchers: database unavailable, not all were stopped")

    async def stop_launchers(self, from_epoch: int, below_epoch: int) -> int:
        """TERM, then KILL after the kill grace, every launcher of those epochs still
        alive — each checked by pid + start time + boot id first (never a reused pid)."""
        sent = 0
        after = ""
        while True:
            async with self.db.read() as tx:
                page = await nodes.fenced_launchers(tx, self.node.node_id, from_epoch,
                                                    below_epoch, after, PAGE)
            idents = await self._identities(page)
            results = await asyncio.gather(*(self._stop_one(a.id, i) for a, i in idents))
            sent += sum(results)
            if len(page) < PAGE:
                break
            after = page[-1].id
        self.signalled += sent
        return sent

    async def _identities(self, page: list[Attempt]) -> list[tuple[Attempt, identity.Identity]]:
        """The launcher identity of each attempt of the page that has one: recorded; else
        held in this worker's memory (spawned within the identity grace, then decided
        `lost` by the takeover before it was written); else found in /proc by its run
        and attempt ids (one walk for the page) — a worker restarted since the spawn.
        An attempt with none never had a launcher on this boot, or it is gone."""
        out: list[tuple[Attempt, identity.Identity]] = []
        unknown: list[Attempt] = []
        for attempt in page:
            if attempt.pid is not None and attempt.proc_start_time is not None \
                    and attempt.boot_id:
                out.append((attempt, identity.Identity(
                    pid=attempt.pid, start_time=attempt.proc_start_time,
                    boot_id=attempt.boot_id)))
            elif (held := self.unrecorded(attempt.id)) is not None:
                out.append((attempt, held))
            else:
                unknown.append(attempt)
        if unknown:
            found = await asyncio.to_thread(
                identity.find_launchers, [(a.run_id, a.id) for a in unknown], self.boot_id)
            out.extend((a, found[a.id]) for a in unknown if a.id in found)
        return out

    async def _stop_one(self, attempt_id: str, ident: identity.Identity) -> bool:
        # The pidfd is opened before the identity is checked again: a pid reused since
        # it was read is never signalled.
        pidfd, _ = identity.open_pidfd(ident, self.boot_id)
        if pidfd is None:
            return False  # gone, or the pid names another process now
        try:
            # TERM to the launcher: it forwards it to the task's group and writes the
            # receipt (recorded as late). KILL: the whole group.
            if not identity.send_signal(pidfd, ident, self.boot_id, signal.SIGTERM):
                return False
            log.warning("attempt %s of a fenced epoch: TERM sent", attempt_id)
            if not await identity.wait_exit(pidfd, self.kill_grace_s):
                identity.send_signal(pidfd, ident, self.boot_id, signal.SIGKILL, group=True)
                log.warning("attempt %s of a fenced epoch: KILL sent", attempt_id)
            return True
        except ProcessLookupError:
            return False
        finally:
            os.close(pidfd)

    # -- views -----------------------------------------------------------------------

    @property
    def lease_held(self) -> bool:
        """This node's own view: a heartbeat kept the lease within `node_lease_s`."""
        if self._held_since is None:
            return False
        return time.monotonic() - self._held_since < self.lease_ms / 1000

    @property
    def ready(self) -> bool:
        """For /readyz: registered, not fenced, lease held."""
        return self.node.epoch is not None and not self.node.fenced and self.lease_held

    healthy = ready

    def report(self) -> dict[str, Any]:
        held = (None if self._held_since is None
                else round(time.monotonic() - self._held_since, 3))
        return {"name": self.node.name, "epoch": self.node.epoch, "fenced": self.node.fenced,
                "lease_held": self.lease_held, "since_heartbeat_s": held,
                "clock_skew_ms": self.skew_ms, "fencings": self.fencings,
                "takeovers": self.takeovers, "decided_lost": self.decided_lost,
                "fenced_signalled": self.signalled, "fenced_tasks": self.fenced_tasks}
