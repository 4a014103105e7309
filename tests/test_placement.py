"""Placement (docs/fleet.md, "The model", "The claim"): the task API, a run's copy of
its task's placement, the claim's page filtered in SQL on both backends, and the claim
on PostgreSQL across two nodes (two Database connections, a real cluster)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

from qledge.db import attempts, claims, pg, runs, tasks
from qledge.db.sqlite import Database
from qledge.launch.executor import ExecutorSettings, LocalExecutor, Prepared
from qledge.launch.isolation import Isolation
from qledge.launch.unrecorded import Identities
from qledge.model import Run, RunStatus, Trigger
from qledge.node import Node
from qledge.receipts.store import ReceiptStore
from qledge.runtime.dispatcher import Dispatcher
from qledge.tasks.writable import TaskFields, task_fields

TASK = {"name": "sensor", "command": "echo hi"}


# -- the task API -------------------------------------------------------------------------

def test_the_task_api_takes_and_returns_a_placement(client: TestClient) -> None:
    r = client.post("/api/v1/tasks", json=TASK)
    assert r.status_code == 201
    assert r.json()["placement"] == {"node": None, "labels": []}
    assert "placement_node" not in r.json()
    url = f"/api/v1/tasks/{r.json()['id']}"
    placed = {"node": "garage-pi", "labels": ["gpio", "arch=aarch64", "gpio"]}
    got = client.patch(url, json={"placement": placed}).json()
    assert got["placement"] == {"node": "garage-pi", "labels": ["gpio", "arch=aarch64"]}
    assert client.get(url).json()["placement"] == got["placement"]
    # Unrelated edits keep it; null clears it.
    assert client.patch(url, json={"name": "s2"}).json()["placement"] == got["placement"]
    assert client.patch(url, json={"placement": None}).json()["placement"] == {
        "node": None, "labels": []}
    r = client.post("/api/v1/tasks", json={**TASK, "placement": {"labels": ["gpio"]}})
    assert r.json()["placement"] == {"node": None, "labels": ["gpio"]}


@pytest.mark.parametrize("bad", [
    {"node": "Garage_Pi"}, {"node": "-x"}, {"node": ""}, {"labels": ["has space"]},
    {"labels": ["x" * 64]}, {"labels": [f"l{n}" for n in range(33)]}, {"nodes": "x"},
    {"labels": "gpio"},
])
def test_a_bad_placement_is_refused_with_a_reason(client: TestClient, bad: Any) -> None:
    # Well-formed JSON that fails validation: the API's 422 INVALID naming the field.
    r = client.post("/api/v1/tasks", json={**TASK, "placement": bad})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "INVALID" and r.json()["field"].startswith("placement")
    assert client.get("/api/v1/tasks").json()["items"] == []


def test_a_queued_run_no_node_can_take_says_why(client: TestClient) -> None:
    """The one SQLite node (no name given to it here) cannot take a run placed on
    `garage-pi`: it stays queued and says so; an unplaced run says nothing."""
    task = client.post("/api/v1/tasks", json={
        **TASK, "placement": {"node": "garage-pi"}}).json()
    run = client.post(f"/api/v1/tasks/{task['id']}/runs").json()["run"]
    assert run["placement"] == {"node": "garage-pi", "labels": []}
    got = client.get(f"/api/v1/runs/{run['id']}").json()
    assert got["status"] == "queued" and got["attempts"] == []
    assert got["waiting"] == {"reason": "PLACEMENT_NO_NODE", "node": "garage-pi",
                              "labels": []}
    listed = client.get("/api/v1/runs").json()["items"]
    assert [r["waiting"]["reason"] for r in listed] == ["PLACEMENT_NO_NODE"]


def test_qinglong_crons_carry_the_placement_as_an_extension(client: TestClient) -> None:
    r = client.post("/open/crons", json={"command": "echo hi", "schedule": "0 * * * *"})
    assert r.json()["data"]["qledge_placement"] == {"node": None, "labels": []}
    num = r.json()["data"]["id"]
    r = client.put("/open/crons", json={"id": num, "qledge_placement": {
        "node": "garage-pi", "labels": ["gpio"]}})
    assert r.status_code == 200, r.text
    cron = r.json()["data"]
    assert cron["qledge_placement"] == {"node": "garage-pi", "labels": ["gpio"]}
    native = client.get(f"/api/v1/tasks/{cron['qledge_id']}").json()
    assert native["placement"] == cron["qledge_placement"]
    # A QingLong client's update without the extension leaves it as it is.
    r = client.put("/open/crons", json={"id": num, "name": "renamed"})
    assert r.json()["data"]["qledge_placement"] == cron["qledge_placement"]
    r = client.put("/open/crons", json={"id": num, "qledge_placement": {"node": "Bad!"}})
    assert r.status_code == 400 and "placement" in r.text


def test_waiting_names_the_down_node_or_the_missing_labels() -> None:
    run = Run(id="r", task_id="t", trigger=Trigger.API, status=RunStatus.QUEUED, version=1,
              event_seq=1, cancel_reason=None, cancel_requested_at_ms=None, created_at_ms=1,
              started_at_ms=None, finished_at_ms=None, exit_code=None, reason_code=None,
              placement_node="pi", placement_labels=["gpio"])
    assert claims.judge(run, []) == claims.Waiting(reason="PLACEMENT_NO_NODE", node="pi")
    assert claims.judge(run, [("pi", ["gpio"], False)]) == claims.Waiting(
        reason="PLACEMENT_NODE_DOWN", node="pi")
    assert claims.judge(run, [("pi", ["x"], True)]) == claims.Waiting(
        reason="PLACEMENT_NO_LABEL", node="pi", labels=["gpio"])
    assert claims.judge(run, [("pi", ["gpio"], True)]) is None
    run = msgspec.structs.replace(run, placement_node=None)
    assert claims.judge(run, [("a", ["gpio"], False), ("b", [], True)]) == claims.Waiting(
        reason="PLACEMENT_NO_LABEL", labels=["gpio"])
    assert claims.judge(run, [("a", ["gpio"], True)]) is None


# -- both backends --------------------------------------------------------------------------



async def _on_both(litedb: Database, pgdb: pg.Database, scenario: Any) -> Any:
    lite = await scenario(litedb)
    assert await scenario(pgdb) == lite
    return lite


def _task(name: str, **more: Any) -> TaskFields:
    return task_fields({"name": name, "command": f"run {name}", "env": {}, "labels": [],
                        "overlap": "allow", **more})


async def _placed_runs(db: Any) -> dict[str, Any]:
    async with db.write() as tx:
        await tasks.create_task(tx, "t-any", _task("any"), 1)
        await tasks.create_task(tx, "t-pi", _task("pi", placement_node="pi"), 1)
        await tasks.create_task(tx, "t-gpio", _task("gpio", placement_labels=["gpio"]), 1)
        await tasks.create_task(tx, "t-both", _task(
            "both", placement_node="pi", placement_labels=["gpio", "arch=aarch64"]), 1)
        for n, tid in enumerate(("t-any", "t-pi", "t-gpio", "t-both"), start=1):
            await runs.create_run(tx, f"r{n}", tid, Trigger.API, 10 + n)
        # Editing the task later moves no queued run: each kept its own copy.
        await tasks.update_task(tx, "t-pi", TaskFields(placement_node="office",
                                             placement_labels=["x"]), 20)
        await runs.create_run(tx, "r5", "t-pi", Trigger.API, 21)
    pi = Node(name="pi", labels=("node=pi", "gpio", "arch=aarch64"))
    office = Node(name="office", labels=("node=office", "x"))
    bare = Node(name="pi", labels=())
    async with db.read() as tx:
        return {
            "copied": [(r.placement_node, r.placement_labels) for r in [
                await runs.get_run(tx, f"r{n}") for n in range(1, 6)]],
            "task": (await tasks.get_task(tx, "t-any")).placement_labels,
            "all": [r.id for r in await runs.queued_runs(tx, 10, 100)],
            "pi": [r.id for r in await runs.queued_runs(tx, 10, 100, pi)],
            "office": [r.id for r in await runs.queued_runs(tx, 10, 100, office)],
            "bare": [r.id for r in await runs.queued_runs(tx, 10, 100, bare)],
            "first": [r.id for r in await runs.queued_runs(tx, 1, 100, office)],
            "null": (await tx.one("SELECT placement_labels_json FROM runs WHERE id = 'r2'"))[0],
        }


async def test_runs_copy_their_placement_and_the_queue_is_filtered_on_both(
        litedb: Database, pgdb: pg.Database) -> None:
    got = await _on_both(litedb, pgdb, _placed_runs)
    assert got["copied"] == [(None, []), ("pi", []), (None, ["gpio"]),
                             ("pi", ["gpio", "arch=aarch64"]), ("office", ["x"])]
    assert got["task"] == [] and got["null"] is None  # no labels: NULL, not "[]"
    assert got["all"] == ["r1", "r2", "r3", "r4", "r5"]
    assert got["pi"] == ["r1", "r2", "r3", "r4"]
    assert got["office"] == ["r1", "r5"] and got["first"] == ["r1"]
    assert got["bare"] == ["r1", "r2"]  # the name, but not the labels


# -- the claim on PostgreSQL ----------------------------------------------------------------

class _NoEnv:
    """No variables besides the task's own (launch/executor.py Environments)."""

    async def global_env(self, tx: Any) -> dict[str, str]:
        return {}

    async def task_env(self, tx: Any, task: Any, run: Run) -> dict[str, str]:
        return {}

    def run_env(self, attempt_id: str) -> dict[str, str]:
        return {}


