"""GET /api/v1/backup (docs/backup.md): the archive streamed as it is written, its
first bytes at once (chunked), memory bounded by a small queue between the writing
thread and the response; GET /api/v1/backup/estimate: the sizes before starting."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import IO

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..clock import now_ms
from .context import runtime_of
from .errors import StateConflict, json_response

QUEUE_CHUNKS = 16  # × up to 64 KiB: what the server holds of an archive at most


class _Pipe:
    """A file the tar writes into; each write waits while the queue is full, and fails
    once the response is gone (the client left), which ends the writing thread."""

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
        """The writer's last word (after success or failure), never blocking for good."""
        while not self.gone.is_set():
            try:
                self.q.put(None, timeout=0.5)
                return
            except queue.Full:
                continue

    def next(self) -> bytes | None:
        """The next chunk; None at the end or once the response is gone."""
        while not self.gone.is_set():
            try:
                return self.q.get(timeout=0.5)
            except queue.Empty:
                continue
        return None


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "") in ("1", "true")


def streamed(write: Callable[[IO[bytes]], None], filename: str,
             media_type: str) -> StreamingResponse:
    """`write(out)` run in a thread, its bytes streamed as they come (bounded: the pipe
    holds QUEUE_CHUNKS); a failed write ends the stream with an error, never "complete"."""
    pipe = _Pipe()

    def produce() -> None:
        try:
            write(pipe)  # type: ignore[arg-type]
        finally:
            pipe.end()

    async def body() -> AsyncIterator[bytes]:
        writer = asyncio.get_running_loop().run_in_executor(None, produce)
        try:
            while (chunk := await asyncio.to_thread(pipe.next)) is not None:
                yield chunk
            await writer
        finally:
            pipe.gone.set()
            while not pipe.q.empty():
                pipe.q.get_nowait()

    return StreamingResponse(body(), media_type=media_type, headers={
        "Content-Disposition": f'attachment; filename="{filename}"',
        "X-Accel-Buffering": "no", "Cache-Control": "no-store"})


async def download(request: Request) -> Response:
    conf = runtime_of(request).settings
    if conf.fleet:
        raise StateConflict("fleet mode keeps its data in PostgreSQL: back it up with"
                            " pg_dump (docs/backup.md)")
    logs, history = _flag(request, "logs"), _flag(request, "history")

    def write(out: IO[bytes]) -> None:
        # Imported when a backup is asked for: an idle worker never loads tarfile and the
        # writer (tests/test_imports_idle.py).
        from .. import backup as backups

        backups.write(conf, out, with_logs=logs, with_history=history)

    return streamed(write, f"qledge-backup-{now_ms() // 1000}.tar.gz", "application/gzip")


async def estimate(request: Request) -> Response:
    from .. import backup as backups  # on use, as in download()
    from ..backup import crypto

    conf = runtime_of(request).settings
    sizes = await asyncio.to_thread(backups.estimate, conf, with_logs=_flag(request, "logs"))
    try:  # the panel offers a passphrase only where the download can use it
        crypto.require()
        encryption = True
    except crypto.EncryptionUnavailable:
        encryption = False
    return json_response({"parts": sizes, "total": sum(sizes.values()),
                          "encryption": encryption})


routes = [Route("/backup", download, methods=["GET"]),
          Route("/backup/estimate", estimate, methods=["GET"])]
