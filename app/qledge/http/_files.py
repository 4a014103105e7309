"""File work for the scripts endpoints: off the event loop, bounded bodies, and
multipart uploads streamed into a staged file (never held whole in memory).

`offload` is the one place blocking file work leaves the loop, so it can be moved to
a bounded executor without touching the endpoints.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from ..scripts.folder import Scripts, ScriptTooLarge, Upload
from .errors import BadRequest

T = TypeVar("T")
MAX_PARTS = 16
UPLOAD_OVERHEAD = 64 * 1024  # part headers, boundaries and small fields around the file


async def offload(fn: Callable[..., T], *args: object) -> T:
    return await asyncio.to_thread(fn, *args)


def _declared(request: Request) -> int | None:
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    if not (raw.strip().isascii() and raw.strip().isdigit()):  # isdigit() takes "²"
        raise BadRequest("Content-Length must be a number", code="BAD_CONTENT_LENGTH")
    return int(raw)


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it is known to exceed `limit`."""
    declared = _declared(request)
    if declared is not None and declared > limit:
        raise ScriptTooLarge(f"the request body is larger than {limit} bytes", field="body")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise ScriptTooLarge(f"the request body is larger than {limit} bytes",
                                 field="body")
        chunks.append(chunk)
    return b"".join(chunks)


class Form:
    """Text fields (each at most `field_limit` bytes) and at most one file part, whose
    bytes are handed out as they arrive (`take`)."""

    def __init__(self, field_limit: int) -> None:
        self.field_limit = field_limit
        self.fields: dict[str, str] = {}
        self.file_name: str | None = None  # the file part's filename=
        self.upload: Upload | None = None
        self.ended = False
        self._parts = 0
        self._header = bytearray()
        self._value = bytearray()
        self._headers: dict[str, bytes] = {}
        self._name = ""
        self._in_file = False
        self._file_bytes: list[bytes] = []
        self._field = bytearray()

    def callbacks(self) -> dict[str, Callable[..., None]]:
        return {"on_part_begin": self._part_begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_done, "on_part_data": self._data,
                "on_part_end": self._part_end, "on_end": self._end}

    def _part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise BadRequest(f"a form may have at most {MAX_PARTS} parts", code="TOO_MANY_PARTS",
                             params={"max": MAX_PARTS})
        self._headers = {}
        self._field = bytearray()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers[bytes(self._header).decode("latin-1").lower()] = bytes(self._value)
        self._header.clear()
        self._value.clear()

    def _headers_done(self) -> None:
        disposition, params = parse_options_header(self._headers.get("content-disposition"))
        if disposition != b"form-data" or b"name" not in params:
            raise BadRequest("each part needs Content-Disposition: form-data; name=…",
                             code="BAD_MULTIPART")
        try:
            self._name = params[b"name"].decode("utf-8")
            filename = params[b"filename"].decode("utf-8") if b"filename" in params else None
        except UnicodeDecodeError:
            raise BadRequest("part names and file names must be UTF-8",
                             code="BAD_MULTIPART") from None
        self._in_file = filename is not None
        if self._in_file:
            if self.file_name is not None:
                raise BadRequest("one file per upload", field=self._name, code="ONE_FILE_ONLY")
            self.file_name = filename

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self._file_bytes.append(data[start:end])
            return
        self._field += data[start:end]
        if len(self._field) > self.field_limit:
            raise ScriptTooLarge(f"form field {self._name!r} is larger than "
                                 f"{self.field_limit} bytes", field=self._name)

    def _part_end(self) -> None:
        if not self._in_file:
            try:
                self.fields[self._name] = bytes(self._field).decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(f"form field {self._name!r} is not UTF-8",
                                 field=self._name, code="BAD_MULTIPART") from None
        self._in_file = False

    def _end(self) -> None:
        self.ended = True

    def take(self) -> bytes:
        data = b"".join(self._file_bytes)
        self._file_bytes.clear()
        return data


async def read_form(request: Request, scripts: Scripts, field_limit: int) -> Form:
    """Parse a multipart/form-data body; the file part (if any) is staged through
    `scripts.stage()` and capped at its upload limit (413, before the rest is read)."""
    ctype, params = parse_options_header(request.headers.get("content-type"))
    if ctype != b"multipart/form-data" or not params.get(b"boundary"):
        raise BadRequest("expected a multipart/form-data body with a boundary",
                         code="NOT_MULTIPART")
    limit = scripts.limits.max_upload + field_limit + UPLOAD_OVERHEAD
    declared = _declared(request)
    if declared is not None and declared > limit:
        raise ScriptTooLarge(f"the upload is larger than {scripts.limits.max_upload} "
                             "bytes", field="file")
    form = Form(field_limit)
    try:
        parser = MultipartParser(params[b"boundary"], form.callbacks())  # type: ignore[arg-type]
    except (ValueError, MultipartParseError) as exc:
        raise BadRequest(f"bad multipart boundary: {exc}", code="BAD_MULTIPART") from exc
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise ScriptTooLarge(f"the upload is larger than "
                                     f"{scripts.limits.max_upload} bytes", field="file")
            try:
                parser.write(chunk)
            except MultipartParseError as exc:
                raise BadRequest(f"malformed multipart body: {exc}",
                                 code="BAD_MULTIPART") from exc
            data = form.take()
            if form.file_name is not None and form.upload is None:
                form.upload = await offload(scripts.stage)
            if data and form.upload is not None:
                await offload(form.upload.write, data)
        if not form.ended:
            raise BadRequest("the multipart body ended before its closing boundary",
                             code="BAD_MULTIPART")
    except BaseException:
        if form.upload is not None:
            await offload(form.upload.abort)
        raise
    return form
