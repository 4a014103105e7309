"""Stream tickets: short-lived, single-run, single-use credentials for the live log.

A browser's `EventSource` cannot send an `Authorization` header, and the
long-lived admin token must never appear in a URL (URLs end up in history,
proxy logs and screenshots). So the panel asks, with its bearer token, for a
ticket bound to one run:

    POST /api/v1/runs/{run_id}/log/ticket  ->  {"ticket", "expires_at_ms", "run_id"}

and opens `GET /api/v1/runs/{run_id}/log/stream?offset=N&ticket=…`. A ticket

* is 32 random bytes (base64url); this worker keeps only its SHA-256, in memory;
* expires `TTL_MS` after it was issued;
* opens the stream of that one run and nothing else;
* is consumed by its first presentation, whatever the outcome: a replay, a use
  for another run, or a use after expiry is refused with 401;
* vanishes when the worker restarts. That is fine: after a dropped connection the
  client asks for a new ticket and resumes from its last offset (`id:` of the
  last `log` event it received).

At most `MAX_OUTSTANDING` unused tickets are kept; issuing beyond that drops the
oldest, so a client that requests tickets in a loop cannot grow memory.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import ids
from ..clock import now_ms
from ..db import runs
from ..runtime.lifecycle import Runtime
from .errors import Missing, Unauthorized, json_response

TTL_MS = 60_000
MAX_OUTSTANDING = 1024
TICKET_BYTES = 32
STREAM_PATH = re.compile(r"^/api/v1/runs/(?P<run_id>[^/]+)/log/stream$")


def _digest(ticket: str) -> bytes:
    return hashlib.sha256(ticket.encode("utf-8", "surrogatepass")).digest()


class TicketStore:
    """In-memory, hashed, single-use stream tickets (one store per worker)."""

    def __init__(self, ttl_ms: int = TTL_MS, max_outstanding: int = MAX_OUTSTANDING,
                 clock: Callable[[], int] = now_ms) -> None:
        self.ttl_ms = ttl_ms
        self.max_outstanding = max_outstanding
        self._clock = clock
        # sha256(ticket) -> (run id, expires_at_ms); insertion order = issue order.
        self._tickets: dict[bytes, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self._tickets)

    def _purge(self, now: int) -> None:
        for key in [k for k, (_, exp) in self._tickets.items() if exp <= now]:
            del self._tickets[key]
        while len(self._tickets) >= self.max_outstanding:
            del self._tickets[next(iter(self._tickets))]

    def issue(self, run_id: str) -> tuple[str, int]:
        """A new ticket for `run_id` and its expiry (ms since the epoch)."""
        now = self._clock()
        self._purge(now)
        ticket = secrets.token_urlsafe(TICKET_BYTES)
        expires_at_ms = now + self.ttl_ms
        self._tickets[_digest(ticket)] = (run_id, expires_at_ms)
        return ticket, expires_at_ms

    def consume(self, ticket: str, run_id: str) -> bool:
        """True when `ticket` is unexpired and bound to `run_id`. Always single-use:
        the ticket is gone after this call, whether or not it was accepted."""
        entry = self._tickets.pop(_digest(ticket), None)
        if entry is None:
            return False
        bound, expires_at_ms = entry
        return hmac.compare_digest(bound.encode(), run_id.encode()) and \
            self._clock() < expires_at_ms


def tickets_of(request: Request) -> TicketStore:
    state = request.app.state
    found: TicketStore | None = getattr(state, "stream_tickets", None)
    if found is None:
        found = state.stream_tickets = TicketStore()
    return found


def admit_stream(request: Request) -> bool:
    """For AdminAuth: True when this request is a log-stream GET that carries a
    valid ticket for its run (and no bearer); False when tickets do not apply (the
    bearer check follows); raises Unauthorized for a bad, used, expired or
    foreign ticket."""
    if request.method != "GET" or "authorization" in request.headers:
        return False
    ticket = request.query_params.get("ticket")
    match = STREAM_PATH.match(request.scope["path"])
    if ticket is None or match is None:
        return False
    if not tickets_of(request).consume(ticket, match["run_id"]):
        raise Unauthorized("stream ticket is invalid, expired, already used or for another run;"
                           " request a new one (POST /api/v1/runs/{id}/log/ticket)",
                           code="TICKET_INVALID")
    return True


async def issue(request: Request) -> Response:
    run_id: str = request.path_params["run_id"]
    if not ids.is_uuid7(run_id):
        raise Missing("run not found", params={"what": "run"})
    rt: Runtime = request.app.state.runtime
    async with rt.db.read() as tx:
        await runs.get_run(tx, run_id)  # 404 for an unknown run
    ticket, expires_at_ms = tickets_of(request).issue(run_id)
    return json_response({"ticket": ticket, "expires_at_ms": expires_at_ms, "run_id": run_id},
                         headers={"Cache-Control": "no-store"})


routes = [Route("/runs/{run_id}/log/ticket", issue, methods=["POST"])]
