"""GET /api/v1/cron/preview?schedule=...&n=5&tz=...: the next fire times of an expression.

Computed in the task's zone `tz` (an IANA name) or, when it is absent or empty, the
container's zone (with its DST rules), exactly as the scheduler computes them; a bad
expression answers 422 naming the problem, an unknown zone 422 UNKNOWN_ZONE.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import cron, limits
from ..clock import now_ms
from . import inputs
from .errors import Invalid, UnknownZone, json_response

MAX_N = 50


async def preview(request: Request) -> Response:
    raw = request.query_params.get("schedule")
    if raw is None or not raw.strip():
        raise Invalid("schedule is required", field="schedule", code="REQUIRED")
    inputs.text(raw, "schedule", limits.MAX_SCHEDULE, lines=True)
    try:
        expr = cron.validate(raw)
    except cron.CronError as exc:
        raise Invalid(f"invalid cron schedule: {exc}", field="schedule",
                      code="BAD_SCHEDULE") from exc
    n = inputs.query_int(request, "n", 5, 1, MAX_N)
    tz = (request.query_params.get("tz") or "").strip() or None
    if tz is not None:
        inputs.text(tz, "tz", limits.MAX_TZ)
        try:
            cron.zone(tz)
        except cron.CronError as exc:
            raise UnknownZone(str(exc), field="tz") from exc
    at_ms = now_ms()
    now = cron.from_ms(at_ms, cron.zone(tz))
    offset = now.utcoffset()
    times = cron.next_ticks(expr, at_ms, n, tz)
    return json_response({
        "zone_source": "task" if tz is not None else "appliance",
        "schedule": expr,
        "seconds_field": len(expr.split()) == 6,
        "timezone": str(getattr(now.tzinfo, "key", None) or now.tzname()),
        "abbreviation": now.tzname(),
        "utc_offset_s": int(offset.total_seconds()) if offset is not None else 0,
        "next": [{"at_ms": int(t.timestamp() * 1000), "at": t.isoformat()} for t in times],
    })


routes = [Route("/cron/preview", preview, methods=["GET"])]
