"""Cron expressions: standard 5 fields or QingLong's 6 with a leading seconds field.

Times are computed in the container's local time zone (TZ), like QingLong.
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


def validate(expr: str) -> str:
    """Normalise whitespace and prove the expression parses; raises CronError naming why."""
    parts = expr.split()
    if len(parts) not in (5, 6):
        raise CronError(f"expected 5 fields (or 6 with leading seconds), got {len(parts)}")
    text = " ".join(parts)
    try:
        it = CronSim(text, datetime.now(local_zone()))
        next(it)
    except CronSimError as exc:
        raise CronError(_diagnose(parts, str(exc))) from exc
    except StopIteration as exc:
        raise CronError("the schedule never fires") from exc
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
    if step.isdigit() and int(step) == 0:
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


def next_after(expr: str, after: datetime) -> datetime | None:
    """First fire time strictly after `after` (aware datetime), or None if never."""
    try:
        return next(CronSim(expr, after.astimezone(local_zone())))
    except (CronSimError, StopIteration):
        return None


def next_n(expr: str, after: datetime, n: int) -> list[datetime]:
    out: list[datetime] = []
    try:
        it = CronSim(expr, after.astimezone(local_zone()))
        for _ in range(n):
            out.append(next(it))
    except (CronSimError, StopIteration):
        pass
    return out
