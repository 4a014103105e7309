"""QingLong's answer shapes and input conventions under /open/* (docs/qinglong-compat.md):
`{"code": 200, "data": ...}`, 400 for bad input, ids as numbers or numeric strings,
collections with and without a trailing slash."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...cron import from_ms, local_zone
from .. import inputs
from ..errors import (
    BadRequest,
    Invalid,
    decode_body,
    json_response,
)

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]


def ok(data: Any = msgspec.UNSET) -> Response:
    if data is msgspec.UNSET:
        return json_response({"code": 200})
    return json_response({"code": 200, "data": data})


def decode(data: bytes, kind: type[T]) -> T:
    """QingLong answers bad input with 400; the message names the field."""
    try:
        return decode_body(data, kind)
    except Invalid as exc:
        raise BadRequest(exc.message, field=exc.field) from exc


# -- helpers ---------------------------------------------------------------------------

def iso(ms: int) -> str:
    return from_ms(ms, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{ms % 1000:03d}Z"


def timestamp(ms: int) -> str:
    """QingLong's `timestamp` is JavaScript's Date.toString() of the last save."""
    return from_ms(ms, local_zone()).strftime(
        "%a %b %d %Y %H:%M:%S GMT%z (%Z)")


def id_list(raw: list[Any], field: str = "ids") -> list[int]:
    """QingLong (Joi.number()) also accepts numeric strings."""
    return inputs.id_list(raw, field, BadRequest)


def path_id(request: Request) -> int:
    return inputs.path_int(request, "num", "id", BadRequest)


async def ids_body(request: Request) -> list[int]:
    raw = decode(await request.body(), list[Any])
    return id_list(raw)


def unsupported(body: msgspec.Struct, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(body, name)
        if value not in (None, "", [], msgspec.UNSET):
            raise BadRequest(f"{name} is not supported by qledge", field=name)


def both(path: str, endpoint: Handler, methods: list[str]) -> list[Route]:
    """QingLong clients call collections with and without a trailing slash."""
    return [Route(path, endpoint, methods=methods),
            Route(f"{path}/", endpoint, methods=methods)]


