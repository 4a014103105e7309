"""Interval schedules: `@every <duration>`, a fixed period instead of cron fields.

The form accepted wherever a schedule is (a task's `schedule` and `extra_schedules`,
a subscription's pull schedule; docs/tasks.md, "Schedules"): `@every 6h`,
`@every 90m`, `@every 1h30m`, `@every 2d` — whole numbers with the units d, h, m, s,
each unit at most once, between MIN_S and MAX_S in all. Stored in one canonical
spelling (largest unit first: `@every 90m` is kept as `@every 1h30m`) so that two
spellings of one period compare equal.

Ticks lie on a grid `anchor + k * period` (k >= 1), where the scheduler passes the
task's last save as the anchor: the first run comes one period after the schedule
was set, a restart does not move the grid (the anchor is in the database), and a
missed tick is caught up like a cron tick (once, for the latest one). An interval
is a duration, not a wall-clock time: time zones and DST do not move it. QingLong's
`interval_schedule` ({type: days|hours|minutes|seconds, value}) maps to it
(`from_qinglong`, `to_qinglong`).
"""

from __future__ import annotations

import functools
import re

PREFIX = "@every"
MIN_S = 60  # shorter repetition: a cron schedule with a seconds field (*/30 * * * * *)
MAX_S = 31 * 86_400
UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
QINGLONG_UNITS = {"days": "d", "hours": "h", "minutes": "m", "seconds": "s"}
_TERM = re.compile(r"(\d{1,9})([dhms])")
_SHAPE = re.compile(r"(?:\d{1,9}[dhms])+")
EXAMPLE = "@every 6h, @every 90m, @every 1h30m, @every 2d (units d, h, m, s)"


class IntervalError(ValueError):
    pass


def is_interval(expr: str) -> bool:
    return expr.strip().lower().startswith(PREFIX)


def seconds_of(expr: str) -> int:
    """The period in seconds of an `@every …` expression; IntervalError saying why not."""
    word = expr.strip().lower()
    if not word.startswith(PREFIX):
        raise IntervalError(f"expected {EXAMPLE}")
    rest = word[len(PREFIX):]
    duration = rest.strip()
    if not rest[:1].isspace() or not _SHAPE.fullmatch(duration):
        raise IntervalError(f"not an interval: expected {EXAMPLE}")
    total = 0
    seen: set[str] = set()
    for number, unit in _TERM.findall(duration):
        if unit in seen:
            raise IntervalError(f"the unit {unit!r} appears twice; write e.g. {EXAMPLE}")
        seen.add(unit)
        total += int(number) * UNITS[unit]
    return bounded(total)


def bounded(total: int) -> int:
    if total < MIN_S:
        raise IntervalError(f"an interval must be at least {MIN_S} s; for a shorter "
                            "repetition use a cron schedule with a seconds field, "
                            "e.g. */30 * * * * *")
    if total > MAX_S:
        raise IntervalError(f"an interval must be at most {MAX_S // 86_400} days")
    return total


def text(total: int) -> str:
    """The canonical spelling of a period (largest unit first)."""
    parts = []
    for unit, size in UNITS.items():
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
    return f"{PREFIX} {''.join(parts)}"


def validate(expr: str) -> str:
    return text(seconds_of(expr))


@functools.lru_cache(maxsize=256)
def period_ms(expr: str) -> int | None:
    """The period of a stored schedule, or None when it is not a (valid) interval."""
    if not expr.lstrip().lower().startswith(PREFIX):
        return None  # a cron expression: the scheduler asks for every tick
    try:
        return seconds_of(expr) * 1000
    except IntervalError:
        return None


def first_after(period: int, anchor_ms: int, after_ms: int) -> int:
    """The first grid tick strictly after `after_ms` (and after the anchor itself)."""
    if after_ms < anchor_ms:
        return anchor_ms + period
    return anchor_ms + ((after_ms - anchor_ms) // period + 1) * period


def last_at_or_before(period: int, anchor_ms: int, at_ms: int) -> int | None:
    """The latest grid tick at or before `at_ms`; None before the first one."""
    if at_ms < anchor_ms + period:
        return None
    return anchor_ms + ((at_ms - anchor_ms) // period) * period


def from_qinglong(unit: object, value: object) -> str:
    """QingLong's interval_schedule {type, value} as `@every …` (IntervalError if not)."""
    short = QINGLONG_UNITS.get(unit) if isinstance(unit, str) else None
    if short is None:
        raise IntervalError("type must be one of days, hours, minutes, seconds")
    # ASCII digits: isdigit() alone takes "²", which int() refuses.
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value)  # Joi.number() takes "6" too
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) \
            or value < 1:
        raise IntervalError("value must be a whole number of at least 1")
    if value > MAX_S:
        raise IntervalError(f"an interval must be at most {MAX_S // 86_400} days")
    return text(bounded(int(value) * UNITS[short]))


def to_qinglong(expr: str) -> dict[str, object] | None:
    """`@every …` as QingLong's {type, value}: the largest unit that divides the period."""
    period = period_ms(expr)
    if period is None:
        return None
    total = period // 1000
    for name, short in QINGLONG_UNITS.items():
        if total % UNITS[short] == 0:
            return {"type": name, "value": total // UNITS[short]}
    return None  # unreachable: every period is a whole number of seconds
