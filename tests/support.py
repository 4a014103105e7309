"""Helpers the tests import (`from support import …`): ports, settings, runtimes,
a real server, waits (`eventually`), unprivileged interpreters. Fixtures live in
tests/conftest.py, which imports from here."""
from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeVar

import pytest

from qledge import paths, settings
from qledge.db import backend, migrate, runs
from qledge.model import Concurrency, Run, RunStatus
from qledge.runtime.lifecycle import Runtime

import _skips

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
ADMIN = "test-admin-token-0123456789abcdef"


def launcher_path() -> str:
    return os.environ.get(
        "QLEDGE_LAUNCHER", str(ROOT / "build" / "launcher" / platform.machine() / "ql-launch"))


def free_port() -> int:
    """A random free port below the ephemeral range, so no outgoing connection and no
    concurrently started test server (which would get sequential kernel picks) takes it
    between this check and the server's bind."""
    import random

    for _ in range(100):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


# QLTEST_BACKEND=pg runs the suites built on these fixtures (make_settings, `db`,
# `client`, make_runtime) on PostgreSQL — a node in fleet mode, alone on a fresh
# database — instead of the embedded SQLite (scripts/test runs a selection both ways).
BACKEND = os.environ.get("QLTEST_BACKEND", "sqlite")
CLUSTER_SECRET = "test-cluster-secret-0123456789abcdef"
_PG_BY_STATE: dict[Path, str] = {}


def pg_env(state: Path) -> dict[str, str]:
    """QLTEST_BACKEND=pg: the settings that make a node of `state` a fleet node on its
    own database — one per state dir, so a restarted node finds its data. A short
    scheduler lease: a worker restarted by a test takes over its predecessor's lease
    (it waits for it to run out, as a fleet node must) in 2 s, not 10."""
    import _pg

    dsn = _PG_BY_STATE.get(state) or _PG_BY_STATE.setdefault(state, _pg.fresh_database())
    return {"QLEDGE_DATABASE_URL": dsn, "QLEDGE_CLUSTER_SECRET": CLUSTER_SECRET,
            "QLEDGE_LEADER_LEASE_S": "2", "QLEDGE_ADMIN_TOKEN": ADMIN}


def make_settings(state: Path, **overrides: str) -> settings.Settings:
    env = {
        "QLEDGE_STATE_DIR": str(state),
        "QLEDGE_ADMIN_TOKEN": ADMIN,
        "QLEDGE_HOST": "127.0.0.1",
        "QLEDGE_LAUNCHER": launcher_path(),
        "QLEDGE_PUBLISH_GRACE_MS": "200",
    }
    if BACKEND == "pg":
        env.update(pg_env(state))
    env.update({f"QLEDGE_{k.upper()}": v for k, v in overrides.items()})
    conf = settings.load(env)
    paths.prepare_roots(conf)
    return conf


def migrate_for(conf: settings.Settings) -> None:
    """Migrate the settings' database; callable inside a running event loop too (the
    PostgreSQL migration runs its own, so it goes to a thread of its own)."""
    if not conf.fleet:
        if not conf.db_path.exists():
            # A new SQLite database starts as a copy of the one migrated once per session
            # (test_support.py proves their schemas equal); apply then only checks it.
            shutil.copyfile(migrated_template(), conf.db_path)
            os.chmod(conf.db_path, 0o600)
        migrate.apply(conf.db_path)
        return
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(backend.migrate_now, conf).result()


_TEMPLATE: list[Path] = []


def migrated_template() -> Path:
    """A SQLite database migrated through every migration, made once per test session
    (closed, so checkpointed: a single file to copy)."""
    if not _TEMPLATE:
        where = Path(tempfile.mkdtemp(prefix="qledge-template-"))
        atexit.register(shutil.rmtree, where, True)
        migrate.apply(where / "template.db")
        _TEMPLATE.append(where / "template.db")
    return _TEMPLATE[0]


def sql(conf: settings.Settings, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """One statement on the settings' database from outside the app (a test's own look
    or change), on either backend: the first column of each row returned."""
    if not conf.fleet:
        import sqlite3

        with sqlite3.connect(conf.db_path) as db:
            return [r[0] for r in db.execute(statement, params).fetchall()]

    async def on_pg() -> list[Any]:
        import asyncpg

        from qledge.db import pg

        conn = await asyncpg.connect(conf.database_url)
        try:
            return [r[0] for r in await conn.fetch(pg.translate(statement)[0], *params)]
        finally:
            await conn.close()

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, on_pg()).result()


def pg_rows(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    """Every row of one statement on a PostgreSQL database, as tuples (a test's look)."""
    async def fetch() -> list[tuple[Any, ...]]:
        import asyncpg

        conn = await asyncpg.connect(dsn)
        try:
            return [tuple(r.values()) for r in await conn.fetch(statement)]
        finally:
            await conn.close()

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fetch()).result()


