"""SQL of OpenAPI apps and their tokens (hashes only; the caller compares secrets)."""

from __future__ import annotations

import msgspec

from . import dialect
from .interface import Row, Tx
from .rows import NotFound

_json = msgspec.json.Encoder()


class App(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    client_id: str
    scopes: list[str]
    created_at_ms: int
    live_tokens: int = 0


class TokenGrant(msgspec.Struct, frozen=True, kw_only=True):
    app_id: str
    app_name: str
    scopes: list[str]
    expires_at_ms: int


def _app(row: Row) -> App:
    keys = row.keys()
    return App(id=row["id"], name=row["name"], client_id=row["client_id"],
               scopes=msgspec.json.decode(row["scopes_json"], type=list[str]),
               created_at_ms=row["created_at_ms"],
               live_tokens=int(row["live_tokens"] or 0) if "live_tokens" in keys else 0)


async def create_app(tx: Tx, *, app_id: str, name: str, client_id: str, secret_hash: bytes,
                     scopes: list[str], now_ms: int) -> App:
    await tx.execute(
        "INSERT INTO apps (id, name, client_id, secret_hash, scopes_json, created_at_ms)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (app_id, name, client_id, secret_hash, _json.encode(scopes).decode(), now_ms))
    return await get_app(tx, app_id, now_ms)


async def update_app(tx: Tx, app_id: str, fields: dict[str, object], now_ms: int) -> App:
    """Any of name, client_id, secret_hash (bytes), scopes. New credentials revoke the
    tokens the old ones got."""
    columns = {"name": "name", "client_id": "client_id", "secret_hash": "secret_hash",
               "scopes": "scopes_json"}
    values = {columns[k]: _json.encode(v).decode() if k == "scopes" else v
              for k, v in fields.items() if k in columns}
    if values:
        sets = ", ".join(f"{c} = :{c}" for c in values)
        if not await tx.execute(f"UPDATE apps SET {sets} WHERE id = :id",  # noqa: S608
                                {**values, "id": app_id}):
            raise NotFound("app")
    if "client_id" in fields or "secret_hash" in fields:
        await tx.execute("DELETE FROM app_tokens WHERE app_id = ?", (app_id,))
    return await get_app(tx, app_id, now_ms)


async def app_name_taken(tx: Tx, name: str) -> bool:
    return await tx.one("SELECT 1 FROM apps WHERE name = ?", (name,)) is not None


async def get_app(tx: Tx, app_id: str, now_ms: int) -> App:
    row = await tx.one(
        "SELECT a.*, (SELECT COUNT(*) FROM app_tokens t WHERE t.app_id = a.id"
        " AND t.expires_at_ms > ?) AS live_tokens FROM apps a WHERE a.id = ?", (now_ms, app_id))
    if row is None:
        raise NotFound("app")
    return _app(row)


async def list_apps(tx: Tx, now_ms: int) -> list[App]:
    rows = await tx.all(
        "SELECT a.*, (SELECT COUNT(*) FROM app_tokens t WHERE t.app_id = a.id"
        " AND t.expires_at_ms > ?) AS live_tokens FROM apps a ORDER BY a.created_at_ms, a.id",
        (now_ms,))
    return [_app(r) for r in rows]


async def delete_app(tx: Tx, app_id: str) -> None:
    """Deleting the app revokes its tokens (ON DELETE CASCADE)."""
    if not await tx.execute("DELETE FROM apps WHERE id = ?", (app_id,)):
        raise NotFound("app")


async def app_secret(tx: Tx, client_id: str) -> tuple[str, bytes] | None:
    """(app id, secret hash) for a client id; the caller compares in constant time."""
    row = await tx.one("SELECT id, secret_hash FROM apps WHERE client_id = ?", (client_id,))
    return (str(row["id"]), bytes(row["secret_hash"])) if row else None


async def issue_token(tx: Tx, app_id: str, token_hash: bytes, expires_at_ms: int, now_ms: int,
                      keep: int) -> None:
    """Store a new token hash; drop expired ones and all but the newest `keep` live ones."""
    await tx.execute("DELETE FROM app_tokens WHERE app_id = ? AND expires_at_ms <= ?",
                     (app_id, now_ms))
    await tx.execute(
        "INSERT INTO app_tokens (token_hash, app_id, created_at_ms, expires_at_ms)"
        " VALUES (?, ?, ?, ?)", (token_hash, app_id, now_ms, expires_at_ms))
    if tx.dialect == dialect.SQLITE:
        await tx.execute(
            "DELETE FROM app_tokens WHERE app_id = ? AND token_hash NOT IN (SELECT token_hash"
            " FROM app_tokens WHERE app_id = ? ORDER BY created_at_ms DESC, rowid DESC LIMIT ?)",
            (app_id, app_id, keep))
        return
    # PostgreSQL has no rowid (the insertion order SQLite breaks ties with): the token
    # just issued is kept by name, then the newest `keep - 1` others.
    await tx.execute(
        "DELETE FROM app_tokens WHERE app_id = ? AND token_hash <> ? AND token_hash NOT IN"
        " (SELECT token_hash FROM app_tokens WHERE app_id = ? AND token_hash <> ?"
        " ORDER BY created_at_ms DESC, token_hash DESC LIMIT ?)",
        (app_id, token_hash, app_id, token_hash, max(keep - 1, 0)))


async def token_grant(tx: Tx, token_hash: bytes) -> TokenGrant | None:
    row = await tx.one(
        "SELECT t.app_id, t.expires_at_ms, a.name, a.scopes_json FROM app_tokens t"
        " JOIN apps a ON a.id = t.app_id WHERE t.token_hash = ?", (token_hash,))
    if row is None:
        return None
    return TokenGrant(app_id=row["app_id"], app_name=row["name"],
                      scopes=msgspec.json.decode(row["scopes_json"], type=list[str]),
                      expires_at_ms=row["expires_at_ms"])
