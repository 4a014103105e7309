"""Every integer and every bounded string a client sends, parsed and checked here.

One place for /api/v1 and /open alike (docs/api.md, "Limits"): an integer is
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

from .errors import ApiError, Invalid

INT64_MAX = 2**63 - 1  # SQLite INTEGER, off_t
_INT = re.compile(r"-?[0-9]{1,20}")
# C0 controls, DEL and C1 controls (Unicode category Cc).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

# Documented limits (docs/api.md). Strings count characters unless "bytes".
MAX_NAME = 200  # task / cron name
MAX_LABELS = 50  # labels per task
MAX_LABEL = 100
MAX_COMMAND_BYTES = 65536  # UTF-8; one argv string (the kernel allows 128 KiB)
MAX_SCHEDULE = 256
MAX_TASK_ENV = 256  # entries in a task's own env
MAX_ENV_NAME = 256
MAX_ENV_VALUE_BYTES = 65536  # UTF-8
MAX_REMARKS = 4096
MAX_APP_NAME = 100
MAX_IDS = 1000  # ids in one /open request, envs created by one request
MAX_QUERY_TEXT = 256  # search values, client ids, other free-text query parameters


def parse_int(raw: str, field: str, lo: int, hi: int,
              error: type[ApiError] = Invalid) -> int:
    if not _INT.fullmatch(raw):
        raise error(f"{field} must be an integer", field=field)
    return bounded(int(raw), field, lo, hi, error)


def bounded(value: int, field: str, lo: int, hi: int,
            error: type[ApiError] = Invalid) -> int:
    if not lo <= value <= hi:
        raise error(f"{field} must be between {lo} and {hi}", field=field)
    return value


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
                    field=field)
    out: list[int] = []
    for item in raw:
        if isinstance(item, str):
            out.append(parse_int(item.strip(), field, 0, INT64_MAX, error))
        elif isinstance(item, int) and not isinstance(item, bool):
            out.append(bounded(item, field, 0, INT64_MAX, error))
        else:
            raise error(f"{field} must be an array of integer ids", field=field)
    return list(dict.fromkeys(out))


def text(value: str, field: str, max_chars: int, *, lines: bool = False,
         error: type[ApiError] = Invalid) -> str:
    """At most `max_chars` characters and no control characters (with lines=True,
    tab, LF and CR are allowed: free text such as remarks)."""
    if len(value) > max_chars:
        raise error(f"{field} is longer than {max_chars} characters", field=field)
    if (_CONTROL_BUT_LINES if lines else _CONTROL).search(value):
        raise error(f"{field} contains a control character"
                    f"{' other than tab or newline' if lines else ''}", field=field)
    return value


def without_controls(value: str) -> str:
    """`value` with each control character replaced by a space (derived names)."""
    return _CONTROL.sub(" ", value)


def utf8_bytes(value: str, field: str, max_bytes: int, error: type[ApiError] = Invalid,
               what: str | None = None) -> str:
    """At most `max_bytes` bytes of UTF-8 and no NUL (commands, env values: any other
    character is legitimate there). `what` names it in the message (default: field)."""
    what = what or field
    if "\x00" in value:
        raise error(f"{what} contains NUL", field=field)
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise error(f"{what} is longer than {max_bytes} bytes (UTF-8)", field=field)
    return value


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