class _StepOne(LocalExecutor):
    """The real spawn step 1 (LocalExecutor.prepare_in, in the claim's transaction); no
    process is launched — the claim, not the launcher, is under test. With a `gate`,
    step 1 waits inside its open transaction (its locks held) until the gate opens."""

    def __init__(self, db: Any, tmp: Path, node: Node) -> None:
        (tmp / "receipts").mkdir(parents=True)
        config = ExecutorSettings(logs_root=tmp / "logs", work_dir=tmp,
                                  scripts_dir=tmp / "scripts", launcher="/bin/false",
                                  node_id=node.node_id, boot_id="boot")
        super().__init__(
            config, db=db, receipts=ReceiptStore(tmp / "receipts"), env=_NoEnv(),
            identities=Identities(), node=node, journal_cutoff=lambda now: None,
            on_cancelling=lambda: None,
            isolation=Isolation(mode="off", landlock_abi=None, effective=False,
                                reason=None, protected=()))
        self.prepared: list[str] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def prepare_in(self, tx: Any, run: Run, task: Any = None) -> Prepared | None:
        got = await super().prepare_in(tx, run, task)
        if got is not None:
            self.prepared.append(got.run.id)
            self.entered.set()
            if self.gate is not None:
                await self.gate.wait()
        return got

    async def launch(self, prepared: Prepared) -> None:
        return None


