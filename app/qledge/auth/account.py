"""The panel account's operations: sign in and out, sessions, password, TOTP, the login
log (docs/security.md, "Signing in to the panel"). Only hashes are stored: the password's
scrypt, the cookie's and the recovery codes' SHA-256."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import NoReturn

import msgspec

from ..clock import now_ms
from ..db import signin as q
from ..db.interface import Database, Tx
from . import password as pw
from . import totp
from .errors import (
    BadCredentials,
    CurrentRequired,
    NoEnrolment,
    PasswordNotSet,
    Throttled,
    TotpRequired,
)
from .throttle import Throttle

TOUCH_EVERY_MS = 60_000  # last-seen is written at most once a minute per session
KEEP_LOGINS = 1000
RECOVERY_CODES = 10
# (tx, client address, browser summary, method): the message is worded by its receiver,
# in the notifications' language (notifications/words.py).
Notify = Callable[[Tx, str, str, str], Awaitable[object]]


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def agent_summary(user_agent: str) -> str:
    """"Firefox on Linux": the browser and the system, never the whole header."""
    ua = user_agent or ""
    browser = next((name for pat, name in (
        (r"Edg/", "Edge"), (r"OPR/|Opera", "Opera"), (r"Firefox/", "Firefox"),
        (r"Chrom(e|ium)/", "Chrome"), (r"Safari/", "Safari"), (r"curl/", "curl"),
        (r"python", "Python")) if re.search(pat, ua, re.I)), "other")
    system = next((name for pat, name in (
        (r"Android", "Android"), (r"iPhone|iPad|iOS", "iOS"), (r"Windows", "Windows"),
        (r"Mac OS X|Macintosh", "macOS"), (r"Linux", "Linux")) if re.search(pat, ua)), "")
    return f"{browser} on {system}" if system else browser


def _recovery_code() -> str:
    raw = secrets.token_hex(5)  # 40 bits, 10 hex digits
    return f"{raw[:5]}-{raw[5:]}"


@dataclass(frozen=True)
class State:
    password_set: bool
    totp_enabled: bool


@dataclass
class Accounts:
    db: Database
    admin_token: str
    idle_ms: int
    max_ms: int
    notify: Notify | None = None
    throttle: Throttle = field(default_factory=Throttle)
    monotonic: Callable[[], float] = time.monotonic

    async def state(self) -> State:
        async with self.db.read() as tx:
            acc = await q.account(tx)
        return State(password_set=acc.password_hash is not None,
                     totp_enabled=acc.totp_secret is not None)

    def is_admin_token(self, value: str) -> bool:
        return hmac.compare_digest(value.encode(), self.admin_token.encode())

    async def _log(self, client: str, agent: str, method: str, outcome: str) -> None:
        async with self.db.write() as tx:
            await q.add_login(tx, at_ms=now_ms(), client=client, agent=agent, method=method,
                              outcome=outcome, keep=KEEP_LOGINS)

    async def _fail(self, client: str, agent: str, method: str, message: str) -> NoReturn:
        wait = self.throttle.failed(client, self.monotonic())
        await self._log(client, agent, method, "refused")
        raise BadCredentials(message, retry_after_s=math.ceil(wait))

    async def sign_in(self, *, client: str, user_agent: str, password: str | None = None,
                      code: str | None = None, token: str | None = None) -> tuple[str, str]:
        """A new session's cookie value and the method that signed in, or a refusal."""
        agent = agent_summary(user_agent)
        if token is not None:
            if self.is_admin_token(token):
                self.throttle.reset()  # the owner's way back in, and out of any lockout
                return await self._open(client, agent, "token")
            await self._fail(client, agent, "token", "that token was refused")
        wait = self.throttle.wait_s(client, self.monotonic())
        if wait > 0:
            raise Throttled("too many failed sign-ins: wait before trying again",
                            retry_after_s=math.ceil(wait))
        async with self.db.read() as tx:
            acc = await q.account(tx)
        if acc.password_hash is None:
            raise PasswordNotSet("no password is set yet: sign in with the admin token")
        ok = await asyncio.to_thread(pw.verify_password, password or "", acc.password_hash)
        if not ok:
            await self._fail(client, agent, "password", "wrong password")
        method = "password"
        if acc.totp_secret is not None:
            if not code:
                raise TotpRequired("enter the code from your authenticator app")
            method = await self._second_factor(code) or ""
            if not method:
                await self._fail(client, agent, "totp", "wrong code")
        self.throttle.succeeded(client)
        return await self._open(client, agent, method)

    async def _second_factor(self, code: str) -> str | None:
        """"totp" or "recovery" when `code` is a valid one (used up in the same
        transaction), else None."""
        async with self.db.write() as tx:
            acc = await q.account(tx)
            if acc.totp_secret is None:
                return "password"
            step = totp.matching_step(acc.totp_secret, code, now_ms() / 1000,
                                      after_step=acc.totp_last_step)
            if step is not None:
                await q.save_account(tx, _with(acc, totp_last_step=step), now_ms())
                return "totp"
            digest = _sha(code.strip().lower())
            if digest in acc.recovery:
                left = [h for h in acc.recovery if h != digest]
                await q.save_account(tx, _with(acc, recovery=left), now_ms())
                return "recovery"
        return None

    async def _open(self, client: str, agent: str, method: str) -> tuple[str, str]:
        value = secrets.token_urlsafe(32)
        now = now_ms()
        async with self.db.write() as tx:
            known = await q.known_client(tx, client, agent)
            await q.add_session(tx, q.Session(id_hash=_sha(value), created_at_ms=now,
                                              last_seen_ms=now, client=client, agent=agent,
                                              method=method))
            await q.add_login(tx, at_ms=now, client=client, agent=agent, method=method,
                              outcome="ok", keep=KEEP_LOGINS)
            if not known and self.notify is not None:
                await self.notify(tx, client, agent, method)
        return value, method

    async def session(self, value: str) -> q.Session | None:
        """The live session this cookie value names, else None (an expired one is
        dropped)."""
        if not value or len(value) > 100:
            return None
        id_hash, now = _sha(value), now_ms()
        async with self.db.read() as tx:
            found = await q.session(tx, id_hash)
        if found is None:
            return None
        if now - found.last_seen_ms > self.idle_ms or now - found.created_at_ms > self.max_ms:
            async with self.db.write(durable=False) as tx:
                await q.drop_session(tx, id_hash)
            return None
        if now - found.last_seen_ms > TOUCH_EVERY_MS:
            async with self.db.write(durable=False) as tx:
                await q.touch_session(tx, id_hash, now)
        return found

    async def sign_out(self, value: str) -> None:
        async with self.db.write() as tx:
            await q.drop_session(tx, _sha(value))

    async def sign_out_everywhere(self) -> int:
        async with self.db.write() as tx:
            return await q.drop_sessions(tx)

    async def sessions(self) -> list[q.Session]:
        now = now_ms()
        async with self.db.write(durable=False) as tx:
            await q.drop_expired(tx, idle_before_ms=now - self.idle_ms,
                                 created_before_ms=now - self.max_ms)
            return await q.sessions(tx)

    async def logins(self, limit: int) -> list[q.Login]:
        async with self.db.read() as tx:
            return await q.logins(tx, limit)

    async def set_password(self, new: str, *, current: str | None,
                           operator: bool = False, keep_session: str = "") -> None:
        """The first password needs nothing more than a signed-in caller; a change needs
        the current password or the admin token (`current`) — or the operator
        (`qledge passwd`, run on the machine). A change ends every other session
        (`keep_session`: the caller's id hash stays)."""
        pw.check_new(new)
        async with self.db.read() as tx:
            acc = await q.account(tx)
        if acc.password_hash is not None and not operator:
            given = current or ""
            if not self.is_admin_token(given) and not await asyncio.to_thread(
                    pw.verify_password, given, acc.password_hash):
                raise CurrentRequired("the current password (or the admin token) is wrong")
        hashed = await asyncio.to_thread(pw.hash_password, new)
        async with self.db.write() as tx:
            acc = await q.account(tx)
            if acc.password_hash is not None:
                await q.drop_sessions(tx, keep=keep_session)
            await q.save_account(tx, _with(acc, password_hash=hashed), now_ms())

    async def totp_begin(self) -> tuple[str, str]:
        """A new pending secret and its otpauth:// URI; it counts once confirmed."""
        secret = totp.new_secret()
        async with self.db.write() as tx:
            acc = await q.account(tx)
            if acc.password_hash is None:
                raise PasswordNotSet("set a password before adding a second factor")
            await q.save_account(tx, _with(acc, totp_pending=secret), now_ms())
        return secret, totp.uri(secret, account="admin")

    async def totp_confirm(self, code: str) -> list[str]:
        """Turn the pending secret on with a code from it; the new recovery codes (shown
        once, stored hashed)."""
        codes = [_recovery_code() for _ in range(RECOVERY_CODES)]
        async with self.db.write() as tx:
            acc = await q.account(tx)
            if acc.totp_pending is None:
                raise NoEnrolment("no second factor is being added: start again")
            step = totp.matching_step(acc.totp_pending, code, now_ms() / 1000)
            if step is None:
                raise BadCredentials("wrong code: check the time on your phone and retry")
            await q.save_account(tx, _with(acc, totp_secret=acc.totp_pending,
                                           totp_pending=None, totp_last_step=step,
                                           recovery=[_sha(c) for c in codes]), now_ms())
        return codes

    async def totp_reset(self) -> None:
        """Admin token only (the caller checks): TOTP off, recovery codes gone."""
        async with self.db.write() as tx:
            acc = await q.account(tx)
            await q.save_account(tx, _with(acc, totp_secret=None, totp_pending=None,
                                           totp_last_step=0, recovery=[]), now_ms())


def _with(acc: q.Account, **changes: object) -> q.Account:
    return msgspec.structs.replace(acc, **changes)
