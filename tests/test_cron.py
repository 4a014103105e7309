"""Cron parsing (5 fields, QingLong's 6 with leading seconds) and next-fire computation."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from qledge import cron

from support import time_zone

SHANGHAI = timezone(timedelta(hours=8))


@pytest.fixture
def tz() -> Iterator[None]:
    """Run in a fixed zone without DST (Asia/Shanghai, QingLong's usual TZ)."""
    with time_zone("Asia/Shanghai"):
        yield


@pytest.mark.parametrize(("expr", "normal"), [
    ("*/5 * * * *", "*/5 * * * *"),
    ("  0   3 * * 1-5 ", "0 3 * * 1-5"),
    ("30 */5 * * * *", "30 */5 * * * *"),  # QingLong: leading seconds
    ("0 0 12 * * *", "0 0 12 * * *"),
    ("15 10 1,15 * *", "15 10 1,15 * *"),
    ("0 9 * * MON", "0 9 * * MON"),
])
def test_valid_forms_are_normalised(expr: str, normal: str) -> None:
    assert cron.validate(expr) == normal


@pytest.mark.parametrize(("expr", "why"), [
    ("", "expected 5 fields"),
    ("* * * *", "got 4"),
    ("* * * * * * *", "got 7"),
    ("@every 30s", "at least 60 s; for a shorter repetition use a cron schedule"),
    ("@every 32d", "at most 31 days"),
    ("@every 6x", "not an interval: expected @every 6h"),
    ("@every 1h1h", "the unit 'h' appears twice"),
    ("@every6h", "not an interval"),
    ("@reboot", "unknown shorthand"),
    ("61 * * * *", "minute field '61': out of range 0-59"),
    ("99 * * * *", "minute field '99': out of range 0-59"),
    ("* 24 * * *", "hour field '24': out of range 0-23"),
    ("* * 32 * *", "day-of-month field '32': out of range 1-31"),
    ("* * 0 * *", "day-of-month field '0': out of range 1-31"),
    ("* * * 13 *", "month field '13': out of range 1-12 (or JAN-DEC)"),
    ("* * * * 8", "day-of-week field '8': out of range 0-7 (or SUN-SAT)"),
    ("70 * * * * *", "second field '70': out of range 0-59"),  # QingLong's leading seconds
    ("0 5,7,61 * * *", "hour field '61' (in '5,7,61'): out of range 0-23"),
    ("a b c d e", "minute field 'a': not a number, range (a-b), step (*/n) or list (a,b)"),
    ("5- * * * *", "minute field '5-': not a number, range"),
    ("9-3 * * * *", "minute field '9-3': the range runs backwards"),
    ("*/0 * * * *", "minute field '*/0': the step must be at least 1"),
    # "²" passed isdigit() and made int() raise: a 500 instead of this (issue 35, #12's kind)
    ("*/\u00b2 * * * *", "minute field '*/\u00b2': not a number"),
    ("0 0 31 2 *", "day-of-month field '31': no month in the month field has that day"),
    ("0 0 30 2 *", "day-of-month field '30': no month in the month field has that day"),
])
def test_invalid_forms_are_refused_naming_the_field_and_value(expr: str, why: str) -> None:
    with pytest.raises(cron.CronError) as err:
        cron.validate(expr)
    assert why in str(err.value)


def _ms(*args: int, tzinfo: timezone = SHANGHAI) -> int:
    return int(datetime(*args, tzinfo=tzinfo).timestamp() * 1000)  # type: ignore[misc]


def test_next_ticks_five_fields(tz: None) -> None:
    after = _ms(2024, 1, 1, 10, 0, 30)
    assert cron.next_ticks("* * * * *", after, 1) == [datetime(2024, 1, 1, 10, 1,
                                                               tzinfo=SHANGHAI)]
    assert cron.next_ticks("*/15 * * * *", after, 1) == [datetime(2024, 1, 1, 10, 15,
                                                                  tzinfo=SHANGHAI)]
    assert cron.next_ticks("0 3 * * *", after, 1) == [datetime(2024, 1, 2, 3, 0,
                                                               tzinfo=SHANGHAI)]
    # strictly after: a tick equal to `after` is not returned
    on_tick = _ms(2024, 1, 1, 10, 15)
    assert cron.next_ticks("*/15 * * * *", on_tick, 1) == [datetime(2024, 1, 1, 10, 30,
                                                                    tzinfo=SHANGHAI)]


def test_six_fields_have_leading_seconds(tz: None) -> None:
    after = _ms(2024, 1, 1, 10, 0, 0)
    got = cron.next_ticks("30 */5 * * * *", after, 3)
    assert got == [datetime(2024, 1, 1, 10, 0, 30, tzinfo=SHANGHAI),
                   datetime(2024, 1, 1, 10, 5, 30, tzinfo=SHANGHAI),
                   datetime(2024, 1, 1, 10, 10, 30, tzinfo=SHANGHAI)]
    every_second = cron.next_ticks("* * * * * *", after, 2)
    assert [d.second for d in every_second] == [1, 2]


def test_next_is_in_the_local_zone(tz: None) -> None:
    # 02:00 UTC is 10:00 in Shanghai: "0 10 * * *" is due at that instant.
    got = cron.first_due_after("0 10 * * *", _ms(2024, 1, 1, 1, 59, tzinfo=UTC))
    assert got == _ms(2024, 1, 1, 2, 0, tzinfo=UTC)
    ticks = cron.next_ticks("0 10 * * *", _ms(2024, 1, 1, 1, 59, tzinfo=UTC), 1)
    assert ticks[0].utcoffset() == timedelta(hours=8)


def test_next_ticks_and_never() -> None:
    after = _ms(2024, 1, 1)
    assert len(cron.next_ticks("0 0 1 1 *", after, 3)) == 3
    assert cron.first_due_after("not a cron", after) is None
    assert cron.next_ticks("not a cron", after, 3) == []


# -- the scheduler's zone-aware tick arithmetic ------------------------------------------

def test_first_due_after_and_last_due_at_or_before(tz: None) -> None:
    t = _ms(2024, 1, 1, 10, 0, 30)
    assert cron.first_due_after("* * * * *", t) == _ms(2024, 1, 1, 10, 1)
    assert cron.last_due_at_or_before("* * * * *", t) == _ms(2024, 1, 1, 10, 0)
    # exactly on a tick: it is "at or before", and not "after"
    on = _ms(2024, 1, 1, 10, 1)
    assert cron.last_due_at_or_before("* * * * *", on) == on
    assert cron.last_due_at_or_before("* * * * *", on + 999) == on
    assert cron.first_due_after("* * * * *", on) == _ms(2024, 1, 1, 10, 2)
    assert cron.last_due_at_or_before("30 */5 * * * *", _ms(2024, 1, 1, 10, 7)) == \
        _ms(2024, 1, 1, 10, 5, 30)
    assert cron.first_due_after("bad", t) is None
    assert cron.last_due_at_or_before("bad", t) is None


def test_zone_rules_follow_dst() -> None:
    """A fixed UTC offset would fire an hour off after a DST change; the zone does not."""
    with time_zone("Europe/Berlin"):
        cet, cest = timezone(timedelta(hours=1)), timezone(timedelta(hours=2))
        before = _ms(2024, 3, 30, 12, 0, tzinfo=cet)  # Saturday, still winter time
        ticks = cron.next_ticks("0 3 * * *", before, 2)
        assert [int(d.timestamp() * 1000) for d in ticks] == [
            _ms(2024, 3, 31, 3, 0, tzinfo=cest), _ms(2024, 4, 1, 3, 0, tzinfo=cest)]
        # 02:30 does not exist on 2024-03-31: Debian-cron semantics fire it right after the gap
        assert cron.first_due_after("30 2 * * *", before) == _ms(2024, 3, 31, 3, 0, tzinfo=cest)
        assert str(cron.local_zone()) == "Europe/Berlin"


@pytest.mark.parametrize("ms", [0, 1_700_000_000_123, 2**31 * 1000 - 1, 2**31 * 1000 + 5,
                                4_102_444_800_000, 7_258_118_400_042])
def test_from_ms_agrees_with_fromtimestamp(ms: int) -> None:
    """Same instant and wall time as the C conversion, where the host's 64-bit
    time_t can still do it (1970 to 2200). On a 32-bit time_t (the arm/v7
    image) only from_ms works past 2038: tests/container/test_image.py."""
    for zone in (UTC, cron._zone("Europe/Berlin"), SHANGHAI):
        got = cron.from_ms(ms, zone)
        want = datetime.fromtimestamp(ms / 1000, zone)
        assert got == want and got.utcoffset() == want.utcoffset()
        assert (got.year, got.hour, got.minute, got.microsecond) == (
            want.year, want.hour, want.minute, (ms % 1000) * 1000)
