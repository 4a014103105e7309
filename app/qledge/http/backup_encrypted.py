"""POST /api/v1/backup (docs/backup.md, "Encryption"): the archive of GET /api/v1/backup,
encrypted with a passphrase sent in the JSON body — never in the URL, where proxies and
access logs would keep it. Streamed the same way: a thread writes the tar through the
encrypting stream (backup/crypto.py) into a bounded queue the response drains."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..clock import now_ms
from .context import runtime_of
from .errors import ApiError, Invalid, StateConflict, decode_body

QUEUE_CHUNKS = 16  # × up to 64 KiB + 16: what the server holds of an archive at most


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


class _Queue:
    """What the encrypting stream writes into; a write fails once the client left."""

    def __init__(self) -> None:
        self.q: queue.Queue[bytes | None] = queue.Queue(QUEUE_CHUNKS)
        self.gone = threading.Event()

    def write(self, data: bytes) -> int:
        while not self.gone.is_set():
            try:
                self.q.put(bytes(data), timeout=0.5)
                return len(data)
            except queue.Full:
                continue
        raise BrokenPipeError("the download was abandoned")

    def flush(self) -> None:
        return None

    def end(self) -> None:
        while not self.gone.is_set():
            try:
                self.q.put(None, timeout=0.5)
                return
            except queue.Full:
                continue

    def next(self) -> bytes | None:
        while not self.gone.is_set():
            try:
                return self.q.get(timeout=0.5)
            except queue.Empty:
                continue
        return None


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
    try:  # said before the answer starts: on arm/v7 there is no cryptography
        crypto.require()
    except crypto.EncryptionUnavailable as exc:
        raise EncryptionUnavailable(str(exc)) from None
    passphrase = body.passphrase.encode()
    pipe = _Queue()

    def produce() -> None:
        from .. import backup as backups

        try:
            sealed = crypto.EncryptingWriter(pipe, passphrase)  # type: ignore[arg-type]
            backups.write(conf, sealed, with_logs=body.logs,  # type: ignore[arg-type]
                          with_history=body.history, encrypted=True)
            sealed.finish()
        finally:
            pipe.end()

    async def stream() -> AsyncIterator[bytes]:
        writer = asyncio.get_running_loop().run_in_executor(None, produce)
        try:
            while (chunk := await asyncio.to_thread(pipe.next)) is not None:
                yield chunk
            await writer  # a failed backup ends the stream with an error, never "complete"
        finally:
            pipe.gone.set()
            while not pipe.q.empty():
                pipe.q.get_nowait()

    name = f"qledge-backup-{now_ms() // 1000}.tar.gz.enc"
    return StreamingResponse(stream(), media_type="application/octet-stream", headers={
        "Content-Disposition": f'attachment; filename="{name}"',
        "X-Accel-Buffering": "no", "Cache-Control": "no-store"})


routes = [Route("/backup", download_encrypted, methods=["POST"])]