@pytest.fixture
async def pgdb2(pgdb: pg.Database) -> AsyncIterator[pg.Database]:
    """A second node's connections to the same database."""
    db = pg.Database(pgdb.dsn)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def _register(db: pg.Database, name: str, epoch: int, lease_ms: int) -> Node:
    """A `nodes` row as runtime/fleet.py keeps it (lease `lease_ms` past the db clock)."""
    node = Node(name=name, labels=(f"node={name}",), node_id=f"id-{name}", fleet=True,
                epoch=epoch)
    async with db.write() as tx:
        await tx.execute(
            "INSERT INTO nodes (name, node_id, incarnation, epoch, state, labels_json, url,"
            " version, heartbeat_at_ms, lease_expires_at_ms, registered_at_ms)"
            f" VALUES (?, ?, 'inc', ?, 'live', ?, '', 'test', 1, {claims.DB_NOW} + ?, 1)",
            (name, node.node_id, epoch, f'["node={name}"]', lease_ms))
    return node


def _dispatcher(db: pg.Database, tmp: Path, node: Node, limit: int) -> Dispatcher:
    executor = _StepOne(db, tmp / node.name, node)
    return Dispatcher(db, executor, node.node_id, limit, lambda _: None,  # type: ignore[arg-type]
                      node=node)


async def _queue(db: pg.Database, n: int, **task: Any) -> list[str]:
    async with db.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1", **task), 1)
        return [(await runs.create_run(tx, f"r{i:02d}", "t1", Trigger.API, 10 + i)).id
                for i in range(n)]


