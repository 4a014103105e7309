"""Connections: one writer (BEGIN IMMEDIATE, synchronous=FULL) and separate readers.

Durability rule (docs/storage.md): the writer commits with synchronous=FULL,
so once COMMIT returns the terminal result is on disk and only then may the
consumer delete the receipt that proved it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from .. import failpoints

BUSY_TIMEOUT_MS = 5000
JOURNAL_SIZE_LIMIT = 4 << 20
Params = Iterable[Any] | dict[str, Any]


class Tx:
    """One open transaction (or read snapshot) on one connection."""

    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run a statement; returns the number of rows changed."""
        cur = await self._conn.execute(sql, params)
        count = cur.rowcount
        await cur.close()
        return count

    async def insert(self, sql: str, params: Params = ()) -> int:
        cur = await self._conn.execute(sql, params)
        rowid = cur.lastrowid
        await cur.close()
        return int(rowid or 0)

    async def one(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        cur = await self._conn.execute(sql, params)
        row = await cur.fetchone()
        await cur.close()
        return row

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A nested unit inside the transaction: rolled back alone if it raises."""
        await self._conn.execute("SAVEPOINT unit")
        try:
            yield
        except BaseException:
            await self._conn.execute("ROLLBACK TO unit")
            await self._conn.execute("RELEASE unit")
            raise
        await self._conn.execute("RELEASE unit")

    async def all(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        cur = await self._conn.execute(sql, params)
        rows = await cur.fetchall()
        await cur.close()
        return list(rows)


async def _connect(path: Path, *, readonly: bool) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    await conn.execute("PRAGMA foreign_keys=ON")
    if readonly:
        await conn.execute("PRAGMA query_only=ON")
    else:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")
        # After a checkpoint resets the WAL, truncate it back to this size (SD cards).
        await conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
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


class Database:
    """Owns every connection; opened and closed by the app lifespan."""

    def __init__(self, path: Path, readers: int = 2) -> None:
        self.path = path
        self._readers_n = readers
        self._writer: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._all: list[aiosqlite.Connection] = []

    async def open(self) -> None:
        self._writer = await _connect(self.path, readonly=False)
        self._all.append(self._writer)
        for _ in range(self._readers_n):
            conn = await _connect(self.path, readonly=True)
            self._all.append(conn)
            self._readers.put_nowait(conn)

    async def close(self) -> None:
        conns, self._all = self._all, []
        self._writer = None
        for conn in conns:
            await conn.close()

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Tx]:
        """A BEGIN IMMEDIATE transaction: committed on exit, rolled back on any error."""
        if self._writer is None:
            raise RuntimeError("database is not open")
        async with self._write_lock:
            conn = self._writer
            await _begin(conn, "BEGIN IMMEDIATE")
            try:
                yield Tx(conn)
                failpoints.hit("db.before_commit")
                await conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    await conn.execute("ROLLBACK")
                raise

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
