"""What the rest of the app knows of a database: the `Database` and `Tx` Protocols.

Two backends satisfy them, checked by mypy at db/backend.py (which returns either as
this `Database`): db/sqlite.py (the embedded SQLite) and db/pg.py (PostgreSQL, fleet
mode). Modules outside `db/` type against these Protocols only, so a method one
backend lacks is a type error, not a fleet node's AttributeError.

Rows are read by column name or position (`row["id"]`, `row[0]`, `dict(row)`): a
sqlite3.Row on SQLite, an asyncpg Record on PostgreSQL; `Row` is what both offer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from .dialect import Dialect

if TYPE_CHECKING:
    from ..model import Run

T = TypeVar("T")
# A statement's parameters: positional (`?`) or named (`:name`), SQLite's spelling on
# both backends (db/pg.py translates them).
Params = Iterable[Any] | dict[str, Any]

# Called inside the writing transaction when a run first becomes terminal (old, new,
# now_ms): work that must commit with the result or not at all — a notification
# outbox row, a parent run's completion — and nothing that leaves the database.
TerminalListener = Callable[["Tx", "Run", "Run", int], Awaitable[None]]


class Row(Protocol):
    """One result row: by column name or position; `dict(row)` maps names to values."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> Iterable[str]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


class Tx(Protocol):
    """One open transaction (or read snapshot) on one connection."""

    # The SQL this transaction speaks: queries build their dialect-specific fragments
    # for it through db/dialect.py.
    dialect: ClassVar[Dialect]
    # db/runs.apply calls these when it makes a run terminal (Database.on_terminal).
    terminal_listeners: tuple[TerminalListener, ...]

    def on_commit(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the event loop once this write transaction has committed (also
        if only a savepoint of it rolled back)."""

    def on_rollback(self, fn: Callable[[], None]) -> None:
        """Run `fn` if this transaction — or the savepoint open now — rolls back."""

    async def notify(self, channel: str) -> None:
        """Wake `channel`'s listeners (Database.listen) when this transaction commits;
        nothing if it rolls back."""

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run a statement; returns the number of rows changed."""

    async def one(self, sql: str, params: Params = ()) -> Row | None: ...

    async def all(self, sql: str, params: Params = ()) -> list[Row]: ...

    def savepoint(self) -> AbstractAsyncContextManager[None]:
        """A nested unit inside the transaction: rolled back alone if it raises."""

    async def inline(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """`fn(tx)`, awaiting this Tx's methods only: on SQLite one hand-off to the
        database thread for the whole function."""


class Database(Protocol):
    """Owns every connection; opened and closed by the runtime's start and stop.

    Durability (docs/storage.md): `commit_seq` counts write transactions committed by
    this process, `durable_seq` the last one known durable."""

    @property
    def commit_seq(self) -> int: ...

    @property
    def durable_seq(self) -> int: ...

    @property
    def syncs(self) -> int:
        """The forced flushes done by sync()."""

    @property
    def is_open(self) -> bool: ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def on_terminal(self, listener: TerminalListener) -> None:
        """Register `listener` for every write transaction that makes a run terminal;
        an exception from it rolls the transaction back."""

    def write(self, *, durable: bool = True) -> AbstractAsyncContextManager[Tx]:
        """A write transaction: committed on exit, rolled back on any error.
        durable=False: only for changes a power cut may lose without harm."""

    def read(self) -> AbstractAsyncContextManager[Tx]:
        """A consistent read snapshot."""

    async def sync(self) -> None:
        """Make every commit so far durable."""

    async def wait_durable(self, seq: int) -> None:
        """Until commit number `seq` is durable."""

    def proven(self, seq: int) -> bool:
        """Commit number `seq` is durable and was not made on a server lost since
        (PostgreSQL: a crash drops asynchronous commits not yet flushed)."""

    def listen(self, channel: str, callback: Callable[[], None]) -> None:
        """Call `callback()` after every committed transaction that notified `channel`
        (Tx.notify), until close(). It may also be called when nothing was notified
        (PostgreSQL: once on every (re)connection), so it only ever wakes a look."""

    async def ping(self) -> None:
        """The database answers a statement now; a storage error (db/errors.py) if not."""
