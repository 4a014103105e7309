"""What an environment variable's fields may hold (docs/api.md, "Limits"; pure).

The same rules for the native API, QingLong's /open/envs and the QingLong importer;
a refusal is a `FieldError` naming its field and never echoing a value.
"""

from __future__ import annotations

import re
from typing import Any

from .. import fields
from ..fields import FieldError
from ..limits import MAX_ENV_NAME, MAX_ENV_VALUE_BYTES, MAX_REMARKS

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_name(name: str) -> bool:
    """A shell identifier of at most MAX_ENV_NAME characters (a task's env names too)."""
    return bool(NAME.match(name)) and len(name) <= MAX_ENV_NAME


def validate_env(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Checks beyond types; `prefix` names an item of a list (`[2].`) in the field."""
    out = dict(values)
    if "name" in out:
        out["name"] = env_name(out["name"], f"{prefix}name")
    if "value" in out:
        fields.utf8_bytes(out["value"], f"{prefix}value", MAX_ENV_VALUE_BYTES)
    if out.get("remarks") is not None:
        fields.text(out["remarks"], f"{prefix}remarks", MAX_REMARKS, lines=True)
    return out


def env_name(raw: str, field: str = "name") -> str:
    name = raw.strip()
    if not is_name(name):
        raise FieldError("NOT_IDENTIFIER", field, f"{field} must be a shell identifier"
                         f" ([A-Za-z_][A-Za-z0-9_]*, at most {MAX_ENV_NAME} characters)",
                         max=MAX_ENV_NAME)
    return name
