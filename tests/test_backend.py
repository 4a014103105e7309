"""Fleet mode's backend switch (db/backend.py): settings, and a real supervised node on
PostgreSQL — a run, a worker killed mid-run, the server away and back."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import _pg
from qledge import settings
from qledge.db import backend
from qledge.db.sqlite import Database

from _appliance import Appliance
from support import eventually, free_port

SECRET = "cluster-secret-0123456789abcdefghij"
DSN = "postgresql://qledge:hunter2-pw@db.lan:5432/qledge"


ADMIN = "admin-token-0123456789abcdefghijkl"


def _fleet(**extra: str) -> dict[str, str]:
    return {"QLEDGE_DATABASE_URL": DSN, "QLEDGE_CLUSTER_SECRET": SECRET,
            "QLEDGE_ADMIN_TOKEN": ADMIN, **extra}


# -- settings ---------------------------------------------------------------------------

def test_embedded_by_default() -> None:
    conf = settings.load({})
    assert not conf.fleet
    assert isinstance(backend.database(conf), Database)


@pytest.mark.parametrize("profile", ["cluster-control", "cluster-worker"])
def test_cluster_profiles_need_a_database_url(profile: str) -> None:
    with pytest.raises(settings.SettingsError, match="needs QLEDGE_DATABASE_URL"):
        settings.load({"QLEDGE_PROFILE": profile})


def test_cluster_profiles_take_standalone_and_edge_limits() -> None:
    control = settings.load(_fleet(QLEDGE_PROFILE="cluster-control")).profile_limits
    worker = settings.load(_fleet(QLEDGE_PROFILE="cluster-worker")).profile_limits
    assert control.name == "cluster-control" and worker.name == "cluster-worker"
    standalone, edge = settings.PROFILES["standalone"], settings.PROFILES["edge"]
    assert control.max_concurrent_attempts == standalone.max_concurrent_attempts == 16
    assert worker.max_concurrent_attempts == edge.max_concurrent_attempts == 4
    assert control.keep_runs_per_task == standalone.keep_runs_per_task
    assert worker.logs_cap_mb == edge.logs_cap_mb


@pytest.mark.parametrize("url", ["postgresql://h/db", "postgres://u:p@h:5433/db?sslmode=require"])
def test_postgres_urls_accepted(url: str) -> None:
    conf = settings.load(_fleet(QLEDGE_DATABASE_URL=url))
    assert conf.fleet and conf.database_url == url


@pytest.mark.parametrize("url", ["mysql://u:hunter2-pw@h/db", "sqlite:///x.db", "db.lan",
                                 "postgresql://u:hunter2-pw@h/db x"])
def test_other_urls_refused_without_their_password(url: str) -> None:
    with pytest.raises(settings.SettingsError, match="postgresql://") as err:
        settings.load(_fleet(QLEDGE_DATABASE_URL=url))
    assert "hunter2" not in str(err.value)


def test_fleet_mode_needs_a_strong_cluster_secret() -> None:
    with pytest.raises(settings.SettingsError, match="QLEDGE_CLUSTER_SECRET"):
        settings.load({"QLEDGE_DATABASE_URL": DSN})
    with pytest.raises(settings.SettingsError, match="too weak") as err:
        settings.load(_fleet(QLEDGE_CLUSTER_SECRET="short-secret"))
    assert "short-secret" not in str(err.value)
    # The embedded SQLite needs none.
    assert settings.load({}).cluster_secret == ""


def test_fleet_mode_needs_one_admin_token_for_every_node() -> None:
    env = _fleet()
    del env["QLEDGE_ADMIN_TOKEN"]
    with pytest.raises(settings.SettingsError, match=r"QLEDGE_ADMIN_TOKEN.*every node"):
        settings.load(env)
    assert settings.load({}).admin_token == ""  # one node generates its own


def test_the_embedded_path_never_imports_the_postgresql_driver() -> None:
    """The arm/v7 image has no asyncpg: a node on SQLite must start without it."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['asyncpg'] = None\n"
            "import qledge.cli, qledge.http.app, qledge.runtime.lifecycle\n"
            "assert sys.modules['asyncpg'] is None")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_fleet_mode_without_the_driver_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """The arm/v7 image has no asyncpg: QLEDGE_DATABASE_URL there is refused with that
    reason (the operator's next step), not a bare ImportError."""
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # import asyncpg -> ImportError
    with pytest.raises(settings.SettingsError) as err:
        backend.database(settings.load(_fleet()))
    said = str(err.value)
    assert "fleet mode" in said and "asyncpg" in said and "arm/v7" in said, said
    assert "amd64 or arm64" in said and "hunter2" not in said


