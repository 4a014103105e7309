"""Which runs notify: per-task state transitions (docs/notifications.md). Pure: no I/O.

"Quiet by default": a task that fails every five minutes all night sent a message
every five minutes (a test receiver got 144 in three minutes from a handful of
tasks). By default (`mode: "transitions"`) a task notifies when it *starts
failing* and once when it *recovers*; `mode: "every_run"` keeps the per-run
behaviour. `streak` N (> 0) is the threshold in both modes: the failing spell
starts at the Nth failure in a row.

The caller counts the task's previous terminal runs that failed in a row (newest
first, cancelled ones skipped), up to `threshold(rules)`, in the transaction that
makes the run terminal (runtime/notifier.py), so two completions never both see
"the first failure".
"""

from __future__ import annotations

import enum

MODES = ("transitions", "every_run")


class Change(enum.Enum):
    FAILING = "failing"  # the run that starts a failing spell (or, every_run: a failure)
    RECOVERED = "recovered"  # the first success after an announced failing spell


def threshold(streak: int) -> int:
    """How many failures in a row make a failing spell (`streak` 0: one)."""
    return max(streak, 1)


def change(mode: str, *, failure: bool, failures_before: int, streak: int) -> Change | None:
    """The state change a run that just became terminal makes, or None.

    `failures_before`: the task's previous terminal runs that failed in a row,
    counted up to `threshold(streak)` (more are never needed)."""
    n = threshold(streak)
    if mode == "every_run":
        if not failure:
            return None
        # streak 0: every failure; N: only the Nth in a row (as before 0028).
        return Change.FAILING if streak == 0 or failures_before + 1 == n else None
    if failure:
        return Change.FAILING if failures_before + 1 == n else None
    return Change.RECOVERED if failures_before >= n else None
