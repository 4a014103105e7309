"""`qledge import qinglong` (docs/migrating-from-qinglong.md): reading a QingLong data
directory or backup read-only (source.py, with _archive.py, _config.py and _scripts.py),
the plan of what to create, change or skip (plan.py: its types and decision rule; build.py
with _items.py: its items, pure), and its report (report.py). db/imports.py applies a
plan; runtime/imports.py runs an import from start to end.

build.py applies the field rules of the domain (tasks/spec.py, envs/spec.py,
subscriptions/spec.py, apps/spec.py), never the HTTP edge's.
"""

from .plan import ImportFailed, Plan
from .source import Source, SourceError, read, unpack

__all__ = ["ImportFailed", "Plan", "Source", "SourceError", "read", "unpack"]