async def _attempts_by_run(db: pg.Database) -> dict[str, list[tuple[str, int | None]]]:
    async with db.read() as tx:
        rows = await tx.all("SELECT run_id, runtime_owner, node_epoch FROM run_attempts"
                            " ORDER BY run_id, attempt_no")
    out: dict[str, list[tuple[str, int | None]]] = {}
    for r in rows:
        out.setdefault(r["run_id"], []).append((r["runtime_owner"], r["node_epoch"]))
    return out


async def test_two_nodes_claiming_at_once_prepare_each_run_once(
        pgdb: pg.Database, pgdb2: pg.Database, tmp_path: Path) -> None:
    a = _dispatcher(pgdb, tmp_path, await _register(pgdb, "a", 3, 60_000), 30)
    b = _dispatcher(pgdb2, tmp_path, await _register(pgdb, "b", 7, 60_000), 30)
    queued = await _queue(pgdb, 24)
    started = await asyncio.gather(a.dispatch_once(), b.dispatch_once())
    assert sum(started) == 0  # _StepOne launches nothing; step 1 is what counts
    got = await _attempts_by_run(pgdb)
    assert sorted(got) == queued
    assert all(len(v) == 1 for v in got.values()), got
    # Each attempt carries its node's owner and lease epoch.
    assert {v[0] for v in got.values()} <= {("id-a", 3), ("id-b", 7)}
    assert len(a.executor.prepared) + len(b.executor.prepared) == 24  # type: ignore[attr-defined]


async def test_a_node_skips_the_run_another_node_holds(
        pgdb: pg.Database, pgdb2: pg.Database, tmp_path: Path) -> None:
    a = _dispatcher(pgdb, tmp_path, await _register(pgdb, "a", 1, 60_000), 1)
    b = _dispatcher(pgdb2, tmp_path, await _register(pgdb, "b", 1, 60_000), 2)
    queued = await _queue(pgdb, 4)
    ex_a: Any = a.executor
    ex_a.gate = asyncio.Event()
    held = asyncio.create_task(a.dispatch_once())
    await asyncio.wait_for(ex_a.entered.wait(), 10)  # a holds r00, uncommitted
    # b neither waits for a's row nor prepares it again: it takes the next two.
    assert await asyncio.wait_for(b.dispatch_once(), 3) == 0
    assert b.executor.prepared == queued[1:3]  # type: ignore[attr-defined]
    ex_a.gate.set()
    await held
    got = await _attempts_by_run(pgdb)
    assert got == {queued[0]: [("id-a", 1)], queued[1]: [("id-b", 1)],
                   queued[2]: [("id-b", 1)]}


@pytest.mark.parametrize("moved", ["epoch", "lease", "fenced", "unregistered"])
async def test_a_fenced_node_inserts_no_attempt(
        pgdb: pg.Database, tmp_path: Path, moved: str) -> None:
    node = await _register(pgdb, "a", 4, 60_000)
    if moved == "epoch":  # taken over: the row's epoch is not this node's any more
        async with pgdb.write() as tx:
            await tx.execute("UPDATE nodes SET epoch = 5 WHERE name = 'a'")
    elif moved == "lease":
        async with pgdb.write() as tx:
            await tx.execute(f"UPDATE nodes SET lease_expires_at_ms = {claims.DB_NOW} - 1")
    elif moved == "fenced":
        node.fenced = True
    else:
        node.epoch = None
    d = _dispatcher(pgdb, tmp_path, node, 4)
    await _queue(pgdb, 2)
    await d.dispatch_once()
    assert await _attempts_by_run(pgdb) == {}
    async with pgdb.read() as tx:
        assert {r.status for r in await runs.queued_runs(tx, 10, 10**13)} == {
            RunStatus.QUEUED}
        assert len(await runs.queued_runs(tx, 10, 10**13)) == 2


