"""Log reads and live tails (SSE), on demand only.

Nothing reads a log while nobody asks: each subscriber gets its own reader
that polls the file size while it is connected and stops when it leaves. The
user process appends to the file directly, so a slow client can only fall
behind (and resume from its offset); it can never slow the task down.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .. import ids
from ..db import retention_queries, store
from ..launch import logs
from ..model import TERMINAL_RUN
from ..runtime.lifecycle import Runtime
from .errors import Invalid, Missing, json_response

CHUNK = 64 * 1024
POLL_S = 0.2
STATUS_EVERY = 5  # polls between run-status checks while the file is quiet
_enc = msgspec.json.Encoder()


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def _target(rt: Runtime, run_id: str) -> tuple[str | None, bool, str]:
    """(log path of the latest attempt, run terminal?, status)."""
    if not ids.is_uuid7(run_id):
        raise Missing("run not found")
    async with rt.db.read() as tx:
        run = await store.get_run(tx, run_id)
        attempts = await store.attempts_of_run(tx, run_id)
    terminal = run.status in TERMINAL_RUN
    return (attempts[-1].log_path if attempts else None), terminal, run.status.value


def _offset(request: Request) -> int:
    raw = request.query_params.get("offset") or request.headers.get("last-event-id") or "0"
    try:
        value = int(raw)
    except ValueError as exc:
        raise Invalid("offset must be a non-negative integer", field="offset") from exc
    if value < 0:
        raise Invalid("offset must be a non-negative integer", field="offset")
    return value


async def read(request: Request) -> Response:
    rt = _rt(request)
    offset = _offset(request)
    try:
        limit = int(request.query_params.get("limit", str(rt.settings.log_read_limit)))
    except ValueError as exc:
        raise Invalid("limit must be an integer", field="limit") from exc
    limit = max(1, min(limit, rt.settings.log_read_limit))
    path, terminal, status = await _target(rt, request.path_params["run_id"])
    data, size = (b"", 0) if path is None else await asyncio.to_thread(
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
        raise Invalid(f"offset {offset} is past the end of the log ({size})", field="offset")
    return Response(data, media_type="application/octet-stream", headers={
        "X-Log-Offset": str(offset), "X-Log-Next-Offset": str(offset + len(data)),
        "X-Log-Size": str(size), "X-Run-Terminal": "true" if terminal else "false",
        "X-Run-Status": status, "Cache-Control": "no-store"})


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
    rt = _rt(request)
    run_id = request.path_params["run_id"]
    offset = _offset(request)
    await _target(rt, run_id)  # 404 before the stream starts
    return StreamingResponse(_tail(rt, run_id, offset), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _tail(rt: Runtime, run_id: str, offset: int) -> AsyncIterator[bytes]:
    rt.log_streams += 1
    try:
        yield b"retry: 1000\n\n"
        polls = 0
        path, terminal, _ = await _target(rt, run_id)
        while True:
            if path is None or polls % STATUS_EVERY == 0:
                path, terminal, _ = await _target(rt, run_id)
            data = b""
            if path is not None:
                data, _ = await asyncio.to_thread(logs.read, rt.settings.logs_path, path,
                                                  offset, CHUNK)
            if data:
                cut = len(data) if terminal else _complete_utf8(data)
                if cut:
                    offset += cut
                    text = data[:cut].decode("utf-8", "replace")
                    yield _sse("log", _enc.encode({"text": text}).decode(), offset)
                    continue  # drain without sleeping while there is backlog
            if terminal and not data:
                evicted = None if path is None else await _evicted(rt, path)
                if evicted is not None:
                    yield _sse("evicted", _enc.encode({"reason": evicted[0],
                                                       "evicted_at_ms": evicted[1]}).decode())
                async with rt.db.read() as tx:
                    run = await store.get_run(tx, run_id)
                yield _sse("end", _enc.encode({"status": run.status.value,
                                               "exit_code": run.exit_code,
                                               "reason_code": run.reason_code}).decode(), offset)
                return
            polls += 1
            await asyncio.sleep(POLL_S)
    finally:
        rt.log_streams -= 1


routes = [
    Route("/runs/{run_id}/log", read, methods=["GET"]),
    Route("/runs/{run_id}/log/stream", stream, methods=["GET"]),
]
