"""Cron expressions: standard 5 fields or QingLong's 6 with a leading seconds field.

Times are computed in the container's local time zone (TZ), like QingLong.
"""

from __future__ import annotations

from datetime import datetime

from cronsim import CronSim, CronSimError


class CronError(ValueError):
    pass


def validate(expr: str) -> str:
    """Normalise whitespace and prove the expression parses; raises CronError naming why."""
    parts = expr.split()
    if len(parts) not in (5, 6):
        raise CronError(f"expected 5 fields (or 6 with leading seconds), got {len(parts)}")
    text = " ".join(parts)
    try:
        it = CronSim(text, datetime.now().astimezone())
        next(it)
    except CronSimError as exc:
        raise CronError(str(exc)) from exc
    except StopIteration as exc:  # e.g. "0 0 30 2 *": February 30th never comes
        raise CronError("the schedule never fires") from exc
    return text


def next_after(expr: str, after: datetime) -> datetime | None:
    """First fire time strictly after `after` (aware datetime), or None if never."""
    try:
        return next(CronSim(expr, after.astimezone()))
    except (CronSimError, StopIteration):
        return None


def next_n(expr: str, after: datetime, n: int) -> list[datetime]:
    out: list[datetime] = []
    try:
        it = CronSim(expr, after.astimezone())
        for _ in range(n):
            out.append(next(it))
    except (CronSimError, StopIteration):
        pass
    return out
