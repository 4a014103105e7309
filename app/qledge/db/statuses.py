"""The model's status sets spelled as SQL, built from the enums in one place.

No other module writes a status literal into SQL. Sets are spelled as
equalities joined by OR in the enums' declaration order — `(status = 'queued'
OR status = 'running')` — because that is how the partial indexes of
migration 0007 spell their WHERE, and SQLite uses a partial index only for a
query whose WHERE contains the index's expression term for term: `status IN
(…)` or another order quietly becomes a table scan (docs/storage.md, "Page size
and the slim schema"; `test_hot_queries_use_indexes`).
"""

from __future__ import annotations

import enum
from collections.abc import Set

from ..model import ACTIVE_ATTEMPT, ACTIVE_RUN, TERMINAL_ATTEMPT, TERMINAL_RUN


def _ordered(members: Set[enum.StrEnum]) -> list[enum.StrEnum]:
    kinds = {type(m) for m in members}
    if len(kinds) != 1:
        raise ValueError("a status set of one enum")
    return [m for m in kinds.pop() if m in members]


def is_(column: str, status: enum.StrEnum) -> str:
    """`column = 'status'`."""
    return f"{column} = '{status.value}'"


def any_of(column: str, members: Set[enum.StrEnum]) -> str:
    """`(column = 'a' OR column = 'b' …)`, the partial-index spelling."""
    return "(" + " OR ".join(is_(column, m) for m in _ordered(members)) + ")"


def in_(column: str, members: Set[enum.StrEnum]) -> str:
    """`column IN ('a', 'b', …)`, for sets no partial index covers."""
    return f"{column} IN (" + ", ".join(f"'{m.value}'" for m in _ordered(members)) + ")"


def active_run(column: str = "status") -> str:
    return any_of(column, ACTIVE_RUN)


def terminal_run(column: str = "status") -> str:
    return in_(column, TERMINAL_RUN)


def active_attempt(column: str = "status") -> str:
    return any_of(column, ACTIVE_ATTEMPT)


def terminal_attempt(column: str = "status") -> str:
    return in_(column, TERMINAL_ATTEMPT)
