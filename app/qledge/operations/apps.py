"""Operations on OpenAPI apps and their tokens (QingLong's /open/auth/token)."""

from __future__ import annotations

import hashlib
import hmac

from .. import ids
from ..clock import now_ms
from ..db import apps
from ..runtime.lifecycle import Runtime


class NameTaken(Exception):
    """Refused: another app has this name."""


class WrongCredentials(Exception):
    """Refused: no app has this client id and secret."""


# What an unknown client id's secret is compared with: the comparison takes as long as
# for a known one, so the answer's time does not say which of the two was wrong.
_NO_SUCH_APP = hashlib.sha256(b"qledge-no-such-client").digest()


async def create_app(rt: Runtime, *, name: str, client_id: str, secret_hash: bytes,
                     scopes: list[str]) -> apps.App:
    """A new app; NameTaken if another has `name`. Only the secret's hash is stored."""
    async with rt.db.write() as tx:
        if await apps.app_name_taken(tx, name):
            raise NameTaken(name)
        return await apps.create_app(tx, app_id=ids.uuid7(), name=name, client_id=client_id,
                                     secret_hash=secret_hash, scopes=scopes, now_ms=now_ms())


async def delete_app(rt: Runtime, app_id: str) -> None:
    """Delete the app and so revoke its tokens; NotFound for an unknown one."""
    async with rt.db.write() as tx:
        await apps.delete_app(tx, app_id)


async def issue_app_token(rt: Runtime, *, client_id: str, secret_hash: bytes,
                          token_hash: bytes, expires_at_ms: int, now: int, keep: int) -> None:
    """Store a token for the app with this client id and secret (compared in constant
    time), keeping its newest `keep`; WrongCredentials, and nothing stored, if none."""
    async with rt.db.write() as tx:
        found = await apps.app_secret(tx, client_id)
        expected = found[1] if found else _NO_SUCH_APP
        if not hmac.compare_digest(secret_hash, expected) or found is None:
            raise WrongCredentials(client_id)
        await apps.issue_token(tx, found[0], token_hash, expires_at_ms, now, keep)
