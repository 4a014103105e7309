"""The SQL spellings that differ between SQLite and PostgreSQL, built in one place.

Most queries of `db/*.py` are written once in a spelling both backends accept
(`ON CONFLICT DO NOTHING`, `SUM(CASE …)`, `IS NOT DISTINCT FROM`, no negative
LIMIT: docs/fleet.md, "SQL dialect differences"). What has no
common spelling is built here, so a module keeps one SQL string per query and a
second backend changes this module, not every call site.

Each transaction says which dialect it speaks (`Tx.dialect`: db/sqlite.py's is
SQLITE, db/pg.py's POSTGRESQL), and a call site passes it to the helper that builds
its fragment. SQLite's fragments are exactly the text the queries had before, so
SQLite's statements, statement cache and query plans are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Final, Literal, TypeVar

Dialect = Literal["sqlite", "postgresql"]
SQLITE: Final = "sqlite"
POSTGRESQL: Final = "postgresql"
T = TypeVar("T")


def marks(n: int) -> str:
    """The placeholders of an `IN (…)` list of `n` values: `?, ?, …`.

    `n` is at least 1 (`IN ()` is SQLite's alone); callers skip empty lists.
    Queries build their lists with `in_list`/`in_params`, which use it for SQLite.
    """
    return ", ".join("?" * n)


@lru_cache(maxsize=256)
def in_list(dialect: Dialect, column: str, n: int) -> str:
    """`column` is one of `n` values, given by `in_params(dialect, values)` where the
    fragment's placeholders stand in the statement.

    Why: SQLite has no array parameter: one `?` per value (`column IN (?, ?, …)`, a
    statement per list length). PostgreSQL takes the whole list as one array parameter
    (`column = ANY(?)`, its element type inferred from the column): one prepared
    statement whatever the length. `n` is at least 1; callers skip empty lists."""
    if dialect == SQLITE:
        return f"{column} IN ({marks(n)})"
    return f"{column} = ANY(?)"


def in_params(dialect: Dialect, values: Sequence[T]) -> list[Any]:
    """The parameters of `in_list(dialect, column, len(values))`, to splice into the
    statement's parameter list where its placeholders stand: each value on SQLite,
    one list of them (an array) on PostgreSQL."""
    if dialect == SQLITE:
        return list(values)
    return [list(values)]


def ordered_join(dialect: Dialect) -> str:
    """The join keyword of `a <join> b ON …` where SQLite must read `a` first.

    Why: SQLite's query planner never reorders the tables of a CROSS JOIN, so the
    spelling `CROSS JOIN … ON` fixes its join order (the running runs first, their
    attempts by run_id: test_hot_queries_use_indexes). PostgreSQL refuses ON after
    CROSS JOIN; a plain inner JOIN means the same rows there, its planner free to
    order it."""
    return "CROSS JOIN" if dialect == SQLITE else "JOIN"


def derived(dialect: Dialect, alias: str) -> str:
    """What follows a subquery in FROM that the query never names: nothing on SQLite,
    ` AS alias` on PostgreSQL.

    Why: PostgreSQL before 16 refuses a subquery in FROM without an alias ("subquery
    in FROM must have an alias"); SQLite takes one without, and its statements keep
    their text."""
    return "" if dialect == SQLITE else f" AS {alias}"


@lru_cache(maxsize=64)
def append_blob(dialect: Dialect, column: str) -> str:
    """`column` (a BLOB/bytea, possibly NULL) with the bytes of one parameter appended.

    Why: SQLite's `||` is a text operator — it returns TEXT even for two blobs — so the
    result is cast back to BLOB (a STRICT table refuses TEXT in a BLOB column), and its
    empty blob is the literal `x''`. PostgreSQL has neither `x''` nor a BLOB type; its
    `||` on two `bytea` is `bytea`, and its empty bytea is `'\\x'::bytea` (asyncpg
    sends Python `bytes` as bytea). The run-writing path appends every run event so."""
    if dialect == SQLITE:
        return f"CAST(COALESCE({column}, x'') || ? AS BLOB)"
    return f"COALESCE({column}, '\\x'::bytea) || ?"


@lru_cache(maxsize=64)
def each_text(dialect: Dialect, source: str = "?", alias: str | None = None) -> str:
    """A table expression of the strings of a JSON array, one row each, in a column
    named `value`; `source` is a parameter (`?`) or a TEXT column holding the array,
    `alias` the table's name in the query (None: none).

    Why: SQLite reads a JSON array as rows with its table-valued `json_each`, whose
    column `value` holds each element; PostgreSQL has no `json_each` of that shape
    (its own returns key/value pairs of an object): `json_array_elements_text` of the
    text cast to json gives the elements as text, and the column list names its one
    column `value` so the query reads it by the same name on both."""
    if dialect == SQLITE:
        return f"json_each({source})" + (f" {alias}" if alias else "")
    return f"json_array_elements_text({source}::json) AS {alias or 'each'}(value)"


@lru_cache(maxsize=64)
def like(dialect: Dialect, column: str, pattern: str) -> str:
    """`column` contains `pattern` (built by rows.like_pattern: `%…%` with `\\`
    escaping the user's `%`, `_` and `\\`), ignoring ASCII case.

    Why: SQLite's LIKE ignores the case of ASCII letters (and only those); PostgreSQL's
    LIKE is case-sensitive, so the same search would find less there: its ILIKE is
    the same match. Under the rig's C/no-locale cluster ILIKE folds ASCII letters only,
    as SQLite does; under a linguistic locale it would fold other letters too. Both
    take the escape character in `ESCAPE '\\'`."""
    op = "LIKE" if dialect == SQLITE else "ILIKE"
    return f"{column} {op} {pattern} ESCAPE '\\'"


@lru_cache(maxsize=16)
def labels_within(dialect: Dialect, column: str) -> str:
    """Every label of the JSON array in `column` (NULL: none) is one of the JSON array
    given as one parameter: a run's placement labels against a node's labels.

    Why: SQLite reads each array with `json_each` (a correlated NOT EXISTS over the
    run's labels; a NULL column, the common case, is decided before it runs);
    PostgreSQL's `jsonb` containment `<@` says the same of two arrays of strings in
    one operator."""
    if dialect == SQLITE:
        return (f"({column} IS NULL OR NOT EXISTS (SELECT 1 FROM json_each({column}) pl"  # noqa: S608
                " WHERE pl.value NOT IN (SELECT value FROM json_each(?))))")
    return f"({column} IS NULL OR {column}::jsonb <@ ?::jsonb)"
