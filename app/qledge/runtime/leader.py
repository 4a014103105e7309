"""The fleet's singleton duties: which node fires schedule ticks (docs/fleet.md,
"The scheduler leader").

On the embedded SQLite the one node is always the leader: no lease, no loop, and
every duty runs exactly as before. On PostgreSQL a `fleet_leases` row named
'scheduler' is acquired or renewed every `leader_lease_s / 5` with a TTL of
`leader_lease_s`, on the database clock (db/fleet_leases.py). The holder fires the
ticks, sends the notifications and runs retention's database deletions; a node that
loses it stops them, and another takes over once the TTL ran out, with epoch + 1.

`is_leader` is this node's own view, and only a hint for what to try: it expires
on the node's monotonic clock from the moment a renewal was *sent* (never later than
the database's expiry), so a node that stopped renewing — its loop stuck, the
database gone — stops acting as leader by itself. What decides is the fencing check
inside each duty's transaction (`fleet_leases.holds_in` with `epoch`).

A `cluster-worker` node never takes the lease: it only runs what it claims.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .. import ids
from ..db import fleet_leases
from ..db.interface import Database, Tx
from ..node import Node
from ..settings import Settings
from .loop import PeriodicLoop

log = logging.getLogger("qledge.leader")

RENEWALS_PER_TTL = 5
WORKER_PROFILE = "cluster-worker"


class Leader:
    def __init__(self, db: Database, node: Node, settings: Settings, *,
                 incarnation: str | None = None, name: str = fleet_leases.SCHEDULER,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.node = node
        self.name = name
        # One incarnation per worker process: a restarted worker is a new holder and
        # waits for its predecessor's lease (that one may be frozen, not dead).
        self.incarnation = incarnation or ids.uuid7()
        self.ttl_s = settings.leader_lease_s
        self.eligible = str(settings.profile) != WORKER_PROFILE
        self.clock = clock
        self.acquired = 0  # times this node became the holder
        self.lost = 0  # times it stopped being it
        self._epoch: int | None = None
        self._valid_until = 0.0  # monotonic: the lease as this node may assume it
        self._listeners: list[Callable[[bool], None]] = []
        self.loop = PeriodicLoop(f"leader:{name}", self.ttl_s / RENEWALS_PER_TTL,
                                 self._round)

    # -- the view --------------------------------------------------------------------

    @property
    def fleet(self) -> bool:
        return self.node.fleet

    @property
    def is_leader(self) -> bool:
        if not self.node.fleet:
            return True  # SQLite: a fleet of one
        return self._epoch is not None and self.clock() < self._valid_until

    @property
    def epoch(self) -> int | None:
        """The lease's epoch while this node holds it (None otherwise, and on SQLite)."""
        return self._epoch if self.node.fleet and self.is_leader else None

    def on_change(self, fn: Callable[[bool], None]) -> None:
        """`fn(is_leader)` when this node gains or loses the lease (the scheduler wakes
        to fire what fell due while another node led, or nobody did)."""
        self._listeners.append(fn)

    async def holds_in(self, tx: Tx) -> bool:
        """The fencing check in a duty's transaction (always true on SQLite)."""
        if not self.node.fleet:
            return True
        epoch = self.epoch
        if epoch is None:
            return False
        return await fleet_leases.holds_in(tx, self.name, self.node.name, epoch)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if not self.node.fleet or not self.eligible:
            return  # SQLite: no lease; a cluster-worker never leads
        self.loop.start()
        self.loop.poke()  # try at once: a fleet with no leader waits for nobody

    async def stop(self) -> None:
        """Stop renewing and hand the lease over now (a clean stop; a crash hands it
        over after the TTL)."""
        if not self.loop.running:
            return
        await self.loop.stop()
        if self._epoch is None:
            return
        was = self.is_leader
        self._set(None, 0.0)
        try:
            async with self.db.write() as tx:
                await fleet_leases.release(tx, self.name, self.node.name, self.incarnation)
        except Exception:
            log.warning("could not release the %s lease; it expires by itself", self.name)
        if was:
            self._notify(False)

    # -- one renewal -------------------------------------------------------------------

    async def renew(self) -> bool:
        """Acquire or renew once; returns whether this node holds the lease now."""
        was = self.is_leader
        sent = self.clock()
        try:
            async with self.db.write() as tx:
                lease = await fleet_leases.acquire(tx, self.name, self.node.name,
                                                   self.incarnation, int(self.ttl_s * 1000))
        except Exception as exc:
            # The database is away: keep what is still valid locally, no longer.
            log.warning("%s lease: renewal failed (%s)", self.name, type(exc).__name__)
            if not self.is_leader and self._epoch is not None:
                self._set(None, 0.0)
            self._after(was)
            return self.is_leader
        if lease is None:
            self._set(None, 0.0)
        else:
            if lease.epoch != self._epoch:
                log.info("%s lease: this node leads now (epoch %d)", self.name, lease.epoch)
            # From the send, not the answer: the database's expiry is sent + TTL or later.
            self._set(lease.epoch, sent + self.ttl_s)
        self._after(was)
        return self.is_leader

    async def _round(self) -> float | None:
        await self.renew()
        return None

    def _set(self, epoch: int | None, valid_until: float) -> None:
        self._epoch = epoch
        self._valid_until = valid_until

    def _after(self, was: bool) -> None:
        now = self.is_leader
        if now == was:
            return
        if now:
            self.acquired += 1
        else:
            self.lost += 1
            log.warning("%s lease: this node no longer leads", self.name)
        self._notify(now)

    def _notify(self, leading: bool) -> None:
        for fn in self._listeners:
            try:
                fn(leading)
            except Exception:
                log.exception("%s lease listener failed", self.name)
