"""The disk watch and the retention rounds' loop, wired as the Runtime starts and stops
them; the System page's report of both."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ...clock import now_ms
from ...db import retention_queries as q
from ...db.interface import Database
from ...settings import Profile, Settings
from ..diskwatch import DiskWatch
from ..leader import Leader
from ..loop import PeriodicLoop
from .policy import DISK_CRITICAL, DISK_PRESSURE, SIZE_CAP
from .rounds import Retention

PRESSURE_INTERVAL_S = 5.0  # retention rounds while under disk pressure
# A round that stopped at its caps with work left is followed by another this soon,
# not after the interval: each round stays bounded, the rate follows the load.
CATCH_UP_S = 1.0


class DiskKeeper:
    """DiskWatch + Retention + their PeriodicLoop, as the Runtime starts and stops them."""

    def __init__(self, *, db: Database, settings: Settings, profile: Profile,
                 wake_dispatcher: Callable[[], None], leader: Leader | None = None,
                 owner: str | None = None,
                 on_pressure: Callable[[bool, dict[str, object]], None] | None = None
                 ) -> None:
        """`on_pressure`: told when a hold is entered or left (the notifier)."""
        self.on_pressure = on_pressure
        self.db = db
        self.profile = profile
        self._wake_dispatcher = wake_dispatcher
        self.disk = DiskWatch(
            {"data": settings.data_path, "receipts": settings.receipts_path,
             "logs": settings.logs_path},
            low_water_mb=profile.low_water_mb, low_water_pct=profile.low_water_pct,
            critical_water_mb=profile.critical_water_mb, on_change=self._pressure_changed,
            guard_unknown=settings.disk_guard_unknown)
        self.retention = Retention(db=db, logs_root=settings.logs_path,
                                   db_path=settings.db_path, profile=profile, disk=self.disk,
                                   leader=leader, owner=owner)
        self.loop = PeriodicLoop("retention", profile.retention_interval_s, self._round)
        self._last_poke = 0.0

    def start(self) -> None:
        self.loop.start()
        self.loop.poke()  # a first round right after start-up (queued deletions, sizes)

    async def stop(self) -> None:
        await self.loop.stop()
        self.disk.close()

    async def may_spawn(self) -> str | None:
        """The dispatcher's hook: a reason to hold queued runs, or None."""
        reason = await self.disk.check()
        if reason is not None and time.monotonic() - self._last_poke >= 1.0:
            self._last_poke = time.monotonic()
            self.loop.poke()  # evict now, and mark the held runs
        return reason

    def _pressure_changed(self, pressure: bool) -> None:
        if self.on_pressure is not None:  # the notifier: a hold entered or left
            self.on_pressure(pressure, self.disk.report())
        if pressure:
            self.loop.interval_s = min(self.profile.retention_interval_s, PRESSURE_INTERVAL_S)
            self.loop.poke()
        else:
            self.loop.interval_s = self.profile.retention_interval_s
            self._wake_dispatcher()

    async def _round(self) -> float | None:
        report = await self.retention.round()
        return CATCH_UP_S if report.more else None

    async def report(self) -> dict[str, object]:
        await self.disk.check()
        r = self.retention
        async with self.db.read() as tx:
            runs = await q.count_runs(tx)
            pending = await q.count_pending_deletions(
                tx, None if r.owner is None else r.vol)
        next_at: int | None = None
        if self.loop.next_round_at is not None:
            wait = self.loop.next_round_at - asyncio.get_running_loop().time()
            next_at = now_ms() + max(0, int(wait * 1000))
        last = r.last
        stats = r.stats
        return {
            "pressure": self.disk.report(),
            "volumes": self.disk.volumes_report(),
            "retention": {
                "rounds": self.loop.rounds,
                "next_round_at_ms": next_at,
                "interval_s": self.loop.interval_s,
                "runs_kept": runs,
                "logs_total_bytes": r.logs_total_bytes,
                "logs_cap_bytes": r.cap_bytes,
                "logs_live": r.live_logs,
                "logs_unmeasured": r.logs_unmeasured,
                "pending_file_deletions": pending,
                "policy": {"keep_runs_per_task": self.profile.keep_runs_per_task,
                           "keep_days": self.profile.keep_days,
                           "logs_cap_mb": self.profile.logs_cap_mb,
                           "low_water_mb": self.profile.low_water_mb,
                           "low_water_pct": self.profile.low_water_pct,
                           "critical_water_mb": self.profile.critical_water_mb},
                "last_round": None if last is None else {
                    "started_at_ms": last.started_at_ms, "finished_at_ms": last.finished_at_ms,
                    "counts": dict(last.counts), "deleted": _by_reason(last.deleted)},
                "deleted_since_start": _by_reason(r.deleted_total),
            },
            "database": None if stats is None else {
                "wal_bytes": r.wal_bytes, "page_size": stats.page_size,
                "page_count": stats.page_count, "freelist_pages": stats.freelist_pages,
                "auto_vacuum": {0: "none", 1: "full", 2: "incremental"}.get(
                    stats.auto_vacuum, str(stats.auto_vacuum)),
            },
        }


def _by_reason(deleted: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Every kind and reason, zeros included, so that a reader needs no defaults."""
    kinds = {"runs": ("KEEP_RUNS", "KEEP_DAYS"),
             "logs": (SIZE_CAP, DISK_PRESSURE, DISK_CRITICAL)}
    return {kind: {why: deleted.get(kind, {}).get(why, 0) for why in reasons}
            for kind, reasons in kinds.items()}
