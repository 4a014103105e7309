"""Strict codec for completion receipts (schema v1, docs/contract.md §4-§5).

The launcher writes one canonical line of JSON. Anything that is not exactly
that shape is rejected with a stable reason code — never repaired — because a
receipt decides a run's result and a lenient reader could invent one.

`decode` never raises for any input bytes: a rejection is a value the
consumer records (journal `quarantined` + reason) before moving the file.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import re
import secrets
from typing import Any, NoReturn

import msgspec

from qledge.ids import is_uuid7

SCHEMA_VERSION = 1
MAX_RECEIPT_BYTES = 4096
# A v1 receipt is a flat object; the cap exists only so that neither json nor
# msgspec hits the interpreter's recursion limit, whose depth (and therefore
# the resulting error) would depend on the caller's stack — not deterministic.
MAX_JSON_DEPTH = 32
# Times and sequences land in SQLite INTEGER columns (signed 64-bit).
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,128}")


class ReceiptReason(enum.StrEnum):
    """Stable reason codes; they are persisted, so never rename one."""

    RECEIPT_TOO_LARGE = "RECEIPT_TOO_LARGE"
    RECEIPT_EMPTY = "RECEIPT_EMPTY"
    RECEIPT_NOT_UTF8 = "RECEIPT_NOT_UTF8"
    RECEIPT_TOO_DEEP = "RECEIPT_TOO_DEEP"
    RECEIPT_MALFORMED_JSON = "RECEIPT_MALFORMED_JSON"
    RECEIPT_NOT_OBJECT = "RECEIPT_NOT_OBJECT"
    RECEIPT_DUPLICATE_KEY = "RECEIPT_DUPLICATE_KEY"
    RECEIPT_NON_FINITE_NUMBER = "RECEIPT_NON_FINITE_NUMBER"
    RECEIPT_UNKNOWN_FIELD = "RECEIPT_UNKNOWN_FIELD"
    RECEIPT_MISSING_FIELD = "RECEIPT_MISSING_FIELD"
    RECEIPT_WRONG_TYPE = "RECEIPT_WRONG_TYPE"
    RECEIPT_BAD_SCHEMA_VERSION = "RECEIPT_BAD_SCHEMA_VERSION"
    RECEIPT_BAD_ID = "RECEIPT_BAD_ID"
    RECEIPT_BAD_SEQUENCE = "RECEIPT_BAD_SEQUENCE"
    RECEIPT_BAD_TOKEN = "RECEIPT_BAD_TOKEN"  # noqa: S105 - a reason code, not a secret
    RECEIPT_BAD_TIME = "RECEIPT_BAD_TIME"
    RECEIPT_TIME_ORDER = "RECEIPT_TIME_ORDER"
    RECEIPT_BAD_EXIT_CODE = "RECEIPT_BAD_EXIT_CODE"
    RECEIPT_BAD_LOG_BYTES = "RECEIPT_BAD_LOG_BYTES"
    RECEIPT_BAD_LEFTOVER_COUNT = "RECEIPT_BAD_LEFTOVER_COUNT"
    # Store level: the thing at the receipt path is not a file we may read.
    RECEIPT_NOT_REGULAR = "RECEIPT_NOT_REGULAR"


class Receipt(
    msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, rename="camel"
):
    """Schema v1. Field order is the canonical order the launcher writes.

    Optional fields follow the eight required ones, present only when they say
    something: absent is never the same as `null` (refused), and a
    `leftoverProcesses` of 0 is refused too (the launcher leaves it out).
    """

    schema_version: int
    run_id: str
    attempt_id: str
    callback_sequence: int
    token: str
    started_at_ms: int
    finished_at_ms: int
    exit_code: int
    # Optional: the log's length once the task was done (absent when stdout was
    # not a regular file). Absent, never null: UNSET rejects a JSON null.
    log_bytes: int | msgspec.UnsetType = msgspec.UNSET
    # Processes the launcher ended after the command (docs/tasks.md); >= 1.
    leftover_processes: int | msgspec.UnsetType = msgspec.UNSET


class Rejected(msgspec.Struct, frozen=True):
    """A deterministic refusal: retrying the same bytes gives the same reason."""

    reason: ReceiptReason


_DECODER = msgspec.json.Decoder(Receipt, strict=True)
_ENCODER = msgspec.json.Encoder()


class _PrepassRejected(Exception):
    def __init__(self, reason: ReceiptReason) -> None:
        super().__init__(reason)
        self.reason = reason


class DuplicateKey(_PrepassRejected):
    """A JSON object names `key` twice (also used by the HTTP API's body decoder)."""

    def __init__(self, key: str) -> None:
        super().__init__(ReceiptReason.RECEIPT_DUPLICATE_KEY)
        self.key = key


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads(object_pairs_hook=...)` that raises DuplicateKey.

    msgspec silently keeps the last of duplicated keys (msgspec#648), so a
    receipt could carry two exit codes and mean whichever a reader picks."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(key)
        result[key] = value
    return result


def _reject_constant(name: str) -> NoReturn:
    # Python's json accepts NaN/Infinity/-Infinity by default; JSON does not.
    raise _PrepassRejected(ReceiptReason.RECEIPT_NON_FINITE_NUMBER)


def _too_deep(text: str) -> bool:
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False  # cheap exit for every sane receipt
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _prepass(text: str) -> ReceiptReason | None:
    try:
        document = json.loads(
            text, object_pairs_hook=unique_pairs, parse_constant=_reject_constant
        )
    except _PrepassRejected as exc:
        return exc.reason
    except RecursionError:  # unreachable below MAX_JSON_DEPTH; kept as a guard
        return ReceiptReason.RECEIPT_TOO_DEEP
    except ValueError:  # JSONDecodeError, incl. "Extra data" (trailing bytes)
        return ReceiptReason.RECEIPT_MALFORMED_JSON
    if not isinstance(document, dict):
        return ReceiptReason.RECEIPT_NOT_OBJECT
    return None


def _validation_reason(message: str) -> ReceiptReason:
    # Matched against msgspec 0.23's messages; anything else it can report for
    # this all-int/str schema is a type mismatch ("Expected `int`, got `float`",
    # "Number out of range" for a float literal such as 1e400, ...).
    if message.startswith("Object contains unknown field"):
        return ReceiptReason.RECEIPT_UNKNOWN_FIELD
    if message.startswith("Object missing required field"):
        return ReceiptReason.RECEIPT_MISSING_FIELD
    if message.startswith("Expected `object`"):
        return ReceiptReason.RECEIPT_NOT_OBJECT
    return ReceiptReason.RECEIPT_WRONG_TYPE


def _is_id(text: str) -> bool:
    # is_uuid7 uses `$`, which also matches before a trailing "\n".
    return len(text) == 36 and is_uuid7(text)


def check(receipt: Receipt) -> ReceiptReason | None:
    """Semantic rules beyond the types; None when the receipt is valid."""
    if receipt.schema_version != SCHEMA_VERSION:
        return ReceiptReason.RECEIPT_BAD_SCHEMA_VERSION
    if not (_is_id(receipt.run_id) and _is_id(receipt.attempt_id)):
        return ReceiptReason.RECEIPT_BAD_ID
    if not 1 <= receipt.callback_sequence <= _INT64_MAX:
        return ReceiptReason.RECEIPT_BAD_SEQUENCE
    if not _TOKEN.fullmatch(receipt.token):
        return ReceiptReason.RECEIPT_BAD_TOKEN
    if not (0 <= receipt.started_at_ms <= _INT64_MAX and 0 <= receipt.finished_at_ms <= _INT64_MAX):
        return ReceiptReason.RECEIPT_BAD_TIME
    if receipt.finished_at_ms < receipt.started_at_ms:
        return ReceiptReason.RECEIPT_TIME_ORDER
    if not 0 <= receipt.exit_code <= 255:
        return ReceiptReason.RECEIPT_BAD_EXIT_CODE
    if receipt.log_bytes is not msgspec.UNSET and not 0 <= receipt.log_bytes <= _INT64_MAX:
        return ReceiptReason.RECEIPT_BAD_LOG_BYTES
    leftovers = receipt.leftover_processes
    if leftovers is not msgspec.UNSET and not 1 <= leftovers <= _INT32_MAX:
        return ReceiptReason.RECEIPT_BAD_LEFTOVER_COUNT
    return None


def decode(data: bytes) -> Receipt | Rejected:
    """Decode launcher bytes strictly; every failure is a stable `Rejected`."""
    if len(data) > MAX_RECEIPT_BYTES:
        return Rejected(ReceiptReason.RECEIPT_TOO_LARGE)
    if not data.strip(b" \t\r\n"):
        return Rejected(ReceiptReason.RECEIPT_EMPTY)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Rejected(ReceiptReason.RECEIPT_NOT_UTF8)
    if _too_deep(text):
        return Rejected(ReceiptReason.RECEIPT_TOO_DEEP)
    reason = _prepass(text)
    if reason is not None:
        return Rejected(reason)
    try:
        receipt = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        return Rejected(_validation_reason(str(exc)))
    except msgspec.DecodeError:  # e.g. a lone "\ud800" escape, which json accepts
        return Rejected(ReceiptReason.RECEIPT_MALFORMED_JSON)
    except RecursionError:  # unreachable below MAX_JSON_DEPTH; kept as a guard
        return Rejected(ReceiptReason.RECEIPT_TOO_DEEP)
    reason = check(receipt)
    return receipt if reason is None else Rejected(reason)


def encode(receipt: Receipt) -> bytes:
    """The canonical bytes the launcher writes (no spaces, no newline).

    Refuses a receipt `decode` would reject, so fixtures and tools can never
    produce evidence the consumer would quarantine by surprise.
    """
    reason = check(receipt)
    if reason is not None:
        raise ValueError(f"invalid receipt: {reason}")
    return _ENCODER.encode(receipt)


def token_hash(token: str) -> bytes:
    """SHA-256 of the callback token; only this digest is ever stored."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def token_matches(token: str, expected_hash: bytes) -> bool:
    """Constant-time comparison against the stored digest."""
    return hmac.compare_digest(token_hash(token), expected_hash)


def new_token() -> str:
    """A fresh callback token: 43 url-safe characters, within the receipt charset."""
    return secrets.token_urlsafe(32)
