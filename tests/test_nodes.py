"""Fleet mode's node lifecycle on a real PostgreSQL (tests/_pg.py): register, heartbeat,
lease expiry and takeover, fencing, and the fenced node's old launchers (real
processes). The SQLite appliance answers /api/v1/nodes as a fleet of one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from qledge import ids, transitions
from qledge.db import attempts, events, nodes, pg, runs, tasks
from qledge.launch import identity
from qledge.launch.executor import EXECUTOR_TYPE
from qledge.model import AttemptStatus, Reason, RunStatus, Trigger
from qledge.node import Node, labels_of
from qledge.runtime.fleet import Fleet
from qledge.runtime.lifecycle import read_boot_id
from qledge.settings import Settings, SettingsError
from qledge.tasks.writable import TaskFields

from support import make_settings

BOOT = read_boot_id()



@pytest.fixture
async def second(pgdb: pg.Database) -> AsyncIterator[pg.Database]:
    """Another node's own connections to the same database."""
    db = pg.Database(pgdb.dsn)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


def _conf(tmp_path: Path, **more: str) -> Settings:
    return make_settings(tmp_path / "state", **{"node_lease_s": "60", "node_heartbeat_s": "5",
                                                **more})


def _fleet(db: pg.Database, conf: Settings, name: str, node_id: str | None = None) -> Fleet:
    node = Node(name=name, labels=labels_of(name, "gpio"), url=f"http://{name}:8080",
                node_id=node_id or ids.uuid7(), fleet=True)
    return Fleet(db, node, conf, ids.uuid7(), "test-1", boot_id=BOOT, kill_grace_s=0.5)


async def _row(db: pg.Database, name: str) -> nodes.NodeRow:
    async with db.read() as tx:
        row = await nodes.node_by_name(tx, name)
    assert row is not None
    return row


async def _expire(db: pg.Database, name: str) -> None:
    async with db.write() as tx:
        await tx.execute("UPDATE nodes SET lease_expires_at_ms = 0 WHERE name = ?", (name,))


async def _running(db: pg.Database, owner: str, epoch: int | None, *, pid: int = 4242,
                   start_time: int = 77, boot_id: str = "another-boot") -> str:
    """A run `running` with one attempt of `owner` at `epoch` (what a claim leaves)."""
    run_id = ids.uuid7()
    async with db.write() as tx:
        run = await runs.create_run(tx, run_id, "t1", Trigger.MANUAL, 10)
        run = await runs.apply(tx, run, transitions.attempt_prepared(run), 20)
        att = await attempts.prepare_attempt(
            tx, run, attempt_id=ids.uuid7(), owner=owner, executor_type=EXECUTOR_TYPE,
            token_hash=b"\x00token", deadline_at_ms=None, log_path=f"t1/{run_id}.log",
            receipt_path=f"receipts/{run_id}", now_ms=20)
        # The claim (helper C) writes node_epoch; here the test does.
        await tx.execute("UPDATE run_attempts SET node_epoch = ? WHERE id = ?", (epoch, att.id))
        run = await runs.get_run(tx, run_id)
        await runs.apply(tx, run, transitions.attempt_started(
            run, att, pid=pid, start_time=start_time, boot_id=boot_id, now_ms=30), 30)
    return run_id


async def _task(db: pg.Database) -> None:
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", TaskFields(name="t1", command="run t1", env={},
                                           labels=[]), 1)


async def _state(db: pg.Database, run_id: str) -> dict[str, Any]:
    async with db.read() as tx:
        run = await runs.get_run(tx, run_id)
        (att,) = await attempts.attempts_of_run(tx, run_id)
        evs = await events.list_events(tx, run_id)
    types = [e.type for e in evs]
    return {"run": run.status, "attempt": att.status, "reason": att.reason_code,
            "finished": types.count("attempt.finished"),
            "run_finished": types.count("run.finished")}


# -- register and heartbeat -----------------------------------------------------------

