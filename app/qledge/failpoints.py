"""Named crash points, off unless QLTEST_FAILPOINTS enables them (tests and drills only).

`QLTEST_FAILPOINTS="consumer.after_commit=exit"` makes the process exit
abruptly (os._exit, like a kill -9 for the data on disk) the first time that
point is reached; `=raise` raises `FailpointError` instead. Several points are
separated by commas. Read once at import, so production pays one dict lookup.
"""

from __future__ import annotations

import os

# Spawn step 1 commits without its fsync at both doors (a trigger that finds a free
# slot, and the dispatcher): the power-cut drill's negative control.
STEP1_DEFERRED = "spawn.step1.deferred"


class FailpointError(RuntimeError):
    pass


def _parse(spec: str) -> dict[str, str]:
    points: dict[str, str] = {}
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        if name:
            points[name] = action or "raise"
    return points


_points = _parse(os.environ.get("QLTEST_FAILPOINTS", ""))


def configure(spec: str) -> None:
    """Replace the active failpoints (tests)."""
    global _points
    _points = _parse(spec)


def armed(name: str) -> bool:
    """Whether `name` is enabled, whatever its action: for a point that changes what
    the code does instead of stopping it (`spawn.step1.deferred`: the drills' negative
    control of spawn step 1's durable commit, tests/drills/test_power_loss.py)."""
    return name in _points


def hit(name: str) -> None:
    if not _points:
        return
    action = _points.get(name)
    if action is None:
        return
    if action == "exit":
        os._exit(86)
    if action == "raise-once":
        del _points[name]
    raise FailpointError(name)
