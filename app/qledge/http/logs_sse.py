"""Log reads and live tails (SSE), on demand only.

Nothing reads a log while nobody asks: each subscriber gets its own reader
that polls the file size while it is connected and stops when it leaves. The
user process appends to the file directly, so a slow client can only fall
behind (and resume from its offset); it can never slow the task down.

Reads run on the runtime's bounded file pool (launch/fileio.py) and accept
regular files only (launch/logs.py): a log the task replaced with a FIFO, a
symlink or a directory answers 409 `LOG_NOT_REGULAR_FILE`, and a stream ends
with an `end` event that carries the same `error` (a client must not
reconnect forever). An idle stream sends an SSE comment every KEEPALIVE_S so
proxies keep it open and a half-open client is noticed.

Fleet mode: an attempt that ran on another node is read from that node
(http/_proxy.py); its internal routes (http/internal.py) serve them with the
same functions as here (`serve_read`, `tail`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .. import ids, limits
from ..db import attempts, retention_queries, runs
from ..launch import logs
from ..launch.fileio import FileBusy, FileTimeout
from ..model import ACTIVE_ATTEMPT, TERMINAL_RUN, Attempt
from ..runtime.lifecycle import Runtime
from . import _proxy, inputs
from .context import runtime_of
from .errors import Invalid, Missing, json_response

CHUNK = 64 * 1024
POLL_S = 0.2
STATUS_EVERY = 5  # polls between run-status checks while the file is quiet
KEEPALIVE_S = 15.0  # an idle stream sends ": keep-alive" this often
KEEPALIVE = b": keep-alive\n\n"
_enc = msgspec.json.Encoder()


Target = tuple[Attempt | None, bool, str]  # (the attempt to read, run over?, run status)


def attempt_no(request: Request) -> int | None:
    """`attempt`: which attempt's log (1-based attempt_no); absent: the latest."""
    raw = request.query_params.get("attempt")
    return None if not raw else inputs.parse_int(raw, "attempt", 1, limits.INT64_MAX)


async def _target(rt: Runtime, run_id: str, number: int | None = None) -> Target:
    """(the latest attempt or attempt `number`, its log final?, run status).

    The latest attempt's log is final once the run is terminal; an earlier one's once
    that attempt ended (a retry waiting or running does not write to it)."""
    if not ids.is_uuid7(run_id):
        raise Missing("run not found", params={"what": "run"})
    async with rt.db.read() as tx:
        run = await runs.get_run(tx, run_id)
        tried = await attempts.attempts_of_run(tx, run_id)
    terminal = run.status in TERMINAL_RUN
    if number is None:
        return (tried[-1] if tried else None), terminal, run.status.value
    chosen = next((a for a in tried if a.attempt_no == number), None)
    if chosen is None:
        raise Missing(f"run has no attempt {number}", code="NO_SUCH_ATTEMPT",
                      params={"number": number})
    return chosen, terminal or chosen.status not in ACTIVE_ATTEMPT, run.status.value