async def test_register_keeps_the_epoch_on_restart_and_bumps_it_for_another_machine(
        pgdb: pg.Database, tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    a = _fleet(pgdb, conf, "garage-pi")
    assert await a.register() == 1 and a.node.epoch == 1 and a.ready
    row = await _row(pgdb, "garage-pi")
    assert (row.state, row.node_id, row.url, row.version) == (
        "live", a.node.node_id, "http://garage-pi:8080", "test-1")
    assert "node=garage-pi" in row.labels and "gpio" in row.labels
    # A worker restart: same node id, the row still live → same epoch, attempts kept.
    restarted = _fleet(pgdb, conf, "garage-pi", a.node.node_id)
    assert await restarted.register() == 1
    # Another machine under the same name: a new epoch, and the first one is fenced.
    other = _fleet(pgdb, conf, "garage-pi")
    assert await other.register() == 2
    assert not await restarted.heartbeat()
    assert restarted.fencings == 1 and not restarted.node.fenced
    assert restarted.node.epoch == 3  # it registered again; now `other` is fenced
    assert not await other.heartbeat()


async def test_a_heartbeat_extends_the_lease_by_the_database_clock_and_records_skew(
        pgdb: pg.Database, tmp_path: Path) -> None:
    a = _fleet(pgdb, _conf(tmp_path), "office")
    await a.register()
    await _expire(pgdb, "office")  # run out, but nobody took it over: still the holder
    assert await a.heartbeat()
    row = await _row(pgdb, "office")
    assert row.epoch == 1 and row.state == "live"
    assert 59_000 <= row.lease_expires_at_ms - row.db_now_ms <= 60_000
    assert row.heartbeat_at_ms <= row.db_now_ms
    # One machine, one clock: the skew is the statement's latency, not seconds.
    assert a.skew_ms is not None and abs(a.skew_ms) < 2000
    assert row.clock_skew_ms == a.skew_ms
    assert a.report()["epoch"] == 1 and a.report()["fenced"] is False


def test_the_heartbeat_must_be_at_most_a_third_of_the_lease(tmp_path: Path) -> None:
    conf = make_settings(tmp_path / "state", node_lease_s="30", node_heartbeat_s="11")
    with pytest.raises(SettingsError, match="at most a third"):
        _fleet(None, conf, "x")  # type: ignore[arg-type]
    ok = make_settings(tmp_path / "state", node_lease_s="30", node_heartbeat_s="10")
    assert _fleet(None, ok, "x").lease_ms == 30_000  # type: ignore[arg-type]


# -- lease expiry and takeover ---------------------------------------------------------

async def test_a_takeover_declares_exactly_the_old_epochs_active_attempts_lost(
        pgdb: pg.Database, tmp_path: Path) -> None:
    conf = _conf(tmp_path, node_lease_s="1", node_heartbeat_s="0.3", fenced_tasks="leave")
    await _task(pgdb)
    a, b = _fleet(pgdb, conf, "garage-pi"), _fleet(pgdb, conf, "office")
    await a.register()
    await b.register()
    old = [await _running(pgdb, a.node.node_id, 1) for _ in range(3)]
    unfenced = await _running(pgdb, a.node.node_id, None)  # no epoch: the SQLite way
    of_b = await _running(pgdb, b.node.node_id, 1)
    await b.round()
    assert b.takeovers == 0 and b.decided_lost == 0  # A's lease still runs
    await asyncio.sleep(1.2)  # A sends no heartbeat: its lease runs out (database clock)
    await b.round()  # B's heartbeat, then the takeover
    assert b.takeovers == 1 and b.decided_lost == 3
    row = await _row(pgdb, "garage-pi")
    assert (row.state, row.epoch) == ("expired", 2)
    for run_id in old:
        assert await _state(pgdb, run_id) == {
            "run": RunStatus.LOST, "attempt": AttemptStatus.LOST,
            "reason": Reason.NODE_LEASE_EXPIRED.value, "finished": 1, "run_finished": 1}
    for run_id in (unfenced, of_b):
        assert (await _state(pgdb, run_id))["attempt"] is AttemptStatus.RUNNING
    await b.round()  # idempotent: nothing decided twice, no second terminal event
    assert b.takeovers == 1 and b.decided_lost == 3
    assert [(await _state(pgdb, r))["finished"] for r in old] == [1, 1, 1]
    # A comes back: its heartbeat finds the epoch taken over → fenced, registers again.
    assert not await a.heartbeat()
    assert a.fencings == 1 and a.node.epoch == 3
    row = await _row(pgdb, "garage-pi")
    assert (row.state, row.epoch) == ("live", 3)
    assert await a.heartbeat() and a.ready


async def test_two_nodes_racing_the_takeover_decide_each_attempt_once(
        pgdb: pg.Database, second: pg.Database, tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    await _task(pgdb)
    a = _fleet(pgdb, conf, "garage-pi")
    b, c = _fleet(pgdb, conf, "office"), _fleet(second, conf, "homelab")
    for f in (a, b, c):
        await f.register()
    old = [await _running(pgdb, a.node.node_id, 1) for _ in range(150)]  # > 2 pages
    await _expire(pgdb, "garage-pi")
    await asyncio.gather(b.round(), c.round())
    assert b.takeovers + c.takeovers == 1
    await asyncio.gather(b.round(), c.round())  # a page skipped as locked is done now
    assert b.decided_lost + c.decided_lost == len(old)
    for run_id in old:
        got = await _state(pgdb, run_id)
        assert (got["attempt"], got["reason"], got["finished"], got["run_finished"]) == (
            AttemptStatus.LOST, Reason.NODE_LEASE_EXPIRED.value, 1, 1)
    assert (await _row(pgdb, "garage-pi")).epoch == 2


async def test_the_nodes_list_counts_running_attempts_per_node(
        pgdb: pg.Database, tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    await _task(pgdb)
    a, b = _fleet(pgdb, conf, "garage-pi"), _fleet(pgdb, conf, "office")
    await a.register()
    await b.register()
    for _ in range(2):
        await _running(pgdb, a.node.node_id, 1)
    async with pgdb.read() as tx:
        listed = {r.name: r for r in await nodes.list_nodes(tx)}
    assert set(listed) == {"garage-pi", "office"}
    assert (listed["garage-pi"].running, listed["office"].running) == (2, 0)
    async with pgdb.read() as tx:
        by_id = await nodes.node_by_id(tx, b.node.node_id)
    assert by_id is not None and by_id.name == "office"


# -- the fenced node's old launchers ---------------------------------------------------

def _spawn(script: str) -> subprocess.Popen[bytes]:
    # Its own session: a group whose id is its pid, as ql-launch's.
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


async def _fence(pgdb: pg.Database, tmp_path: Path, fenced_tasks: str,
                 procs: list[tuple[subprocess.Popen[bytes], int]]) -> Fleet:
    """Node A runs `procs` (pid, recorded start time) under epoch 1; B takes it over;
    A's next heartbeat finds itself fenced. Returns A after its stop path ran."""
    conf = _conf(tmp_path, fenced_tasks=fenced_tasks)
    await _task(pgdb)
    a, b = _fleet(pgdb, conf, "garage-pi"), _fleet(pgdb, conf, "office")
    a.kill_grace_s = 0.5
    await a.register()
    await b.register()
    for proc, start in procs:
        await _running(pgdb, a.node.node_id, 1, pid=proc.pid, start_time=start, boot_id=BOOT)
    await _expire(pgdb, "garage-pi")
    await b.round()
    assert b.decided_lost == len(procs)
    assert not await a.heartbeat()
    await a.stop()  # waits for the stop path it started
    return a


def _start(proc: subprocess.Popen[bytes]) -> int:
    st = identity.start_time(proc.pid)
    assert st is not None
    return st


async def test_a_fenced_node_stops_its_old_launchers_and_never_a_reused_pid(
        pgdb: pg.Database, tmp_path: Path) -> None:
    polite = _spawn("exec sleep 60")
    stubborn = _spawn("trap '' TERM; sleep 60")  # ignores TERM: KILL after the grace
    # Same pid, another start time: the pid now names a different process.
    stranger = _spawn("exec sleep 60")
    try:
        a = await _fence(pgdb, tmp_path, "stop", [
            (polite, _start(polite)), (stubborn, _start(stubborn)),
            (stranger, _start(stranger) + 1)])
        assert polite.wait(5) == -signal.SIGTERM
        assert stubborn.wait(5) == -signal.SIGKILL
        assert stranger.poll() is None  # never signalled
        assert a.signalled == 2
    finally:
        for p in (polite, stubborn, stranger):
            if p.poll() is None:
                p.kill()
                p.wait()


async def test_fenced_tasks_leave_lets_the_old_launchers_run(
        pgdb: pg.Database, tmp_path: Path) -> None:
    proc = _spawn("exec sleep 60")
    try:
        a = await _fence(pgdb, tmp_path, "leave", [(proc, _start(proc))])
        await asyncio.sleep(0.3)
        assert proc.poll() is None and a.signalled == 0
    finally:
        proc.kill()
        proc.wait()


async def _prepared(db: pg.Database, owner: str, epoch: int) -> tuple[str, str]:
    """(run id, attempt id) of an attempt spawned but not yet identified: its worker
    holds the launcher's identity in memory, within the identity grace."""
    run_id, attempt_id = ids.uuid7(), ids.uuid7()
    async with db.write() as tx:
        run = await runs.create_run(tx, run_id, "t1", Trigger.MANUAL, 10)
        run = await runs.apply(tx, run, transitions.attempt_prepared(run), 20)
        await attempts.prepare_attempt(
            tx, run, attempt_id=attempt_id, owner=owner, executor_type=EXECUTOR_TYPE,
            token_hash=b"\x00token", deadline_at_ms=None, log_path=f"t1/{run_id}.log",
            receipt_path=f"receipts/{run_id}", now_ms=20, node_epoch=epoch)
    return run_id, attempt_id


async def test_a_fenced_node_stops_the_launchers_it_never_recorded(
        pgdb: pg.Database, tmp_path: Path) -> None:
    """Issue 41: spawned within the identity grace, decided `lost` with no pid by the
    takeover. The fenced node stops the one whose identity it holds in memory and the
    one it finds in /proc by its run and attempt ids (a worker restarted since)."""
    conf = _conf(tmp_path, fenced_tasks="stop")
    await _task(pgdb)
    a, b = _fleet(pgdb, conf, "garage-pi"), _fleet(pgdb, conf, "office")
    a.kill_grace_s = 0.5
    await a.register()
    await b.register()
    (_, held_id), (run_id, found_id), _ = [await _prepared(pgdb, a.node.node_id, 1)
                                           for _ in range(3)]
    held = _spawn("sleep 60; true")
    # argv as ql-launch's: the walk matches `--run-id R` and `--attempt-id A`.
    found = subprocess.Popen(["sh", "-c", "sleep 60; true", "ql-launch", "--run-id", run_id,
                              "--attempt-id", found_id], start_new_session=True)
    procs = (held, found)
    try:
        memory = {held_id: identity.Identity(pid=held.pid, start_time=_start(held),
                                             boot_id=BOOT)}
        a.unrecorded = memory.get
        await _expire(pgdb, "garage-pi")
        await b.round()
        assert b.decided_lost == 3
        async with pgdb.read() as tx:
            assert [x.pid for x in (await attempts.get_attempt(tx, held_id),
                                    await attempts.get_attempt(tx, found_id))] == [None, None]
        assert not await a.heartbeat()
        await a.stop()
        assert held.wait(5) == -signal.SIGTERM
        assert found.wait(5) == -signal.SIGTERM
        assert a.signalled == 2  # the third never had a launcher: nothing to signal
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # the sleep the shell left behind


# -- the API on the embedded SQLite -------------------------------------------------------

def test_the_sqlite_appliance_lists_itself_as_a_fleet_of_one(client: TestClient) -> None:
    got = client.get("/api/v1/nodes")
    assert got.status_code == 200
    body = got.json()
    assert body["fleet"] is False
    (me,) = body["items"]
    assert me["name"] == body["self"] and me["epoch"] is None
    assert any(label.startswith("arch=") for label in me["labels"])
    assert me["running_attempts"] == 0
