"""Free space on the three volumes (data, receipts, logs) and the disk-pressure state.

`check()` reads one `statvfs` per volume (a few microseconds, no I/O to the card),
so it runs before every dispatch and in every retention round. The calls run in
the background on one daemon thread per volume, never on the event loop: on a
hung filesystem (a dead network or FUSE mount) statvfs(2) blocks in the kernel,
and on the loop it would stop the whole worker. A check starts a probe where
none is outstanding (so however many checks run at once, each volume has at most
one call in the kernel, and a hung mount keeps one thread, not a pile) and waits
up to FRESH_WAIT_S for a young probe's answer. A slow answer is not waited for:
the volume keeps its last measured free space (`age_ms` says how old) until the
new one arrives. Only when a probe has had no answer for ANSWER_BOUND_S does the
volume's free space become unknown (error "TimeoutError"; the guard setting below
applies), logged once; the next check after the answer measures it again. A
probe that fails (an OSError) makes it unknown at once: the kernel said so.

A volume is under pressure when its free space (`f_bavail`: what an unprivileged writer can
still use) drops below its low-water mark, the larger of `low_water_mb` and
`low_water_pct` of its size; it leaves pressure only once free space is back
above the mark × RELEASE_FACTOR, so spawning does not flap at the edge.

Under pressure no new attempt is spawned (runs stay `queued`, one `run.held`
event each), retention runs early and evicts old logs; running tasks are left
alone. The callback hears every change of the overall state.

Below a second, lower mark the volume is *critically* full: `critical_water_mb`,
but never more than half the low-water mark. Only then may retention take a
task's newest finished log too (docs/retention.md).

A filesystem that reports a size of zero (no statfs support, e.g. some FUSE
filesystems) has an *unknown* free space, not zero: with `guard_unknown="off"`
(the default) that volume is not guarded (the writes themselves will tell: a
full disk never gives a half receipt or a false success); with "hold" it
holds new attempts with the reason DISK_FREE_UNKNOWN. Either way
/api/v1/system says so, and such a volume is never critical (docs/retention.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..clock import now_ms

log = logging.getLogger("qledge.diskwatch")
MIB = 1 << 20
REASON = "DISK_PRESSURE"
REASON_UNKNOWN = "DISK_FREE_UNKNOWN"
RELEASE_FACTOR = 1.25
GuardUnknown = Literal["off", "hold"]
# How long a volume keeps its last measured free space while a probe stays unanswered
# before it becomes unknown. statvfs of a local filesystem answers in microseconds, but
# a probe thread can wait seconds for the GIL and the kernel's locks while a burst of
# spawns and fsyncs keeps two small cores busy, and an NFS server that is alive but slow
# answers within its client's retransmit timeout (timeo=600: 60 s over TCP). A short
# bound switched the guard off exactly when the disk was busiest; 60 s only gives up on
# a mount that is really gone. Free space used at most 60 s old is safe enough: the
# guard is for disks that fill over minutes and hours, and the writes themselves still
# tell the truth (ENOSPC never gives a half receipt or a false success).
ANSWER_BOUND_S = 60.0
# How long a check waits for the answer to a probe started within this time: a healthy
# statvfs answers well within it, so a check sees a change at once; a slower answer is
# not waited for (the last known value serves) and never makes the volume unknown.
FRESH_WAIT_S = 0.5


class Volume(msgspec.Struct, kw_only=True):
    name: str
    total_bytes: int = 0
    free_bytes: int = 0
    used_bytes: int = 0
    low_water_bytes: int = 0
    critical_bytes: int = 0
    device: int = 0
    pressure: bool = False
    critical: bool = False
    error: str | None = None
    free_space_known: bool = True


def low_water(total_bytes: int, low_water_mb: int, low_water_pct: float) -> int:
    """The mark below which a volume is under pressure (0 = never)."""
    return max(low_water_mb * MIB, int(total_bytes * low_water_pct / 100))


def critical_water(low_water_bytes: int, critical_water_mb: int) -> int:
    """The critical mark: the setting, but at most half the low-water mark (0 = never)."""
    return min(critical_water_mb * MIB, low_water_bytes // 2)


def under_pressure(free: int, mark: int, was: bool) -> bool:
    """Enter below the mark; leave only above mark × RELEASE_FACTOR (hysteresis)."""
    if mark <= 0:
        return False
    if was:
        return free < mark * RELEASE_FACTOR
    return free < mark


class _Probe:
    """One volume's background statvfs: at most one call outstanding, on the volume's own
    daemon thread (a hung mount keeps that one thread, never a pile of them)."""

    def __init__(self, root: Path, statvfs: Callable[[Path], os.statvfs_result],
                 name: str) -> None:
        self.root = root
        self.statvfs = statvfs
        self.name = name
        self.future: asyncio.Future[tuple[os.statvfs_result, int]] | None = None
        self.started = 0.0  # monotonic, of the outstanding call
        self.answered: float | None = None  # monotonic, of the last answer
        self.stat: os.statvfs_result | None = None
        self.device = 0
        self.error: str | None = None  # the last answer was an error (its type's name)
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop,
                                             asyncio.Future[Any]] | None] | None = None

    @property
    def outstanding(self) -> bool:
        return self.future is not None and not self.future.done()

    def start(self) -> asyncio.Future[tuple[os.statvfs_result, int]]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[os.statvfs_result, int]] = loop.create_future()
        fut.add_done_callback(self._answer)
        self.future, self.started = fut, time.monotonic()
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(self._queue,), name=self.name,
                             daemon=True).start()
        self._queue.put((loop, fut))
        return fut

    def _work(self, jobs: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop,
                                                  asyncio.Future[Any]] | None]) -> None:
        while (job := jobs.get()) is not None:
            loop, fut = job
            result: Any = None
            error: BaseException | None = None
            try:
                result = self.statvfs(self.root), os.stat(self.root).st_dev
            except BaseException as exc:  # handed to the loop
                error = exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                loop.call_soon_threadsafe(_deliver, fut, result, error)

    def _answer(self, fut: asyncio.Future[tuple[os.statvfs_result, int]]) -> None:
        if fut.cancelled():
            return
        self.answered = time.monotonic()
        exc = fut.exception()
        if exc is None:
            self.stat, self.device = fut.result()
            self.error = None
        else:
            self.stat, self.error = None, type(exc).__name__

    def close(self) -> None:
        if self._queue is not None:
            self._queue.put(None)  # an idle thread ends; a stuck one is a daemon, left behind
            self._queue = None  # a probe after close starts a thread of its own
        if self.future is not None and not self.future.done():
            self.future.cancel()


def _deliver(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # cancelled at close
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class DiskWatch:
    def __init__(self, roots: Mapping[str, Path], *, low_water_mb: int, low_water_pct: float,
                 critical_water_mb: int = 0,
                 on_change: Callable[[bool], None] | None = None,
                 statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
                 guard_unknown: GuardUnknown = "off",
                 answer_bound_s: float = ANSWER_BOUND_S,
                 fresh_wait_s: float = FRESH_WAIT_S) -> None:
        self.roots = dict(roots)
        self.guard_unknown = guard_unknown
        self.low_water_mb = low_water_mb
        self.low_water_pct = low_water_pct
        self.critical_water_mb = critical_water_mb
        self.on_change = on_change
        self.answer_bound_s = answer_bound_s
        self.fresh_wait_s = fresh_wait_s
        self.volumes = {name: Volume(name=name) for name in self.roots}
        self.pressure = False
        self.reason: str | None = None
        self.since_ms: int | None = None
        self.checks = 0
        self._statvfs = statvfs
        self._probes = {name: _Probe(root, self._stat, f"qledge-statvfs-{name}")
                        for name, root in self.roots.items()}

    def _stat(self, root: Path) -> os.statvfs_result:
        return self._statvfs(root)  # looked up per call: tests swap the filesystem in

    def close(self) -> None:
        for probe in self._probes.values():
            probe.close()

    async def _refresh(self) -> None:
        """Start a probe where none is outstanding, and wait a little for fresh answers."""
        waits: list[asyncio.Future[tuple[os.statvfs_result, int]]] = []
        deadline = 0.0
        for probe in self._probes.values():
            if not probe.outstanding:
                probe.start()
            if probe.future is not None and not probe.future.done():
                # Only a young call is waited for: a check never waits on a call that
                # has already had its FRESH_WAIT_S (a hung mount costs one wait, once).
                until = probe.started + self.fresh_wait_s
                if until > time.monotonic():
                    waits.append(probe.future)
                    deadline = max(deadline, until)
        if waits:
            await asyncio.wait(waits, timeout=max(0.0, deadline - time.monotonic()))

    async def check(self) -> str | None:
        """Refresh every volume; returns REASON while any is under pressure."""
        self.checks += 1
        await self._refresh()
        now_mono = time.monotonic()
        for name, probe in self._probes.items():
            vol = self.volumes[name]
            if probe.outstanding and now_mono - probe.started >= self.answer_bound_s:
                # No answer for the whole bound: a hung (or dead) mount, not a busy one.
                vol.error = "TimeoutError"
                self._unknown(vol)
                continue
            if probe.error is not None:
                # The kernel answered with an error: unknown free space, as on a
                # filesystem without statfs; the guard setting decides (by default
                # nothing is held on a guess; the write will tell).
                vol.error = probe.error
                self._unknown(vol)
                continue
            st = probe.stat
            if st is None:
                continue  # no answer yet, within the bound: nothing measured, nothing held
            vol.error = None
            vol.device = probe.device
            if st.f_blocks == 0:
                self._unknown(vol)
                continue
            vol.free_space_known = True
            vol.total_bytes = st.f_blocks * st.f_frsize
            vol.free_bytes = st.f_bavail * st.f_frsize
            vol.used_bytes = (st.f_blocks - st.f_bfree) * st.f_frsize
            vol.low_water_bytes = low_water(vol.total_bytes, self.low_water_mb,
                                            self.low_water_pct)
            vol.pressure = under_pressure(vol.free_bytes, vol.low_water_bytes, vol.pressure)
            vol.critical_bytes = critical_water(vol.low_water_bytes, self.critical_water_mb)
            vol.critical = vol.free_bytes < vol.critical_bytes
        now = any(v.pressure for v in self.volumes.values())
        self.reason = None if not now else REASON if any(
            v.pressure and v.free_space_known for v in self.volumes.values()) else REASON_UNKNOWN
        if now != self.pressure:
            self.pressure = now
            self.since_ms = now_ms()
            if now:
                log.warning("%s on %s: new attempts are held", self.reason,
                            ", ".join(self.pressed()))
            else:
                log.info("disk pressure is over: spawning resumes")
            if self.on_change is not None:
                self.on_change(now)
        return self.reason

    def _unknown(self, vol: Volume) -> None:
        """No size or no answer: unknown free space (no statfs, a failed or hung probe),
        not a full disk."""
        if vol.free_space_known:
            why = vol.error or "its filesystem reports no size"
            log.warning("free space of the %s volume is unknown (%s); disk guard for it: %s"
                        " (QLEDGE_DISK_GUARD_UNKNOWN)", vol.name, why, self.guard_unknown)
        vol.free_space_known = False
        vol.total_bytes = vol.free_bytes = vol.used_bytes = vol.low_water_bytes = 0
        vol.critical_bytes = 0
        vol.pressure = self.guard_unknown == "hold"
        vol.critical = False  # nothing measured: newest logs are not taken on a guess

    def pressed(self) -> list[str]:
        return [v.name for v in self.volumes.values() if v.pressure]

    def shares_logs_device(self, name: str) -> bool:
        """Would deleting logs free space on this volume (same filesystem)?"""
        logs, vol = self.volumes.get("logs"), self.volumes.get(name)
        return logs is not None and vol is not None and logs.device == vol.device

    def bytes_to_release(self) -> int:
        """Bytes to free on the logs' filesystem to leave pressure on every volume it backs."""
        need = 0
        for vol in self.volumes.values():
            # Unknown free space: no amount of deleted logs can be measured to help.
            if vol.pressure and vol.free_space_known and self.shares_logs_device(vol.name):
                need = max(need, int(vol.low_water_bytes * RELEASE_FACTOR) - vol.free_bytes + 1)
        return need

    def bytes_to_leave_critical(self) -> int:
        """Bytes to free on the logs' filesystem so that no volume it backs is critical
        any more (with the same release factor as pressure)."""
        need = 0
        for vol in self.volumes.values():
            if vol.critical and self.shares_logs_device(vol.name):
                need = max(need, int(vol.critical_bytes * RELEASE_FACTOR) - vol.free_bytes + 1)
        return need

    def report(self) -> dict[str, object]:
        return {
            "state": "pressure" if self.pressure else "ok",
            "reason": self.reason,
            "since_ms": self.since_ms,
            "volumes": self.pressed(),
            "free_space_unknown": [v.name for v in self.volumes.values()
                                   if not v.free_space_known],
            "guard_unknown": self.guard_unknown,
        }

    def volumes_report(self) -> dict[str, object]:
        now = time.monotonic()
        out: dict[str, object] = {}
        for v in self.volumes.values():
            answered = self._probes[v.name].answered if v.name in self._probes else None
            # Nothing measured yet (no answer so far, within the bound): no figures.
            sizes = v.free_space_known and answered is not None
            out[v.name] = {
                "total_bytes": v.total_bytes if sizes else None,
                "used_bytes": v.used_bytes if sizes else None,
                "free_bytes": v.free_bytes if sizes else None,
                "low_water_bytes": v.low_water_bytes,
                "critical_bytes": v.critical_bytes, "pressure": v.pressure,
                "critical": v.critical, "error": v.error,
                "free_space_known": v.free_space_known,
                # How old the figures are (ms since the filesystem last answered).
                "age_ms": None if answered is None else int((now - answered) * 1000)}
        return out