class LogState(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt's log against what its receipt said (docs/storage.md).

    size and truncated are None when the file could not be looked at now (the
    file pool is stuck or full): a run's record must not wait on its log file."""

    size: int | None
    expected: int | None  # the log's length when the command exited, if known
    truncated: bool | None  # shorter than at exit and not evicted: a power cut took the rest

    @property
    def note(self) -> str | None:
        if not self.truncated:
            return None
        return f"log truncated by power loss: {self.size} of {self.expected} bytes"


async def log_state(rt: Runtime, attempt: Attempt) -> LogState:
    expected = attempt.log_bytes_at_exit
    if _proxy.elsewhere(rt, attempt):  # its file is on another node: not looked at here
        return LogState(size=None, expected=expected, truncated=None)
    try:
        size = await rt.files.run(logs.size, rt.settings.logs_path, attempt.log_path)
    except (FileBusy, FileTimeout):
        return LogState(size=None, expected=expected, truncated=None)
    truncated = (expected is not None and size < expected
                 and await _evicted(rt, attempt.log_path) is None)
    return LogState(size=size, expected=expected, truncated=truncated)


def _offset(request: Request) -> int:
    """`offset`, else an EventSource's Last-Event-ID (the `id` of its last `log` event)."""
    raw = request.query_params.get("offset")
    if raw:
        return inputs.parse_int(raw, "offset", 0, limits.INT64_MAX)
    header = request.headers.get("last-event-id", "").strip()
    if header:
        return inputs.parse_int(header, "Last-Event-ID", 0, limits.INT64_MAX)
    return 0


def read_window(rt: Runtime, request: Request) -> tuple[int, int]:
    """(offset, limit) of a log read."""
    most = rt.settings.log_read_limit
    return _offset(request), inputs.query_int(request, "limit", most, 1, most)


async def read(request: Request) -> Response:
    rt = runtime_of(request)
    offset, limit = read_window(rt, request)
    attempt, terminal, status = await _target(rt, request.path_params["run_id"],
                                              attempt_no(request))
    if attempt is not None and (peer := await _proxy.owner(rt, attempt)) is not None:
        return await _proxy.relay_read(rt, peer, attempt.id, offset, limit)
    return await serve_read(rt, attempt, terminal, status, offset, limit)


async def serve_read(rt: Runtime, attempt: Attempt | None, terminal: bool, status: str,
                     offset: int, limit: int) -> Response:
    """A window of this node's copy of `attempt`'s log, with the log headers."""
    path = None if attempt is None else attempt.log_path
    data, size = (b"", 0) if path is None else await rt.files.run(
        logs.read, rt.settings.logs_path, path, offset, limit)
    if size == 0 and path is not None:
        evicted = await _evicted(rt, path)
        if evicted is not None:  # retention deleted the file; the run row stays
            return json_response(
                {"error": "LOG_EVICTED", "message": "this log was deleted by log retention",
                 "reason": evicted[0], "evicted_at_ms": evicted[1]}, 410,
                headers={"X-Log-Evicted": evicted[0], "X-Run-Status": status,
                         "X-Run-Terminal": "true" if terminal else "false"})
    if offset > size:
        raise Invalid(f"offset {offset} is past the end of the log ({size})", field="offset",
                      code="OFFSET_PAST_END")
    headers = {
        "X-Log-Offset": str(offset), "X-Log-Next-Offset": str(offset + len(data)),
        "X-Log-Size": str(size), "X-Run-Terminal": "true" if terminal else "false",
        "X-Run-Status": status, "Cache-Control": "no-store"}
    if attempt is not None and attempt.log_bytes_at_exit is not None:
        # A power cut can take an unsynced log's tail while the result survives:
        # say so instead of serving the rest as the whole log.
        state = await log_state(rt, attempt)
        headers["X-Log-Expected-Size"] = str(attempt.log_bytes_at_exit)
        if state.truncated is not None:
            headers["X-Log-Truncated"] = "true" if state.truncated else "false"
        if state.note:
            headers["X-Log-Note"] = state.note
    return Response(data, media_type="application/octet-stream", headers=headers)


async def _evicted(rt: Runtime, path: str) -> tuple[str, int] | None:
    """(reason, evicted_at_ms) if retention evicted this log (docs/retention.md)."""
    async with rt.db.read() as tx:
        return await retention_queries.log_eviction(tx, path)


def _complete_utf8(data: bytes) -> int:
    """Length of the longest prefix that does not end inside a UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return len(data) if need <= back else len(data) - back
    return len(data)


def _sse(event: str, data: str, event_id: int | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


async def stream(request: Request) -> Response:
    rt = runtime_of(request)
    run_id = request.path_params["run_id"]
    offset = _offset(request)
    number = attempt_no(request)
    await _target(rt, run_id, number)  # 404 before the stream starts
    return sse_response(_tail(rt, run_id, offset, number))


def _tail(rt: Runtime, run_id: str, offset: int,
          number: int | None = None) -> AsyncIterator[bytes]:
    """The public tail: the run's latest attempt (or attempt `number`), wherever its
    log is."""
    return tail(rt, lambda: _target(rt, run_id, number), run_id, offset, follow_owner=True)


def sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _end(rt: Runtime, run_id: str, offset: int, attempt: Attempt | None = None,
               **error: str) -> bytes:
    """The last event of every stream: the run's state, whether its log is whole
    (`attempt` given: a normal end), and why it ended early if so (`error`)."""
    async with rt.db.read() as tx:
        run = await runs.get_run(tx, run_id)
    state = None if attempt is None else await log_state(rt, attempt)
    body: dict[str, object] = {
        "status": run.status.value, "exit_code": run.exit_code, "reason_code": run.reason_code,
        "log_bytes_at_exit": None if state is None else state.expected,
        "log_truncated": False if state is None else state.truncated,
        "log_note": None if state is None else state.note, **error}
    return _sse("end", _enc.encode(body).decode(), offset)


async def tail(rt: Runtime, target: Callable[[], Awaitable[Target]], run_id: str,
               offset: int, *, follow_owner: bool) -> AsyncIterator[bytes]:
    """The SSE tail of `target()`'s attempt. `follow_owner`: an attempt that ran on
    another node is relayed from it (the public route; the internal one serves only
    its own attempts)."""
    rt.log_streams += 1
    try:
        yield b"retry: 1000\n\n"
        sent_at = time.monotonic()
        polls = 0
        attempt, terminal, _ = await target()
        while True:
            if attempt is None or polls % STATUS_EVERY == 0:
                attempt, terminal, _ = await target()
            if follow_owner and attempt is not None and \
                    (peer := await _proxy.owner(rt, attempt)) is not None:
                async for block in _proxy.relay_stream(rt, peer, attempt.id, offset):
                    yield block
                return
            path = None if attempt is None else attempt.log_path
            data = b""
            if path is not None:
                try:
                    data, _ = await rt.files.run(logs.read, rt.settings.logs_path, path,
                                                 offset, CHUNK)
                except logs.UnsafeLogFile as exc:
                    yield await _end(rt, run_id, offset, error="LOG_NOT_REGULAR_FILE",
                                     kind=exc.kind, message=str(exc))
                    return
                except FileBusy:
                    pass  # a burst of readers: this poll is skipped, the next one reads
                except FileTimeout as exc:
                    yield await _end(rt, run_id, offset, error="LOG_READ_TIMEOUT",
                                     message=str(exc))
                    return
            if data:
                cut = len(data) if terminal else _complete_utf8(data)
                if cut:
                    offset += cut
                    text = data[:cut].decode("utf-8", "replace")
                    yield _sse("log", _enc.encode({"text": text}).decode(), offset)
                    sent_at = time.monotonic()
                    continue  # drain without sleeping while there is backlog
            if terminal and not data:
                evicted = None if path is None else await _evicted(rt, path)
                if evicted is not None:
                    yield _sse("evicted", _enc.encode({"reason": evicted[0],
                                                       "evicted_at_ms": evicted[1]}).decode())
                yield await _end(rt, run_id, offset, attempt)
                return
            if time.monotonic() - sent_at >= KEEPALIVE_S:
                yield KEEPALIVE
                sent_at = time.monotonic()
            polls += 1
            await asyncio.sleep(POLL_S)
    finally:
        rt.log_streams -= 1


routes = [
    Route("/runs/{run_id}/log", read, methods=["GET"]),
    Route("/runs/{run_id}/log/stream", stream, methods=["GET"]),
]
