"""Free space on the three volumes (data, receipts, logs) and the disk-pressure state.

`check()` is one `statvfs` per volume (a few microseconds, no I/O to the card),
so it runs before every dispatch and in every retention round. The calls run
on a small pool of daemon threads (launch/fileio.py), never on the event loop:
on a hung filesystem (a dead network or FUSE mount) statvfs(2) blocks in the
kernel, and on the loop it would stop the whole worker. A probe that has not
answered within PROBE_TIMEOUT_S leaves its volume's free space unknown
(error "TimeoutError"; the guard setting below applies); while it stays
stuck the volume is not probed again (no pile of stuck threads), and the next
check after it returns probes anew.

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

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import msgspec

from ..clock import now_ms
from ..launch.fileio import FilePool, FileTimeout

log = logging.getLogger("qledge.diskwatch")
MIB = 1 << 20
REASON = "DISK_PRESSURE"
REASON_UNKNOWN = "DISK_FREE_UNKNOWN"
RELEASE_FACTOR = 1.25
GuardUnknown = Literal["off", "hold"]
PROBE_TIMEOUT_S = 2.0


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


class DiskWatch:
    def __init__(self, roots: Mapping[str, Path], *, low_water_mb: int, low_water_pct: float,
                 critical_water_mb: int = 0,
                 on_change: Callable[[bool], None] | None = None,
                 statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
                 guard_unknown: GuardUnknown = "off",
                 probe_timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.roots = dict(roots)
        self.guard_unknown = guard_unknown
        self.low_water_mb = low_water_mb
        self.low_water_pct = low_water_pct
        self.critical_water_mb = critical_water_mb
        self.on_change = on_change
        self._statvfs = statvfs
        self.volumes = {name: Volume(name=name) for name in self.roots}
        self.pressure = False
        self.reason: str | None = None
        self.since_ms: int | None = None
        self.checks = 0
        self._pool = FilePool(threads=max(1, len(self.roots)), timeout_s=probe_timeout_s,
                              name="qledge-statvfs")
        self._probing: dict[str, threading.Event] = {}  # set once the probe returned

    def close(self) -> None:
        self._pool.close()

    def _probe(self, root: Path, done: threading.Event) -> tuple[os.statvfs_result, int]:
        try:
            return self._statvfs(root), os.stat(root).st_dev
        finally:
            done.set()

    async def check(self) -> str | None:
        """Refresh every volume; returns REASON while any is under pressure."""
        self.checks += 1
        for name, root in self.roots.items():
            vol = self.volumes[name]
            done = self._probing.get(name)
            try:
                if done is not None and not done.is_set():
                    raise FileTimeout("the previous probe is still blocked")
                done = self._probing[name] = threading.Event()
                st, device = await self._pool.run(self._probe, root, done)
            except (OSError, FileTimeout) as exc:
                # Unknown free space, as on a filesystem without statfs: the guard
                # setting decides (by default nothing is held on a guess; the write
                # will tell). A slow but alive filesystem lands here too.
                vol.error = "TimeoutError" if isinstance(exc, FileTimeout) else type(exc).__name__
                self._unknown(vol)
                continue
            vol.error = None
            vol.device = device
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
        return {v.name: {"total_bytes": v.total_bytes if v.free_space_known else None,
                         "used_bytes": v.used_bytes if v.free_space_known else None,
                         "free_bytes": v.free_bytes if v.free_space_known else None,
                         "low_water_bytes": v.low_water_bytes,
                         "critical_bytes": v.critical_bytes, "pressure": v.pressure,
                         "critical": v.critical, "error": v.error,
                         "free_space_known": v.free_space_known}
                for v in self.volumes.values()}
