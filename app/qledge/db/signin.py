"""SQL of the panel's sign-in: the one account, its sessions and the login log
(hashes only: the caller makes and compares secrets, auth/)."""

from __future__ import annotations

import msgspec

from .interface import Row, Tx


class Account(msgspec.Struct, frozen=True, kw_only=True):
    password_hash: str | None = None
    totp_secret: str | None = None
    totp_pending: str | None = None
    totp_last_step: int = 0
    recovery: list[str] = []
    changed_at_ms: int = 0


class Session(msgspec.Struct, frozen=True, kw_only=True):
    id_hash: str
    created_at_ms: int
    last_seen_ms: int
    client: str
    agent: str
    method: str


class Login(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    at_ms: int
    client: str
    agent: str
    method: str
    outcome: str




async def account(tx: Tx) -> Account:
    row = await tx.one("SELECT * FROM panel_account WHERE id = 1")
    if row is None:
        return Account()
    return Account(password_hash=row["password_hash"], totp_secret=row["totp_secret"],
                   totp_pending=row["totp_pending"],
                   totp_last_step=int(row["totp_last_step"]),
                   recovery=msgspec.json.decode(row["recovery_json"], type=list[str]),
                   changed_at_ms=int(row["changed_at_ms"]))


async def save_account(tx: Tx, acc: Account, now_ms: int) -> None:
    values = (acc.password_hash, acc.totp_secret, acc.totp_pending, acc.totp_last_step,
              msgspec.json.encode(acc.recovery).decode(), now_ms)
    await tx.execute(
        "INSERT INTO panel_account (id, password_hash, totp_secret, totp_pending,"
        " totp_last_step, recovery_json, changed_at_ms) VALUES (1, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET password_hash = excluded.password_hash,"
        " totp_secret = excluded.totp_secret, totp_pending = excluded.totp_pending,"
        " totp_last_step = excluded.totp_last_step, recovery_json = excluded.recovery_json,"
        " changed_at_ms = excluded.changed_at_ms", values)


async def add_session(tx: Tx, s: Session) -> None:
    await tx.execute(
        "INSERT INTO panel_sessions (id_hash, created_at_ms, last_seen_ms, client, agent,"
        " method) VALUES (?, ?, ?, ?, ?, ?)",
        (s.id_hash, s.created_at_ms, s.last_seen_ms, s.client, s.agent, s.method))


def _session(r: Row) -> Session:
    return Session(id_hash=r["id_hash"], created_at_ms=int(r["created_at_ms"]),
                   last_seen_ms=int(r["last_seen_ms"]), client=r["client"],
                   agent=r["agent"], method=r["method"])


async def session(tx: Tx, id_hash: str) -> Session | None:
    row = await tx.one("SELECT * FROM panel_sessions WHERE id_hash = ?", (id_hash,))
    return None if row is None else _session(row)


async def sessions(tx: Tx) -> list[Session]:
    rows = await tx.all("SELECT * FROM panel_sessions ORDER BY last_seen_ms DESC LIMIT 200")
    return [_session(r) for r in rows]


async def touch_session(tx: Tx, id_hash: str, now_ms: int) -> None:
    await tx.execute("UPDATE panel_sessions SET last_seen_ms = ? WHERE id_hash = ?",
                     (now_ms, id_hash))


async def drop_session(tx: Tx, id_hash: str) -> int:
    return await tx.execute("DELETE FROM panel_sessions WHERE id_hash = ?", (id_hash,))


async def drop_sessions(tx: Tx, *, keep: str = "") -> int:
    """Every session but `keep` (an id hash; empty: every one)."""
    return await tx.execute("DELETE FROM panel_sessions WHERE id_hash <> ?", (keep,))


async def drop_expired(tx: Tx, *, idle_before_ms: int, created_before_ms: int) -> int:
    return await tx.execute(
        "DELETE FROM panel_sessions WHERE last_seen_ms < ? OR created_at_ms < ?",
        (idle_before_ms, created_before_ms))


async def add_login(tx: Tx, *, at_ms: int, client: str, agent: str, method: str,
                    outcome: str, keep: int) -> None:
    await tx.execute(
        "INSERT INTO panel_logins (at_ms, client, agent, method, outcome)"
        " VALUES (?, ?, ?, ?, ?)", (at_ms, client, agent, method, outcome))
    # Bounded: the newest `keep` rows stay.
    await tx.execute(
        "DELETE FROM panel_logins WHERE id <= (SELECT id FROM panel_logins"
        " ORDER BY id DESC LIMIT 1 OFFSET ?)", (keep,))


async def known_client(tx: Tx, client: str, agent: str) -> bool:
    """Whether this address and browser signed in successfully before."""
    row = await tx.one(
        "SELECT 1 FROM panel_logins WHERE client = ? AND agent = ? AND outcome = 'ok'"
        " LIMIT 1", (client, agent))
    return row is not None


async def logins(tx: Tx, limit: int) -> list[Login]:
    rows = await tx.all("SELECT * FROM panel_logins ORDER BY id DESC LIMIT ?", (limit,))
    return [Login(id=int(r["id"]), at_ms=int(r["at_ms"]), client=r["client"],
                  agent=r["agent"], method=r["method"], outcome=r["outcome"]) for r in rows]
