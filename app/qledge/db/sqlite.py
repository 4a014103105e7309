"""The embedded SQLite backend: one writer (BEGIN IMMEDIATE) and separate readers;
durability marks. Its Database and Tx satisfy db/interface.py's Protocols.

Durability rule (docs/storage.md): a receipt is deleted only once the result
it proved is on disk. A write transaction is either *durable* (COMMIT with
synchronous=FULL: the WAL is fsync'd before COMMIT returns) or *deferred*
(synchronous=NORMAL: written to the WAL, on disk at the next fsync of it).
`commit_seq` counts commits and `durable_seq` the last one known on disk; the
WAL is append-only, so an fsync makes every earlier commit durable (a power
cut keeps a prefix of commits, never a hole). Deferred commits are for what a
power cut may lose without harm (see docs/storage.md, "Durability classes").
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

import aiosqlite

from .. import failpoints
from . import interface
from ._durability import Durability
from ._hooks import TxHooks
from .dialect import SQLITE, Dialect
from .interface import Params, Row, TerminalListener

BUSY_TIMEOUT_MS = 5000
JOURNAL_SIZE_LIMIT = 4 << 20
# The callbacks listening on each channel (Database.listen), in this process.
Listeners = dict[str, list[Callable[[], None]]]

T = TypeVar("T")


def _seq(params: Params) -> Sequence[Any] | dict[str, Any]:
    return params if isinstance(params, (list, tuple, dict)) else tuple(params)


def _exec(conn: sqlite3.Connection, sql: str, params: Params) -> int:
    cur = conn.execute(sql, _seq(params))
    try:
        return cur.rowcount
    finally:
        cur.close()


def _one(conn: sqlite3.Connection, sql: str, params: Params) -> Row | None:
    cur = conn.execute(sql, _seq(params))
    try:
        row: sqlite3.Row | None = cur.fetchone()
        return row
    finally:
        cur.close()


def _all(conn: sqlite3.Connection, sql: str, params: Params) -> list[Row]:
    cur = conn.execute(sql, _seq(params))
    try:
        return list(cur.fetchall())
    finally:
        cur.close()


class InlineSuspended(RuntimeError):
    """Code run by Tx.inline awaited something other than its transaction."""


def _drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, here (the database thread)."""
    try:
        step = coro.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coro.close()
    raise InlineSuspended(f"inline transaction code awaited {type(step).__name__}")


class Tx(TxHooks):
    """One open transaction (or read snapshot) on one connection.

    Each statement is one hand-off to the connection's thread (aiosqlite would
    take three: execute, fetch, close). `inline` runs a whole function there in
    one hand-off: a batch of receipts is then one round trip, not eight per
    receipt (docs/performance.md)."""

    __slots__ = ("_conn", "_listeners")

    # A class constant: no cost per transaction.
    dialect: ClassVar[Dialect] = SQLITE

    def __init__(self, conn: aiosqlite.Connection,
                 terminal_listeners: tuple[TerminalListener, ...] = (),
                 listeners: Listeners | None = None) -> None:
        super().__init__(terminal_listeners)
        self._conn = conn
        self._listeners: Listeners = {} if listeners is None else listeners

    async def notify(self, channel: str) -> None:
        """The channel's listeners in this process run after the commit, once each
        (one process writes an embedded database: nobody else could listen). A
        savepoint's rollback does not withdraw it: listeners only wake a look."""
        for callback in self._listeners.get(channel, ()):
            if callback not in self._committed:
                self.on_commit(callback)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        result: T = await self._conn._execute(fn, *args)  # type: ignore[no-untyped-call]
        return result

    def _raw(self) -> sqlite3.Connection:
        raw: sqlite3.Connection = self._conn._conn  # the sqlite3 object, used on its thread
        return raw

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run a statement; returns the number of rows changed."""
        return await self._run(_exec, self._raw(), sql, params)

    async def one(self, sql: str, params: Params = ()) -> Row | None:
        return await self._run(_one, self._raw(), sql, params)

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._run(_all, self._raw(), sql, params)

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A nested unit inside the transaction: rolled back alone if it raises."""
        await self.execute("SAVEPOINT unit")
        mark = self._savepoint_mark()
        try:
            yield
        except BaseException:
            await self.execute("ROLLBACK TO unit")
            await self.execute("RELEASE unit")
            self._rolled_back(mark)
            raise
        await self.execute("RELEASE unit")

    async def inline(self, fn: Callable[[interface.Tx], Awaitable[T]]) -> T:
        """`fn(tx)` whole on the database thread, in one hand-off.

        `fn` may await this Tx's methods only (they complete at once there); any
        other await raises InlineSuspended, which rolls the transaction back. Its
        on_commit callbacks still run on the event loop, after the commit."""
        itx = _InlineTx(self._conn, self.terminal_listeners, self._listeners)
        itx._share_hooks(self)
        return await self._run(_inline, itx, fn)


