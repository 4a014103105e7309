"""The SQL spellings that differ between SQLite and PostgreSQL, built in one place.

Most queries of `db/*.py` are written once in a spelling both backends accept
(`ON CONFLICT DO NOTHING`, `SUM(CASE …)`, `IS NOT DISTINCT FROM`, no negative
LIMIT: docs/fleet-plan.md, "Migrations for both backends", item 4). What has no
common spelling is built here, so a module keeps one SQL string per query and a
second backend changes this module, not every call site. Only SQLite is
implemented today.
"""

from __future__ import annotations


def marks(n: int) -> str:
    """The placeholders of an `IN (…)` list of `n` values: `?, ?, …`.

    `n` is at least 1 (`IN ()` is SQLite's alone); callers skip empty lists.
    PostgreSQL would take one array parameter instead (`= ANY($n)`).
    """
    return ", ".join("?" * n)
