"""One retention round: queued file deletions, policy deletions, log sizes, the size
cap, disk pressure and database upkeep, each bounded (see the package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec

from ... import failpoints
from ...clock import now_ms
from ...db import errors
from ...db import retention_queries as q
from ...db.dialect import POSTGRESQL
from ...db.interface import Database, Tx
from ...launch import logs
from ...settings import Profile
from ..diskwatch import MIB, REASON, DiskWatch
from ..leader import Leader
from .policy import (
    DISK_CRITICAL,
    DISK_PRESSURE,
    SIZE_CAP,
    LogFacts,
    bounds,
    cap_excess,
    evict_oldest,
    policy_for,
    verdict,
)

log = logging.getLogger("qledge.retention")
VACUUM_SHARE = 4  # incremental_vacuum once free pages are >= 1/4 of the file (or pressure)


def _disk_full(exc: BaseException) -> bool:
    return errors.is_full(exc) or "full" in str(exc)


class RetentionReport(msgspec.Struct, kw_only=True):
    started_at_ms: int
    finished_at_ms: int | None = None
    counts: dict[str, int] = {}
    # What went, by why: runs (KEEP_RUNS, KEEP_DAYS), logs (SIZE_CAP, DISK_PRESSURE,
    # DISK_CRITICAL).
    deleted: dict[str, dict[str, int]] = {}
    more: bool = False  # a capped pass left work for a catch-up round

    def add(self, key: str, n: int = 1) -> None:
        if n:
            self.counts[key] = self.counts.get(key, 0) + n

    def gone(self, kind: str, why: str, n: int = 1) -> None:
        if n:
            by_reason = self.deleted.setdefault(kind, {})
            by_reason[why] = by_reason.get(why, 0) + n


class Retention:
    def __init__(self, *, db: Database, logs_root: Path, db_path: Path, profile: Profile,
                 disk: DiskWatch, leader: Leader | None = None,
                 owner: str | None = None) -> None:
        self.db = db
        # Fleet mode: policy deletions only while this node holds the lease.
        self.leader = leader
        # Fleet mode: this node's id. Its file work (sizes, eviction, unlinks) is on
        # its own logs, the ones on its disk; None: the one node's (all of them).
        self.owner = owner
        self.vol = q.LOGS if owner is None else f"{q.LOGS}@{owner}"
        self.logs_root = logs_root
        self.db_path = db_path
        self.profile = profile
        self.disk = disk
        self.task_cursor = 0
        self.last: RetentionReport | None = None
        self.logs_total_bytes: int | None = None
        self.logs_unmeasured = 0
        self.live_logs = 0
        self.wal_bytes = 0
        self.stats: q.DbStats | None = None
        self._done: list[str] = []  # unlinked files whose queue rows can go
        # Queued files wait for this commit to be durable (the one that deleted
        # their rows deferred), since this monotonic time.
        self._unlink_after = 0
        self._waiting_since: float | None = None
        self.syncs = 0  # fsyncs paid by retention to free files (no durable commit came)
        self.deleted_total: dict[str, dict[str, int]] = {}  # since start, by kind and why

    @property
    def cap_bytes(self) -> int:
        return self.profile.logs_cap_mb * MIB

    async def round(self) -> RetentionReport:
        report = RetentionReport(started_at_ms=now_ms())
        await self._drain(report)
        # Pressure first: freeing space comes before anything that writes more. Each
        # task's newest finished log stays unless the disk is critically full.
        if await self.disk.check() is not None and self.disk.bytes_to_release() > 0:
            await self._evict(self.disk.bytes_to_release(), DISK_PRESSURE, report)
            await self.disk.check()
            if self.disk.bytes_to_leave_critical() > 0:
                await self._evict(self.disk.bytes_to_leave_critical(), DISK_CRITICAL, report)
        if self.leader is None or self.leader.is_leader:
            await self._apply_policy(report)
        await self._measure(report)
        excess = cap_excess(self.logs_total_bytes or 0, self.cap_bytes)
        if excess:
            await self._evict(excess, SIZE_CAP, report)
        if await self.disk.check() is not None:
            await self._hold(report)
        if self._done:
            async with self._tx():
                pass
        await self._upkeep(report)
        report.finished_at_ms = now_ms()
        for kind, by_reason in report.deleted.items():
            total = self.deleted_total.setdefault(kind, {})
            for why, n in by_reason.items():
                total[why] = total.get(why, 0) + n
        self.last = report
        if report.counts:
            log.info("retention round: %s", report.counts)
        return report

    @contextlib.asynccontextmanager
    async def _tx(self, *, durable: bool = False) -> AsyncIterator[Tx]:
        """A write transaction that also drops the queue rows of files already unlinked.
        Deferred unless `durable`: what a power cut loses here the next round redoes."""
        done = list(self._done)
        async with self.db.write(durable=durable) as tx:
            if done:
                await q.forget_deletions(tx, done, self.vol)
            yield tx
        forgotten = set(done)
        self._done = [p for p in self._done if p not in forgotten]

    def _unlink(self, paths: list[str]) -> tuple[list[str], int, int]:
        """(paths whose file is gone now, removed, failed): runs in a thread."""
        gone: list[str] = []
        removed = failed = 0
        for rel in paths:
            try:
                if logs.remove(self.logs_root, rel):
                    removed += 1
                gone.append(rel)  # removed, already absent, or a reference that can't exist
            except OSError as exc:
                failed += 1
                log.warning("could not remove a log file (kept for the next round): %s",
                            type(exc).__name__)
        return gone, removed, failed

    async def _remove_files(self, paths: list[str], report: RetentionReport) -> int:
        """Unlink after commit; how many of these files are gone now."""
        if not paths:
            return 0
        gone, removed, failed = await asyncio.to_thread(self._unlink, paths)
        self._done.extend(gone)
        report.add("files_removed", removed)
        report.add("files_already_gone", len(gone) - removed)
        report.add("files_failed", failed)
        return len(gone)

    async def _drain(self, report: RetentionReport) -> None:
        """Files queued by an earlier round, task deletion, or before a crash."""
        if not await self._durable_for_unlink(report):
            return
        limit = self.profile.retention_pages * self.profile.retention_page_size
        async with self.db.read() as tx:
            pending = await q.pending_deletions(tx, limit, self.vol)
        gone = await self._remove_files(pending, report)
        # More queued, and progress made (files that keep failing wait for the interval).
        report.more |= len(pending) == limit and gone > 0

    async def _apply_policy(self, report: RetentionReport) -> None:
        size, pages = self.profile.retention_page_size, self.profile.retention_pages
        now = now_ms()
        flushed = examined = 0
        victims: list[tuple[str, str]] = []  # (run id, why)
        while flushed < pages and examined < pages * size:
            async with self.db.read() as tx:
                tasks = await q.tasks_page(tx, self.task_cursor, size)
            for task in tasks:
                examined += 1
                policy = policy_for(task.keep_runs, task.keep_days, self.profile)
                keep_n, cutoff = bounds(policy, now)
                while True:
                    room = size - len(victims)
                    async with self.db.read() as tx:
                        cands = await q.run_candidates(tx, task.id, keep_n, cutoff, room)
                    for c in cands:
                        why = verdict(c.rank, c.finished_at_ms, policy, now)
                        if why is not None:
                            victims.append((c.id, why))
                    if len(victims) < size:
                        break
                    await self._delete(victims, report)
                    victims = []
                    flushed += 1
                    if flushed >= pages:
                        self.task_cursor = task.num - 1  # resume with this task
                        report.more = True
                        return
                self.task_cursor = task.num
            if len(tasks) < size:
                self.task_cursor = 0  # wrapped: start from the first task next round
                break
        else:
            # Task budget spent before the last task: catch up only if this walk found
            # runs to delete (many tasks with nothing to do wait for the interval).
            report.more = bool(flushed or victims)
        if victims:
            await self._delete(victims, report)

    async def _delete(self, victims: list[tuple[str, str]], report: RetentionReport) -> None:
        async with self._tx() as tx:
            deleted = await q.delete_runs(tx, [run_id for run_id, _ in victims], now_ms(),
                                          self.owner)
        report.add("runs_deleted", deleted.runs)
        why = dict(victims)
        for run_id in deleted.run_ids:
            report.gone("runs", why[run_id])
        report.add("attempts_deleted", deleted.attempts)
        failpoints.hit("retention.after_commit")
        seq = self.db.commit_seq
        if seq <= self.db.durable_seq:
            await self._remove_files(deleted.log_paths, report)
        elif deleted.log_paths:
            # Queued in file_deletions by the same commit: a later round's _drain
            # unlinks them once an fsync covers that commit.
            self._unlink_after = max(self._unlink_after, seq)
            if self._waiting_since is None:
                self._waiting_since = time.monotonic()
            report.add("files_waiting_for_fsync", len(deleted.log_paths))

    async def _durable_for_unlink(self, report: RetentionReport) -> bool:
        """Whether queued files may go now. Their rows' deletion is on disk, or it is
        made so here: under disk pressure at once, else once they have waited a
        retention interval for another commit's fsync to cover them."""
        if self._unlink_after > self.db.durable_seq:
            waited = time.monotonic() - (self._waiting_since or time.monotonic())
            if self.disk.reason is None and waited < self.profile.retention_interval_s:
                report.add("unlinks_waiting_for_fsync")
                return False
            await self.db.sync()
            self.syncs += 1
            report.add("syncs_for_files")
        self._waiting_since = None
        return True

    async def _measure(self, report: RetentionReport) -> None:
        """Record the final size of finished logs; total = measured + active ones now."""
        limit = self.profile.retention_pages * self.profile.retention_page_size
        async with self.db.read() as tx:
            unsized = await q.unsized_logs(tx, limit, self.owner)
            active = await q.active_logs(tx, 256, self.owner)
        root = self.logs_root

        def stat_all() -> tuple[list[tuple[str, int]], int]:
            sizes = [(row.id, logs.size(root, row.relative_path)) for row in unsized]
            return sizes, sum(logs.size(root, rel) for rel in active)

        sizes, active_bytes = await asyncio.to_thread(stat_all)
        report.more |= len(unsized) == limit
        if sizes:
            async with self._tx() as tx:
                await q.set_sizes(tx, sizes)
            report.add("logs_measured", len(sizes))
        async with self.db.read() as tx:
            totals = await q.log_totals(tx, self.owner)
        self.logs_total_bytes = totals.sized_bytes + active_bytes
        self.logs_unmeasured = max(0, totals.unsized - len(active))
        self.live_logs = totals.live

    async def _evict(self, excess: int, reason: str, report: RetentionReport) -> None:
        """Evict the oldest finished logs until `excess` bytes are freed. SIZE_CAP and
        DISK_PRESSURE keep each task's newest finished log; DISK_CRITICAL (the disk is
        critically full) takes those too — the others it frees are DISK_PRESSURE."""
        size, pages = self.profile.retention_page_size, self.profile.retention_pages
        on_disk = reason != SIZE_CAP
        after = ""
        for _ in range(pages):
            if excess <= 0:
                break
            async with self.db.read() as tx:
                cands = await q.eviction_candidates(tx, after, size,
                                                    keep_newest=reason != DISK_CRITICAL,
                                                    owner=self.owner)
            if not cands:
                break
            after = cands[-1].attempt_id
            facts = await asyncio.to_thread(self._facts, cands)
            chosen = {c.id: c for c in evict_oldest(facts, excess)}
            if not chosen:
                break
            newest = {c.attempt_id for c in cands if c.newest}
            why = {aid: DISK_CRITICAL if reason == DISK_CRITICAL and aid in newest
                   else DISK_PRESSURE if reason == DISK_CRITICAL else reason for aid in chosen}
            try:
                evicted: list[tuple[str, str]] = []
                async with self._tx(durable=True) as tx:
                    for label in sorted(set(why.values())):
                        evicted += await q.evict_logs(
                            tx, [a for a in chosen if why[a] == label], label, now_ms(),
                            self.vol)
            except errors.Transient as exc:
                if not on_disk or not _disk_full(exc):
                    raise
                await self._unlink_unrecorded(cands, chosen, report)
                excess = await self._still_to_free(reason)
                continue
            paths = [path for _, path in evicted]
            freed = sum(chosen[attempt_id].size_bytes for attempt_id, _ in evicted)
            report.add("logs_evicted", len(paths))
            report.add("bytes_evicted", freed)
            for attempt_id, _ in evicted:
                report.gone("logs", why[attempt_id])
            failpoints.hit("retention.after_commit")
            await self._remove_files(paths, report)
            if self.logs_total_bytes is not None:
                self.logs_total_bytes -= freed
            excess = await self._still_to_free(reason) if on_disk else excess - freed

    async def _still_to_free(self, reason: str) -> int:
        """The real free space again, not our estimate."""
        await self.disk.check()
        if reason == DISK_CRITICAL:
            return self.disk.bytes_to_leave_critical()
        return self.disk.bytes_to_release()

    async def _unlink_unrecorded(self, cands: list[q.LogRow], chosen: dict[str, LogFacts],
                                 report: RetentionReport) -> None:
        """The card is so full that SQLite cannot even record an eviction: delete these
        finished attempts' files first (terminal is final, so nothing writes them any
        more); the log API reads them as empty until a later round, with room again,
        marks them evicted. No row ever points at a file that is not accounted for."""
        paths = [c.relative_path for c in cands if c.attempt_id in chosen]
        _, removed, failed = await asyncio.to_thread(self._unlink, paths)
        report.add("logs_unlinked_before_mark", removed)
        report.add("files_failed", failed)
        log.warning("disk full: removed %d finished logs before recording their eviction",
                    removed)

    def _should_vacuum(self, stats: q.DbStats) -> bool:
        """Free pages are reused by new rows anyway: moving them back to the filesystem
        costs writes, so only when the free list is a large share of the file (a burst of
        deletions, a lowered policy) or the data volume is short of space."""
        if stats.freelist_pages == 0:
            return False
        if self.disk.volumes.get("data") is not None and self.disk.volumes["data"].pressure:
            return True
        return stats.freelist_pages >= max(self.profile.vacuum_pages_per_round,
                                           stats.page_count // VACUUM_SHARE)

    def _facts(self, rows: list[q.LogRow]) -> list[LogFacts]:
        return [LogFacts(id=r.attempt_id, size_bytes=r.size_bytes if r.size_bytes is not None
                         else logs.size(self.logs_root, r.relative_path)) for r in rows]

    async def _hold(self, report: RetentionReport) -> None:
        """One `run.held` event per queued run while new attempts are held."""
        limit = self.profile.retention_pages * self.profile.retention_page_size
        async with self.db.read() as tx:
            run_ids = await q.unheld_queued_runs(tx, limit)
        if not run_ids:
            return
        data: dict[str, str | int | None] = {"reason": self.disk.reason or REASON,
                                             "volumes": ",".join(self.disk.pressed())}
        held = 0
        async with self._tx() as tx:
            for run_id in run_ids:
                held += await q.mark_held(tx, run_id, data, now_ms())
        report.add("runs_held", held)

    async def _upkeep(self, report: RetentionReport) -> None:
        async with self.db.read() as tx:
            if tx.dialect == POSTGRESQL:
                # The server checkpoints and vacuums its own files: only the size here
                # (a stale SQLite file at db_path, from before fleet mode, is not ours).
                self.wal_bytes = 0
                self.stats = await q.db_stats(tx)
                return
        try:
            self.wal_bytes = os.stat(f"{self.db_path}-wal").st_size
        except FileNotFoundError:
            self.wal_bytes = 0
        if self.wal_bytes > self.profile.wal_checkpoint_mb * MIB:
            busy, _, _ = await q.checkpoint_wal(self.db)
            report.add("wal_checkpoints")
            report.add("wal_checkpoint_busy", busy)
            try:
                self.wal_bytes = os.stat(f"{self.db_path}-wal").st_size
            except FileNotFoundError:
                self.wal_bytes = 0
        async with self.db.read() as tx:
            stats = await q.db_stats(tx)
        if stats.auto_vacuum == 2 and self._should_vacuum(stats):
            step = min(stats.freelist_pages, self.profile.vacuum_pages_per_round)
            await q.incremental_vacuum(self.db, step)
            report.add("pages_vacuumed", step)
            async with self.db.read() as tx:
                stats = await q.db_stats(tx)
        self.stats = stats
