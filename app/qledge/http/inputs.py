"""Every integer and every bounded string a client sends, parsed and checked here.

One place for /api/v1 and /open alike (the numbers are limits.py's, the string
checks fields.py's, shared with the domain's field rules) (docs/api.md, "Limits"): an integer is
ASCII digits with an optional leading `-` (no `+`, spaces, `_`, exponents or
non-ASCII digits such as `²` or `٣`), at most 20 characters, then within the
route's bounds; a value out of bounds is refused, never clamped. Every error
names its field. Native routes answer 422 (`Invalid`); /open passes
`BadRequest` for QingLong's 400.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request

from .. import fields
from ..limits import INT64_MAX, MAX_IDS, MAX_QUERY_TEXT
from .errors import ApiError, Invalid, field_refusal

_INT = re.compile(r"-?[0-9]{1,20}")


def parse_int(raw: str, field: str, lo: int, hi: int,
              error: type[ApiError] = Invalid) -> int:
    if not _INT.fullmatch(raw):
        raise error(f"{field} must be an integer", field=field, code="NOT_INTEGER")
    return bounded(int(raw), field, lo, hi, error)


def bounded(value: int, field: str, lo: int, hi: int,
            error: type[ApiError] = Invalid) -> int:
    try:
        return fields.bounded(value, field, lo, hi)
    except fields.FieldError as exc:
        raise field_refusal(exc, error) from None


def query_int(request: Request, name: str, default: int, lo: int, hi: int,
              error: type[ApiError] = Invalid) -> int:
    """An optional integer query parameter; absent or empty means `default`."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    return parse_int(raw, name, lo, hi, error)


def path_int(request: Request, name: str, field: str, error: type[ApiError] = Invalid) -> int:
    """A numeric path segment (routes match it with the `digits` convertor)."""
    raw: str = request.path_params[name]
    return parse_int(raw, field, 0, INT64_MAX, error)


def id_list(raw: list[Any], field: str, error: type[ApiError] = Invalid) -> list[int]:
    """QingLong's integer ids; like its Joi.number(), numeric strings ("12") pass too.
    Duplicates collapse, order is kept."""
    if len(raw) > MAX_IDS:
        raise error(f"{field} holds {len(raw)} ids; at most {MAX_IDS} per request",
                    field=field, code="TOO_MANY_IDS", params={"max": MAX_IDS})
    out: list[int] = []
    for item in raw:
        if isinstance(item, str):
            out.append(parse_int(item.strip(), field, 0, INT64_MAX, error))
        elif isinstance(item, int) and not isinstance(item, bool):
            out.append(bounded(item, field, 0, INT64_MAX, error))
        else:
            raise error(f"{field} must be an array of integer ids", field=field, code="NOT_ID_LIST")
    return list(dict.fromkeys(out))


def text(value: str, field: str, max_chars: int, *, lines: bool = False,
         error: type[ApiError] = Invalid) -> str:
    """fields.text, refused with `error` (the route's status: 422, or 400 on /open)."""
    try:
        return fields.text(value, field, max_chars, lines=lines)
    except fields.FieldError as exc:
        raise field_refusal(exc, error) from None


without_controls = fields.without_controls


def utf8_bytes(value: str, field: str, max_bytes: int, error: type[ApiError] = Invalid,
               what: str | None = None) -> str:
    """fields.utf8_bytes, refused with `error`."""
    try:
        return fields.utf8_bytes(value, field, max_bytes, what)
    except fields.FieldError as exc:
        raise field_refusal(exc, error) from None


def query_text(request: Request, name: str, error: type[ApiError] = Invalid) -> str:
    """A free-text query parameter (search values and the like); "" when absent."""
    return text(request.query_params.get(name, ""), name, MAX_QUERY_TEXT, error=error)


class _Digits(Convertor[str]):
    """Like Starlette's `int` convertor, but hands the text to `path_int`: its int()
    would raise on 5000 digits and lets 20-digit ids through to SQLite."""

    regex = "[0-9]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("digits", _Digits())
