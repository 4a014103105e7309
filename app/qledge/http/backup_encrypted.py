"""POST /api/v1/backup (docs/backup.md, "Encryption"): the archive of GET /api/v1/backup,
encrypted with a passphrase sent in the JSON body — never in the URL, where proxies and
access logs would keep it. Streamed the same way: a thread writes the tar through the
encrypting stream (backup/crypto.py) into a bounded queue the response drains.

The panel's download form posts the same three fields form-encoded: a browser saves a
form's answer to disk as it streams, where a fetch() would hold the whole archive in the
page's memory first. The session cookie's origin check (http/auth.py) applies to both."""

from __future__ import annotations

from typing import IO
from urllib.parse import parse_qsl

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..clock import now_ms
from .backup import streamed
from .context import runtime_of
from .errors import ApiError, BadRequest, Invalid, StateConflict, decode_body


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


FORM = "application/x-www-form-urlencoded"
_FLAGS = ("logs", "history")


def _form_as_json(data: bytes) -> bytes:
    """The panel's form in the JSON body's terms, judged by the same strict decode (an
    unknown or repeated field is refused the same way); a ticked box is "1"."""
    try:
        pairs = parse_qsl(data.decode(), keep_blank_values=True, strict_parsing=True,
                          errors="strict",
                          max_num_fields=len(EncryptedDownload.__struct_fields__))
    except (UnicodeDecodeError, ValueError):
        # Not the parser's words: they quote the field, which may be the passphrase.
        raise BadRequest("malformed form body: name=value pairs joined by &, UTF-8,"
                         " percent-encoded", code="MALFORMED_FORM") from None

    def member(key: str, value: str) -> bytes:
        given: str | bool = True if key in _FLAGS and value == "1" else value
        return msgspec.json.encode(key) + b":" + msgspec.json.encode(given)

    return b"{" + b",".join(member(k, v) for k, v in pairs) + b"}"


async def download_encrypted(request: Request) -> Response:
    from ..backup import crypto  # on use: an idle worker never loads the backup code

    conf = runtime_of(request).settings
    if conf.fleet:
        raise StateConflict("fleet mode keeps its data in PostgreSQL: back it up with"
                            " pg_dump (docs/backup.md)")
    data = await request.body()
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == FORM:
        data = _form_as_json(data)
    body = decode_body(data, EncryptedDownload)
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
