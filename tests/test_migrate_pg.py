"""PostgreSQL migrations (db/migrate_pg.py) and the one source of truth: after all
migrations, SQLite's and PostgreSQL's catalogs read into one normalized model must
be equal (docs/fleet.md, "Migrations on both backends").

The model: per table, its columns in order (name, normalized type, NOT NULL, default,
identity/AUTOINCREMENT), primary key, unique constraints, foreign keys with ON
DELETE, and its indexes with their columns (DESC marked) and partial predicates.
CHECK constraints are compared by count and by the columns each one reads, not by
text: PostgreSQL stores them deparsed (`IN (…)` becomes `= ANY (ARRAY[…])`, casts
added), which no simple normalization undoes reliably.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from qledge.db import migrate, migrate_pg

# SQLite's `node` singleton is left out of PostgreSQL's baseline on purpose: a fleet
# node keeps its id in its state dir (docs/fleet.md, "How it is built").
SQLITE_ONLY = {"node"}
# And a fleet's own tables (migration 0023): one node has no peers and no leases.
PG_ONLY = {"nodes", "fleet_leases"}

Model = dict[str, dict[str, Any]]

_TYPES = {"integer": "int", "bigint": "int", "text": "text", "blob": "blob", "bytea": "blob"}
_ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL",
              "d": "SET DEFAULT"}


def _norm_expr(text: str | None) -> str | None:
    """A default or an index predicate with PostgreSQL's casts and parentheses gone."""
    if text is None:
        return None
    text = re.sub(r"::(text|bigint|integer|bytea)\b", "", text)
    text = text.replace("(", " ").replace(")", " ")
    return " ".join(text.split()).lower()


def _identifiers(expr: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"'[^']*'", "''", expr)))


def _check_bodies(sql: str) -> list[str]:
    """The text inside each CHECK (…) of a CREATE TABLE, comments removed."""
    sql = re.sub(r"--[^\n]*", "", sql)
    bodies = []
    for m in re.finditer(r"\bCHECK\s*\(", sql, re.IGNORECASE):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[i], 0)
            i += 1
        bodies.append(sql[m.end():i - 1])
    return bodies


def sqlite_model(db: Path) -> Model:
    conn = sqlite3.connect(db)
    try:
        model: Model = {}
        tables = conn.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'"
                              " AND name NOT LIKE 'sqlite_%'").fetchall()
        for table, sql in tables:
            if table in SQLITE_ONLY:
                continue
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
            autoinc = "AUTOINCREMENT" in sql.upper()
            cols = [(r[1], _TYPES[r[2].lower()], bool(r[3]) or r[1] in pk, _norm_expr(r[4]),
                     autoinc and pk == [r[1]]) for r in info]
            names = {c[0] for c in cols}
            uniques, indexes = [], {}
            for _, name, unique, origin, partial in conn.execute(f"PRAGMA index_list({table})"):
                xinfo = conn.execute(f"PRAGMA index_xinfo({name})").fetchall()
                keys = [(r[2], bool(r[3])) for r in xinfo if r[5]]
                if origin == "u":
                    uniques.append(tuple(k for k, _ in keys))
                elif origin == "c":
                    idx_sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = ?",
                                           (name,)).fetchone()[0]
                    where = idx_sql.split(" WHERE ", 1)[1] if partial else None
                    indexes[name] = (bool(unique), tuple(keys), _norm_expr(where))
            fks = {}
            for r in conn.execute(f"PRAGMA foreign_key_list({table})"):
                src, dst, ref, on_delete = fks.get(r[0], ((), (), r[2], r[6]))
                fks[r[0]] = ((*src, r[3]), (*dst, r[4]), ref, on_delete)
            model[table] = {
                "columns": cols, "primary_key": tuple(pk), "unique": sorted(uniques),
                "foreign_keys": sorted(fks.values()), "indexes": indexes,
                "checks": sorted(tuple(sorted(_identifiers(b) & names))
                                 for b in _check_bodies(sql)),
            }
        return model
    finally:
        conn.close()


