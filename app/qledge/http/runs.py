"""Runs API: trigger, list, detail, events, cancel."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import ids, limits, operations
from ..db import attempts, claims, conc_runs, events, nodes, runs, tasks
from ..db.interface import Tx
from ..model import (
    ACTIVE_ATTEMPT,
    TERMINAL_RUN,
    Attempt,
    Run,
    RunStatus,
    Trigger,
)
from ..runtime.lifecycle import Runtime
from . import inputs
from .context import runtime_of
from .errors import Invalid, Missing, json_response
from .logs_sse import log_state

MAX_OFFSET = 10_000_000  # numbered pages: deep enough for any appliance's history


def run_view(run: Run, waiting: claims.Waiting | None = None) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.to_builtins(run)
    body["terminal"] = run.status in TERMINAL_RUN
    body["placement"] = {"node": body.pop("placement_node", None),
                         "labels": body.pop("placement_labels", [])}
    # A queued run that no live node can take says why (docs/fleet.md), else null.
    body["waiting"] = msgspec.to_builtins(waiting) if waiting is not None else None
    return body


async def _waiting(rt: Runtime, tx: Tx, page: list[Run]) -> dict[str, claims.Waiting]:
    """Computed on read, for queued runs with a placement only (one read of the nodes)."""
    placed = [r for r in page if claims.placed_queued(r)]
    if not placed:
        return {}
    known = await claims.known_nodes(tx, rt.dispatcher.node)
    return {r.id: w for r in placed if (w := claims.judge(r, known)) is not None}


def attempt_view(a: Attempt) -> dict[str, Any]:
    # No token hash, no pid/boot internals beyond what an operator needs.
    return {
        "id": a.id, "attempt_no": a.attempt_no, "status": a.status.value,
        "exit_code": a.exit_code, "reason_code": a.reason_code, "pid": a.pid,
        "created_at_ms": a.created_at_ms, "started_at_ms": a.started_at_ms,
        "finished_at_ms": a.finished_at_ms, "deadline_at_ms": a.deadline_at_ms,
        "active": a.status in ACTIVE_ATTEMPT,
        # Fleet mode: a receipt that came after a takeover decided the attempt (its
        # facts, never applied: COMPLETION_STALE_EPOCH). None: no late receipt.
        "late_exit_code": a.late_exit_code, "late_finished_at_ms": a.late_finished_at_ms,
    }


async def create(request: Request) -> Response:
    got = await operations.start_run(runtime_of(request), request.path_params["task_id"],
                                     Trigger.API)
    return json_response({"run": run_view(got.run), "outcome": got.outcome,
                          "replaced": got.replaced}, 202)


async def list_(request: Request) -> Response:
    q = request.query_params
    status = q.get("status") or None
    if status is not None and status not in RunStatus.__members__.values():
        raise Invalid(f"unknown status {status!r}", field="status", code="NOT_ONE_OF")
    cursor = q.get("cursor") or None
    if cursor is not None and not ids.is_uuid7(cursor):
        raise Invalid("cursor must be a run id from next_cursor", field="cursor",
                      code="BAD_CURSOR")
    limit = inputs.query_int(request, "limit", limits.RUNS_PAGE.default, 1,
                             limits.RUNS_PAGE.most)
    task_id = q.get("task_id") or None
    if task_id is not None and not ids.is_uuid7(task_id):
        raise Invalid("task_id must be a task id (UUIDv7)", field="task_id", code="BAD_ID")
    offset = inputs.query_int(request, "offset", 0, 0, MAX_OFFSET)
    if offset and cursor is not None:
        raise Invalid("give either cursor or offset, not both", field="offset",
                      code="CURSOR_AND_OFFSET")
    async with runtime_of(request).db.read() as tx:
        page = await runs.list_runs(tx, task_id=task_id, status=status,
                                     before=cursor, limit=limit, offset=offset)
        waits = await _waiting(runtime_of(request), tx, page)
        total = await runs.count_runs(tx, task_id=task_id, status=status)
        earlier = await runs.earlier_attempts(tx, [r.id for r in page])
        named = await tasks.tasks_by_ids(tx, sorted({r.task_id for r in page}))
    nxt = page[-1].id if len(page) == limit else None
    items = []
    for r in page:
        view = run_view(r, waits.get(r.id))
        # The runs list's row: by whose name, and whether it took retries to end so.
        task = named.get(r.task_id)
        view["task_name"] = task.name if task is not None else None
        view["earlier_attempts"] = earlier.get(r.id, 0)
        items.append(view)
    return json_response({"items": items, "next_cursor": nxt, "total": total,
                          "offset": offset})


async def _run_id(request: Request) -> str:
    run_id: str = request.path_params["run_id"]
    if not ids.is_uuid7(run_id):
        raise Missing("run not found", params={"what": "run"})
    return run_id


async def get(request: Request) -> Response:
    rt = runtime_of(request)
    run_id = await _run_id(request)
    async with rt.db.read() as tx:
        run = await runs.get_run(tx, run_id)
        tried = await attempts.attempts_of_run(tx, run_id)
        children = await conc_runs.children(tx, run_id)
        waits = await _waiting(rt, tx, [run])
        where = await _nodes_of(rt, tx, {a.runtime_owner for a in tried})
        named = await tasks.tasks_by_ids(tx, [run.task_id])
    views = []
    for a in tried:
        view = attempt_view(a)
        # What ran where (fleet mode: the owner's node name; one node: its own).
        view["node"] = where.get(a.runtime_owner)
        state = await log_state(rt, a)
        view.update(log_size=state.size, log_bytes_at_exit=a.log_bytes_at_exit,
                    log_truncated=state.truncated, log_note=state.note)
        views.append(view)
    # A `task … conc` parent's child runs (docs/tasks.md): ids and results.
    kids = [{"id": c.id, "conc_index": c.conc_index, "status": c.status.value,
             "exit_code": c.exit_code, "reason_code": c.reason_code} for c in children]
    task = named.get(run.task_id)
    return json_response({**run_view(run, waits.get(run.id)), "attempts": views,
                          "children": kids,
                          "task_name": task.name if task is not None else None})


async def _nodes_of(rt: Runtime, tx: Tx, owners: set[str]) -> dict[str, str]:
    """Node names of attempt owners (runtime_owner = a node id)."""
    if not rt.node.fleet:
        return {rt.node_id: rt.node.name}
    found = {}
    for owner in owners:
        row = await nodes.node_by_id(tx, owner)
        if row is not None:
            found[owner] = row.name
    return found


async def run_events(request: Request) -> Response:
    run_id = await _run_id(request)
    after = inputs.query_int(request, "after", 0, 0, limits.INT64_MAX)
    async with runtime_of(request).db.read() as tx:
        await runs.get_run(tx, run_id)
        evs = await events.list_events(tx, run_id, after_seq=after)
    return json_response({"items": msgspec.to_builtins(evs)})


async def cancel(request: Request) -> Response:
    run_id = await _run_id(request)
    status = await operations.cancel_run(runtime_of(request), run_id)
    return json_response({"run_id": run_id, "status": status.value, "cancel_requested": True},
                         202)


routes = [
    Route("/tasks/{task_id}/runs", create, methods=["POST"]),
    Route("/runs", list_, methods=["GET"]),
    Route("/runs/{run_id}", get, methods=["GET"]),
    Route("/runs/{run_id}/events", run_events, methods=["GET"]),
    Route("/runs/{run_id}/cancel", cancel, methods=["POST"]),
]
