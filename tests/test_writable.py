"""tasks/writable.py: a task's writable fields as one typed value (and tasks/spec.py's
`validated`, which produces it)."""

from __future__ import annotations

import msgspec
import pytest

from qledge.fields import FieldError
from qledge.model import Concurrency, Overlap, Task
from qledge.tasks.spec import validated
from qledge.tasks.writable import UNSET, TaskFields, changed_from, given, is_empty, task_fields


def _task(**more: object) -> Task:
    return msgspec.convert({"id": "t1", "num": 1, "name": "backup", "command": "true",
                            "schedule": None, "timeout_s": None, "env": {}, "enabled": True,
                            "concurrency": "forbid", "labels": [], "created_at_ms": 1,
                            "updated_at_ms": 1, "version": 1, **more}, Task)


def test_a_patch_holds_only_the_fields_it_was_given() -> None:
    patch = validated({"name": "  nightly  ", "enabled": False})
    assert isinstance(patch, TaskFields)
    assert given(patch) == {"name": "nightly", "enabled": False}
    assert patch.command is UNSET and patch.schedule is UNSET


def test_validated_maps_the_api_spellings_to_the_fields() -> None:
    fields = validated({"name": "n", "command": "true", "overlap": "queue",
                        "placement": {"node": "pi", "labels": ["gpio", "gpio"]},
                        "keep_runs": None})
    assert given(fields) == {"name": "n", "command": "true", "overlap": Overlap.QUEUE,
                             "placement_node": "pi", "placement_labels": ["gpio"],
                             "keep_runs": None}
    assert validated({"concurrency": "allow"}).concurrency is Concurrency.ALLOW


def test_validated_still_refuses_by_field() -> None:
    with pytest.raises(FieldError) as exc:
        validated({"name": "n", "command": "true", "retries": 10_000})
    assert exc.value.field == "retries"


def test_a_name_that_is_no_task_field_is_refused() -> None:
    for bad in ("nmae", "version", "id", "placement", "name = 'x', num"):
        with pytest.raises(msgspec.ValidationError, match="unknown field"):
            task_fields({"name": "n", bad: "x"})
    with pytest.raises(msgspec.ValidationError):
        task_fields({"timeout_s": "10"})  # no lax conversion of values either


def test_changed_from_keeps_only_what_differs() -> None:
    task = _task(labels=["subscription"])
    wanted = TaskFields(name="backup", command="false", labels=["subscription"],
                        concurrency=Concurrency.FORBID, enabled=False)
    assert given(changed_from(task, wanted)) == {"command": "false", "enabled": False}
    assert is_empty(changed_from(task, TaskFields(name="backup", enabled=True)))
    assert not is_empty(wanted)