def make_runtime(state: Path, **overrides: str) -> Runtime:
    """An in-process runtime on a migrated database; the caller starts and stops it."""
    conf = make_settings(state, **overrides)
    migrate_for(conf)
    return Runtime(conf)


async def add_task(rt: Runtime, command: str) -> str:
    """A task (concurrency: allow) straight into the runtime's database; its id."""
    from qledge import ids
    from qledge.db import tasks
    from qledge.tasks.writable import TaskFields

    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), TaskFields(
            name="t", command=command, env={}, labels=[],
            concurrency=Concurrency.ALLOW), 1)
    return task.id


@contextlib.contextmanager
def time_zone(name: str) -> Iterator[None]:
    """Run in this TZ (the process's local zone), restored afterwards."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


# `migrate.apply` in a child whose storage-conversion VACUUM is watched: SQLite's
# progress handler counts every 1000 VM steps inside the VACUUM (and SIGKILLs the
# child at step argv[2], when not 0); a stat of argv[3] marks its start for strace.
_MIGRATE = """
import os, signal, sys
from pathlib import Path
from qledge.db import migrate, upkeep
from qledge.tasks.writable import TaskFields

db, kill_at, marker = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
real = upkeep.apply_storage_settings
state = {"vacuum": False, "steps": 0}

def watched(conn):
    def trace(sql):
        state["vacuum"] = sql.strip().upper() == "VACUUM"
        if state["vacuum"]:
            os.path.exists(marker)

    def progress():
        if state["vacuum"]:
            state["steps"] += 1
            if state["steps"] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return 0

    conn.set_trace_callback(trace)
    conn.set_progress_handler(progress, 1000)
    try:
        return real(conn)
    finally:
        conn.set_progress_handler(None, 0)
        conn.set_trace_callback(None)

upkeep.apply_storage_settings = watched
migrate.apply(db)
print(state["steps"])
"""


class Vacuumed(NamedTuple):
    steps: int  # progress callbacks inside the VACUUM (1000 VM steps each)
    writes_before: int  # pwrite64s to the database file before the VACUUM began
    writes_from: int  # ... from its start to the end of migrate.apply (the copy back)


def migrate_in_child(db: Path, *, kill_at_step: int = 0, kill_at_write: int = 0
                     ) -> Vacuumed | None:
    """`migrate.apply(db)` in a child process, for the crash-safety tests of the
    storage conversion (one VACUUM, db/upkeep.py). Without a kill: run to the end
    under strace and count (Vacuumed). `kill_at_step`: SIGKILL at that progress step
    of the VACUUM, while it copies into its temporary database. `kill_at_write`:
    SIGKILL (strace inject) instead of the database file's pwrite64 of that number,
    i.e. while the VACUUM copies back over the file with a hot journal beside it."""
    import shutil
    import signal
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT / "app")}
    marker = f"{db}.vacuum-starts"
    child = [sys.executable, "-c", _MIGRATE, str(db), str(kill_at_step), marker]
    if kill_at_step:
        done = subprocess.run(child, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr)
        return None
    strace = shutil.which("strace")
    if strace is None:
        unavailable("strace is not installed (scripts/bootstrap installs it)")
    trace = Path(f"{db}.strace")
    watch = [strace, "-f", "-qq", "-o", str(trace), "-P", str(db),
             "-P", marker, "-e", "trace=pwrite64,newfstatat,stat"]
    if kill_at_write:  # (strace 6.1 injects nothing with --seccomp-bpf)
        watch += ["-e", f"inject=pwrite64:signal=SIGKILL:when={kill_at_write}"]
    else:
        watch.insert(1, "--seccomp-bpf")  # stops at the traced calls only: faster
    done = subprocess.run([*watch, *child], env=env, capture_output=True, text=True,
                          timeout=300)
    if kill_at_write:
        assert done.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), (
            done.returncode, done.stderr)
        return None
    assert done.returncode == 0, done.stderr
    lines = trace.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    writes = [i for i, line in enumerate(lines) if " pwrite64(" in line]
    return Vacuumed(steps=int(done.stdout.split()[-1]),
                    writes_before=sum(i < start for i in writes),
                    writes_from=sum(i > start for i in writes))


def killed_mid_vacuum(db: Path) -> dict[str, Path]:
    """Copies of `db` (closed, conversion pending) after `migrate.apply` in a child:
    "full" ran to the end; "copy_in" was SIGKILLed half-way through the VACUUM's
    progress steps, while it fills its temporary database (the file itself untouched:
    no hot journal); "copy_back" half-way through its writes over the file (a hot journal
    beside it, rolled back by the next open)."""
    import shutil

    copies = {}
    for name in ("full", "copy_in", "copy_back"):
        copies[name] = db.with_name(f"{db.stem}-{name}{db.suffix}")
        for suffix in ("", "-wal"):
            if Path(f"{db}{suffix}").exists():
                shutil.copyfile(f"{db}{suffix}", f"{copies[name]}{suffix}")
    full = migrate_in_child(copies["full"])
    assert full is not None and full.steps >= 10 and full.writes_from >= 10, full
    migrate_in_child(copies["copy_in"], kill_at_step=full.steps // 2)
    unused = Path(f"{copies['copy_in']}-journal")
    assert not unused.exists() or unused.stat().st_size == 0, "the file was written"
    migrate_in_child(copies["copy_back"],
                     kill_at_write=full.writes_before + full.writes_from // 2)
    journal = Path(f"{copies['copy_back']}-journal")
    assert journal.exists() and journal.stat().st_size > 0, "no hot journal beside the file"
    return copies












@contextlib.contextmanager
def tmpfs(mnt: Path, why: str) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted at `mnt` (a small, really full-able volume; root only)."""
    if os.geteuid() != 0:
        unavailable(f"{why} needs root to mount a tmpfs")
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)




