"""The PostgreSQL backend's connections (asyncpg): db/interface.py's Protocols.

One writer connection under an asyncio lock (writes of a node stay serialized, as
on SQLite), reader connections for `REPEATABLE READ READ ONLY` snapshots. Built
for fleet mode (docs/fleet.md, "How it is built"); db/backend.py opens it when
`database_url` is set.

Durability (docs/storage.md, "Durability classes"): a durable write commits with
`synchronous_commit = on` (the writer's session default), a deferred one with
`SET LOCAL synchronous_commit = off`. PostgreSQL's WAL is one sequential log, so
the flush of a later synchronous commit record covers every earlier asynchronous
commit: `commit_seq` / `durable_seq` keep their meaning — on the same server. A
crash loses the asynchronous commits not yet flushed, and a flush after it covers
none of them: when the writer's connection is lost, every commit not yet durable
becomes doubtful (db/_durability.py), never `proven`. A transaction that wrote
no row may write no commit record and flush nothing, so, as on SQLite, it does not
advance `durable_seq`. `sync()` forces one: a transaction that takes a transaction
id (`pg_current_xact_id()`) writes a commit record and, synchronous, flushes the WAL
up to it.

SQL stays SQLite's spelling of parameters: `?` and `:name` become `$n`, translated
once per SQL string and cached. Rows are asyncpg Records, read by column name (or
position) like sqlite3.Row. The driver's exceptions become db/errors.py's Pg*
classes here, at the boundary. Dialect differences in the SQL text itself are not
rewritten here: queries are written portably, or build the differing fragment
(event-log append, `json_each`, LIKE, `IN` lists, …) through db/dialect.py for
`Tx.dialect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any, ClassVar, TypeVar

import asyncpg

from .. import failpoints
from . import errors, interface
from ._durability import Durability
from ._hooks import TxHooks
from .dialect import POSTGRESQL, Dialect
from .interface import Params, TerminalListener

log = logging.getLogger("qledge.pg")
T = TypeVar("T")
Row = Any  # an asyncpg.Record: row["column"], row[0], keys(), dict(row)
# A channel name as NOTIFY takes it unquoted (lower case: LISTEN quotes its name).
_CHANNEL = re.compile(r"[a-z_][a-z0-9_]*")

# Session settings of every connection (the plan's "session timeouts"): a frozen
# node's open transaction is aborted by the server and its locks released.
SESSION = {
    "application_name": "qledge",
    "synchronous_commit": "on",
    "lock_timeout": "5000",  # ms
    "idle_in_transaction_session_timeout": "30000",
    "statement_timeout": "60000",
}

# -- `?` and `:name` to `$n` ------------------------------------------------------------

_TOKENS = re.compile(
    r"""'(?:[^']|'')*'        # a string literal
      | "(?:[^"]|"")*"        # a quoted identifier
      | --[^\n]*              # a comment
      | (?P<q>\?)             # a positional parameter
      | (?<!:):(?P<name>[A-Za-z_][A-Za-z0-9_]*)  # a named one (not a ::cast)
    """, re.VERBOSE)


@lru_cache(maxsize=4096)
def translate(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """SQLite's parameters as asyncpg's: (sql with $1…$n, the names in order or None
    for positional). A name used twice is one parameter; `?` and names do not mix."""
    names: list[str] = []
    positional = 0

    def sub(m: re.Match[str]) -> str:
        nonlocal positional
        if m["q"]:
            positional += 1
            return f"${positional}"
        if m["name"]:
            if m["name"] not in names:
                names.append(m["name"])
            return f"${names.index(m['name']) + 1}"
        return m[0]

    out = _TOKENS.sub(sub, sql)
    if positional and names:
        raise ValueError(f"SQL mixes ? and :name parameters: {sql[:80]!r}")
    return out, tuple(names) if names else None


def _args(sql: str, params: Params) -> tuple[str, list[Any]]:
    text, names = translate(sql)
    if names is None:
        if isinstance(params, dict):
            if not params:  # a search without a filter: no parameter at all (SQLite's too)
                return text, []
            raise TypeError("named parameters given to SQL with ? placeholders")
        return text, list(params)
    if not isinstance(params, dict):
        raise TypeError("SQL with :name placeholders needs a dict of parameters")
    return text, [params[n] for n in names]


# -- the driver's errors as db/errors.py's ----------------------------------------------

# SQLSTATE classes and codes after which the same work may succeed later.
_TRANSIENT_CLASSES = ("08", "53", "57", "58")  # connection, resources, operator, system
_TRANSIENT_CODES = {"40001", "40P01", "55P03", "55006"}  # serialization, deadlock, locks


def map_error(exc: BaseException) -> errors.PgError | None:
    """db/errors.py's class for a driver exception, or None when it is not one."""
    if isinstance(exc, asyncpg.PostgresError):
        state = str(exc.sqlstate or "")
        if state == "53100":
            return errors.PgFull(str(exc), state)
        if state.startswith("23"):
            return errors.PgIntegrity(str(exc), state)
        if state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_CODES:
            return errors.PgTransient(str(exc), state)
        return errors.PgError(str(exc), state)
    if isinstance(exc, asyncpg.InternalClientError | ConnectionError | TimeoutError):
        return errors.PgTransient(str(exc) or type(exc).__name__)
    if isinstance(exc, asyncpg.InterfaceError):
        return errors.PgError(str(exc))
    return None


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = map_error(exc)
        if mapped is None:
            raise
        raise mapped from exc


