"""Disk pressure: the low-water maths, held spawns with one `run.held` event per run,
and a real drill on a tiny tmpfs logs volume (root only)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from qledge import ids
from qledge.db import events, runs, tasks
from qledge.db.sqlite import Database
from qledge.model import Trigger
from qledge.runtime.diskwatch import (
    MIB,
    REASON,
    REASON_UNKNOWN,
    DiskWatch,
    critical_water,
    low_water,
    under_pressure,
)
from qledge.runtime.retention import DiskKeeper, Retention
from qledge.settings import Settings
from qledge.tasks.writable import TaskFields

from support import Server, eventually, tmpfs, unavailable, wait_terminal


class FakeFs:
    """statvfs of a filesystem whose free space the test sets."""

    def __init__(self, total: int, free: int) -> None:
        self.total, self.free = total, free

    def __call__(self, path: Path) -> Any:
        class St:
            f_frsize = 4096
            f_blocks = self.total // 4096
            f_bfree = self.free // 4096
            f_bavail = self.free // 4096

        return St()


def test_low_water_is_the_larger_of_both_marks() -> None:
    assert low_water(1000 * MIB, 64, 2.0) == 64 * MIB
    assert low_water(10_000 * MIB, 64, 2.0) == 200 * MIB
    assert low_water(10_000 * MIB, 0, 0) == 0


def test_pressure_has_hysteresis() -> None:
    mark = 100
    assert under_pressure(99, mark, was=False)
    assert not under_pressure(100, mark, was=False)
    assert under_pressure(110, mark, was=True)  # not yet: back above mark x 1.25
    assert not under_pressure(125, mark, was=True)
    assert not under_pressure(0, 0, was=True)  # mark 0 = off


async def test_diskwatch_reports_changes_once(tmp_path: Path) -> None:
    fs = FakeFs(total=1000 * MIB, free=500 * MIB)
    changes: list[bool] = []
    watch = DiskWatch({"data": tmp_path, "logs": tmp_path}, low_water_mb=100, low_water_pct=0,
                      on_change=changes.append, statvfs=fs)
    assert await watch.check() is None
    fs.free = 50 * MIB
    assert await watch.check() == REASON
    assert await watch.check() == REASON
    assert watch.pressed() == ["data", "logs"]
    assert watch.shares_logs_device("data")
    assert watch.bytes_to_release() == 125 * MIB - 50 * MIB + 1
    fs.free = 120 * MIB
    assert await watch.check() == REASON  # hysteresis
    fs.free = 130 * MIB
    assert await watch.check() is None
    assert changes == [True, False]
    vols = watch.volumes_report()
    assert vols["logs"] == {"total_bytes": 1000 * MIB, "used_bytes": 870 * MIB,
                            "free_bytes": 130 * MIB, "low_water_bytes": 100 * MIB,
                            "critical_bytes": 0, "pressure": False, "critical": False,
                            "error": None, "free_space_known": True,
                            "age_ms": vols["logs"]["age_ms"]}  # type: ignore[index]
    assert 0 <= vols["logs"]["age_ms"] < 1000  # type: ignore[index]  # just measured
    watch.close()


async def test_a_volume_without_statfs_has_unknown_free_space_not_zero(tmp_path: Path) -> None:
    """A filesystem reporting size 0 (no statfs) used to hold every run forever
    as 'disk pressure'. Default: not guarded, and said so; "hold": held with its
    own reason, never plain DISK_PRESSURE."""
    known, bare = FakeFs(total=1000 * MIB, free=500 * MIB), FakeFs(total=0, free=0)

    def fs(path: Path) -> Any:
        return bare(path) if path.name == "logs" else known(path)

    roots = {"data": tmp_path / "data", "logs": tmp_path / "logs"}
    for root in roots.values():
        root.mkdir()
    watch = DiskWatch(roots, low_water_mb=100, low_water_pct=0, statvfs=fs)
    assert await watch.check() is None
    assert watch.volumes_report()["logs"] == {
        "total_bytes": None, "used_bytes": None, "free_bytes": None, "low_water_bytes": 0,
        "critical_bytes": 0, "pressure": False, "critical": False, "error": None,
        "free_space_known": False,
        "age_ms": watch.volumes_report()["logs"]["age_ms"]}  # type: ignore[index]
    assert watch.report()["free_space_unknown"] == ["logs"]
    assert watch.report()["guard_unknown"] == "off"

    hold = DiskWatch(roots, low_water_mb=100, low_water_pct=0, statvfs=fs, guard_unknown="hold")
    assert await hold.check() == REASON_UNKNOWN
    assert hold.pressed() == ["logs"]
    assert hold.bytes_to_release() == 0  # deleting logs cannot be measured to help
    known.free = 50 * MIB  # real pressure elsewhere wins the reason
    assert await hold.check() == REASON
    watch.close()
    hold.close()


async def test_a_failing_probe_makes_the_free_space_unknown_at_once(tmp_path: Path) -> None:
    """The kernel's error is an answer (nothing usable), not a slow probe: unknown at
    once, without waiting for the bound, and measured again once the path is back."""
    watch = DiskWatch({"logs": tmp_path / "gone"}, low_water_mb=1, low_water_pct=0,
                      answer_bound_s=3600)
    try:
        assert await watch.check() is None
        assert watch.volumes["logs"].error == "FileNotFoundError"
        assert watch.volumes["logs"].free_space_known is False
        (tmp_path / "gone").mkdir()
        assert await watch.check() is None
        assert watch.volumes["logs"].error is None
        assert watch.volumes["logs"].free_space_known is True
        assert watch.volumes["logs"].total_bytes > 0
    finally:
        watch.close()


def _statvfs_threads(before: set[threading.Thread]) -> list[str]:
    """The probe threads started since `before` (other tests' closed watches may still
    be finishing theirs)."""
    return [t.name for t in threading.enumerate()
            if t not in before and t.name.startswith("qledge-statvfs-")]


async def test_a_hung_volume_turns_unknown_only_after_the_bound(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The logs volume is a real FUSE mount whose daemon is stopped: statvfs(2) there
    blocks in the kernel. The event loop keeps running; the volume keeps its last
    measured free space until no answer has come for the bound (1.5 s here, 60 s by
    default), then it is unknown ("TimeoutError", the guard setting applies), logged
    once; checks meanwhile never start a second stuck probe; once the filesystem
    answers, the volume is measured again."""
    from drills._forgetful import ForgetfulMount, available

    why = available()
    if why:
        unavailable(f"a FUSE filesystem to hang: {why}")
    (tmp_path / "data").mkdir()
    rig = ForgetfulMount(tmp_path / "backing", tmp_path / "logs")
    rig.mount()
    assert rig.proc is not None
    bound = 1.5
    watch = DiskWatch({"data": tmp_path / "data", "logs": tmp_path / "logs"},
                      low_water_mb=1, low_water_pct=0, answer_bound_s=bound)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    beat = asyncio.create_task(ticker())
    caplog.set_level("WARNING", logger="qledge.diskwatch")
    threads = set(threading.enumerate())
    try:
        assert await watch.check() is None
        measured = watch.volumes["logs"].total_bytes
        assert watch.volumes["logs"].error is None and measured > 0
        os.kill(rig.proc.pid, signal.SIGSTOP)
        # Should the check block the loop after all, this wakes the filesystem so that
        # the test fails on its assertions instead of hanging.
        rescue = threading.Timer(15, os.kill, (rig.proc.pid, signal.SIGCONT))
        rescue.start()
        try:
            hung_at = time.monotonic()
            before = ticks
            assert await watch.check() is None
            assert ticks - before >= 10  # the loop ran while the probe hung (0.5 s wait)
            # Within the bound: the last measured value, and how old it is.
            while time.monotonic() - hung_at < bound - 0.3:
                assert await watch.check() is None
                logs = watch.volumes["logs"]
                assert (logs.free_space_known, logs.error, logs.total_bytes) == (
                    True, None, measured)
                await asyncio.sleep(0.05)
            assert watch.volumes_report()["logs"]["age_ms"] >= (bound - 0.3) * 1000  # type: ignore[index]
            assert not [r for r in caplog.records if "unknown" in r.getMessage()]
            await asyncio.sleep(max(0.0, hung_at + bound - time.monotonic()) + 0.05)
            assert await watch.check() is None  # unknown free space holds nothing ("off")
            assert watch.volumes["logs"].error == "TimeoutError"
            assert watch.volumes["logs"].free_space_known is False
            assert watch.volumes_report()["logs"]["free_bytes"] is None  # type: ignore[index]
            watch.guard_unknown = "hold"  # the operator's choice applies to a hung one too
            assert await watch.check() == REASON_UNKNOWN
            watch.guard_unknown = "off"
            assert watch.volumes["data"].error is None  # the other volume is measured
            await asyncio.gather(*(watch.check() for _ in range(20)))
            # one stuck thread for the hung volume, not one per check
            assert sorted(_statvfs_threads(threads)) == [
                "qledge-statvfs-data", "qledge-statvfs-logs"]
            unknown = [r for r in caplog.records if "unknown" in r.getMessage()]
            assert len(unknown) == 1, unknown  # once per transition, not per check
            assert "logs volume is unknown (TimeoutError)" in unknown[0].getMessage()
        finally:
            rescue.cancel()
            os.kill(rig.proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while watch.volumes["logs"].error is not None:
            assert time.monotonic() < deadline, "the volume was never measured again"
            await asyncio.sleep(0.1)
            await watch.check()
        assert watch.volumes["logs"].free_space_known is True
        assert watch.volumes["logs"].total_bytes > 0
    finally:
        beat.cancel()
        watch.close()
        rig.unmount()


async def test_a_burst_of_checks_on_a_slow_probe_keeps_guarding(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 40: under a burst, checks raced a slow probe and the volume turned
    "unknown" — the guard switched off exactly when the disk was busiest. On a real
    8 MiB tmpfs, with the real statvfs made slow (each call sleeps past the check's
    short wait), hundreds of concurrent checks never make the volume unknown, keep one
    probe (and one thread) per volume, and still see the disk fill up."""
    logs = tmp_path / "logs"
    with tmpfs(logs, "the slow-probe burst"):
        (tmp_path / "data").mkdir()
        delay = 0.0
        calls: list[float] = []
        in_flight = 0
        most = 0
        lock = threading.Lock()

        def slow_statvfs(path: Path) -> os.statvfs_result:
            nonlocal in_flight, most
            with lock:
                in_flight += 1
                most = max(most, in_flight)
                calls.append(time.monotonic())
            try:
                time.sleep(delay)
                return os.statvfs(path)
            finally:
                with lock:
                    in_flight -= 1

        watch = DiskWatch({"data": tmp_path / "data", "logs": logs}, low_water_mb=2,
                          low_water_pct=0, statvfs=slow_statvfs, answer_bound_s=30)
        caplog.set_level("WARNING", logger="qledge.diskwatch")
        threads = set(threading.enumerate())
        try:
            assert await watch.check() is None
            assert watch.volumes["logs"].free_bytes > 6 * MIB
            delay = 1.0  # slower than the check's 0.5 s wait for a fresh answer
            calls.clear()
            # Fill the volume: 7 of its 8 MiB, below the 2 MiB mark.
            (logs / "fill").write_bytes(b"x" * (7 * MIB))
            t0 = time.monotonic()
            seen: list[str | None] = []
            while time.monotonic() - t0 < 3.5:
                seen += await asyncio.gather(*(watch.check() for _ in range(25)))
                for vol in watch.volumes.values():
                    assert (vol.free_space_known, vol.error) == (True, None), vol
                # a check that went unknown in between says so in the log
                assert not [r for r in caplog.records if "unknown" in r.getMessage()]
                await asyncio.sleep(0.02)
            elapsed = time.monotonic() - t0
            assert len(seen) >= 100
            assert most <= 2  # one call per volume at a time, however many checks
            assert len(calls) <= 2 * (elapsed / delay + 1)
            assert sorted(_statvfs_threads(threads)) == [
                "qledge-statvfs-data", "qledge-statvfs-logs"]
            # The slow answers still arrive and still guard: the full disk is seen.
            assert seen[0] is None and seen[-1] == REASON
            assert watch.volumes["logs"].pressure and not watch.volumes["data"].pressure
            assert not [r for r in caplog.records if "unknown" in r.getMessage()]
        finally:
            watch.close()


def test_a_run_is_not_held_forever_on_a_filesystem_without_statfs(tmp_path: Path) -> None:
    """The real thing: the logs volume on a FUSE filesystem without statfs."""
    from drills._forgetful import ForgetfulMount, available

    why = available()
    if why:
        unavailable(f"a FUSE filesystem without statfs: {why}")
    rig = ForgetfulMount(tmp_path / "backing", tmp_path / "logs", statfs=False)
    rig.mount()
    try:
        assert os.statvfs(tmp_path / "logs").f_blocks == 0
        srv = Server(tmp_path / "state", logs_dir=str(tmp_path / "logs"))
        try:
            task = srv.http.post("/api/v1/tasks", json={"name": "q", "command": "echo hi"}).json()
            run = srv.http.post(f"/api/v1/tasks/{task['id']}/runs").json()["run"]
            done = wait_terminal(srv.http, run["id"], timeout=20)
            assert (done["status"], done["exit_code"]) == ("succeeded", 0)
            system = srv.http.get("/api/v1/system").json()
            assert system["volumes"]["logs"]["free_space_known"] is False
            assert system["volumes"]["logs"]["free_bytes"] is None
            assert system["pressure"]["free_space_unknown"] == ["logs"]
            assert system["pressure"]["state"] == "ok"
        finally:
            srv.stop()
    finally:
        rig.unmount()


async def test_the_critical_mark_is_at_most_half_the_low_water_mark(tmp_path: Path) -> None:
    assert critical_water(100 * MIB, 16) == 16 * MIB
    assert critical_water(2 * MIB, 16) == 1 * MIB  # a tiny volume: below its pressure
    assert critical_water(0, 16) == 0  # pressure off: never critical
    fs = FakeFs(total=1000 * MIB, free=50 * MIB)
    watch = DiskWatch({"logs": tmp_path}, low_water_mb=100, low_water_pct=0,
                      critical_water_mb=16, statvfs=fs)
    assert await watch.check() == REASON and watch.bytes_to_leave_critical() == 0
    fs.free = 10 * MIB
    await watch.check()
    assert watch.volumes["logs"].critical
    assert watch.bytes_to_leave_critical() == 20 * MIB - 10 * MIB + 1



async def test_a_volume_whose_free_space_becomes_unknown_is_not_critical(tmp_path: Path) -> None:
    """Critically full, then its filesystem stops reporting a size: nothing can be
    measured any more, so each task's newest log is not taken on a stale figure."""
    fs = FakeFs(total=1000 * MIB, free=10 * MIB)
    watch = DiskWatch({"logs": tmp_path}, low_water_mb=100, low_water_pct=0,
                      critical_water_mb=16, statvfs=fs, guard_unknown="hold")
    await watch.check()
    assert watch.volumes["logs"].critical and watch.bytes_to_leave_critical() > 0
    fs.total = fs.free = 0
    assert await watch.check() == REASON_UNKNOWN
    assert not watch.volumes["logs"].critical
    assert watch.bytes_to_leave_critical() == 0
    assert watch.volumes_report()["logs"]["critical_bytes"] == 0  # type: ignore[index]


async def test_held_runs_get_one_event_each_and_resume_by_themselves(
        db: Database, conf: Settings, tmp_path: Path) -> None:
    from qledge.runtime.dispatcher import Dispatcher

    profile = msgspec.structs.replace(conf.profile_limits, low_water_mb=100, low_water_pct=0)
    woken: list[int] = []
    keeper = DiskKeeper(db=db, settings=conf, profile=profile,
                        wake_dispatcher=lambda: woken.append(1))
    fs = FakeFs(total=1000 * MIB, free=50 * MIB)
    keeper.disk._statvfs = fs

    class NoSpawn:
        async def spawn(self, run: object) -> None:
            raise AssertionError("spawned under disk pressure")

    dispatcher = Dispatcher(db, NoSpawn(), "n1", 4, lambda r: None,  # type: ignore[arg-type]
                            may_spawn=keeper.may_spawn)
    async with db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="t", command="true", env={}, labels=[],
            concurrency="allow"), 1)
        queued = [await runs.create_run(tx, ids.uuid7(), task.id, Trigger.API, 2)
                for _ in range(3)]
    assert await dispatcher.dispatch_once() == 0
    retention: Retention = keeper.retention
    for _ in range(3):  # several rounds, still one event per run
        await retention.round()
    async with db.write() as tx:
        late = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.API, 3)
    await retention.round()
    async with db.read() as tx:
        for run in [*queued, late]:
            evs = await events.list_events(tx, run.id)
            held = [e for e in evs if e.type == "run.held"]
            assert len(held) == 1
            assert held[0].data == {"reason": "DISK_PRESSURE", "volumes": "data,receipts,logs"}
            assert (await runs.get_run(tx, run.id)).status.value == "queued"
    report = await keeper.report()
    assert report["pressure"]["state"] == "pressure"  # type: ignore[index]
    assert woken == []
    fs.free = 900 * MIB
    assert await keeper.may_spawn() is None
    assert woken == [1]  # the dispatcher is woken when pressure ends
    assert (await keeper.report())["pressure"]["state"] == "ok"  # type: ignore[index]


