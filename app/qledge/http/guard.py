"""The outermost middleware: a request-body size limit and JSON for every failure.

* **Body limit** (`QLEDGE_MAX_BODY_BYTES`, 1 MiB by default), on every route: a
  `Content-Length` above it is refused with 413 before a byte of the body is
  read; a body without one (chunked) is counted as it arrives and refused the
  moment it passes the limit. The worker never holds more than the limit of a
  request body, whatever a client sends.
* **Unhandled exceptions** become JSON (`errors.unexpected`): 507
  `DISK_FULL` for a full disk, else 500 `INTERNAL` with an error id that the
  worker log repeats with the traceback. Starlette's own fallback would answer
  plain text.

Both answer in the shape of the application the path belongs to (`shapes`: QingLong's
under /open, the native one elsewhere).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError, PayloadTooLarge, render, unexpected

log = logging.getLogger("qledge.http")


class Guard:
    """`wider`: path prefixes whose routes take larger bodies and bound them
    themselves, each with its own ceiling here (the scripts upload). `shapes`: path
    prefixes (a mounted application) whose errors have another shape than `render`'s."""

    def __init__(self, app: ASGIApp, max_body_bytes: int,
                 wider: dict[str, int] | None = None,
                 shapes: dict[str, Callable[[ApiError], Response]] | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.wider = sorted((wider or {}).items(), key=lambda kv: -len(kv[0]))
        self.shapes = sorted((shapes or {}).items(), key=lambda kv: -len(kv[0]))

    def _shape(self, path: str) -> Callable[[ApiError], Response]:
        for prefix, shape in self.shapes:
            if path == prefix or path.startswith(prefix + "/"):
                return shape
        return render

    def _limit(self, path: str) -> int:
        for prefix, limit in self.wider:
            if path == prefix or path.startswith(prefix + "/"):
                return max(limit, self.max_body_bytes)
        return self.max_body_bytes

    def _too_large(self, limit: int) -> PayloadTooLarge:
        setting = " (setting QLEDGE_MAX_BODY_BYTES)" if limit == self.max_body_bytes else ""
        return PayloadTooLarge(f"request body is larger than {limit} bytes{setting}",
                               extra={"limit_bytes": limit})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isascii() and declared.isdigit() and (
                len(declared) > 18 or int(declared) > limit):
            response = self._shape(scope["path"])(self._too_large(limit))
            await response(scope, receive, send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise self._too_large(limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except Exception as exc:
            if started:  # mid-stream: too late for an answer; the server aborts it
                log.error("error after the response started (%s %s)", scope.get("method"),
                          scope.get("path"), exc_info=exc)
                raise
            shape = self._shape(scope["path"])
            if isinstance(exc, PayloadTooLarge):  # raised by `counted` outside a route
                response = shape(exc)
            else:
                response = shape(unexpected(f"{scope.get('method')} {scope['path']}", exc))
            await response(scope, receive, send)