def _lost(exc: BaseException) -> bool:
    """The connection cannot be trusted after `exc` (or its cause): drop it."""
    for e in (exc, exc.__cause__):
        if isinstance(e, asyncpg.InternalClientError | asyncpg.PostgresConnectionError
                      | OSError):
            return True
        if isinstance(e, asyncpg.PostgresError) and str(e.sqlstate or "").startswith("57P"):
            return True  # the server is shutting the session down
    return False


async def _abandon(conn: Any, exc: BaseException) -> None:
    """After a failed transaction: roll it back, or drop a connection that cannot
    (the next use reconnects)."""
    if conn.is_closed():
        return
    if _lost(exc):
        conn.terminate()
        return
    if conn.is_in_transaction():
        try:
            await conn.execute("ROLLBACK")
        except Exception:  # the connection is gone, and so is the transaction
            conn.terminate()


def _rowcount(status: str) -> int:
    """Rows changed, from a command tag: 'INSERT 0 3', 'UPDATE 2', 'DELETE 0'."""
    verb, _, rest = status.partition(" ")
    if verb in ("INSERT", "UPDATE", "DELETE", "MERGE", "COPY") and rest:
        return int(rest.rsplit(" ", 1)[-1])
    return 0


class Tx(TxHooks):
    """One open transaction (or read snapshot) on one connection."""

    __slots__ = ("_conn", "changes")

    dialect: ClassVar[Dialect] = POSTGRESQL

    def __init__(self, conn: Any, terminal_listeners: tuple[TerminalListener, ...] = ()) -> None:
        super().__init__(terminal_listeners)
        self._conn = conn
        self.changes = 0  # rows changed by INSERT/UPDATE/DELETE in this transaction

    async def notify(self, channel: str) -> None:
        """NOTIFY: the server delivers it to every node's listeners when this
        transaction commits (one per channel and transaction), drops it with a
        rollback — of the transaction or of the savepoint it was sent in."""
        if not _CHANNEL.fullmatch(channel):
            raise ValueError(f"not a channel name: {channel!r}")
        await self.execute(f"NOTIFY {channel}")

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run a statement; returns the number of rows changed."""
        text, args = _args(sql, params)
        with _mapped():
            status: str = await self._conn.execute(text, *args)
        n = _rowcount(status)
        self.changes += n
        return n

    async def one(self, sql: str, params: Params = ()) -> Row | None:
        text, args = _args(sql, params)
        with _mapped():
            return await self._conn.fetchrow(text, *args)

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        text, args = _args(sql, params)
        with _mapped():
            rows: list[Row] = await self._conn.fetch(text, *args)
        return rows

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A nested unit inside the transaction: rolled back alone if it raises."""
        await self.execute("SAVEPOINT unit")
        mark = self._savepoint_mark()
        changes = self.changes
        try:
            yield
        except BaseException:
            await self.execute("ROLLBACK TO SAVEPOINT unit")
            await self.execute("RELEASE SAVEPOINT unit")
            self._rolled_back(mark)
            self.changes = changes
            raise
        await self.execute("RELEASE SAVEPOINT unit")

    async def inline(self, fn: Callable[[interface.Tx], Awaitable[T]]) -> T:
        """`fn(tx)`: a plain call here (no database thread to stay on)."""
        return await fn(self)


async def _connect(dsn: str, *, readonly: bool) -> Any:
    settings = dict(SESSION)
    if readonly:
        settings["default_transaction_read_only"] = "on"
    with _mapped():
        return await asyncpg.connect(dsn, server_settings=settings)


