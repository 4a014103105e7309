"""POST /api/v1/restore (docs/backup.md, "Restoring"): the archive as the raw request
body, streamed into a spool file on the data volume (never read whole into memory,
never in /tmp), then checked and staged like `qledge restore`. `?replace=1` replaces
an appliance that holds data, `?force=1` even while runs execute; an encrypted
archive's passphrase comes in the `Qledge-Backup-Passphrase` header, percent-encoded.

Once staged (202), the worker ends itself after answering and supervisord starts it
again: the swap happens at that start, before the database opens."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from urllib.parse import unquote

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..backup import swap
from ..fs import dirfd
from ..settings import Settings
from ._files import offload
from .context import runtime_of
from .errors import ApiError, json_response

PATH = "/api/v1/restore"
MAX_ARCHIVE = 64 << 30  # a ceiling for the body guard; the data volume's room decides
RESTART_DELAY_S = 0.5


def body_ceilings() -> dict[str, int]:
    """The outer body limit (http/guard.py) of the restore upload."""
    return {PATH: MAX_ARCHIVE}


class RestoreBusy(ApiError):
    status = 409
    code = "RESTORE_BUSY"

# Percent-encoded UTF-8 (a header holds latin-1 only; the panel sends encodeURIComponent).
PASSPHRASE_HEADER = "qledge-backup-passphrase"  # noqa: S105 (a header name)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "") in ("1", "true")


async def upload(request: Request) -> Response:
    conf = runtime_of(request).settings
    replace, force = _flag(request, "replace"), _flag(request, "force")
    passphrase = _passphrase(request)
    spool = conf.data_path / f".restore-upload-{os.getpid()}-{time.monotonic_ns()}"
    fd = os.open(spool, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        # The name goes at once: a killed upload leaves no spool behind.
        os.unlink(spool)
        async for chunk in request.stream():
            if chunk:
                await offload(dirfd.write_all, fd, chunk)
        os.lseek(fd, 0, os.SEEK_SET)
        pending = await asyncio.to_thread(_stage, conf, fd, replace, force, passphrase)
    finally:
        os.close(fd)
    restart: Callable[[], None] | None = getattr(request.app.state, "restart", None)
    body = {"staged": True, "restarting": restart is not None,
            "schema_version": pending.schema_version, "counts": pending.counts,
            "requeued": pending.requeued, "logs": pending.logs}
    task = None
    if restart is not None:
        loop = asyncio.get_running_loop()
        task = BackgroundTask(loop.call_later, RESTART_DELAY_S, restart)
    response = json_response(body, status=202)
    response.background = task
    return response


def _passphrase(request: Request) -> bytes | None:
    """An encrypted archive's passphrase: a header, never the URL (which logs keep)."""
    value = request.headers.get(PASSPHRASE_HEADER)
    return None if value is None else unquote(value).encode()


def _stage(conf: Settings, fd: int, replace: bool, force: bool,
           passphrase: bytes | None) -> swap.Pending:
    from ..backup import restore  # tarfile and the reader: on use (an idle worker)

    with os.fdopen(os.dup(fd), "rb", buffering=1 << 16) as source:
        try:
            return restore.stage(conf, source, replace=replace, force=force,
                                 passphrase=passphrase)
        except swap.Busy as exc:
            raise RestoreBusy(str(exc)) from exc


routes = [Route("/restore", upload, methods=["POST"])]