# -- the drill: a real server, a real 8 MiB tmpfs logs volume ------------------------

@pytest.fixture
def tiny_logs(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "logs", "the disk-pressure drill") as mnt:
        yield mnt


def _wait(pred: Any, timeout: float = 60.0, what: str = "") -> Any:
    return eventually(pred, timeout=timeout, interval=0.1, what=what or "the condition")


@pytest.mark.drill
def test_disk_pressure_drill(tmp_path: Path, tiny_logs: Path) -> None:
    gate = tmp_path / "gate"
    srv = Server(tmp_path / "state", logs_dir=str(tiny_logs), low_water_mb="2",
                 low_water_pct="0", logs_cap_mb="0", retention_interval_s="1")
    try:
        http = srv.http
        # 12 MB into an 8 MiB volume: head fails with ENOSPC (exit 1), then the task
        # stays running (its log is active: never evicted) until the test opens the gate.
        overflow = http.post("/api/v1/tasks", json={
            "name": "overflow",
            "command": f"head -c 12000000 /dev/zero; rc=$?; "
                       f"while [ ! -e {gate} ]; do sleep 0.1; done; exit $rc"}).json()
        quick = http.post("/api/v1/tasks", json={
            "name": "quick", "command": "echo hello", "concurrency": "allow"}).json()
        big = http.post(f"/api/v1/tasks/{overflow['id']}/runs").json()["run"]

        def pressure() -> dict[str, Any] | None:
            system = http.get("/api/v1/system").json()
            return system if system["pressure"]["state"] == "pressure" else None

        system = _wait(pressure, what="disk pressure")
        assert "logs" in system["pressure"]["volumes"]
        assert system["volumes"]["logs"]["free_bytes"] < 2 * MIB
        assert system["volumes"]["data"]["pressure"] is False

        held = [http.post(f"/api/v1/tasks/{quick['id']}/runs").json()["run"]
                for _ in range(2)]

        def held_events() -> bool:
            for run in held:
                events = http.get(f"/api/v1/runs/{run['id']}/events").json()
                items = events["items"] if isinstance(events, dict) else events
                if not any(e["type"] == "run.held" for e in items):
                    return False
            return True

        _wait(held_events, what="run.held events")
        time.sleep(2.5)  # more rounds under pressure: still one event each, still queued
        for run in held:
            body = http.get(f"/api/v1/runs/{run['id']}").json()
            assert body["status"] == "queued"
            events = http.get(f"/api/v1/runs/{run['id']}/events").json()
            items = events["items"] if isinstance(events, dict) else events
            hold = [e for e in items if e["type"] == "run.held"]
            assert len(hold) == 1 and hold[0]["data"]["reason"] == "DISK_PRESSURE"
        assert http.get(f"/api/v1/runs/{big['id']}").json()["status"] == "running"

        gate.touch()
        done = wait_terminal(http, big["id"], timeout=60)
        assert done["status"] == "failed" and done["exit_code"] == 1  # never a false success
        for run in held:  # retention evicts the overflow log, pressure ends, they start
            finished = wait_terminal(http, run["id"], timeout=60)
            assert finished["status"] == "succeeded", finished
            assert http.get(f"/api/v1/runs/{run['id']}/log").content == b"hello\n"
        # The overflow log is its task's newest: kept under mere pressure, taken
        # because the volume was critically full (free < 1 MiB = half the 2 MiB mark).
        gone = http.get(f"/api/v1/runs/{big['id']}/log")
        assert gone.status_code == 410
        assert gone.json()["reason"] == "DISK_CRITICAL"
        system = http.get("/api/v1/system").json()
        assert system["retention"]["deleted_since_start"]["logs"]["DISK_CRITICAL"] == 1
        assert system["pressure"]["state"] == "ok"
        assert system["retention"]["runs_kept"] == 3
        conn = sqlite3.connect(srv.state / "data" / "qledge.sqlite3")
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        finally:
            conn.close()
    finally:
        gate.touch()
        srv.stop()