class Database(Durability):
    """Owns every connection."""

    def __init__(self, dsn: str, readers: int = 2) -> None:
        super().__init__()
        self.dsn = dsn
        self._readers_n = readers
        self._writer: Any = None
        self._write_lock = asyncio.Lock()
        self._readers: asyncio.Queue[Any] = asyncio.Queue()
        self._all: list[Any] = []
        self._terminal: tuple[TerminalListener, ...] = ()
        self._listening: list[asyncio.Task[None]] = []

    def on_terminal(self, listener: TerminalListener) -> None:
        """Register `listener` for every write transaction that makes a run terminal."""
        self._terminal = (*self._terminal, listener)

    async def open(self) -> None:
        self._writer = await _connect(self.dsn, readonly=False)
        self._all.append(self._writer)
        for _ in range(self._readers_n):
            conn = await _connect(self.dsn, readonly=True)
            self._all.append(conn)
            self._readers.put_nowait(conn)
        # A previous worker's asynchronous commits may not be flushed yet: make them
        # durable before anything here acts on what they say (as db/sqlite.py's open).
        await self._flush()

    async def close(self) -> None:
        listening, self._listening = self._listening, []
        for task in listening:
            task.cancel()
        for task in listening:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        conns, self._all = self._all, []
        self._writer = None
        while not self._readers.empty():
            self._readers.get_nowait()
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.close()

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    async def _writer_conn(self) -> Any:
        """The writer, reconnected if the server dropped it (a restart, a timeout)."""
        if self._writer is None:
            raise RuntimeError("database is not open")
        if self._writer.is_closed():
            # Whether the server restarted (losing asynchronous commits it had not
            # flushed) or only the connection dropped cannot be told from here.
            self._doubt()
            fresh = await _connect(self.dsn, readonly=False)
            self._all = [fresh if c is self._writer else c for c in self._all]
            self._writer = fresh
        return self._writer

    @asynccontextmanager
    async def write(self, *, durable: bool = True) -> AsyncIterator[Tx]:
        """A READ COMMITTED transaction on the writer: committed on exit, rolled back
        on any error. durable=False commits asynchronously (`synchronous_commit = off`
        for this transaction only); only for changes a crash may lose without harm."""
        async with self._write_lock:
            conn = await self._writer_conn()
            tx = Tx(conn, self._terminal)
            try:
                with _mapped():
                    if conn.is_in_transaction():  # left open by a cancelled task
                        await conn.execute("ROLLBACK")
                    await conn.execute("BEGIN")
                    if not durable:
                        await conn.execute("SET LOCAL synchronous_commit = off")
                yield tx
                failpoints.hit("db.before_commit")
                with _mapped():
                    status = await conn.execute("COMMIT")
                if status != "COMMIT":
                    # An error inside the transaction aborted it, and PostgreSQL turns
                    # the COMMIT into a ROLLBACK: nothing of it was written.
                    raise errors.PgError(f"transaction aborted, COMMIT answered {status}")
            except BaseException as exc:
                await _abandon(conn, exc)
                tx._rolled_back()
                raise
            self.commit_seq += 1
            tx._did_commit()
            if durable and tx.changes:
                await self._advance(self.commit_seq)

    async def _flush(self) -> None:
        """One synchronous commit with a transaction id: the WAL is flushed through
        its commit record, which covers every commit before it."""
        async with self._write_lock:
            conn = await self._writer_conn()
            with _mapped():
                async with conn.transaction():
                    await conn.execute("SELECT pg_current_xact_id()")

    async def ping(self) -> None:
        """The database answers a statement now (a storage error if not)."""
        async with self.read() as tx:
            await tx.one("SELECT 1")

    async def sync(self) -> None:
        """Make every commit so far durable."""
        seq = self.commit_seq
        if seq <= self.durable_seq:
            return
        await self._flush()
        self.syncs += 1
        await self._advance(seq)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """A consistent read snapshot (REPEATABLE READ READ ONLY) on a reader."""
        conn = await self._readers.get()
        try:
            if conn.is_closed():
                fresh = await _connect(self.dsn, readonly=True)
                self._all = [fresh if c is conn else c for c in self._all]
                conn = fresh
            try:
                with _mapped():
                    if conn.is_in_transaction():
                        await conn.execute("ROLLBACK")
                    await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield Tx(conn)
            except BaseException as exc:
                await _abandon(conn, exc)
                raise
            with _mapped():
                await conn.execute("COMMIT")
        finally:
            self._readers.put_nowait(conn)

    # -- LISTEN -------------------------------------------------------------------------

    def listen(self, channel: str, callback: Callable[[], None], *,
               ping_s: float = 10.0, max_backoff_s: float = 30.0) -> None:
        """Call `callback()` for every notification on `channel`, on a connection of its
        own, until close(). After a drop (a server restart, a network cut) it reconnects
        with backoff, and calls `callback()` once on every (re)connection: what was
        notified while nobody listened is lost, so the listener looks once. `ping_s`: a
        silent connection is probed that often (a dead peer shows no error otherwise)."""
        task = asyncio.create_task(self._listen(channel, callback, ping_s, max_backoff_s),
                                   name=f"listen:{channel}")
        self._listening.append(task)

    async def _listen(self, channel: str, callback: Callable[[], None], ping_s: float,
                      max_backoff_s: float) -> None:
        delay = 0.2
        while True:
            conn: Any = None
            try:
                conn = await _connect(self.dsn, readonly=False)
                gone = asyncio.Event()
                conn.add_termination_listener(lambda *_, ev=gone: ev.set())
                await conn.add_listener(channel, lambda *_: callback())
                delay = 0.2
                callback()
                while not conn.is_closed():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(gone.wait(), ping_s)
                    await asyncio.wait_for(conn.execute("SELECT 1"), ping_s)
            except asyncio.CancelledError:
                if conn is not None and not conn.is_closed():
                    conn.terminate()
                raise
            except Exception as exc:  # the server or the network: try again later
                log.warning("LISTEN %s lost (%s); reconnecting in %.1f s", channel,
                            type(exc).__name__, delay)
            if conn is not None and not conn.is_closed():
                conn.terminate()
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_backoff_s)
