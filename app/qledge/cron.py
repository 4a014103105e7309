"""Cron expressions: standard 5 fields or QingLong's 6 with a leading seconds field.

The one wrapper of cronsim: validation with messages that name the field,
and the tick arithmetic of the scheduler and the previews. Times are
computed in the container's local time zone (TZ) with its DST rules, like
QingLong; times in and out are milliseconds since the epoch (docs/tasks.md).
`@every <duration>` (interval.py) is the one form that is not cron: its ticks lie
on a grid from an anchor the caller passes (the scheduler: the task's last save).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from cronsim.cronsim import FIELD_NAMES, RANGES, Field

from . import interval

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class CronError(ValueError):
    pass


def from_ms(ms: int, tz: tzinfo) -> datetime:
    """Epoch milliseconds as an aware datetime in `tz`, without a C time_t on the way.

    datetime.fromtimestamp() goes through the platform's time_t, which is 32-bit
    in Debian bookworm's armhf userland (the arm/v7 image): it raises
    OverflowError for any time after 2038-01-19. Date arithmetic does not.
    """
    return (_EPOCH + timedelta(milliseconds=ms)).astimezone(tz)


# Schedules that never tick (docs/tasks.md): `@boot` runs once after each start of
# the appliance, `@once` only when run by hand (QingLong's two special schedules).
BOOT = "@boot"
ONCE = "@once"
SPECIAL = frozenset({BOOT, ONCE})
# cronsim has no shorthands: the standard ones, spelled out.
ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
           "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@hourly": "0 * * * *"}


def _cron_text(expr: str) -> str | None:
    """The cron expression behind `expr` (an alias spelled out); None: it never ticks."""
    if expr.startswith("@"):
        return ALIASES.get(expr)
    return expr


def validate(expr: str) -> str:
    """Normalise whitespace and prove the expression parses; raises CronError naming why.

    Pure (no clock, no time zone): whether an expression fires does not depend on
    when one looks, cron has no year field."""
    word = expr.strip().lower()
    if word.startswith(interval.PREFIX):
        try:
            return interval.validate(word)
        except interval.IntervalError as exc:
            raise CronError(str(exc)) from exc
    if word.startswith("@"):
        if word in SPECIAL or word in ALIASES:
            return word
        raise CronError(f"unknown shorthand {word[:32]!r}; use one of"
                        f" {', '.join(sorted(SPECIAL | ALIASES.keys()))}, or {interval.PREFIX}"
                        " <duration> (e.g. @every 6h)")
    parts = expr.split()
    if len(parts) not in (5, 6):
        raise CronError(f"expected 5 fields (or 6 with leading seconds), got {len(parts)}")
    text = " ".join(parts)
    try:
        it = CronSim(text, _EPOCH)
        next(it)
    except CronSimError as exc:
        raise CronError(_diagnose(parts, str(exc))) from exc
    except StopIteration as exc:
        raise CronError("the schedule never fires") from exc
    except ValueError as exc:  # cronsim lets a few malformed terms through as ValueError
        raise CronError(f"not a valid cron expression: {exc}") from exc
    return text


_NAMES = {"month": " (or JAN-DEC)", "day-of-week": " (or SUN-SAT)"}


def _diagnose(parts: list[str], message: str) -> str:
    """cronsim says only "Bad minute"; name the field, the value and what is wrong with it,
    judging each term of the field with cronsim's own parser."""
    name = message.removeprefix("Bad ")
    if name not in FIELD_NAMES:
        return message
    field = Field(FIELD_NAMES.index(name))
    value = parts[field - (6 - len(parts))]  # 5 fields: no leading seconds
    span = RANGES[field]
    allowed = f"{span.start}-{span.stop - 1}{_NAMES.get(name, '')}"
    for term in value.split(","):
        try:
            field.parse(term.upper())
        except CronSimError:
            where = f"{name} field '{term}'" + (f" (in '{value}')" if term != value else "")
            return f"{where}: {_why(term, span, allowed)}"
    if field is Field.DAY:  # each term parses; together with the months they never meet
        return f"{name} field '{value}': no month in the month field has that day"
    return f"{name} field '{value}': not valid"


