"""The transaction hooks both backends' Tx keep (db/sqlite.py, db/pg.py): on_commit,
on_rollback and the terminal listeners, written once so the two cannot drift on when
a hook runs."""

from __future__ import annotations

from collections.abc import Callable

from .interface import TerminalListener


class TxHooks:
    __slots__ = ("_committed", "_undo", "terminal_listeners")

    def __init__(self, terminal_listeners: tuple[TerminalListener, ...] = ()) -> None:
        self._undo: list[Callable[[], None]] = []
        self._committed: list[Callable[[], None]] = []
        self.terminal_listeners = terminal_listeners

    def on_commit(self, fn: Callable[[], None]) -> None:
        """Run `fn` once this write transaction has committed (a hint to wake a loop
        that reads what it wrote; it also runs if only a savepoint rolled back).
        Always on the event loop's thread, after the commit."""
        self._committed.append(fn)

    def on_rollback(self, fn: Callable[[], None]) -> None:
        """Run `fn` if this transaction — or the savepoint open now — rolls back:
        in-memory bookkeeping about rows that then never existed."""
        self._undo.append(fn)

    def _share_hooks(self, other: TxHooks) -> None:
        """Register this Tx's hooks on `other`'s lists (SQLite's inline Tx)."""
        self._undo = other._undo
        self._committed = other._committed

    def _savepoint_mark(self) -> int:
        return len(self._undo)

    def _rolled_back(self, mark: int = 0) -> None:
        """The transaction (mark 0) or the savepoint opened at `mark` rolled back."""
        undo = self._undo[mark:]
        del self._undo[mark:]  # in place: an inline Tx shares this list
        for fn in reversed(undo):
            fn()

    def _did_commit(self) -> None:
        for fn in self._committed:
            fn()