def _inline(itx: _InlineTx, fn: Callable[[interface.Tx], Awaitable[T]]) -> T:
    itx.bind()
    return _drive(cast(Coroutine[Any, Any, T], fn(itx)))


class _InlineTx(Tx):
    """A Tx whose statements run synchronously on the current (database) thread."""

    __slots__ = ("_sync",)

    def bind(self) -> None:
        self._sync = self._conn._conn

    async def execute(self, sql: str, params: Params = ()) -> int:
        return _exec(self._sync, sql, params)

    async def one(self, sql: str, params: Params = ()) -> Row | None:
        return _one(self._sync, sql, params)

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        return _all(self._sync, sql, params)

    async def inline(self, fn: Callable[[interface.Tx], Awaitable[T]]) -> T:
        return await fn(self)


async def _connect(path: Path, *, readonly: bool) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    await conn.execute("PRAGMA foreign_keys=ON")
    if readonly:
        await conn.execute("PRAGMA query_only=ON")
    else:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")  # switched per transaction
        # After a checkpoint resets the WAL, truncate it back to this size (SD cards).
        await conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
        # Checkpoint when the WAL reaches that size, not SQLite's 1000 pages: a
        # checkpoint rewrites every distinct page into the database file, and the
        # hot pages (the B-trees' right edges) are rewritten once per checkpoint,
        # so fewer checkpoints mean fewer bytes per attempt.
        cur = await conn.execute("PRAGMA page_size")
        row = await cur.fetchone()
        await cur.close()
        page_size = int(row[0]) if row else 4096
        await conn.execute(f"PRAGMA wal_autocheckpoint={JOURNAL_SIZE_LIMIT // page_size}")
    return conn


async def _begin(conn: aiosqlite.Connection, statement: str) -> None:
    """BEGIN, first closing a transaction a cancelled task left open.

    A task cancelled while awaiting (an SSE client leaving, a loop stopped
    mid-round) cannot stop the statement already queued on the connection's
    thread, so its COMMIT/ROLLBACK may never run and the connection comes back
    still inside a transaction. Nothing of it was committed; roll it back.
    """
    try:
        await conn.execute(statement)
    except sqlite3.OperationalError as exc:
        if "within a transaction" not in str(exc):
            raise
        await conn.execute("ROLLBACK")
        await conn.execute(statement)


