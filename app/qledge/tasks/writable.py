"""A task's writable fields, as one typed value from the API to db/tasks.py.

`TaskFields` is what a create or a partial update writes: a field left UNSET keeps
the column's default (create) or its current value (update). tasks/spec.py
`validated` produces it for the native API, QingLong's /open/crons and the importer;
the appliance's own tasks (a subscription's pull, a dependency queue) build it
directly. db/tasks.py maps each field to its column by a fixed list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..model import Concurrency, Overlap, Task

UNSET = msgspec.UNSET
Unset = msgspec.UnsetType


class TaskFields(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | Unset = UNSET
    command: str | Unset = UNSET
    schedule: str | Unset | None = UNSET
    timeout_s: int | Unset | None = UNSET
    env: dict[str, str] | Unset = UNSET
    enabled: bool | Unset = UNSET
    # The old spelling of `overlap`; the two columns stay in step (db/tasks.py).
    concurrency: Concurrency | Unset = UNSET
    overlap: Overlap | Unset = UNSET
    labels: list[str] | Unset = UNSET
    keep_runs: int | Unset | None = UNSET
    keep_days: int | Unset | None = UNSET
    keep_background: bool | Unset = UNSET
    retries: int | Unset = UNSET
    retry_delay_s: int | Unset = UNSET
    retry_on: list[str] | Unset = UNSET
    on_success: list[str] | Unset = UNSET
    on_failure: list[str] | Unset = UNSET
    on_finish: list[str] | Unset = UNSET
    extra_schedules: list[str] | Unset = UNSET
    tz: str | Unset | None = UNSET
    placement_node: str | Unset | None = UNSET
    placement_labels: list[str] | Unset = UNSET
    # The panel's debug runs (operations/script_runs.py); the APIs never set it.
    hidden: bool | Unset = UNSET


NAMES: tuple[str, ...] = TaskFields.__struct_fields__


def task_fields(values: Mapping[str, Any]) -> TaskFields:
    """Checked conversion of named values (a key that is no task field, or a value of
    the wrong type, raises msgspec.ValidationError)."""
    return msgspec.convert(dict(values), TaskFields)


def given(fields: TaskFields) -> dict[str, Any]:
    """The fields set, by name (the others are UNSET)."""
    return {name: value for name in NAMES
            if (value := getattr(fields, name)) is not UNSET}


def changed_from(task: Task, fields: TaskFields) -> TaskFields:
    """Only those of `fields` whose value differs from the task's."""
    return TaskFields(**{name: value for name, value in given(fields).items()
                         if getattr(task, name) != value})


def is_empty(fields: TaskFields) -> bool:
    return not given(fields)
