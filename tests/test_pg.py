"""The PostgreSQL backend (db/pg.py) against a real throwaway cluster (tests/_pg.py)."""

from __future__ import annotations

import asyncpg


async def test_the_rig_cluster_is_a_real_durable_server(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        settings = {r["name"]: r["setting"] for r in await conn.fetch(
            "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])",
            ["fsync", "synchronous_commit", "listen_addresses"])}
        assert settings == {"fsync": "on", "synchronous_commit": "on",
                            "listen_addresses": "127.0.0.1"}
        assert await conn.fetchval("SELECT current_database()") == pg_dsn.rsplit("/", 1)[1]
        tables = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        assert await conn.fetchval(tables) == 0
    finally:
        await conn.close()
