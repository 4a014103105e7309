"""PostgreSQL drivers for fleet mode (docs/fleet.md, "Why asyncpg"): psycopg 3 (async)
vs asyncpg on the two hot transactions, and the same shapes on the embedded SQLite.

Standalone groundwork, not part of `scripts/bench` (which never runs it) and never
imported by the app. It needs what the appliance does not ship, so it skips with a
message and exit status 0 when something is missing:

* PostgreSQL: `--dsn` or QLTEST_PG_DSN names a server to use (its `bench_*` tables are
  dropped and re-created); without one, a throwaway cluster is started in a temp dir
  from Debian's binaries (`/usr/lib/postgresql/<v>/bin`, `apt-get install postgresql`;
  QLTEST_PG_BIN to point elsewhere) — as the `postgres` user through `runuser` when run
  as root (initdb refuses root) — on a free loopback port, and removed at the end;
* the drivers, in the interpreter that runs this (a scratch venv, not the project's):
  `pip install 'psycopg[binary]' asyncpg aiosqlite`. A missing driver skips its rows.

The two transactions, each timed BEGIN → COMMIT returned by the client, with N
"nodes" = N asyncio tasks each holding its own connection (one process, one loop):

* claim — a node takes the oldest queued run it may run and does spawn step 1 on it:
  `SELECT … FROM bench_runs WHERE status = 'queued' AND (not-before passed) AND
  (placement any or this node) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`; `INSERT`
  the attempt carrying the node and its lease epoch, as `INSERT … SELECT … FROM
  bench_nodes WHERE name = $node AND epoch = $epoch AND lease unexpired` (a node
  whose lease was taken over inserts nothing and rolls back: fencing at claim time);
  `UPDATE` the run to `running` with compare-and-set on its version, appending its
  event to the run's event log (as `runs.apply` does since migration 0020); COMMIT.
  Five round trips.
* claim1 — the same claim as one statement (data-modifying CTEs, the driver's
  autocommit): one round trip. PostgreSQL only.
* completion — the CompletionService shape: read the attempt joined to its run;
  `UPDATE` the attempt terminal only while it is active, owned by this node and this
  epoch, and the node's row still carries that epoch (a stale completion changes no
  row and rolls back); `UPDATE` the run terminal with compare-and-set on its version,
  appending two events; COMMIT.

PostgreSQL runs with synchronous_commit=on (every COMMIT waits for its WAL flush).
SQLite runs both shapes with one writer (the appliance has one), WAL, 1 KiB pages,
BEGIN IMMEDIATE, synchronous=FULL and NORMAL, one hand-off to aiosqlite's thread per
statement (as db/sqlite.Tx does), `?` placeholders, no SKIP LOCKED (one writer).

Each cell starts from fresh tables: SEED queued runs (claim) or running attempts
(completion) after HISTORY finished runs (a realistic table for the planner), then
ANALYZE, CHECKPOINT, a 0.5 s warm-up and `--seconds` measured. Reported per cell:
transactions, per second, p50/p99 latency in ms, the client's CPU time per
transaction (this process, all nodes; what a Raspberry Pi node pays — the server's
CPU is not in it, SQLite's engine is) and PostgreSQL's WAL bytes per transaction;
then the medians over `--repeat` runs. The drivers alternate within each repeat, so
a shared machine's noise falls on both alike. `--json PATH` writes the rows too.

    /tmp/pgvenv/bin/python scripts/_bench/pgdrivers.py [--seconds 5] [--nodes 1,3]
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SEED = 40_000  # queued runs (claim) or running attempts (completion) per cell
# Finished runs older than those, as an appliance's history: without them every row is
# queued at ANALYZE time and PostgreSQL reads the queue by the primary key, filtering
# out the runs already claimed (a plan that slows down as the cell goes on).
HISTORY = 100_000
EVENT = b"\x94\x01\xcd\x01\x00\x01\x80"  # about one event record of runs.event_log
EVENTS2 = EVENT + b"\x94\x05\xcd\x01\x00\x01\x81\x03\x00"
TOKEN_HASH = bytes(range(32))
LEASE_MS = 3_600_000


class Skip(Exception):
    """Something this benchmark needs is not here: say what, exit 0."""


class Fenced(Exception):
    """The node's epoch or the run's version moved: the transaction rolls back."""


class Drained(Exception):
    """No queued run left for this node."""


@dataclass
class Row:
    backend: str
    driver: str
    shape: str
    nodes: int
    txns: int
    per_s: float
    p50_ms: float
    p99_ms: float
    cpu_us: float
    wal_bytes: float = float("nan")  # WAL written per transaction (PostgreSQL only)


def _pct(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- a throwaway PostgreSQL cluster ------------------------------------------------------

def find_pg_bin() -> Path | None:
    given = os.environ.get("QLTEST_PG_BIN")
    if given:
        return Path(given) if (Path(given) / "initdb").exists() else None
    found = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()]
    found.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """initdb + pg_ctl in a temp dir: trust auth on loopback only, socket in the dir.

    As root, everything runs as the `postgres` user (Debian's package creates it) via
    runuser; otherwise as the current user. The same steps are what scripts/test will
    do for the fleet rig (docs/fleet.md, "The test rig")."""

    def __init__(self, bindir: Path) -> None:
        self.bin = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="qlpg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise Skip("running as root and there is no `postgres` user to run "
                           "initdb as (apt-get install postgresql creates it)") from exc
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self.prefix, *args], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise Skip(f"{Path(args[0]).name} failed: {done.stderr.strip()[-400:]}")

    def start(self) -> None:
        # -N: no fsync of the initial files (a throwaway cluster); the server itself
        # runs with fsync and synchronous_commit on.
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "-A", "trust", "-E", "UTF8", "--no-locale", "-N")
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir}"
                " -c fsync=on -c synchronous_commit=on -c max_connections=50")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                  str(self.dir / "server.log"), "-w", "-t", "60", "-o", opts, "start")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            subprocess.run([*self.prefix, str(self.bin / "pg_ctl"), "-D", str(self.data),
                            "-m", "fast", "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the bench schema (a sketch of the fleet tables, not the product's migrations) ------

PG_SCHEMA = [
    "DROP TABLE IF EXISTS bench_attempts, bench_runs, bench_nodes",
    """CREATE TABLE bench_nodes (
        name text PRIMARY KEY,
        epoch bigint NOT NULL,
        lease_expires_at_ms bigint NOT NULL,
        labels text[] NOT NULL DEFAULT '{}')""",
    """CREATE TABLE bench_runs (
        id text PRIMARY KEY,
        task_id text NOT NULL,
        trigger text NOT NULL,
        status text NOT NULL,
        version integer NOT NULL DEFAULT 1,
        event_seq integer NOT NULL DEFAULT 0,
        event_log bytea,
        created_at_ms bigint NOT NULL,
        not_before_ms bigint,
        started_at_ms bigint,
        finished_at_ms bigint,
        exit_code integer,
        reason_code text,
        placement_node text)""",
    "CREATE INDEX bench_runs_active ON bench_runs (status, id)"
    " WHERE status = 'queued' OR status = 'running'",
    """CREATE TABLE bench_attempts (
        id text PRIMARY KEY,
        run_id text NOT NULL REFERENCES bench_runs(id) ON DELETE CASCADE,
        attempt_no integer NOT NULL,
        executor_type text NOT NULL,
        runtime_owner text NOT NULL,
        node_epoch bigint NOT NULL,
        status text NOT NULL,
        callback_token_hash bytea NOT NULL,
        callback_sequence bigint NOT NULL,
        created_at_ms bigint NOT NULL,
        deadline_at_ms bigint,
        finished_at_ms bigint,
        exit_code integer,
        reason_code text,
        log_path text NOT NULL,
        receipt_state text,
        receipt_path text,
        receipt_created_at_ms bigint,
        receipt_updated_at_ms bigint,
        receipt_settled_at_ms bigint,
        UNIQUE (run_id, attempt_no))""",
]

SQLITE_SCHEMA = [
    # Same shape, SQLite's spelling (STRICT, BLOB, `||` on blobs needs the CAST back).
    "CREATE TABLE bench_nodes (name TEXT PRIMARY KEY, epoch INTEGER NOT NULL,"
    " lease_expires_at_ms INTEGER NOT NULL, labels_json TEXT NOT NULL DEFAULT '[]') STRICT",
    "CREATE TABLE bench_runs (id TEXT PRIMARY KEY, task_id TEXT NOT NULL,"
    " trigger TEXT NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 1,"
    " event_seq INTEGER NOT NULL DEFAULT 0, event_log BLOB, created_at_ms INTEGER NOT NULL,"
    " not_before_ms INTEGER, started_at_ms INTEGER, finished_at_ms INTEGER,"
    " exit_code INTEGER, reason_code TEXT, placement_node TEXT) STRICT, WITHOUT ROWID",
    "CREATE INDEX bench_runs_active ON bench_runs (status, id)"
    " WHERE status = 'queued' OR status = 'running'",
    "CREATE TABLE bench_attempts (id TEXT PRIMARY KEY,"
    " run_id TEXT NOT NULL REFERENCES bench_runs(id) ON DELETE CASCADE,"
    " attempt_no INTEGER NOT NULL, executor_type TEXT NOT NULL,"
    " runtime_owner TEXT NOT NULL, node_epoch INTEGER NOT NULL, status TEXT NOT NULL,"
    " callback_token_hash BLOB NOT NULL, callback_sequence INTEGER NOT NULL,"
    " created_at_ms INTEGER NOT NULL, deadline_at_ms INTEGER, finished_at_ms INTEGER,"
    " exit_code INTEGER, reason_code TEXT, log_path TEXT NOT NULL, receipt_state TEXT,"
    " receipt_path TEXT, receipt_created_at_ms INTEGER, receipt_updated_at_ms INTEGER,"
    " receipt_settled_at_ms INTEGER, UNIQUE (run_id, attempt_no)) STRICT",
]

# Statements in a neutral form: {n} is the n-th parameter (1-based), spelled `$n` for
# both PostgreSQL drivers' server-side binding (psycopg gets `%s` in order) and `?` for
# SQLite. The placeholders appear in order, each once.
CLAIM_SELECT = (
    "SELECT id, version FROM bench_runs WHERE status = 'queued'"
    " AND (not_before_ms IS NULL OR not_before_ms <= {1})"
    " AND (placement_node IS NULL OR placement_node = {2})"
    " ORDER BY id LIMIT 1")
CLAIM_INSERT = (
    "INSERT INTO bench_attempts (id, run_id, attempt_no, executor_type, runtime_owner,"
    " node_epoch, status, callback_token_hash, callback_sequence, created_at_ms,"
    " deadline_at_ms, log_path, receipt_state, receipt_path, receipt_created_at_ms,"
    " receipt_updated_at_ms)"
    " SELECT {1}, {2}, (SELECT COALESCE(MAX(attempt_no), 0) + 1 FROM bench_attempts"
    "   WHERE run_id = {3}), 'local_process', n.name, n.epoch, 'preparing', {4}, 1, {5},"
    " NULL, {6}, 'pending', {7}, {8}, {9}"
    " FROM bench_nodes n WHERE n.name = {10} AND n.epoch = {11}"
    " AND n.lease_expires_at_ms > {12}")
CLAIM_UPDATE_PG = (
    "UPDATE bench_runs SET status = 'running', version = version + 1,"
    " event_seq = event_seq + 1, event_log = COALESCE(event_log, ''::bytea) || {1}"
    " WHERE id = {2} AND version = {3}")
CLAIM_UPDATE_SQLITE = (
    "UPDATE bench_runs SET status = 'running', version = version + 1,"
    " event_seq = event_seq + 1, event_log = CAST(COALESCE(event_log, x'') || {1} AS BLOB)"
    " WHERE id = {2} AND version = {3}")
# claim1: the same claim as one statement, one round trip (autocommit), PostgreSQL only:
# data-modifying CTEs; nothing comes back when the queue is empty or the node is fenced.
CLAIM_ONE = (
    "WITH c AS (SELECT id, version FROM bench_runs WHERE status = 'queued'"
    "   AND (not_before_ms IS NULL OR not_before_ms <= {1})"
    "   AND (placement_node IS NULL OR placement_node = {2})"
    "   ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED),"
    " n AS (SELECT name, epoch FROM bench_nodes WHERE name = {3} AND epoch = {4}"
    "   AND lease_expires_at_ms > {5}),"
    " ins AS (INSERT INTO bench_attempts (id, run_id, attempt_no, executor_type,"
    "   runtime_owner, node_epoch, status, callback_token_hash, callback_sequence,"
    "   created_at_ms, log_path, receipt_state, receipt_path, receipt_created_at_ms,"
    "   receipt_updated_at_ms)"
    "   SELECT {6}, c.id, (SELECT COALESCE(MAX(attempt_no), 0) + 1 FROM bench_attempts"
    "     WHERE run_id = c.id), 'local_process', n.name, n.epoch, 'preparing', {7}, 1, {8},"
    "   {9}, 'pending', {10}, {11}, {12} FROM c, n RETURNING run_id)"
    " UPDATE bench_runs r SET status = 'running', version = r.version + 1,"
    " event_seq = r.event_seq + 1, event_log = COALESCE(r.event_log, ''::bytea) || {13}"
    " FROM c, ins WHERE r.id = c.id AND r.id = ins.run_id AND r.version = c.version"
    " RETURNING r.id")
DONE_SELECT = (
    "SELECT a.run_id, a.status, a.node_epoch, a.callback_token_hash, a.callback_sequence,"
    " r.version FROM bench_attempts a JOIN bench_runs r ON r.id = a.run_id WHERE a.id = {1}")
DONE_ATTEMPT = (
    "UPDATE bench_attempts SET status = 'succeeded', exit_code = 0, reason_code = 'EXITED',"
    " finished_at_ms = {1}, receipt_settled_at_ms = {2}"
    " WHERE id = {3} AND (status = 'preparing' OR status = 'running')"
    " AND runtime_owner = {4} AND node_epoch = {5}"
    " AND EXISTS (SELECT 1 FROM bench_nodes WHERE name = {6} AND epoch = {7})")
DONE_RUN_PG = (
    "UPDATE bench_runs SET status = 'succeeded', version = version + 1,"
    " finished_at_ms = {1}, exit_code = 0, reason_code = 'EXITED',"
    " event_seq = event_seq + 2, event_log = COALESCE(event_log, ''::bytea) || {2}"
    " WHERE id = {3} AND version = {4}")
DONE_RUN_SQLITE = (
    "UPDATE bench_runs SET status = 'succeeded', version = version + 1,"
    " finished_at_ms = {1}, exit_code = 0, reason_code = 'EXITED',"
    " event_seq = event_seq + 2, event_log = CAST(COALESCE(event_log, x'') || {2} AS BLOB)"
    " WHERE id = {3} AND version = {4}")


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def spell(sql: str, style: str) -> str:
    """`{n}` → `$n` (asyncpg), `%s` (psycopg) or `?` (sqlite3)."""
    def mark(m: re.Match[str]) -> str:
        return {"dollar": f"${m[1]}", "pyformat": "%s", "qmark": "?"}[style]
    return re.sub(r"\{(\d+)\}", mark, sql)


def _pyformat(sql: str) -> str:
    return re.sub(r"\$\d+", "%s", sql)


def node_name(i: int) -> str:
    return f"node-{i}"


# -- one interface over the three drivers -------------------------------------------------

class Conn(abc.ABC):
    """BEGIN/COMMIT around a body; `one` returns a row or None, `run` rows changed."""

    style = "dollar"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    claim_update = CLAIM_UPDATE_PG
    done_run = DONE_RUN_PG

    @abc.abstractmethod
    def tx(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Implemented by each driver's class below."""

    @abc.abstractmethod
    async def one(self, sql: str, *params: Any) -> Any:
        """Implemented by each driver's class below."""

    @abc.abstractmethod
    async def run(self, sql: str, *params: Any) -> int:
        """Implemented by each driver's class below."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Implemented by each driver's class below."""


class AsyncpgConn(Conn):
    def __init__(self, conn: Any) -> None:
        self.c = conn

    def tx(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.c.transaction()  # type: ignore[no-any-return]

    async def one(self, sql: str, *params: Any) -> Any:
        return await self.c.fetchrow(sql, *params)

    async def run(self, sql: str, *params: Any) -> int:
        status: str = await self.c.execute(sql, *params)
        return int(status.rsplit(" ", 1)[-1])

    async def close(self) -> None:
        await self.c.close()


class PsycopgConn(Conn):
    style = "pyformat"

    def __init__(self, conn: Any) -> None:
        self.c = conn

    def tx(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.c.transaction()  # type: ignore[no-any-return]

    async def one(self, sql: str, *params: Any) -> Any:
        cur = await self.c.execute(sql, params)
        return await cur.fetchone()

    async def run(self, sql: str, *params: Any) -> int:
        cur = await self.c.execute(sql, params)
        return int(cur.rowcount)

    async def close(self) -> None:
        await self.c.close()


def _sq_one(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> Any:
    cur = conn.execute(sql, params)
    try:
        return cur.fetchone()
    finally:
        cur.close()


def _sq_run(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> int:
    cur = conn.execute(sql, params)
    try:
        return cur.rowcount
    finally:
        cur.close()


class SqliteConn(Conn):
    """aiosqlite with one hand-off per statement (the app's Tx does the same through
    aiosqlite's `_execute`)."""

    style = "qmark"
    skip_locked = ""
    claim_update = CLAIM_UPDATE_SQLITE
    done_run = DONE_RUN_SQLITE

    def __init__(self, conn: Any) -> None:
        self.c = conn

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[None]:  # type: ignore[override]
        await self.c.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            await self.c.execute("ROLLBACK")
            raise
        await self.c.execute("COMMIT")

    async def one(self, sql: str, *params: Any) -> Any:
        return await self.c._execute(_sq_one, self.c._conn, sql, params)

    async def run(self, sql: str, *params: Any) -> int:
        return int(await self.c._execute(_sq_run, self.c._conn, sql, params))

    async def close(self) -> None:
        await self.c.close()


# -- the two transactions ----------------------------------------------------------------

class Node:
    def __init__(self, conn: Conn, index: int) -> None:
        self.conn = conn
        self.name = node_name(index)
        self.epoch = 1
        st = conn.style
        self.q_claim_select = spell(CLAIM_SELECT, st) + conn.skip_locked
        self.q_claim_insert = spell(CLAIM_INSERT, st)
        self.q_claim_update = spell(conn.claim_update, st)
        self.q_claim_one = spell(CLAIM_ONE, st)
        self.q_done_select = spell(DONE_SELECT, st)
        self.q_done_attempt = spell(DONE_ATTEMPT, st)
        self.q_done_run = spell(conn.done_run, st)
        self._ids = itertools.count()

    async def claim(self) -> None:
        c = self.conn
        t = now_ms()
        async with c.tx():
            row = await c.one(self.q_claim_select, t, self.name)
            if row is None:
                raise Drained
            run_id, version = row[0], row[1]
            attempt_id = f"a-{self.name}-{next(self._ids):09d}"
            inserted = await c.run(
                self.q_claim_insert, attempt_id, run_id, run_id, TOKEN_HASH, t,
                f"logs/{attempt_id[-2:]}/{attempt_id}.log",
                f"{attempt_id[-2:]}/{attempt_id}.json", t, t, self.name, self.epoch, t)
            if inserted != 1:
                raise Fenced("node lease")
            if await c.run(self.q_claim_update, EVENT, run_id, version) != 1:
                raise Fenced("run version")

    async def claim_one(self) -> None:
        """One statement outside an explicit transaction (the driver's autocommit)."""
        t = now_ms()
        attempt_id = f"a-{self.name}-{next(self._ids):09d}"
        row = await self.conn.one(
            self.q_claim_one, t, self.name, self.name, self.epoch, t, attempt_id, TOKEN_HASH,
            t, f"logs/{attempt_id[-2:]}/{attempt_id}.log",
            f"{attempt_id[-2:]}/{attempt_id}.json", t, t, EVENT)
        if row is None:
            raise Drained

    async def complete(self, attempt_id: str) -> None:
        c = self.conn
        t = now_ms()
        async with c.tx():
            row = await c.one(self.q_done_select, attempt_id)
            if row is None:
                raise Fenced("unknown attempt")
            run_id, version = row[0], row[5]
            if await c.run(self.q_done_attempt, t, t, attempt_id, self.name, self.epoch,
                           self.name, self.epoch) != 1:
                raise Fenced("stale completion")
            if await c.run(self.q_done_run, t, EVENTS2, run_id, version) != 1:
                raise Fenced("run version")


async def drive(nodes: list[Node], shape: str, seconds: float,
                work: dict[str, list[str]]) -> tuple[list[float], int, float, float]:
    """Every node loops its transaction until the deadline (or its work runs out)."""
    latencies: list[float] = []
    fenced = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def one_node(node: Node) -> None:
        nonlocal fenced
        mine = iter(work.get(node.name, ()))
        while loop.time() < deadline:
            t0 = time.perf_counter()
            try:
                if shape == "claim":
                    await node.claim()
                elif shape == "claim1":
                    await node.claim_one()
                else:
                    attempt_id = next(mine, None)
                    if attempt_id is None:
                        return
                    await node.complete(attempt_id)
            except Drained:
                return
            except Fenced:
                fenced += 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_node(n) for n in nodes))
    return latencies, fenced, time.perf_counter() - wall0, time.process_time() - cpu0


def _row(backend: str, driver: str, shape: str, n: int,
         result: tuple[list[float], int, float, float], wal: int | None = None) -> Row:
    lat, fenced, wall, cpu = result
    if fenced:
        print(f"  ({backend}/{driver}/{shape}/{n}: {fenced} fenced transactions, unexpected)")
    lat.sort()
    return Row(backend=backend, driver=driver, shape=shape, nodes=n, txns=len(lat),
               per_s=len(lat) / wall if wall else 0.0, p50_ms=_pct(lat, 0.50),
               p99_ms=_pct(lat, 0.99), cpu_us=cpu / len(lat) * 1e6 if lat else float("nan"),
               wal_bytes=wal / len(lat) if wal is not None and lat else float("nan"))


# -- seeding -------------------------------------------------------------------------------

def seed_rows(shape: str, nodes: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]],
                                                dict[str, list[str]]]:
    """Runs (queued for claim; running with an attempt each for completion)."""
    t = now_ms()
    status = "running" if shape == "complete" else "queued"
    runs = [(f"h-{i:09d}", "t-0001", "schedule", "succeeded", t) for i in range(HISTORY)]
    runs += [(f"r-{i:09d}", "t-0001", "schedule", status, t) for i in range(SEED)]
    attempts: list[tuple[Any, ...]] = []
    work: dict[str, list[str]] = {}
    if shape == "complete":
        for i in range(SEED):
            owner = node_name(i % nodes)
            aid = f"a-seed-{i:09d}"
            attempts.append((aid, f"r-{i:09d}", owner, TOKEN_HASH, t, f"logs/{aid}.log"))
            work.setdefault(owner, []).append(aid)
    return runs, attempts, work


PG_SEED_RUN = ("INSERT INTO bench_runs (id, task_id, trigger, status, created_at_ms)"
               " VALUES ($1, $2, $3, $4, $5)")
PG_SEED_ATTEMPT = (
    "INSERT INTO bench_attempts (id, run_id, attempt_no, executor_type, runtime_owner,"
    " node_epoch, status, callback_token_hash, callback_sequence, created_at_ms, log_path)"
    " VALUES ($1, $2, 1, 'local_process', $3, 1, 'running', $4, 1, $5, $6)")


async def pg_reset(dsn: str, shape: str, nodes: int) -> dict[str, list[str]]:
    """Fresh tables for one cell, seeded through asyncpg (or psycopg), then ANALYZE."""
    runs, attempts, work = seed_rows(shape, nodes)
    node_rows = [(node_name(i), 1, now_ms() + LEASE_MS) for i in range(nodes)]
    try:
        import asyncpg
    except ImportError:
        asyncpg = None
    if asyncpg is not None:
        conn = await asyncpg.connect(dsn)
        try:
            for stmt in PG_SCHEMA:
                await conn.execute(stmt)
            await conn.copy_records_to_table("bench_runs", records=runs, columns=[
                "id", "task_id", "trigger", "status", "created_at_ms"])
            if attempts:
                await conn.executemany(PG_SEED_ATTEMPT, attempts)
            await conn.executemany("INSERT INTO bench_nodes (name, epoch, lease_expires_at_ms)"
                                   " VALUES ($1, $2, $3)", node_rows)
            await conn.execute("ANALYZE")
            await conn.execute("CHECKPOINT")
        finally:
            await conn.close()
        return work
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for stmt in PG_SCHEMA:
            await conn.execute(stmt)
        async with conn.cursor() as cur:
            await cur.executemany(_pyformat(PG_SEED_RUN), runs)
            if attempts:
                await cur.executemany(_pyformat(PG_SEED_ATTEMPT), attempts)
            await cur.executemany("INSERT INTO bench_nodes (name, epoch, lease_expires_at_ms)"
                                  " VALUES (%s, %s, %s)", node_rows)
        await conn.execute("ANALYZE")
        await conn.execute("CHECKPOINT")
    return work


# -- the cells -----------------------------------------------------------------------------

async def connect_pg(driver: str, dsn: str) -> Conn:
    if driver == "asyncpg":
        import asyncpg

        return AsyncpgConn(await asyncpg.connect(dsn))
    import psycopg

    return PsycopgConn(await psycopg.AsyncConnection.connect(dsn, autocommit=True))


async def pg_cell(dsn: str, driver: str, shape: str, n: int, seconds: float) -> Row:
    work = await pg_reset(dsn, shape, n)
    conns = [await connect_pg(driver, dsn) for _ in range(n)]
    try:
        nodes = [Node(c, i) for i, c in enumerate(conns)]
        # Warm-up (statement preparation, caches) outside the measured window.
        warm = {k: v[:50] for k, v in work.items()}
        rest = {k: v[50:] for k, v in work.items()}
        await drive(nodes, shape, 0.5, warm)
        lsn = "SELECT pg_current_wal_lsn()::text"
        before = (await conns[0].one(lsn))[0]
        result = await drive(nodes, shape, seconds, rest)
        after = (await conns[0].one(lsn))[0]
        wal = _lsn(after) - _lsn(before)
        return _row("postgresql", driver, shape, n, result, wal)
    finally:
        for c in conns:
            await c.close()


async def sqlite_cell(path: Path, synchronous: str, shape: str, seconds: float) -> Row:
    import aiosqlite

    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA page_size=1024")
    raw.execute("PRAGMA journal_mode=WAL")
    for stmt in SQLITE_SCHEMA:
        raw.execute(stmt)
    runs, attempts, work = seed_rows(shape, 1)
    raw.execute("BEGIN")
    raw.executemany("INSERT INTO bench_runs (id, task_id, trigger, status, created_at_ms)"
                    " VALUES (?, ?, ?, ?, ?)", runs)
    raw.executemany(
        "INSERT INTO bench_attempts (id, run_id, attempt_no, executor_type, runtime_owner,"
        " node_epoch, status, callback_token_hash, callback_sequence, created_at_ms, log_path)"
        " VALUES (?, ?, 1, 'local_process', ?, 1, 'running', ?, 1, ?, ?)", attempts)
    raw.execute("INSERT INTO bench_nodes (name, epoch, lease_expires_at_ms) VALUES (?, 1, ?)",
                (node_name(0), now_ms() + LEASE_MS))
    raw.execute("COMMIT")
    raw.execute("ANALYZE")
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        await conn.execute("PRAGMA busy_timeout=5000")
        await conn.execute("PRAGMA foreign_keys=ON")
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute(f"PRAGMA synchronous={synchronous}")
        await conn.execute("PRAGMA wal_autocheckpoint=4096")
        node = Node(SqliteConn(conn), 0)
        warm = {k: v[:50] for k, v in work.items()}
        rest = {k: v[50:] for k, v in work.items()}
        await drive([node], shape, 0.5, warm)
        return _row("sqlite", f"aiosqlite {synchronous}", shape, 1,
                    await drive([node], shape, seconds, rest))
    finally:
        await conn.close()


def print_table(rows: list[Row]) -> None:
    print(f"{'backend':11} {'driver':17} {'shape':9} {'nodes':>5} {'txns':>7} {'txn/s':>8}"
          f" {'p50 ms':>7} {'p99 ms':>7} {'cpu us/txn':>10} {'WAL B/txn':>9}")
    for r in rows:
        print(f"{r.backend:11} {r.driver:17} {r.shape:9} {r.nodes:5d} {r.txns:7d}"
              f" {r.per_s:8.0f} {r.p50_ms:7.2f} {r.p99_ms:7.2f} {r.cpu_us:10.0f}"
              f" {r.wal_bytes:9.0f}")


def print_summary(rows: list[Row]) -> None:
    """Medians over the repeats of each cell, and the range of its txn/s."""
    cells: dict[tuple[str, str, str, int], list[Row]] = {}
    for r in rows:
        cells.setdefault((r.backend, r.driver, r.shape, r.nodes), []).append(r)
    print(f"{'median of repeats':39} {'n':>3} {'txn/s':>7} {'(min-max)':>12}"
          f" {'p50 ms':>7} {'p99 ms':>7} {'cpu us/txn':>10} {'WAL B/txn':>9}")
    for (backend, driver, shape, nodes), rs in cells.items():
        def med(field: str, rs: list[Row] = rs) -> float:
            return statistics.median(getattr(r, field) for r in rs)
        span = f"({min(r.per_s for r in rs):.0f}-{max(r.per_s for r in rs):.0f})"
        print(f"{backend:10} {driver:16} {shape:8} {nodes:2d} {len(rs):3d} {med('per_s'):7.0f}"
              f" {span:>12} {med('p50_ms'):7.2f} {med('p99_ms'):7.2f} {med('cpu_us'):10.0f}"
              f" {med('wal_bytes'):9.0f}")


async def pg_server_facts(dsn: str) -> str:
    conn = await connect_pg(DRIVERS[0], dsn)
    try:
        facts = []
        for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method",
                     "shared_buffers"):
            row = await conn.one(f"SHOW {name}")
            facts.append(f"{name}={row[0]}")
        return " ".join(facts)
    finally:
        await conn.close()