def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


class Server:
    """`python -m qledge serve` on a real port (no supervisord), for HTTP-level tests.

    `user`: run the worker (and so its tasks) as this uid/gid (needs root; the
    state dir is given to it). `preexec_fn`: run in the worker's process first
    (e.g. a seccomp filter, which its launchers and tasks inherit).
    """

    def __init__(self, state: Path, *, user: int | None = None,
                 preexec_fn: Callable[[], None] | None = None, **settings_env: str) -> None:
        import subprocess
        import sys

        import httpx

        self.state = state
        self.port = free_port()
        self.env = {**os.environ, "QLEDGE_STATE_DIR": str(state), "QLEDGE_HOST": "127.0.0.1",
                    "QLEDGE_PORT": str(self.port), "QLEDGE_ADMIN_TOKEN": ADMIN,
                    "QLEDGE_LAUNCHER": launcher_path(), "QLEDGE_PUBLISH_GRACE_MS": "200",
                    **{f"QLEDGE_{k.upper()}": v for k, v in settings_env.items()}}
        if BACKEND == "pg":
            self.env.update(pg_env(state))
        self.output = state.parent / f"{state.name}.out"
        state.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "qledge", "serve"]
        ids: dict[str, Any] = {}
        if user is not None:
            how = unprivileged(user)
            argv = [*how.python, "-m", "qledge", "serve"]
            self.env["PYTHONPATH"] = os.pathsep.join(how.path)
            self.env["QLEDGE_LAUNCHER"] = how.launcher
            self.env.pop("QLEDGE_PYTHON", None)
            for path in (state.parent, state):
                os.chown(path, user, user)
            ids = {"user": user, "group": user, "extra_groups": []}
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(argv, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, preexec_fn=preexec_fn, **ids)
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=30,
                                 headers={"Authorization": f"Bearer {ADMIN}"})
        import time

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(self.output.read_text())
            try:
                if self.http.get("/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("server not ready")

    def stop_worker_only(self) -> None:
        """SIGTERM the worker and wait; its tasks are left alone (shutdown policy)."""
        import signal

        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self.http.close()

    def stop(self) -> None:
        import signal

        from _appliance import kill_leftover_tasks

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self.http.close()
        kill_leftover_tasks(self.state)




def eventually(predicate: Callable[[], T | None], *, timeout: float = 30.0,
               interval: float = 0.02, what: str = "the condition") -> T:
    """Call `predicate` every `interval` s until it returns something truthy, and return
    that; after `timeout` s fail naming `what` was awaited. The one polling wait of the
    suite: no fixed sleep where there is an event to wait on."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


async def eventually_async(predicate: Callable[[], Awaitable[T | None]], *,
                           timeout: float = 30.0, interval: float = 0.02,
                           what: str = "the condition") -> T:
    """`eventually` for a coroutine predicate, sleeping on the event loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


def ended(run: Run) -> bool:
    """A run that is neither queued nor running."""
    return run.status not in (RunStatus.QUEUED, RunStatus.RUNNING)


async def run_when(rt: Runtime, run_id: str, check: Callable[[Run], object] = ended, *,
                   timeout: float = 20.0, what: str = "") -> Run:
    """The run, read from `rt`'s database, once `check(run)` holds (by default: once it
    has ended); after `timeout` s fail with the run as it last was."""
    last: list[Run] = []

    async def holds() -> Run | None:
        async with rt.db.read() as tx:
            run = await runs.get_run(tx, run_id)
        last[:] = [run]
        return run if check(run) else None

    try:
        return await eventually_async(holds, timeout=timeout, what=what or f"run {run_id}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the run: {last[0] if last else None}") from None


def wait_terminal(http: object, run_id: str, timeout: float = 30.0) -> dict[str, object]:
    """The run once terminal; after `timeout` s the run as it last was (callers assert)."""
    def get() -> dict[str, object]:
        run: dict[str, object] = http.get(f"/api/v1/runs/{run_id}").json()  # type: ignore[attr-defined]
        return run

    def ended() -> dict[str, object] | None:
        run = get()
        return run if run["terminal"] else None

    try:
        return eventually(ended, timeout=timeout, what=f"run {run_id} to be terminal")
    except AssertionError:
        return get()


def _python_path() -> list[str]:
    """This interpreter's import path for qledge and its dependencies (the venv's
    site-packages), for another interpreter of the same version."""
    import site

    return [str(ROOT / "app"), *site.getsitepackages()]


class Unprivileged(NamedTuple):
    """What an unprivileged uid runs: an interpreter, its import path, the launcher."""

    python: list[str]
    path: list[str]
    launcher: str


_UNPRIVILEGED: dict[int, Unprivileged] = {}


def _reachable_mirror() -> Path:
    """A copy of the app, the venv's site-packages and the launcher in a 0755 folder
    under /var/tmp, for a checkout an unprivileged uid cannot traverse to (a clone in
    /root or in a 0700 temporary folder). Hard links where the filesystem allows
    (seconds, no space), else a copy; removed when the test session ends."""
    import atexit
    import shutil
    import tempfile

    mirror = Path(tempfile.mkdtemp(prefix="qledge-unpriv-", dir="/var/tmp"))
    atexit.register(shutil.rmtree, mirror, ignore_errors=True)
    sources = {"app": ROOT / "app", "launcher": Path(launcher_path()).parent}
    for i, site_dir in enumerate(_python_path()[1:]):
        sources[f"site{i}"] = Path(site_dir)
    for name, src in sources.items():
        if not src.is_dir():
            continue
        done = subprocess.run(["cp", "-al", str(src), str(mirror / name)], capture_output=True)
        if done.returncode != 0:
            shutil.rmtree(mirror / name, ignore_errors=True)
            shutil.copytree(src, mirror / name, symlinks=True)
    for folder in [mirror, *(p for p in mirror.rglob("*") if p.is_dir() and not p.is_symlink())]:
        folder.chmod(0o755)
    return mirror


def _runs_as(uid: int, argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, user=uid, group=uid, extra_groups=[], capture_output=True,
                              timeout=60, check=False).returncode == 0
    except OSError:
        return False


def unprivileged(uid: int) -> Unprivileged:
    """An interpreter that `uid` can run with this venv's packages (this one, or the
    system python3 of the same version: a pyenv under /root is out of its reach), the
    import path it uses and the launcher it can execute — from the checkout itself
    when `uid` can reach it, else from a mirror of it (`_reachable_mirror`)."""
    import sys

    if uid in _UNPRIVILEGED:
        return _UNPRIVILEGED[uid]
    probe = "import qledge, msgspec, uvloop, aiosqlite, starlette, hypercorn"
    reasons = []
    mirror: Path | None = None
    for attempt in ("checkout", "mirror"):
        if attempt == "checkout":
            path, launcher = _python_path(), launcher_path()
        else:
            mirror = _reachable_mirror()
            sites = sorted(str(p) for p in mirror.glob("site*"))
            path = [str(mirror / "app"), *sites]
            launcher = str(mirror / "launcher" / Path(launcher_path()).name)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        for candidate in (sys.executable, "/usr/bin/python3"):
            try:
                done = subprocess.run([candidate, "-c", probe], env=env, user=uid, group=uid,
                                      extra_groups=[], capture_output=True, text=True,
                                      timeout=60, check=False)
            except OSError as exc:
                reasons.append(f"{attempt}: {candidate}: {exc}")
                continue
            if done.returncode == 0 and _runs_as(uid, [launcher, "--version"]):
                found = Unprivileged([candidate], path, launcher)
                _UNPRIVILEGED[uid] = found
                return found
            reasons.append(f"{attempt}: {candidate}: {done.stderr.strip().splitlines()[-1:]}")
    unavailable(f"no python that uid {uid} can run with this venv's packages: {reasons}")
    raise AssertionError("unreachable")


def unavailable(reason: str) -> NoReturn:
    """A prerequisite of a promised check is missing: skip with the reason on a
    developer's machine, but FAIL under CI, where scripts/bootstrap installs
    everything and a skip would hide the promise going unproven."""
    if _skips.under_ci():
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)
