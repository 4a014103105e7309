"""What a task's fields may hold (docs/api.md, "Limits"; docs/tasks.md; pure).

The same rules for the native API (422), QingLong's /open/crons (400) and the
QingLong importer (a cron that breaks one is skipped, naming why); each refusal is a
`FieldError` naming its field.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .. import cron, fields, node, taskform
from ..envs.spec import is_name as is_env_name
from ..fields import FieldError
from ..limits import (
    MAX_COMMAND_BYTES,
    MAX_ENV_NAME,
    MAX_ENV_VALUE_BYTES,
    MAX_EXTRA_SCHEDULES,
    MAX_KEEP_DAYS,
    MAX_KEEP_RUNS,
    MAX_LABEL,
    MAX_LABELS,
    MAX_NAME,
    MAX_RETRIES,
    MAX_RETRY_DELAY_S,
    MAX_SCHEDULE,
    MAX_TASK_ENV,
    MAX_TIMEOUT_S,
    MAX_TZ,
)
from ..model import RETRYABLE, Reason
from .writable import TaskFields, task_fields


class PlacementIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Where a task's runs may execute (docs/fleet.md): a node by name, labels a node
    must all carry, both, or neither (any node)."""

    node: str | None = None
    labels: list[str] = []


# A `task` form refused for its words alone can never start: refused at save, with the
# code a run would end with (the path's checks need the scripts folder: at spawn).
_REFUSED_AT_SAVE = frozenset({Reason.TASK_BAD_SYNTAX, Reason.TASK_BAD_OPTION,
                              Reason.TASK_BAD_SELECTION})


def _task_form(command: str) -> None:
    if not taskform.is_task_form(command):
        return
    try:
        taskform.parse(command)
    except taskform.TaskFormError as exc:
        if exc.reason in _REFUSED_AT_SAVE:
            raise FieldError(exc.reason.value, "command",
                             f"{exc.reason.value}: {exc.message}") from None


def validated(values: dict[str, Any]) -> TaskFields:
    """Field checks beyond types, on the fields given (a patch checks only those); the
    result is what db/tasks.py writes (tasks/writable.py)."""
    out = dict(values)
    if "name" in out:
        name = fields.text(out["name"].strip(), "name", MAX_NAME)
        if not name:
            raise FieldError("EMPTY", "name", f"name must be 1-{MAX_NAME} characters",
                             max=MAX_NAME)
        out["name"] = name
    if "command" in out:
        if not out["command"].strip():
            raise FieldError("EMPTY", "command", "command must not be empty")
        fields.utf8_bytes(out["command"], "command", MAX_COMMAND_BYTES)
        _task_form(out["command"])
    if out.get("schedule") is not None:
        out["schedule"] = _schedule(out["schedule"])
    if "extra_schedules" in out:
        out["extra_schedules"] = _extra_schedules(out["extra_schedules"])
    if out.get("tz") is not None:
        tz = fields.text(out["tz"], "tz", MAX_TZ)
        try:
            cron.zone(tz)
        except cron.CronError as exc:
            raise FieldError("BAD_ZONE", "tz", str(exc)) from exc
    if out.get("timeout_s") is not None:
        fields.bounded(out["timeout_s"], "timeout_s", 1, MAX_TIMEOUT_S)
    _env(out.get("env") or {})
    _labels(out.get("labels") or [])
    if out.get("keep_runs") is not None:
        fields.bounded(out["keep_runs"], "keep_runs", 0, MAX_KEEP_RUNS)
    if out.get("keep_days") is not None:
        fields.bounded(out["keep_days"], "keep_days", 0, MAX_KEEP_DAYS)
    _policies(out)
    if "placement" in out:
        out.update(placement(out.pop("placement")))
    return task_fields(out)


def _schedule(raw: str) -> str:
    schedule = fields.text(raw, "schedule", MAX_SCHEDULE, lines=True)
    try:
        return cron.validate(schedule)
    except cron.CronError as exc:
        raise FieldError("BAD_SCHEDULE", "schedule",
                         f"invalid cron schedule: {exc}") from exc


