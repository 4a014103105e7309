"""The refusal of one field a client sent, and the checks every feature's rules share.

A rule of the domain (tasks/spec.py, envs/spec.py, apps/spec.py,
subscriptions/spec.py) raises `FieldError`: a stable `code`, the `field` it names,
the `params` a translation needs (the limit, the kind of value) and the English
`message` the APIs answer with. Only http/errors.py turns it into a response (422,
or 400 in QingLong's /open shape), so the QingLong importer can apply the same rules
without reaching into the HTTP edge.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (Unicode category Cc).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class FieldError(Exception):
    """A value that breaks a rule: `code` is stable (e.g. TOO_LONG), `message` English."""

    def __init__(self, code: str, field: str, message: str,
                 **params: str | int | None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.message = message
        self.params = params


def bounded(value: int, field: str, lo: int, hi: int) -> int:
    if not lo <= value <= hi:
        raise FieldError("OUT_OF_RANGE", field, f"{field} must be between {lo} and {hi}",
                         min=lo, max=hi)
    return value


def text(value: str, field: str, max_chars: int, *, lines: bool = False) -> str:
    """At most `max_chars` characters and no control characters (with lines=True,
    tab, LF and CR are allowed: free text such as remarks)."""
    if len(value) > max_chars:
        raise FieldError("TOO_LONG", field, f"{field} is longer than {max_chars} characters",
                         max=max_chars, unit="characters")
    if (_CONTROL_BUT_LINES if lines else _CONTROL).search(value):
        raise FieldError("CONTROL_CHARACTER", field, f"{field} contains a control character"
                         f"{' other than tab or newline' if lines else ''}")
    return value


def without_controls(value: str) -> str:
    """`value` with each control character replaced by a space (derived names)."""
    return _CONTROL.sub(" ", value)


def utf8_bytes(value: str, field: str, max_bytes: int, what: str | None = None) -> str:
    """At most `max_bytes` bytes of UTF-8 and no NUL (commands, env values: any other
    character is legitimate there). `what` names it in the message (default: field)."""
    what = what or field
    if "\x00" in value:
        raise FieldError("NUL_CHARACTER", field, f"{what} contains NUL")
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise FieldError("TOO_LONG", field, f"{what} is longer than {max_bytes} bytes"
                         " (UTF-8)", max=max_bytes, unit="bytes")
    return value
