"""A throwaway PostgreSQL cluster for the backend tests (docs/fleet.md, "The test rig").

`pg_server` (session) runs initdb + pg_ctl in a private temp dir: trust auth, listening
on 127.0.0.1 only at a free port, its socket in that dir, fsync and synchronous_commit
on; stopped and removed at the end of the session. As root every step runs as the
`postgres` user through runuser (initdb refuses root); otherwise as the current user.
QLTEST_PG_DSN names an existing server instead (scripts/test may start one).

`pg_dsn` (per test) is a fresh database on it (CREATE DATABASE … TEMPLATE template0),
so tests do not see each other's rows.

PostgreSQL missing is a failure, not a skip: scripts/bootstrap installs it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

DSN_ENV = "QLTEST_PG_DSN"
_names = itertools.count(1)


def pg_bindir(root: Path = Path("/usr/lib/postgresql")) -> Path:
    """The highest installed /usr/lib/postgresql/<major>/bin with initdb."""
    found = sorted((p for p in root.glob("*/bin")
                    if (p / "initdb").exists() and p.parent.name.isdigit()),
                   key=lambda p: int(p.parent.name))
    if not found:
        pytest.fail("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                    "run scripts/bootstrap as root, it installs Debian's postgresql")
    return found[-1]


class Cluster:
    def __init__(self, bindir: Path, port: int, settings: dict[str, str] | None = None) -> None:
        self.bin = bindir
        self.port = port
        self.settings = settings or {}
        self.dir = Path(tempfile.mkdtemp(prefix="qlpg-"))
        self.data = self.dir / "data"
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.dir, ignore_errors=True)
                pytest.fail("running as root and there is no `postgres` user to run "
                            "initdb as (apt-get install postgresql creates it)")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.dir.chmod(0o700)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self.prefix, *args], capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            log = self.dir / "server.log"
            tail = log.read_text()[-1500:] if log.exists() else ""
            pytest.fail(f"{Path(args[0]).name} failed ({done.returncode}): "
                        f"{done.stderr.strip()[-1500:]}\n{tail}")

    def start(self) -> None:
        # -N: no fsync of initdb's own files (a throwaway cluster); the server runs
        # with fsync and synchronous_commit on, as a real one.
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "-A", "trust", "-E", "UTF8", "--no-locale", "-N")
        self._start()

    def _start(self) -> None:
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir}"
                " -c fsync=on -c synchronous_commit=on -c max_connections=200"
                + "".join(f" -c {k}={v}" for k, v in self.settings.items()))
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                  str(self.dir / "server.log"), "-w", "-t", "60", "-o", opts, "start")

    def crash(self) -> None:
        """`pg_ctl stop -m immediate`: the server quits without a checkpoint, as in a
        crash; the next start replays its WAL."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                  "stop")

    def start_again(self) -> None:
        self._start()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            subprocess.run([*self.prefix, str(self.bin / "pg_ctl"), "-D", str(self.data),
                            "-m", "fast", "-w", "stop"], capture_output=True, timeout=60,
                           check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def psql(dsn: str, sql: str) -> str:
    """One statement through psql (no event loop needed in a sync fixture)."""
    done = subprocess.run([str(pg_bindir() / "psql"), "-X", "-q", "-At", "-v",
                           "ON_ERROR_STOP=1", "-d", dsn, "-c", sql],
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        pytest.fail(f"psql {sql!r} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The DSN of the session's PostgreSQL server (its `postgres` database)."""
    given = os.environ.get(DSN_ENV)
    if given:
        yield given
        return
    from support import free_port

    cluster = Cluster(pg_bindir(), free_port())
    try:
        cluster.start()
        yield cluster.dsn
    finally:
        cluster.stop()


@pytest.fixture
async def pgdb(pg_dsn: str) -> AsyncIterator[Any]:
    """A migrated PostgreSQL `Database` (db/pg.py) on a fresh database, open."""
    from qledge.db import migrate_pg, pg

    await migrate_pg.apply(pg_dsn)
    db = pg.Database(pg_dsn)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
async def litedb(tmp_path: Path) -> AsyncIterator[Any]:
    """The same on the embedded SQLite (db/sqlite.py): the reference of the
    two-backend comparisons."""
    from qledge.db import migrate
    from qledge.db.sqlite import Database

    path = tmp_path / "qledge.db"
    migrate.apply(path)
    db = Database(path)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A fresh, empty database for this test; dropped afterwards."""
    name = f"qltest_{os.getpid()}_{next(_names)}"
    psql(pg_server, f"CREATE DATABASE {name} TEMPLATE template0")
    base = pg_server.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        psql(pg_server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


_shared: Cluster | None = None


def fresh_database() -> str:
    """QLTEST_BACKEND=pg (tests/support.py): a new empty database on a cluster shared
    by the whole session, started at the first call and stopped at exit."""
    global _shared
    import atexit

    from support import free_port

    server = os.environ.get(DSN_ENV)
    if server is None:
        if _shared is None:
            _shared = Cluster(pg_bindir(), free_port())
            _shared.start()
            atexit.register(_shared.stop)
        server = _shared.dsn
    name = f"qlb_{os.getpid()}_{next(_names)}"
    psql(server, f"CREATE DATABASE {name} TEMPLATE template0")
    return f"{server.rsplit('/', 1)[0]}/{name}"