def _env(env: dict[str, str]) -> None:
    if len(env) > MAX_TASK_ENV:
        raise FieldError("TOO_MANY", "env", f"env holds {len(env)} variables; at most"
                         f" {MAX_TASK_ENV}", max=MAX_TASK_ENV)
    for key, value in env.items():
        if not is_env_name(key):
            raise FieldError("NOT_IDENTIFIER", "env", f"env name {key[:64]!r} is not a shell"
                             f" identifier (at most {MAX_ENV_NAME} characters)",
                             max=MAX_ENV_NAME)
        fields.utf8_bytes(value, "env", MAX_ENV_VALUE_BYTES, what=f"env value of {key}")


def _labels(labels: list[str]) -> None:
    if len(labels) > MAX_LABELS:
        raise FieldError("TOO_MANY", "labels", f"{len(labels)} labels; at most {MAX_LABELS}",
                         max=MAX_LABELS)
    for label in labels:
        fields.text(label, "labels", MAX_LABEL)
        if not label.strip():
            raise FieldError("EMPTY", "labels", f"labels must be 1-{MAX_LABEL} characters",
                             max=MAX_LABEL)


def placement(value: PlacementIn | dict[str, Any] | None) -> dict[str, Any]:
    """A placement as the task's columns (`placement_node`, `placement_labels`), checked
    by the node rules (node.check_name / check_labels); None or {} is "any node"."""
    if value is None:
        return {"placement_node": None, "placement_labels": []}
    if isinstance(value, dict):
        try:
            value = msgspec.convert(value, PlacementIn)
        except msgspec.ValidationError as exc:
            raise FieldError("BAD_PLACEMENT", "placement", f"placement: {exc}") from exc
    try:
        name = node.check_name(value.node) if value.node is not None else None
        labels = node.check_labels(value.labels)
    except node.NodeError as exc:
        raise FieldError("BAD_PLACEMENT", "placement", f"placement: {exc}") from exc
    return {"placement_node": name, "placement_labels": labels}


def _extra_schedules(items: list[str]) -> list[str]:
    if len(items) > MAX_EXTRA_SCHEDULES:
        raise FieldError("TOO_MANY", "extra_schedules", f"{len(items)} extra schedules;"
                         f" at most {MAX_EXTRA_SCHEDULES}", max=MAX_EXTRA_SCHEDULES)
    out = []
    for item in items:
        text = fields.text(item, "extra_schedules", MAX_SCHEDULE, lines=True)
        try:
            out.append(cron.validate(text))
        except cron.CronError as exc:
            raise FieldError("BAD_SCHEDULE", "extra_schedules", f"extra_schedules: invalid"
                             f" cron schedule {text[:64]!r}: {exc}") from exc
    return list(dict.fromkeys(out))


def _policies(out: dict[str, Any]) -> None:
    """Overlap (with its old spelling `concurrency`) and retries (docs/tasks.md)."""
    conc, overlap = out.pop("concurrency", None), out.pop("overlap", None)
    if overlap is not None:
        if conc is not None and (conc == "allow") != (overlap == "allow"):
            raise FieldError("CONTRADICTS", "concurrency", f"concurrency {conc!r} contradicts"
                             f" overlap {overlap!r}; send overlap only (concurrency is its"
                             " old spelling)")
        out["overlap"] = overlap
    elif conc is not None:
        out["concurrency"] = conc
    if "retries" in out:
        fields.bounded(out["retries"], "retries", 0, MAX_RETRIES)
    if "retry_delay_s" in out:
        fields.bounded(out["retry_delay_s"], "retry_delay_s", 0, MAX_RETRY_DELAY_S)
    if "retry_on" in out:
        wrong = [o for o in out["retry_on"] if o not in RETRYABLE]
        if wrong:
            raise FieldError("NOT_RETRYABLE", "retry_on", f"retry_on: {str(wrong[0])[:32]!r}"
                             f" cannot retry; choose from {', '.join(sorted(RETRYABLE))}")