# -- each task's newest finished log survives pressure, not a critically full disk ---

async def test_pressure_keeps_each_tasks_newest_log_until_the_disk_is_critical(
        db: Database, conf: Settings) -> None:
    from qledge.db import retention_queries as q
    from qledge.launch import logs
    from test_retention import _log_file, _run, _task

    profile = msgspec.structs.replace(conf.profile_limits, low_water_mb=100, low_water_pct=0,
                                      critical_water_mb=16, logs_cap_mb=0)
    keeper = DiskKeeper(db=db, settings=conf, profile=profile, wake_dispatcher=lambda: None)
    # Foreign files fill the disk: 60 MiB free, under the 100 MiB mark, above 16 MiB.
    fs = FakeFs(total=1000 * MIB, free=60 * MIB)
    keeper.disk._statvfs = fs
    tasks = [await _task(db, keep_runs=0, keep_days=0) for _ in range(2)]
    made = {t: [await _run(db, conf, t, log_bytes=1000) for _ in range(3)] for t in tasks}
    newest = {made[t][-1][1] for t in tasks}

    report = await keeper.retention.round()
    for t in tasks:
        for _, aid in made[t]:
            assert _log_file(conf, aid).exists() == (aid in newest)
    assert report.deleted == {"logs": {"DISK_PRESSURE": 4}}
    system = await keeper.report()
    last = system["retention"]["last_round"]  # type: ignore[index]
    assert last["deleted"]["logs"] == {"SIZE_CAP": 0, "DISK_PRESSURE": 4, "DISK_CRITICAL": 0}
    assert last["deleted"]["runs"] == {"KEEP_RUNS": 0, "KEEP_DAYS": 0}

    fs.free = 10 * MIB  # critically full now: the newest logs go too, under their own reason
    report = await keeper.retention.round()
    assert report.deleted == {"logs": {"DISK_CRITICAL": 2}}
    assert not any(_log_file(conf, aid).exists() for aid in newest)
    async with db.read() as tx:
        for aid in newest:
            assert (await q.log_eviction(tx, logs.relative_path(aid)))[0] == "DISK_CRITICAL"  # type: ignore[index]
    system = await keeper.report()
    assert system["retention"]["deleted_since_start"]["logs"] == {  # type: ignore[index]
        "SIZE_CAP": 0, "DISK_PRESSURE": 4, "DISK_CRITICAL": 2}
    assert system["volumes"]["logs"]["critical"] is True  # type: ignore[index]
    assert _rows_in(conf, "SELECT COUNT(*) FROM runs") == 6  # runs stay; only logs went


def _rows_in(conf: Settings, sql: str) -> int:
    conn = sqlite3.connect(conf.db_path)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()