def test_url_and_secret_from_files(tmp_path: Path) -> None:
    (tmp_path / "url").write_text(DSN + "\n")
    (tmp_path / "secret").write_text(SECRET + "\n")
    conf = settings.load({"QLEDGE_DATABASE_URL_FILE": str(tmp_path / "url"),
                          "QLEDGE_CLUSTER_SECRET_FILE": str(tmp_path / "secret"),
                          "QLEDGE_PROFILE": "cluster-worker", "QLEDGE_ADMIN_TOKEN": ADMIN})
    assert (conf.database_url, conf.cluster_secret, conf.fleet) == (DSN, SECRET, True)
    with pytest.raises(settings.SettingsError, match="not both"):
        settings.load({**_fleet(), "QLEDGE_DATABASE_URL_FILE": str(tmp_path / "url")})
    with pytest.raises(settings.SettingsError, match="CLUSTER_SECRET_FILE"):
        settings.load({"QLEDGE_DATABASE_URL": DSN,
                       "QLEDGE_CLUSTER_SECRET_FILE": str(tmp_path / "absent")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(settings.SettingsError, match="DATABASE_URL_FILE is empty"):
        settings.load({"QLEDGE_DATABASE_URL_FILE": str(tmp_path / "empty"),
                       "QLEDGE_CLUSTER_SECRET": SECRET})


@pytest.mark.parametrize(("key", "value", "match"), [
    ("QLEDGE_NODE_NAME", "Garage_Pi", "QLEDGE_NODE_NAME"),
    ("QLEDGE_NODE_LABELS", "gpio bad;label", "QLEDGE_NODE_LABELS"),
    ("QLEDGE_NODE_URL", "garage:5700", "QLEDGE_NODE_URL"),
    ("QLEDGE_NODE_HEARTBEAT_S", "30", "a third of QLEDGE_NODE_LEASE_S"),
])
def test_node_settings_checked_in_fleet_mode(key: str, value: str, match: str) -> None:
    with pytest.raises(settings.SettingsError, match=match):
        settings.load(_fleet(**{key: value}))


def test_redacted_url_keeps_no_credential() -> None:
    assert settings.redact_dsn(DSN) == "postgresql://***@db.lan:5432/qledge"
    assert settings.redact_dsn("postgresql://h/db?password=x") == "postgresql://h/db?***"
    assert settings.redact_dsn("postgresql://h:5432/db") == "postgresql://h:5432/db"


def test_node_id_file_created_once(tmp_path: Path) -> None:
    first = backend.fleet_node_id(tmp_path)
    assert (tmp_path / "node-id").read_text() == f"{first}\n"
    assert oct((tmp_path / "node-id").stat().st_mode & 0o777) == "0o600"
    assert backend.fleet_node_id(tmp_path) == first
    assert not list(tmp_path.glob(".node-id*"))


async def test_migrate_waits_for_a_server_then_names_it_redacted() -> None:
    dsn = f"postgresql://u:hunter2-pw@127.0.0.1:{free_port()}/x"
    t0 = time.monotonic()
    with pytest.raises(backend.migrate.MigrationError) as err:
        await backend.migrate_pg_waiting(dsn, wait_s=1.2)
    assert time.monotonic() - t0 >= 0.5  # it retried before giving up
    assert "hunter2" not in str(err.value) and "127.0.0.1" in str(err.value)


def test_audit_of_the_sqlite_file_refused_in_fleet_mode(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLEDGE_")}
    env.update(_fleet(QLEDGE_STATE_DIR=str(tmp_path)))
    res = subprocess.run([sys.executable, "-m", "qledge", "audit", "receipts"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "for the embedded SQLite database" in res.stderr
    assert "hunter2" not in res.stderr + res.stdout


# -- a real node on PostgreSQL ------------------------------------------------------------

def _wait(fn: Any, timeout: float = 30, what: str = "") -> Any:
    return eventually(fn, timeout=timeout, interval=0.05, what=what or "the condition")


def _run_of(app: Appliance, run_id: str) -> dict[str, Any]:
    r = app.api("GET", f"/runs/{run_id}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _terminal(app: Appliance, run_id: str, timeout: float = 30) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run = _run_of(app, run_id)
        return run if run["finished_at_ms"] is not None else None
    result: dict[str, Any] = _wait(done, timeout, f"run {run_id} to finish")
    return result


@pytest.fixture
def own_pg() -> Iterator[_pg.Cluster]:
    """A cluster of this test's own: it is stopped and started again mid-test."""
    cluster = _pg.Cluster(_pg.pg_bindir(), free_port())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _pg_ctl(cluster: _pg.Cluster, *args: str) -> None:
    subprocess.run([*cluster.prefix, str(cluster.bin / "pg_ctl"), "-D", str(cluster.data),
                    *args], capture_output=True, timeout=60, check=True)


async def _rows(dsn: str, sql: str) -> list[Any]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


@pytest.mark.drill
def test_a_node_on_postgresql_runs_survives_a_worker_kill_and_the_server_away(
        tmp_path: Path, own_pg: _pg.Cluster) -> None:
    dsn = own_pg.dsn
    state = tmp_path / "state"
    # Short supervision rounds: a result kept while the server was away is found soon.
    app = Appliance(state, free_port(), database_url=dsn, cluster_secret=SECRET,
                    node_name="garage", round_interval_s="2")
    app.start(60)
    try:
        system = app.api("GET", "/system").json()
        assert system["backend"] == "postgresql"
        assert system["node"]["name"] == "garage" and system["node"]["fleet"] is True
        assert "node=garage" in system["node"]["labels"]
        node_id = (state / "data" / "node-id").read_text().strip()
        assert system["node_id"] == node_id
        assert not (state / "data" / "qledge.sqlite3").exists()  # nothing went to SQLite
        out = app.output.read_text()
        assert f"database=postgresql://***@127.0.0.1:{own_pg.port}/postgres" in out

        # A run, end to end: its real exit code and its log.
        task = app.api("POST", "/tasks", json={"name": "pg", "command":
                       "echo hello from postgres; exit 3"}).json()
        run = app.api("POST", f"/tasks/{task['id']}/runs").json()["run"]
        done = _terminal(app, run["id"])
        assert (done["status"], done["exit_code"]) == ("failed", 3)
        log = app.api("GET", f"/runs/{run['id']}/log")
        assert log.status_code == 200 and b"hello from postgres" in log.content
        ok = app.api("POST", "/tasks", json={"name": "ok", "command": "echo fine"}).json()
        run_ok = app.api("POST", f"/tasks/{ok['id']}/runs").json()["run"]
        assert _terminal(app, run_ok["id"])["status"] == "succeeded"
        # The rows are in PostgreSQL, owned by this node's id.
        owners = asyncio.run(_rows(dsn, "SELECT runtime_owner FROM run_attempts"))
        assert {r["runtime_owner"] for r in owners} == {node_id}

        # kill -9 of the worker mid-run: supervisord restarts it and the result applies.
        gate = tmp_path / "gate"
        slow = app.api("POST", "/tasks", json={"name": "slow", "command":
                       f"while [ ! -e {gate} ]; do sleep 0.05; done; echo after; exit 7"}
                       ).json()
        run_slow = app.api("POST", f"/tasks/{slow['id']}/runs").json()["run"]
        _wait(lambda: _run_of(app, run_slow["id"])["started_at_ms"], 20, "the slow run")
        first = app.worker_pid()
        app.kill_worker()
        gate.touch()  # the task ends while no worker runs
        app.wait_ready(60)
        assert app.worker_pid() != first
        assert (state / "data" / "node-id").read_text().strip() == node_id
        done = _terminal(app, run_slow["id"])
        assert (done["status"], done["exit_code"]) == ("failed", 7)
        assert b"after" in app.api("GET", f"/runs/{run_slow['id']}/log").content

        # The server away: the API says database_unavailable (503), /readyz 503,
        # /healthz stays 200; a task that ends meanwhile keeps its receipt; back, its
        # real exit code is applied and everything works again.
        gate2 = tmp_path / "gate2"
        away = app.api("POST", "/tasks", json={"name": "away", "command":
                       f"while [ ! -e {gate2} ]; do sleep 0.05; done; echo late; exit 5"}
                       ).json()
        run_away = app.api("POST", f"/tasks/{away['id']}/runs").json()["run"]
        _wait(lambda: _run_of(app, run_away["id"])["started_at_ms"], 20, "the run")
        _pg_ctl(own_pg, "-m", "fast", "-w", "stop")
        gate2.touch()
        r = _wait(lambda: (x := app.api("GET", "/tasks")).status_code == 503 and x, 20,
                  "503 from the API")
        assert r.json()["error"] == "DATABASE_UNAVAILABLE"
        assert int(r.headers["Retry-After"]) > 0
        ready = app.http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == "database_unavailable"
        assert app.http.get("/healthz").status_code == 200
        assert app.api("POST", "/tasks", json={"name": "x", "command": "true"}
                       ).status_code == 503
        time.sleep(3)  # the launcher has exited and published; the worker kept trying
        _pg_ctl(own_pg, "-w", "-t", "60", "-l", str(own_pg.dir / "server.log"), "-o",
                f"-c listen_addresses=127.0.0.1 -p {own_pg.port} -k {own_pg.dir}", "start")
        app.wait_ready(60)
        done = _terminal(app, run_away["id"])
        assert (done["status"], done["exit_code"]) == ("failed", 5)
        assert b"late" in app.api("GET", f"/runs/{run_away['id']}/log").content
        again = app.api("POST", f"/tasks/{ok['id']}/runs")
        assert again.status_code < 300, again.text
        assert _terminal(app, again.json()["run"]["id"])["status"] == "succeeded"
        assert app.proc is not None and app.proc.poll() is None
    finally:
        app.stop()


# -- SQLite-only duties on PostgreSQL ------------------------------------------------------

async def test_boot_claim_and_db_stats_on_postgresql(pg_dsn: str) -> None:
    from qledge.db import pg, policies
    from qledge.db import retention_queries as q

    conf = settings.load(_fleet(QLEDGE_DATABASE_URL=pg_dsn))
    assert await backend.migrate_pg_waiting(pg_dsn)
    db = backend.database(conf)
    assert isinstance(db, pg.Database)
    await db.open()
    try:
        async with db.write() as tx:  # no registration yet: no row, no claim
            assert not await policies.claim_boot(tx, "boot-1", "garage")
            # The row node registration (runtime/fleet.py) creates.
            await tx.execute(
                "INSERT INTO nodes (name, node_id, incarnation, epoch, state, labels_json,"
                " url, version, heartbeat_at_ms, lease_expires_at_ms, registered_at_ms)"
                " VALUES ('garage', 'n1', 'i1', 1, 'live', '[]', 'http://g', 'v', 0, 0, 0),"
                " ('office', 'n2', 'i2', 1, 'live', '[]', 'http://o', 'v', 0, 0, 0)")
        for start, node, expected in (("boot-1", "garage", True), ("boot-1", "garage", False),
                                      ("boot-1", "office", True), ("boot-2", "garage", True)):
            async with db.write() as tx:
                assert await policies.claim_boot(tx, start, node) is expected, (start, node)
        async with db.read() as tx:
            stats = await q.db_stats(tx)
        assert stats.page_size == 8192 and stats.page_count > 0
        assert (stats.freelist_pages, stats.auto_vacuum) == (0, 0)  # never vacuumed by us
    finally:
        await db.close()
