"""Rows to Structs: the one mapping of the run model's tables, and a lookup's errors.

Every noun module of `db/` builds its Task/Run/Attempt through these, so a
column added by a migration is read in one place.
"""

from __future__ import annotations

import msgspec

from ..model import (
    CHAIN_FIELDS,
    Attempt,
    AttemptStatus,
    CancelReason,
    Concurrency,
    Overlap,
    Run,
    RunStatus,
    Task,
    Trigger,
)
from .interface import Row


class Conflict(Exception):
    """Compare-and-set lost: the row changed since it was read."""


class NotFound(Exception):
    pass


# An attempt row carries its log (path, size, eviction) and its receipt-journal entry
# (migration 0021).
ATTEMPT_SELECT = "SELECT a.* FROM run_attempts a"


def task_from_row(row: Row) -> Task:
    return Task(
        id=row["id"], num=row["num"], name=row["name"], command=row["command"],
        schedule=row["schedule"], timeout_s=row["timeout_s"],
        env=msgspec.json.decode(row["env_json"], type=dict[str, str]),
        enabled=bool(row["enabled"]), concurrency=Concurrency(row["concurrency"]),
        labels=msgspec.json.decode(row["labels_json"], type=list[str]),
        created_at_ms=row["created_at_ms"], updated_at_ms=row["updated_at_ms"],
        version=row["version"], keep_runs=row["keep_runs"], keep_days=row["keep_days"],
        keep_background=bool(row["keep_background"]), overlap=Overlap(row["overlap"]),
        retries=row["retries"], retry_delay_s=row["retry_delay_s"],
        retry_on=msgspec.json.decode(row["retry_on_json"], type=list[str]),
        **{f: msgspec.json.decode(row[f"{f}_json"], type=list[str]) for f in CHAIN_FIELDS},
        extra_schedules=msgspec.json.decode(row["extra_schedules_json"], type=list[str]),
        tz=row["tz"], placement_node=row["placement_node"],
        placement_labels=_labels(row["placement_labels_json"]), hidden=bool(row["hidden"]),
    )


def run_from_row(row: Row) -> Run:
    return Run(
        id=row["id"], task_id=row["task_id"], trigger=Trigger(row["trigger"]),
        status=RunStatus(row["status"]), version=row["version"], event_seq=row["event_seq"],
        cancel_reason=CancelReason(row["cancel_reason"]) if row["cancel_reason"] else None,
        cancel_requested_at_ms=row["cancel_requested_at_ms"],
        created_at_ms=row["created_at_ms"], started_at_ms=row["started_at_ms"],
        finished_at_ms=row["finished_at_ms"], exit_code=row["exit_code"],
        reason_code=row["reason_code"], not_before_ms=row["not_before_ms"],
        parent_run_id=row["parent_run_id"], conc_index=row["conc_index"],
        placement_node=row["placement_node"],
        placement_labels=_labels(row["placement_labels_json"]),
    )


def attempt_from_row(row: Row) -> Attempt:
    return Attempt(
        id=row["id"], run_id=row["run_id"], attempt_no=row["attempt_no"],
        executor_type=row["executor_type"], runtime_owner=row["runtime_owner"],
        status=AttemptStatus(row["status"]), callback_token_hash=row["callback_token_hash"],
        callback_sequence=row["callback_sequence"], log_path=row["log_path"], pid=row["pid"],
        proc_start_time=row["proc_start_time"],
        boot_id=row["boot_id"], exit_code=row["exit_code"], reason_code=row["reason_code"],
        created_at_ms=row["created_at_ms"], started_at_ms=row["started_at_ms"],
        finished_at_ms=row["finished_at_ms"], deadline_at_ms=row["deadline_at_ms"],
        log_bytes_at_exit=row["log_bytes_at_exit"], node_epoch=row["node_epoch"],
        late_exit_code=row["late_exit_code"], late_finished_at_ms=row["late_finished_at_ms"],
        spawn_boot_id=row["spawn_boot_id"],
    )


def _labels(text: str | None) -> list[str]:
    """A placement's labels: NULL (the common case, no bytes per row) is none."""
    return [] if text is None else msgspec.json.decode(text, type=list[str])


def like_pattern(text: str) -> str:
    """`%text%` for `LIKE … ESCAPE '\\'`, the user's `%`, `_` and `\\` matched literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