async def test_a_run_placed_on_one_node_is_never_claimed_by_another(
        pgdb: pg.Database, pgdb2: pg.Database, tmp_path: Path) -> None:
    x = _dispatcher(pgdb, tmp_path, await _register(pgdb, "x", 1, 60_000), 4)
    y = _dispatcher(pgdb2, tmp_path, await _register(pgdb, "y", 1, 60_000), 4)
    queued = await _queue(pgdb, 3, placement_node="x")
    await y.dispatch_once()
    assert await _attempts_by_run(pgdb) == {}
    async with pgdb.read() as tx:  # x is live: nothing to explain
        run = await runs.get_run(tx, queued[0])
        assert claims.judge(run, await claims.known_nodes(tx, y.node)) is None
    await x.dispatch_once()
    assert await _attempts_by_run(pgdb) == {r: [("id-x", 1)] for r in queued}


async def test_waiting_reads_the_nodes_table(pgdb: pg.Database) -> None:
    await _register(pgdb, "x", 1, -1)  # lease already expired
    await _queue(pgdb, 1, placement_node="x")
    await _queue_more(pgdb)
    async with pgdb.read() as tx:
        known = await claims.known_nodes(tx, Node(name="here", labels=()))
        assert known == [("x", ["node=x"], False)]
        got = [claims.judge(await runs.get_run(tx, r), known) for r in ("r00", "s1")]
    assert got == [claims.Waiting(reason="PLACEMENT_NODE_DOWN", node="x"),
                   claims.Waiting(reason="PLACEMENT_NO_NODE", node="nowhere")]


async def _queue_more(db: pg.Database) -> None:
    async with db.write() as tx:
        await tasks.create_task(tx, "t2", _task("t2", placement_node="nowhere"), 1)
        await runs.create_run(tx, "s1", "t2", Trigger.API, 50)


async def test_overlap_skip_across_two_nodes_starts_one_run(
        pgdb: pg.Database, pgdb2: pg.Database, tmp_path: Path) -> None:
    """Two queued runs of a `skip` task (queued while none ran): node a prepares the
    first and holds its transaction open; node b must wait for that decision and then
    see the run a started, not start the second beside it."""
    a = _dispatcher(pgdb, tmp_path, await _register(pgdb, "a", 1, 60_000), 1)
    b = _dispatcher(pgdb2, tmp_path, await _register(pgdb, "b", 1, 60_000), 4)
    queued = await _queue(pgdb, 2, overlap="skip")
    ex_a: Any = a.executor
    ex_a.gate = asyncio.Event()
    held = asyncio.create_task(a.dispatch_once())
    await asyncio.wait_for(ex_a.entered.wait(), 10)
    other = asyncio.create_task(b.dispatch_once())
    await asyncio.sleep(0.5)
    assert not other.done()  # b waits on the task's lock, not on a's run
    ex_a.gate.set()
    await held
    await asyncio.wait_for(other, 10)
    assert await _attempts_by_run(pgdb) == {queued[0]: [("id-a", 1)]}
    async with pgdb.read() as tx:
        assert await attempts.count_active_attempts(tx, "id-b") == 0


async def test_queueing_a_run_notifies_the_listeners(pgdb: pg.Database,
                                                     pgdb2: pg.Database) -> None:
    woke = asyncio.Event()
    calls: list[int] = []

    def wake() -> None:
        calls.append(1)
        woke.set()

    pgdb2.listen(runs.QUEUED_CHANNEL, wake, ping_s=0.5)
    await asyncio.wait_for(woke.wait(), 10)  # the first look at (re)connection
    woke.clear()
    async with pgdb.write() as tx:
        await tasks.create_task(tx, "t1", _task("t1"), 1)
    await asyncio.sleep(0.3)
    assert not woke.is_set()  # no run queued, no wake-up
    await _queue_more(pgdb)
    await asyncio.wait_for(woke.wait(), 10)
    # A dropped listening connection comes back and looks once more.
    woke.clear()
    async with pgdb.write() as tx:
        killed = await tx.all("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                              " WHERE pid <> pg_backend_pid() AND query LIKE 'LISTEN%'")
    assert len(killed) == 1
    await asyncio.wait_for(woke.wait(), 20)
    woke.clear()
    async with pgdb.write() as tx:
        await runs.create_run(tx, "s2", "t2", Trigger.API, 60)
    await asyncio.wait_for(woke.wait(), 10)
