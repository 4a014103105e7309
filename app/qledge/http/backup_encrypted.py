"""POST /api/v1/backup (docs/backup.md, "Encryption"): the archive of GET /api/v1/backup,
encrypted with a passphrase sent in the JSON body — never in the URL, where proxies and
access logs would keep it. Streamed the same way: a thread writes the tar through the
encrypting stream (backup/crypto.py) into a bounded queue the response drains."""

from __future__ import annotations

from typing import IO

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..clock import now_ms
from .backup import streamed
from .context import runtime_of
from .errors import ApiError, Invalid, StateConflict, decode_body


class EncryptedDownload(msgspec.Struct, forbid_unknown_fields=True, frozen=True,
                        kw_only=True):
    passphrase: str
    logs: bool = False
    history: bool = False


class PassphraseShort(Invalid):
    code = "BACKUP_PASSPHRASE_SHORT"


class EncryptionUnavailable(ApiError):
    status = 501
    code = "BACKUP_ENCRYPTION_UNAVAILABLE"


async def download_encrypted(request: Request) -> Response:
    from ..backup import crypto  # on use: an idle worker never loads the backup code

    conf = runtime_of(request).settings
    if conf.fleet:
        raise StateConflict("fleet mode keeps its data in PostgreSQL: back it up with"
                            " pg_dump (docs/backup.md)")
    body = decode_body(await request.body(), EncryptedDownload)
    if len(body.passphrase) < crypto.MIN_PASSPHRASE:
        raise PassphraseShort(f"a backup passphrase needs at least {crypto.MIN_PASSPHRASE}"
                              " characters", field="passphrase",
                              extra={"params": {"min": crypto.MIN_PASSPHRASE}})
    try:  # said before the answer starts
        crypto.require()
    except crypto.EncryptionUnavailable as exc:
        raise EncryptionUnavailable(str(exc)) from None
    passphrase = body.passphrase.encode()

    def write(out: IO[bytes]) -> None:
        from .. import backup as backups

        sealed = crypto.EncryptingWriter(out, passphrase)
        backups.write(conf, sealed, with_logs=body.logs,  # type: ignore[arg-type]
                      with_history=body.history, encrypted=True)
        sealed.finish()

    return streamed(write, f"qledge-backup-{now_ms() // 1000}.tar.gz.enc",
                    "application/octet-stream")


routes = [Route("/backup", download_encrypted, methods=["POST"])]