def _fdatasync(wal: Path) -> None:
    try:
        fd = os.open(wal, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # no WAL: everything was checkpointed into the (fsync'd) database
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


async def _set_synchronous(conn: aiosqlite.Connection, level: str) -> None:
    """SQLite refuses this inside a transaction; one a cancelled task left open is
    rolled back first (see _begin)."""
    try:
        await conn.execute(f"PRAGMA synchronous={level}")
    except sqlite3.OperationalError as exc:
        if "transaction" not in str(exc):
            raise
        await conn.execute("ROLLBACK")
        await conn.execute(f"PRAGMA synchronous={level}")


class Database(Durability):
    """Owns every connection; opened and closed by the app lifespan."""

    def __init__(self, path: Path, readers: int = 2) -> None:
        super().__init__()
        self.path = path
        self._readers_n = readers
        self._writer: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._all: list[aiosqlite.Connection] = []
        self._full = True
        self._terminal: tuple[TerminalListener, ...] = ()
        self._listeners: Listeners = {}

    def on_terminal(self, listener: TerminalListener) -> None:
        """Register `listener` for every write transaction that makes a run terminal
        (db/runs.apply calls it); an exception from it rolls the transaction back."""
        self._terminal = (*self._terminal, listener)

    async def open(self) -> None:
        self._writer = await _connect(self.path, readonly=False)
        self._full = True
        self._all.append(self._writer)
        for _ in range(self._readers_n):
            conn = await _connect(self.path, readonly=True)
            self._all.append(conn)
            self._readers.put_nowait(conn)
        # A previous worker may have left deferred commits in the page cache only:
        # make them durable before anything here acts on what they say (e.g. deletes
        # a receipt because its attempt reads terminal).
        await asyncio.to_thread(_fdatasync, Path(f"{self.path}-wal"))

    async def close(self) -> None:
        conns, self._all = self._all, []
        self._writer = None
        self._listeners.clear()
        for conn in conns:
            await conn.close()

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    @asynccontextmanager
    async def write(self, *, durable: bool = True) -> AsyncIterator[Tx]:
        """A BEGIN IMMEDIATE transaction: committed on exit, rolled back on any error.

        durable=False defers the fsync to the next durable commit or sync(); only for
        changes a power cut may lose without harm (docs/storage.md).
        """
        if self._writer is None:
            raise RuntimeError("database is not open")
        async with self._write_lock:
            conn = self._writer
            if durable is not self._full:
                await _set_synchronous(conn, "FULL" if durable else "NORMAL")
                self._full = durable
            await _begin(conn, "BEGIN IMMEDIATE")
            changes = conn.total_changes
            tx = Tx(conn, self._terminal, self._listeners)
            try:
                yield tx
                failpoints.hit("db.before_commit")
                await conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    await conn.execute("ROLLBACK")
                tx._rolled_back()
                raise
            self.commit_seq += 1
            tx._did_commit()
            # A transaction that changed nothing writes no WAL frame, so SQLite does
            # not fsync it even at synchronous=FULL: it must not claim the earlier
            # deferred commits durable (found by the power-cut drill: the reaper
            # deleted a receipt whose result was still only in the page cache).
            if durable and conn.total_changes != changes:
                await self._advance(self.commit_seq)

    def listen(self, channel: str, callback: Callable[[], None]) -> None:
        """Call `callback()` after every commit of this process that notified `channel`
        (Tx.notify), until close()."""
        self._listeners.setdefault(channel, []).append(callback)

    async def ping(self) -> None:
        """The database answers a statement now (a storage error if not)."""
        async with self.read() as tx:
            await tx.one("SELECT 1")

    async def sync(self) -> None:
        """Make every commit so far durable: one fdatasync of the WAL.

        Every commit counted in commit_seq has handed its frames to write(2)
        before COMMIT returned, so an fsync of the file covers them all.
        """
        seq = self.commit_seq
        if seq <= self.durable_seq:
            return
        await asyncio.to_thread(_fdatasync, Path(f"{self.path}-wal"))
        self.syncs += 1
        await self._advance(seq)

    async def maintenance(self, pragma: str, *, rows: bool = True) -> list[sqlite3.Row]:
        """A maintenance PRAGMA (wal_checkpoint, incremental_vacuum) on the writer, outside
        any transaction, under the write lock. Never a full VACUUM (docs/retention.md).

        rows=False steps the statement to completion without rows (incremental_vacuum
        frees one page per step; a plain execute would stop after the first)."""
        if self._writer is None:
            raise RuntimeError("database is not open")
        if not pragma.startswith("PRAGMA "):
            raise ValueError("maintenance runs PRAGMAs only")
        async with self._write_lock:
            if not rows:
                await self._writer.executescript(pragma)
                return []
            cur = await self._writer.execute(pragma)
            result = await cur.fetchall()
            await cur.close()
            return list(result)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """A consistent read snapshot on a reader connection."""
        conn = await self._readers.get()
        try:
            await _begin(conn, "BEGIN")
            try:
                yield Tx(conn)
            finally:
                await conn.execute("COMMIT")
        finally:
            self._readers.put_nowait(conn)
