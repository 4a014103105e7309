"""A run's events as one compact, append-only byte string stored in its row (`runs.event_log`,
migration 0020; docs/storage.md, "Events with their run").

Each event is one self-delimiting MessagePack array `[type, dt, attempt, data]`, and the
log is those arrays concatenated — appending is `event_log || new bytes` in the statement
that already rewrites the run row, so an event costs no B-tree page of its own:

* `type`: the index in TYPES, or the type's text when it is not listed;
* `dt`: `at_ms` minus the run's `created_at_ms` (any integer);
* `attempt`: nil for none, the attempt's number in its run (`attempt_no`, 1 byte —
  the reader maps it back through `run_attempts`), else the 16 bytes of a canonical
  UUID, else the id's text;
* `data`: a map whose keys are indexes in KEYS (or text) and whose values are nil,
  integers, a listed text as the extension `Ext(1, index in VALUES)`, or text.

The tables are part of the stored format: entries are only ever appended, never
reordered or removed (a reader of older rows must read them the same way).
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from ..model import Event, NewEvent

TYPES = (
    "run.created", "attempt.created", "attempt.started", "run.started", "attempt.finished",
    "run.finished", "run.cancel_requested", "attempt.signal_sent", "run.retry_scheduled",
    "run.scheduled", "schedule.skipped", "run.replaces", "run.replaced_by", "run.held",
    "chain.triggered", "chain.triggered_by", "chain.skipped",
)
KEYS = (
    "trigger", "pid", "status", "exit_code", "reason_code", "reason", "leftover_processes",
    "message", "not_before_ms", "children", "children_succeeded", "signal", "epoch", "run_id",
    "task_id", "scheduled_for_ms", "late_ms", "catch_up", "at_boot", "attempt_no", "delay_ms",
    "parent_run_id", "conc_index",
)
VALUES = (
    "queued", "running", "succeeded", "failed", "cancelled", "timed_out", "lost", "blocked",
    "preparing", "user", "timeout", "policy", "shutdown", "manual", "schedule", "api", "chain",
    "EXITED", "CANCEL_REQUESTED", "TIMEOUT", "CANCELLED_BEFORE_START", "SPAWN_FAILED",
    "SPAWN_HANDLE_PERSIST_FAILED", "PROCESS_EXITED_WITHOUT_RECEIPT",
    "RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT", "RECOVERY_SPAWN_UNCONFIRMED",
    "RECOVERY_IDENTITY_MISMATCH", "RECOVERY_IDENTITY_MISSING", "RECOVERY_BOOT_CHANGED",
    "RECOVERY_IDENTITY_UNSUPPORTED", "RECOVERY_FOREIGN_OWNER", "TASK_ISOLATION_UNAVAILABLE",
    "CONC_CHILDREN", "SIGTERM", "SIGKILL", "missing", "disabled", "active_run", "queued_run",
)
_TYPE = {t: i for i, t in enumerate(TYPES)}
_KEY = {k: i for i, k in enumerate(KEYS)}
_VALUE = {v: i for i, v in enumerate(VALUES)}
_EXT_VALUE = 1

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(list[Any], ext_hook=lambda code, data: _ext(code, data))


class CorruptEventLog(Exception):
    pass


def _ext(code: int, data: memoryview) -> str:
    if code != _EXT_VALUE or len(data) != 1 or data[0] >= len(VALUES):
        raise CorruptEventLog(f"unknown value extension {code}")
    return VALUES[data[0]]


def _uuid_bytes(text: str) -> bytes | None:
    """The 16 bytes of a canonical (lower-case, hyphenated) UUID, else None."""
    if len(text) != 36:
        return None
    try:
        value = uuid.UUID(text)
    except ValueError:
        return None
    return value.bytes if str(value) == text else None


def _value(v: str | int | None) -> object:
    if isinstance(v, str) and v in _VALUE:
        return msgspec.msgpack.Ext(_EXT_VALUE, bytes([_VALUE[v]]))
    return v


def encode(events: list[NewEvent], created_at_ms: int, at_ms: int,
           attempt_nos: dict[str, int]) -> bytes:
    """The records of `events`, all at `at_ms`; `attempt_nos` numbers the attempts of
    this run the caller knows (others are written out)."""
    out = bytearray()
    for ev in events:
        attempt: object = None
        if ev.attempt_id is not None:
            attempt = (attempt_nos.get(ev.attempt_id) or _uuid_bytes(ev.attempt_id)
                       or ev.attempt_id)
        data = {_KEY.get(k, k): _value(v) for k, v in ev.data.items()}
        out += _enc.encode([_TYPE.get(ev.type, ev.type), at_ms - created_at_ms, attempt, data])
    return bytes(out)


def _count_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def decode(run_id: str, log: bytes, count: int, first_seq: int, created_at_ms: int,
           attempt_ids: dict[int, str]) -> list[Event]:
    """`count` events numbered from `first_seq`; `attempt_ids`: the run's attempts by
    number."""
    if count <= 0:
        return []
    try:
        records = _dec.decode(_count_header(count) + log)
        out: list[Event] = []
        for i, (kind, dt, attempt, data) in enumerate(records):
            if isinstance(attempt, int) and not isinstance(attempt, bool):
                attempt = attempt_ids[attempt]
            elif isinstance(attempt, bytes):
                attempt = str(uuid.UUID(bytes=attempt))
            out.append(Event(
                run_id=run_id, seq=first_seq + i,
                type=TYPES[kind] if isinstance(kind, int) else kind,
                at_ms=created_at_ms + dt, attempt_id=attempt,
                data={KEYS[k] if isinstance(k, int) else k: v for k, v in data.items()}))
    except (msgspec.DecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise CorruptEventLog(f"run {run_id}: {type(exc).__name__}") from exc
    return out
