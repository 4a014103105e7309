"""The appliance's Prometheus metrics (docs/metrics.md), on its own registry.

Bounded cardinality: no label carries a task, run or free text. `status` is one
of the six terminal statuses; `reason` one of the stable reason codes (the
`Reason` enum and the disk-hold codes), anything else counted as "other" — at
most 6 x 20 series per counter, whatever the tasks are. Counters count since
the worker started (Prometheus handles the reset); gauges are read at scrape.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ..clock import now_ms
from ..db import gauges
from ..db import notifications as nq
from ..db import retention_queries as rq
from ..db.interface import Database, Tx
from ..model import Reason, Run
from ..notifications import rules as notify

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

KNOWN_REASONS = frozenset({*(r.value for r in Reason), *notify.REASONS})
DURATION_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)


def reason_label(code: str | None) -> str:
    if code is None:
        return "none"
    return code if code in KNOWN_REASONS else "other"


class Live(msgspec.Struct, frozen=True, kw_only=True):
    """What the engine's components count in memory, read at a scrape
    (lifecycle.Runtime.live_metrics): Metrics needs these values, not the Runtime."""

    fleet: bool  # the database is the shared PostgreSQL (no file of ours to stat)
    db_path: Path
    scheduler_lag_ms: float
    disk_pressure: bool
    started_at_ms: int
    receipts_consumed: int
    receipts_quarantined: int
    notify_sent: int
    notify_send_failures: int
    recovery: dict[str, int]  # the start-up reconciler's actions; {} before it ran


class _Snapshot:
    """Gauges read just before a scrape (collect() must not do I/O of its own)."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.recovery: dict[str, int] = {}
        self.counters: dict[str, float] = {}

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        v = self.values
        for name, doc in _GAUGES.items():
            if name in v:
                yield GaugeMetricFamily(f"qledge_{name}", doc, value=v[name])
        for name, doc in _COUNTERS.items():
            if name in self.counters:
                yield CounterMetricFamily(f"qledge_{name}", doc, value=self.counters[name])
        fam = GaugeMetricFamily("qledge_startup_recovery_actions",
                                "What the start-up reconciler did, by action",
                                labels=["action"])
        for action, n in sorted(self.recovery.items()):
            fam.add_metric([action], n)
        yield fam


_GAUGES = {
    "queue_depth": "Runs queued, waiting for a slot",
    "running_runs": "Runs running now",
    "scheduler_lag_seconds": "How late the most overdue schedule tick of the last round fired",
    "notify_outbox_pending": "Notification messages waiting to be sent (incl. retrying)",
    "notify_outbox_given_up": "Notification messages given up (kept 7 days)",
    "disk_pressure": "1 while new attempts are held for lack of disk space",
    "db_size_bytes": "Size of the SQLite database file (fleet mode: of the PostgreSQL database)",
    "db_wal_size_bytes": "Size of the SQLite write-ahead log",
    "process_resident_memory_bytes": "Resident memory of the worker process",
    "up_seconds": "Seconds since the worker started",
}
_COUNTERS = {
    "receipts_consumed": "Receipts consumed into a result since the worker started",
    "receipts_quarantined": "Receipts quarantined since the worker started",
    "notify_sent": "Notification messages delivered since the worker started",
    "notify_send_failures": "Failed notification sends (each retry counts)",
}


class Metrics:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.snapshot = _Snapshot()
        self._made: tuple[CollectorRegistry, Counter, Histogram] | None = None
        db.on_terminal(self.on_terminal)

    def _metrics(self) -> tuple[CollectorRegistry, Counter, Histogram]:
        """The registry, made at the first finished run or scrape: prometheus_client
        (~1.2 MiB with http.server, urllib.request, gzip) is not loaded by a worker that
        has done neither (tests/test_imports_idle.py). Nothing is lost by waiting: both
        metrics carry labels, and a labelled series starts (and gets its `_created`)
        at its first increment anyway."""
        if self._made is None:
            from prometheus_client import CollectorRegistry, Counter, Histogram
            from prometheus_client.registry import Collector

            snapshot = self.snapshot

            class Snapshot(Collector):
                def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
                    return snapshot.collect()

            registry = CollectorRegistry(auto_describe=True)
            runs = Counter("qledge_runs_finished", "Runs that reached a final status",
                           ["status", "reason"], registry=registry)
            duration = Histogram("qledge_run_duration_seconds",
                                 "Run duration (start to finish) by final status",
                                 ["status"], buckets=DURATION_BUCKETS, registry=registry)
            registry.register(Snapshot())
            self._made = (registry, runs, duration)
        return self._made

    @property
    def runs(self) -> Counter:
        return self._metrics()[1]

    @property
    def duration(self) -> Histogram:
        return self._metrics()[2]

    async def on_terminal(self, tx: Tx, old: Run, new: Run, now: int) -> None:
        # Counted once committed — and not when only the caller's savepoint rolled
        # back (after-commit hooks run then too): that run did not become terminal.
        live = [True]
        tx.on_rollback(lambda: live.__setitem__(0, False))
        tx.on_commit(lambda: self._count(new) if live[0] else None)

    def _count(self, run: Run) -> None:
        self.runs.labels(run.status.value, reason_label(run.reason_code)).inc()
        if run.started_at_ms is not None and run.finished_at_ms is not None:
            self.duration.labels(run.status.value).observe(
                max(0, run.finished_at_ms - run.started_at_ms) / 1000)

    async def render(self, live: Live) -> bytes:
        from prometheus_client import generate_latest

        registry, _runs, _duration = self._metrics()
        async with self.db.read() as tx:
            queued, running = await gauges.active_runs(tx)
            outbox = await nq.counts(tx)
            # Fleet mode: the shared PostgreSQL's size (no file of ours to stat).
            shared = await rq.db_stats(tx) if live.fleet else None
        path = live.db_path
        v = self.snapshot.values
        v["queue_depth"] = queued
        v["running_runs"] = running
        v["scheduler_lag_seconds"] = live.scheduler_lag_ms / 1000
        v["notify_outbox_pending"] = outbox["pending"]
        v["notify_outbox_given_up"] = outbox["given_up"]
        v["disk_pressure"] = 1.0 if live.disk_pressure else 0.0
        v["db_size_bytes"] = (_size(path) if shared is None
                              else shared.page_size * shared.page_count)
        v["db_wal_size_bytes"] = _size(Path(f"{path}-wal"))
        v["process_resident_memory_bytes"] = _rss()
        v["up_seconds"] = (now_ms() - live.started_at_ms) / 1000
        c = self.snapshot.counters
        c["receipts_consumed"] = live.receipts_consumed
        c["receipts_quarantined"] = live.receipts_quarantined
        c["notify_sent"] = live.notify_sent
        c["notify_send_failures"] = live.notify_send_failures
        self.snapshot.recovery = dict(live.recovery)
        return generate_latest(registry)


def _size(path: Path) -> float:
    try:
        return float(path.stat().st_size)
    except OSError:
        return 0.0


def _rss() -> float:
    try:
        with open("/proc/self/statm") as f:
            return float(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError):
        return 0.0
