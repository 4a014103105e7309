"""Stream tickets: short-lived, single-run, single-use credentials for the SSE log tail."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from qledge.http.tickets import MAX_OUTSTANDING, TTL_MS, TicketStore

from support import Server, wait_terminal

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

RUN_A = "01900000-0000-7000-8000-00000000000a"
RUN_B = "01900000-0000-7000-8000-00000000000b"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


# -- the store ----------------------------------------------------------------------


def test_ticket_is_random_and_expires_after_the_ttl() -> None:
    clock = Clock()
    tickets = TicketStore(clock=clock)
    ticket, expires = tickets.issue(RUN_A)
    other, _ = tickets.issue(RUN_A)
    assert ticket != other
    assert len(ticket) >= 43  # 32 random bytes, base64url
    assert expires == clock.now + TTL_MS == clock.now + 60_000


def test_ticket_is_single_use_replay_refused() -> None:
    tickets = TicketStore(clock=Clock())
    ticket, _ = tickets.issue(RUN_A)
    assert tickets.consume(ticket, RUN_A)
    assert not tickets.consume(ticket, RUN_A)
    assert len(tickets) == 0


def test_ticket_opens_only_its_own_run_and_a_misuse_burns_it() -> None:
    tickets = TicketStore(clock=Clock())
    ticket, _ = tickets.issue(RUN_A)
    assert not tickets.consume(ticket, RUN_B)
    assert not tickets.consume(ticket, RUN_A)  # burnt by the wrong-run attempt


def test_expired_ticket_refused() -> None:
    clock = Clock()
    tickets = TicketStore(clock=clock)
    ticket, expires = tickets.issue(RUN_A)
    late, _ = tickets.issue(RUN_A)
    clock.now = expires - 1
    assert tickets.consume(ticket, RUN_A)
    clock.now = expires
    assert not tickets.consume(late, RUN_A)


def test_expired_tickets_are_purged_and_outstanding_is_bounded() -> None:
    clock = Clock()
    tickets = TicketStore(clock=clock, max_outstanding=4)
    first, _ = tickets.issue(RUN_A)
    for _ in range(10):
        tickets.issue(RUN_A)
    assert len(tickets) == 4
    assert not tickets.consume(first, RUN_A)  # evicted, oldest first
    clock.now += TTL_MS
    tickets.issue(RUN_B)
    assert len(tickets) == 1
    assert MAX_OUTSTANDING >= 256


def test_only_hashes_are_kept() -> None:
    tickets = TicketStore(clock=Clock())
    ticket, _ = tickets.issue(RUN_A)
    assert ticket.encode() not in repr(tickets.__dict__).encode()
    assert ticket not in repr(tickets.__dict__)


def test_garbage_ticket_refused() -> None:
    tickets = TicketStore(clock=Clock())
    assert not tickets.consume("", RUN_A)
    assert not tickets.consume("\udcff" * 3, RUN_A)


# -- over HTTP --------------------------------------------------------------------------


def _run(server: Server, command: str) -> str:
    task = server.http.post("/api/v1/tasks", json={"name": "t", "command": command}).json()
    return str(server.http.post(f"/api/v1/tasks/{task['id']}/runs").json()["run"]["id"])


def _ticket(server: Server, run_id: str) -> str:
    r = server.http.post(f"/api/v1/runs/{run_id}/log/ticket")
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"ticket", "expires_at_ms", "run_id"}
    assert body["run_id"] == run_id
    assert r.headers["cache-control"] == "no-store"
    return str(body["ticket"])


def _stream(server: Server, run_id: str, ticket: str, offset: int = 0) -> httpx.Response:
    """GET the SSE stream with the ticket and no Authorization header; read it all."""
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        resp = anon.get(f"/api/v1/runs/{run_id}/log/stream",
                        params={"offset": offset, "ticket": ticket})
    return resp


def _log_text(body: str) -> str:
    text = ""
    for block in body.split("\n\n"):
        lines = block.split("\n")
        if "event: log" in lines:
            text += json.loads("\n".join(ln[6:] for ln in lines if ln.startswith("data: ")))["text"]
    return text


def test_ticket_opens_the_stream_without_the_bearer_once(server: Server) -> None:
    run_id = _run(server, "echo one; echo two")
    assert wait_terminal(server.http, run_id)["status"] == "succeeded"
    ticket = _ticket(server, run_id)
    first = _stream(server, run_id, ticket)
    assert first.status_code == 200
    assert first.headers["content-type"].startswith("text/event-stream")
    assert _log_text(first.text) == "one\ntwo\n"
    assert "event: end" in first.text
    replay = _stream(server, run_id, ticket)
    assert replay.status_code == 401
    assert replay.json()["error"] == "UNAUTHORIZED"
    # resume from an offset with a fresh ticket
    resumed = _stream(server, run_id, _ticket(server, run_id), offset=4)
    assert _log_text(resumed.text) == "two\n"


def test_ticket_scoped_to_one_run_and_to_the_stream_route(server: Server) -> None:
    run_a = _run(server, "echo a")
    run_b = _run(server, "echo b")
    wait_terminal(server.http, run_a)
    wait_terminal(server.http, run_b)
    ticket = _ticket(server, run_a)
    assert _stream(server, run_b, ticket).status_code == 401
    # burnt by the misuse
    assert _stream(server, run_a, ticket).status_code == 401
    # a ticket never stands in for the bearer anywhere else
    ticket = _ticket(server, run_a)
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        for path in (f"/api/v1/runs/{run_a}", f"/api/v1/runs/{run_a}/log",
                     f"/api/v1/runs/{run_a}/events", "/api/v1/tasks"):
            assert anon.get(path, params={"ticket": ticket}).status_code == 401, path
        assert anon.post(f"/api/v1/runs/{run_a}/log/ticket",
                         params={"ticket": ticket}).status_code == 401
    # ...and was not consumed by those refusals: it still opens its own stream
    assert _stream(server, run_a, ticket).status_code == 200


def test_ticket_issue_needs_the_bearer_and_a_known_run(server: Server) -> None:
    run_id = _run(server, "true")
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        assert anon.post(f"/api/v1/runs/{run_id}/log/ticket").status_code == 401
        bad = anon.post(f"/api/v1/runs/{run_id}/log/ticket",
                        headers={"Authorization": "Bearer wrong"})
        assert bad.status_code == 401
    assert server.http.post(
        "/api/v1/runs/01900000-0000-7000-8000-000000000000/log/ticket").status_code == 404
    assert server.http.post("/api/v1/runs/nope/log/ticket").status_code == 404
    # the bearer still works on the stream, and a bad ticket beside a bearer is ignored
    wait_terminal(server.http, run_id)
    r = server.http.get(f"/api/v1/runs/{run_id}/log/stream", params={"ticket": "x"})
    assert r.status_code == 200


def test_tickets_vanish_on_restart_and_are_never_stored(tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = Server(state)
    try:
        run_id = _run(server, "echo kept")
        wait_terminal(server.http, run_id)
        ticket = _ticket(server, run_id)
    finally:
        server.stop()
    # nothing of the ticket reached the disk (DB, logs, output)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert ticket.encode() not in path.read_bytes(), path
    server = Server(state)
    try:
        assert _stream(server, run_id, ticket).status_code == 401
        fresh = _stream(server, run_id, _ticket(server, run_id))
        assert fresh.status_code == 200
        assert _log_text(fresh.text) == "kept\n"
    finally:
        server.stop()
