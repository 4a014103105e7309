"""Fleet mode: a log stays on the node that ran it; any node serves it through the owner.

Two real app instances (create_app, served by hypercorn on loopback ports) share one
real PostgreSQL. The fleet runtime that starts a node on PostgreSQL comes with the
fleet lifecycle; here each app's Runtime gets the PostgreSQL store and its `Node`
directly and is not started (the log routes need the store, the file pool and the
node, nothing of the scheduler or the launchers).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypercorn.asyncio import serve
from hypercorn.config import Config

from qledge import cluster_auth, ids, transitions
from qledge.clock import now_ms
from qledge.db import attempts, migrate_pg, pg, runs, tasks
from qledge.http.app import create_app
from qledge.launch import logs
from qledge.model import Trigger
from qledge.node import Node
from qledge.tasks.writable import TaskFields

from support import ADMIN, free_port, make_settings

SECRET = "fleet-secret-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
LOG = b"".join(b"line %d \xc3\xa9\n" % i for i in range(1, 201))


class Fleet:
    """Nodes `a` and `b` (and their apps) served from one background event loop."""

    def __init__(self, root: Path, dsn: str) -> None:
        self.dsn = dsn
        self.loop = asyncio.new_event_loop()
        self.nodes: dict[str, Node] = {}
        self.apps: dict[str, Any] = {}
        self.urls: dict[str, str] = {}
        self.stops: dict[str, asyncio.Event] = {}
        self.served: dict[str, Any] = {}
        self.dbs: list[pg.Database] = []
        for name in ("a", "b"):
            conf = make_settings(root / name, cluster_secret=SECRET, node_name=name)
            app = create_app(conf, ADMIN)
            url = f"http://127.0.0.1:{free_port()}"
            self.nodes[name] = Node(name=name, labels=(f"node={name}",), url=url,
                                    node_id=ids.uuid7(), fleet=True, epoch=1)
            app.state.runtime.node = self.nodes[name]
            self.apps[name], self.urls[name] = app, url
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self._open())
        for name in self.apps:
            self.start(name)

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _open(self) -> None:
        await migrate_pg.apply(self.dsn)
        for name, app in self.apps.items():
            db = pg.Database(self.dsn)
            await db.open()
            self.dbs.append(db)
            app.state.runtime.db = db
            node = self.nodes[name]
            await db_exec(db, "INSERT INTO nodes (name, node_id, incarnation, epoch, state,"
                              " labels_json, url, version, heartbeat_at_ms, lease_expires_at_ms,"
                              " registered_at_ms) VALUES (?, ?, 'i', 1, 'live', '[]', ?, 'test',"
                              " 1700000000000, ?, 1)",
                          (name, node.node_id, node.url, now_ms() + 600_000))

    def start(self, name: str) -> None:
        async def run() -> None:
            config = Config()
            config.bind = [self.urls[name].removeprefix("http://")]
            config.accesslog = None
            stop = self.stops[name] = asyncio.Event()
            inner = self.apps[name]

            async def app(scope: Any, receive: Any, send: Any) -> None:
                if scope["type"] == "lifespan":  # the runtime is not started (see above)
                    while (await receive())["type"] != "lifespan.shutdown":
                        await send({"type": "lifespan.startup.complete"})
                    await send({"type": "lifespan.shutdown.complete"})
                    return
                await inner(scope, receive, send)

            await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

        self.served[name] = asyncio.run_coroutine_threadsafe(run(), self.loop)
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{self.urls[name]}/healthz", timeout=1)
                return
            except httpx.HTTPError:
                assert time.monotonic() < deadline, f"node {name} did not start"
                time.sleep(0.05)

    def stop(self, name: str) -> None:
        self.loop.call_soon_threadsafe(self.stops[name].set)
        self.served[name].result(30)

    def close(self) -> None:
        for name in list(self.served):
            if not self.served[name].done():
                self.stop(name)
        for db in self.dbs:
            self.call(db.close())
        for app in self.apps.values():
            app.state.runtime.files.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def logs_dir(self, name: str) -> Path:
        return Path(self.apps[name].state.runtime.settings.logs_path)

    def sql(self, sql: str, params: tuple[object, ...] = ()) -> None:
        self.call(db_exec(self.dbs[0], sql, params))


async def db_exec(db: pg.Database, sql: str, params: tuple[object, ...] = ()) -> None:
    async with db.write() as tx:
        await tx.execute(sql, params)


async def _spawned_on(db: pg.Database, node: Node) -> tuple[str, str, str]:
    """A running run whose attempt `node` owns: (run id, attempt id, log path)."""
    task_id, run_id, attempt_id = ids.uuid7(), ids.uuid7(), ids.uuid7()
    log_path = logs.relative_path(attempt_id)
    async with db.write() as tx:
        await tasks.create_task(tx, task_id, TaskFields(name="t", command="true", env={},
                                              labels=[]), 1)
        run = await runs.create_run(tx, run_id, task_id, Trigger.MANUAL, 2)
        run = await runs.apply(tx, run, transitions.attempt_prepared(run), 3)
        att = await attempts.prepare_attempt(
            tx, run, attempt_id=attempt_id, owner=node.node_id, executor_type="local",
            token_hash=b"h", deadline_at_ms=None, log_path=log_path,
            receipt_path=f"receipts/{attempt_id}", now_ms=3)
        run = await runs.get_run(tx, run_id)
        await runs.apply(tx, run, transitions.attempt_started(
            run, att, pid=100, start_time=1, boot_id="boot", now_ms=4), 4)
    return run_id, attempt_id, log_path


async def _finish(db: pg.Database, run_id: str, attempt_id: str) -> None:
    async with db.write() as tx:
        run = await runs.get_run(tx, run_id)
        att = await attempts.get_attempt(tx, attempt_id)
        await runs.apply(tx, run, transitions.complete(run, att, exit_code=0,
                                                       finished_at_ms=10), 10)


@pytest.fixture
def fleet(tmp_path: Path, pg_dsn: str) -> Iterator[Fleet]:
    f = Fleet(tmp_path, pg_dsn)
    try:
        yield f
    finally:
        f.close()


def _on_a(fleet: Fleet, data: bytes = LOG) -> tuple[str, str, Path]:
    run_id, attempt_id, rel = fleet.call(_spawned_on(fleet.dbs[0], fleet.nodes["a"]))
    path = fleet.logs_dir("a") / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return run_id, attempt_id, path


def _get(fleet: Fleet, node: str, path: str, **params: object) -> httpx.Response:
    return httpx.get(f"{fleet.urls[node]}{path}", params=params, headers=AUTH, timeout=30)


def _same(x: httpx.Response, y: httpx.Response) -> None:
    assert (x.status_code, x.content) == (y.status_code, y.content)
    strip = {"date", "server"}
    assert {k: v for k, v in x.headers.items() if k not in strip} == \
        {k: v for k, v in y.headers.items() if k not in strip}


def test_a_log_written_on_a_is_served_by_b_byte_identical(fleet: Fleet) -> None:
    run_id, attempt_id, path = _on_a(fleet)
    assert not (fleet.logs_dir("b") / path.relative_to(fleet.logs_dir("a"))).exists()
    url = f"/api/v1/runs/{run_id}/log"
    for params in ({}, {"offset": 7, "limit": 100}, {"offset": len(LOG) - 3},
                   {"offset": len(LOG)}, {"offset": len(LOG) + 1}):
        on_a, on_b = _get(fleet, "a", url, **params), _get(fleet, "b", url, **params)
        _same(on_a, on_b)
    whole = _get(fleet, "b", url)
    assert whole.content == LOG and whole.headers["x-log-size"] == str(len(LOG))
    part = _get(fleet, "b", url, offset=7, limit=100)
    assert part.content == LOG[7:107] and part.headers["x-log-next-offset"] == "107"

    # A power cut took the tail: the truncation headers come through from A.
    fleet.call(_finish(fleet.dbs[0], run_id, attempt_id))
    fleet.sql("UPDATE run_attempts SET log_bytes_at_exit = ? WHERE id = ?",
              (len(LOG) + 50, attempt_id))
    on_a, on_b = _get(fleet, "a", url), _get(fleet, "b", url)
    _same(on_a, on_b)
    assert on_b.headers["x-log-truncated"] == "true"
    assert on_b.headers["x-log-expected-size"] == str(len(LOG) + 50)
    assert on_b.headers["x-run-terminal"] == "true"
    # B's run detail does not judge a file it does not hold (no false "truncated").
    detail = _get(fleet, "b", f"/api/v1/runs/{run_id}").json()["attempts"][0]
    assert (detail["log_size"], detail["log_truncated"]) == (None, None)

    # Retention evicted it on A: 410, as A says it.
    path.unlink()
    fleet.sql("UPDATE run_attempts SET log_evicted_reason = 'SIZE_CAP', log_evicted_at_ms = 99"
              " WHERE id = ?", (attempt_id,))
    on_a, on_b = _get(fleet, "a", url), _get(fleet, "b", url)
    _same(on_a, on_b)
    assert on_b.status_code == 410 and on_b.json()["error"] == "LOG_EVICTED"


def _events(r: httpx.Response) -> Iterator[tuple[str, str]]:
    event, data = "message", []
    for line in r.iter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


def test_the_stream_relays_appended_lines_and_the_end(fleet: Fleet) -> None:
    run_id, attempt_id, path = _on_a(fleet, b"first\n")
    text, ends = "", []
    with httpx.stream("GET", f"{fleet.urls['b']}/api/v1/runs/{run_id}/log/stream",
                      headers=AUTH, timeout=30) as r:
        assert r.status_code == 200
        for event, data in _events(r):
            if event == "log":
                text += json.loads(data)["text"]
                if text == "first\n":
                    with path.open("ab") as f:
                        f.write(b"second\nthird \xc3\xa9\n")
                elif text.endswith("third é\n"):
                    fleet.call(_finish(fleet.dbs[0], run_id, attempt_id))
            elif event == "end":
                ends.append(json.loads(data))
                break
            else:
                pytest.fail(f"unexpected event {event}: {data}")
    assert text == "first\nsecond\nthird é\n"
    assert ends[0]["status"] == "succeeded" and ends[0]["log_truncated"] is False


def _down(fleet: Fleet, run_id: str, last_seen: int) -> None:
    started = time.monotonic()
    r = _get(fleet, "b", f"/api/v1/runs/{run_id}/log")
    assert time.monotonic() - started < 5
    assert r.status_code == 503, r.text
    assert r.json()["error"] == "NODE_UNAVAILABLE"
    assert (r.json()["node"], r.json()["last_seen_ms"]) == ("a", last_seen)
    with httpx.stream("GET", f"{fleet.urls['b']}/api/v1/runs/{run_id}/log/stream",
                      headers=AUTH, timeout=30) as s:
        got = list(_events(s))
    assert [e for e, _ in got] == ["node_down"]
    assert json.loads(got[0][1])["node"] == "a"


def test_an_owner_whose_lease_expired_is_reported_down(fleet: Fleet) -> None:
    run_id, _, _ = _on_a(fleet)
    fleet.sql("UPDATE nodes SET lease_expires_at_ms = 5, heartbeat_at_ms = 1234 WHERE name = 'a'")
    _down(fleet, run_id, 1234)


def test_an_owner_that_refuses_connections_is_reported_down(fleet: Fleet) -> None:
    run_id, _, _ = _on_a(fleet)
    fleet.stop("a")  # its lease still runs: only the connection tells
    _down(fleet, run_id, 1700000000000)


def test_an_owner_that_does_not_answer_within_2_s_is_reported_down(fleet: Fleet) -> None:
    run_id, _, _ = _on_a(fleet)
    with socket.socket() as mute:  # accepts connections (backlog), never answers
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        fleet.sql("UPDATE nodes SET url = ? WHERE name = 'a'",
                  (f"http://127.0.0.1:{mute.getsockname()[1]}",))
        _down(fleet, run_id, 1700000000000)


# -- the internal route: the cluster credential only ----------------------------------

def _internal(fleet: Fleet, attempt_id: str, node: str = "b", secret: str = SECRET,
              extra: dict[str, str] | None = None, to: str = "a") -> httpx.Response:
    path, query = f"/internal/v1/attempts/{attempt_id}/log", "offset=0&limit=5"
    headers = cluster_auth.sign(secret, node, "GET", path, query, now_ms())
    return httpx.get(f"{fleet.urls[to]}{path}?{query}", headers={**headers, **(extra or {})},
                     timeout=10)


def test_the_internal_route_takes_only_the_cluster_credential(fleet: Fleet) -> None:
    _, attempt_id, _ = _on_a(fleet)
    ok = _internal(fleet, attempt_id)
    assert ok.status_code == 200 and ok.content == LOG[:5]
    url = f"{fleet.urls['a']}/internal/v1/attempts/{attempt_id}/log"
    assert httpx.get(url, headers=AUTH).status_code == 401  # the admin token: never
    assert _internal(fleet, attempt_id, extra=AUTH).status_code == 401
    assert _internal(fleet, attempt_id, secret="not-the-fleet-secret").status_code == 401
    bad = _internal(fleet, attempt_id, extra={cluster_auth.SIGNATURE: "ab" * 32})
    assert bad.status_code == 401 and SECRET not in bad.text
    assert _internal(fleet, attempt_id, node="stranger").status_code == 403
    # B's attempt: A does not serve it, even to a good credential.
    _, b_attempt, _ = fleet.call(_spawned_on(fleet.dbs[0], fleet.nodes["b"]))
    assert _internal(fleet, b_attempt).status_code == 404
    assert _internal(fleet, b_attempt, to="b", node="a").status_code == 200


def test_outside_fleet_mode_there_is_no_internal_route(fleet: Fleet) -> None:
    _, attempt_id, _ = _on_a(fleet)
    fleet.nodes["a"].fleet = False
    assert _internal(fleet, attempt_id).status_code == 404


def _ql_token(fleet: Fleet, node: str) -> dict[str, str]:
    app = httpx.post(f"{fleet.urls[node]}/api/v1/apps", headers=AUTH, timeout=30,
                     json={"name": f"ql-{time.monotonic_ns()}", "scopes": ["crons"]}).json()
    got = httpx.get(f"{fleet.urls[node]}/open/auth/token", timeout=30, params={
        "client_id": app["client_id"], "client_secret": app["client_secret"]}).json()
    return {"Authorization": f"Bearer {got['data']['token']}"}


def test_qinglongs_log_route_reads_the_owners_tail_or_says_it_is_down(fleet: Fleet) -> None:
    """QingLong's /open/crons/{num}/log on B: the tail A holds, never an empty log."""
    big = b"".join(b"line %06d\n" % i for i in range(200_000))  # 2.2 MB > the 1 MiB read
    run_id, _, _ = _on_a(fleet, big)
    num = _get(fleet, "b", f"/api/v1/runs/{run_id}").json()["task_id"]
    task = _get(fleet, "b", f"/api/v1/tasks/{num}").json()
    headers = _ql_token(fleet, "b")
    r = httpx.get(f"{fleet.urls['b']}/open/crons/{task['num']}/log", headers=headers,
                  timeout=30)
    assert r.status_code == 200, r.text
    data = r.json()["data"].encode()
    assert big.endswith(data) and len(data) == 1 << 20  # the last log_read_limit bytes
    on_a = httpx.get(f"{fleet.urls['a']}/open/crons/{task['num']}/log", timeout=30,
                     headers=_ql_token(fleet, "a"))
    assert on_a.json() == r.json()  # as the owner itself answers
    fleet.sql("UPDATE nodes SET lease_expires_at_ms = 5 WHERE name = 'a'")
    r = httpx.get(f"{fleet.urls['b']}/open/crons/{task['num']}/log", headers=headers,
                  timeout=30)
    assert r.status_code == 503 and r.json()["error"] == "NODE_UNAVAILABLE", r.text