async def pg_model(dsn: str) -> Model:
    conn = await asyncpg.connect(dsn)
    try:
        model: Model = {}
        tables = [r["table_name"] for r in await conn.fetch(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")
            if r["table_name"] not in PG_ONLY]
        for table in tables:
            info = await conn.fetch(
                "SELECT column_name, data_type, is_nullable, column_default, is_identity"
                " FROM information_schema.columns WHERE table_schema = 'public'"
                " AND table_name = $1 ORDER BY ordinal_position", table)
            cols = [(r["column_name"], _TYPES[r["data_type"]], r["is_nullable"] == "NO",
                     _norm_expr(r["column_default"]), r["is_identity"] == "YES") for r in info]
            cons = await conn.fetch(
                """SELECT c.contype::text AS contype, c.confdeltype::text AS confdeltype,
                     f.relname AS ref,
                     array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
                           JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n
                           ORDER BY k.o) AS cols,
                     array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, o)
                           JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n
                           ORDER BY k.o) AS refcols
                   FROM pg_constraint c LEFT JOIN pg_class f ON f.oid = c.confrelid
                   WHERE c.conrelid = (quote_ident($1))::regclass""", table)
            pk = next((tuple(r["cols"]) for r in cons if r["contype"] == "p"), ())
            idx = await conn.fetch(
                """SELECT c.relname AS name, i.indisunique AS uniq,
                     array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(n, o)
                           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
                           ORDER BY k.o) AS cols,
                     i.indoption::int2[] AS opts, pg_get_expr(i.indpred, i.indrelid) AS pred
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   WHERE i.indrelid = (quote_ident($1))::regclass
                     AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = c.oid)""",
                table)
            model[table] = {
                "columns": cols, "primary_key": pk,
                "unique": sorted(tuple(r["cols"]) for r in cons if r["contype"] == "u"),
                "foreign_keys": sorted((tuple(r["cols"]), tuple(r["refcols"]), r["ref"],
                                        _ON_DELETE[r["confdeltype"]])
                                       for r in cons if r["contype"] == "f"),
                "indexes": {r["name"]: (r["uniq"], tuple(
                    (c, bool(o & 1)) for c, o in zip(r["cols"], r["opts"], strict=True)),
                    _norm_expr(r["pred"])) for r in idx},
                "checks": sorted(tuple(sorted(r["cols"])) for r in cons if r["contype"] == "c"),
            }
        return model
    finally:
        await conn.close()


def differences(a: Model, b: Model) -> list[str]:
    out = [f"table {t}: only in {side}" for side, x, y in (("SQLite", a, b), ("PostgreSQL", b, a))
           for t in sorted(x.keys() - y.keys())]
    for table in sorted(a.keys() & b.keys()):
        for part in a[table]:
            if a[table][part] != b[table][part]:
                out.append(f"{table}.{part}:\n  SQLite     {a[table][part]}\n"
                           f"  PostgreSQL {b[table][part]}")
    return out


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    db = tmp_path / "q.db"
    migrate.apply(db)
    return db


async def test_both_backends_migrate_to_the_same_schema(sqlite_db: Path, pg_dsn: str) -> None:
    assert await migrate_pg.apply(pg_dsn) == [m.version for m in migrate_pg.bundled()]
    lite, pg = sqlite_model(sqlite_db), await pg_model(pg_dsn)
    assert differences(lite, pg) == []
    # the model is not vacuous: what this compares is really there
    assert len(lite) == 25  # 21 + the sign-in's three (0025) + notify_settings (0028)
    assert lite["runs"]["indexes"]["runs_active"][2] == "status = 'queued' or status = 'running'"
    assert lite["envs"]["indexes"]["envs_order"][1] == (
        ("enabled", False), ("position", True), ("num", False))
    assert ("task_id",) in [fk[0] for fk in lite["runs"]["foreign_keys"]]
    assert lite["tasks"]["columns"][0] == ("num", "int", True, None, True)
    assert len(lite["run_attempts"]["checks"]) == 4
    assert lite["dependencies"]["unique"] == [("id",), ("type", "name")]


async def test_a_column_on_one_side_only_is_a_difference(sqlite_db: Path, pg_dsn: str) -> None:
    await migrate_pg.apply(pg_dsn)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("ALTER TABLE runs ADD COLUMN node_epoch bigint")
        await conn.execute("CREATE INDEX runs_epoch ON runs (node_epoch) WHERE node_epoch > 0")
    finally:
        await conn.close()
    found = differences(sqlite_model(sqlite_db), await pg_model(pg_dsn))
    assert [d.split(":")[0] for d in found] == ["runs.columns", "runs.indexes"]
    assert "node_epoch" in found[0]


async def test_migrating_twice_applies_nothing(pg_dsn: str) -> None:
    first = await migrate_pg.apply(pg_dsn)
    assert first[0] == 22
    assert await migrate_pg.apply(pg_dsn) == []
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
    finally:
        await conn.close()
    assert [(r["version"], r["name"], r["checksum"]) for r in rows] == [
        (m.version, m.name, m.checksum) for m in migrate_pg.bundled()]


async def test_a_changed_applied_migration_is_refused(tmp_path: Path, pg_dsn: str) -> None:
    d = tmp_path / "pg"
    d.mkdir()
    baseline = migrate_pg.bundled()[0]
    (d / "0022_baseline.sql").write_text(baseline.sql)
    assert await migrate_pg.apply(pg_dsn, migrate_pg.bundled(d)) == [22]
    (d / "0022_baseline.sql").write_text(baseline.sql + "\n-- edited after it was applied\n")
    with pytest.raises(migrate.MigrationError, match="has changed since it was applied"):
        await migrate_pg.apply(pg_dsn, migrate_pg.bundled(d))


async def test_a_database_newer_than_the_code_is_refused(tmp_path: Path, pg_dsn: str) -> None:
    d = tmp_path / "pg"
    d.mkdir()
    shipped = migrate_pg.bundled()
    for m in shipped:  # the code's own, then more than it knows
        (d / f"{m.version:04d}_{m.name}.sql").write_text(m.sql)
    later = shipped[-1].version + 2
    for n in range(shipped[-1].version + 1, later + 1):
        (d / f"{n:04d}_later.sql").write_text(f"CREATE TABLE later{n} (x bigint);\n")
    assert await migrate_pg.apply(pg_dsn, migrate_pg.bundled(d)) == list(range(22, later + 1))
    with pytest.raises(migrate.MigrationError, match="newer than the code"):
        await migrate_pg.apply(pg_dsn)


async def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path, pg_dsn: str) -> None:
    d = tmp_path / "pg"
    d.mkdir()
    (d / "0022_baseline.sql").write_text(migrate_pg.bundled()[0].sql)
    (d / "0023_bad.sql").write_text("CREATE TABLE half (x bigint);\nSELECT no_such_fn();\n")
    with pytest.raises(migrate.MigrationError, match="0023_bad failed"):
        await migrate_pg.apply(pg_dsn, migrate_pg.bundled(d))
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval("SELECT to_regclass('half')") is None
        assert [r["version"] for r in await conn.fetch(
            "SELECT version FROM schema_migrations")] == [22]
    finally:
        await conn.close()


async def test_concurrent_starts_migrate_once(pg_dsn: str) -> None:
    import asyncio

    results = await asyncio.gather(*(migrate_pg.apply(pg_dsn) for _ in range(3)))
    assert sorted(results) == [[], [], [m.version for m in migrate_pg.bundled()]]