DRIVERS: list[str] = []


def available_drivers() -> list[str]:
    out = []
    for name, module in (("psycopg", "psycopg"), ("asyncpg", "asyncpg")):
        try:
            __import__(module)
        except ImportError:
            print(f"skip {name}: not importable in {sys.executable}"
                  " (pip install 'psycopg[binary]' asyncpg into a scratch venv)")
            continue
        out.append(name)
    return out


async def main_async(args: argparse.Namespace) -> int:
    rows: list[Row] = []
    shapes = [s for s in ("claim", "claim1", "complete") if s in args.shapes.split(",")]
    node_counts = [int(x) for x in args.nodes.split(",")]
    if not args.sqlite_only:
        DRIVERS[:] = available_drivers()
        cluster: Cluster | None = None
        dsn = args.dsn or os.environ.get("QLTEST_PG_DSN", "")
        try:
            if not DRIVERS:
                raise Skip("no PostgreSQL driver importable")
            if not dsn:
                bindir = find_pg_bin()
                if bindir is None:
                    raise Skip("no PostgreSQL: give --dsn/QLTEST_PG_DSN, or install Debian's"
                               " package (apt-get install -y postgresql) for a throwaway"
                               " cluster")
                cluster = Cluster(bindir)
                cluster.start()
                dsn = cluster.dsn
                print(f"throwaway cluster: {bindir} in {cluster.dir}, port {cluster.port}")
            try:
                facts = await pg_server_facts(dsn)
            except Exception as exc:  # the drivers' connection errors differ
                raise Skip(f"cannot connect to {dsn}: {type(exc).__name__}: {exc}") from exc
            print(f"postgresql: {facts}")
            # Drivers alternate within each repeat: a shared machine's noise then
            # falls on both alike.
            for shape in shapes:
                for n in node_counts:
                    for _, driver in itertools.product(range(args.repeat), DRIVERS):
                        rows.append(await pg_cell(dsn, driver, shape, n, args.seconds))
                        if args.verbose:
                            print_table(rows[-1:])
        except Skip as exc:
            print(f"skip postgresql: {exc}")
        finally:
            if cluster is not None:
                cluster.stop()
    if not args.pg_only:
        try:
            import aiosqlite  # noqa: F401
        except ImportError:
            print("skip sqlite: aiosqlite not importable")
        else:
            with tempfile.TemporaryDirectory(prefix="qlsq-", dir=args.sqlite_dir) as d:
                path = Path(d) / "bench.db"
                for shape in (s for s in shapes if s != "claim1"):  # no DML in a CTE
                    for _, sync in itertools.product(range(args.repeat), ("FULL", "NORMAL")):
                        rows.append(await sqlite_cell(path, sync, shape, args.seconds))
                        if args.verbose:
                            print_table(rows[-1:])
    if rows:
        print()
        print_table(rows)
        print()
        print_summary(rows)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", default="", help="a PostgreSQL to use (default: QLTEST_PG_DSN,"
                   " else a throwaway cluster)")
    p.add_argument("--seconds", type=float, default=5.0, help="measured time per cell")
    p.add_argument("--nodes", default="1,3", help="node counts for PostgreSQL")
    p.add_argument("--shapes", default="claim,claim1,complete",
                   help="claim, claim1 (one statement, PostgreSQL only), complete")
    p.add_argument("--repeat", type=int, default=1, help="runs of each cell")
    p.add_argument("--pg-only", action="store_true")
    p.add_argument("--sqlite-only", action="store_true")
    p.add_argument("--sqlite-dir", default=None, help="where the SQLite file goes (a real"
                   " disk, not tmpfs; default: the temp dir)")
    p.add_argument("--json", default="", help="also write the rows here")
    p.add_argument("-v", "--verbose", action="store_true", help="print each cell as it ends")
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