def _why(term: str, span: range, allowed: str) -> str:
    base, _, step = term.partition("/")
    if step.isascii() and step.isdigit() and int(step) == 0:  # isdigit() alone takes "²"
        return "the step must be at least 1"
    numbers = [int(n) for n in re.findall(r"\d+", base)]
    if any(n not in span for n in numbers):
        return f"out of range {allowed}"
    if re.fullmatch(r"\d+-\d+", base) and numbers[0] > numbers[1]:
        return "the range runs backwards"
    return f"not a number, range (a-b), step (*/n) or list (a,b) within {allowed}"


def local_zone() -> tzinfo:
    """The container's time zone as a real zone (DST rules included), not a fixed offset.

    TZ names a zone (TZ=Asia/Shanghai; tzdata must be installed) → that zone;
    TZ unset → /etc/localtime; anything else (a POSIX TZ string) → the current
    fixed offset.
    """
    return _zone(os.environ.get("TZ"))


@functools.lru_cache(maxsize=8)
def _zone(tz: str | None) -> tzinfo:
    name = (tz or "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    elif tz is None:
        target = os.path.realpath("/etc/localtime")
        if "/zoneinfo/" in target:
            with contextlib.suppress(ZoneInfoNotFoundError, ValueError, OSError):
                return ZoneInfo(target.split("/zoneinfo/", 1)[1])
        try:
            with open("/etc/localtime", "rb") as f:
                return ZoneInfo.from_file(f, key="localtime")
        except (OSError, ValueError):
            pass
    return datetime.now().astimezone().tzinfo or UTC


def zone(name: str | None) -> tzinfo:
    """A task's time zone: its IANA name, or the container's when None."""
    if name is None:
        return local_zone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise CronError(f"unknown time zone {name[:64]!r}") from exc


def _dt(ms: int, tz: str | None = None) -> datetime:
    return from_ms(ms, zone(tz))


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def next_ticks(expr: str, after_ms: int, n: int, tz: str | None = None,
               anchor_ms: int | None = None) -> list[datetime]:
    """Up to n ticks strictly after `after_ms`, as aware datetimes in the task's zone
    (none if invalid or a schedule that never ticks). An interval's grid starts at
    `anchor_ms` (default: `after_ms`, as a schedule saved now)."""
    out: list[datetime] = []
    period = interval.period_ms(expr)
    if period is not None:
        at = after_ms
        for _ in range(n):
            at = interval.first_after(period, after_ms if anchor_ms is None else anchor_ms, at)
            out.append(from_ms(at, zone(tz)))
        return out
    text = _cron_text(expr)
    if text is None:
        return out
    try:
        it = CronSim(text, _dt(after_ms, tz))
        for _ in range(n):
            out.append(next(it))
    except (CronSimError, StopIteration):
        pass
    return out


def first_due_after(expr: str, after_ms: int, tz: str | None = None,
                    anchor_ms: int | None = None) -> int | None:
    """The first tick strictly after `after_ms`, or None if it never fires."""
    period = interval.period_ms(expr)
    if period is not None:
        return interval.first_after(period, after_ms if anchor_ms is None else anchor_ms,
                                    after_ms)
    ticks = next_ticks(expr, after_ms, 1, tz)
    return _ms(ticks[0]) if ticks else None


def last_due_at_or_before(expr: str, at_ms: int, tz: str | None = None,
                          anchor_ms: int | None = None) -> int | None:
    """The latest tick at or before `at_ms` (ticks fall on whole seconds); an interval
    without an anchor has no past ticks."""
    period = interval.period_ms(expr)
    if period is not None:
        return None if anchor_ms is None else interval.last_at_or_before(period, anchor_ms,
                                                                         at_ms)
    text = _cron_text(expr)
    if text is None:
        return None
    whole = _dt(at_ms - at_ms % 1000, tz) + timedelta(seconds=1)
    try:
        return _ms(next(CronSim(text, whole, reverse=True)))
    except (CronSimError, StopIteration):
        return None


def first_due_after_any(exprs: list[str], after_ms: int, tz: str | None = None,
                        anchor_ms: int | None = None) -> int | None:
    """The earliest first tick of several schedules (a task's schedule and extras)."""
    ticks = [t for e in exprs
             if (t := first_due_after(e, after_ms, tz, anchor_ms)) is not None]
    return min(ticks) if ticks else None


def last_due_any(exprs: list[str], at_ms: int, tz: str | None = None,
                 anchor_ms: int | None = None) -> int | None:
    ticks = [t for e in exprs
             if (t := last_due_at_or_before(e, at_ms, tz, anchor_ms)) is not None]
    return max(ticks) if ticks else None
