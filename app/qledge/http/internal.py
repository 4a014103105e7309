"""Node-to-node routes (fleet mode): another node reads the logs this node holds.

    GET /internal/v1/attempts/{attempt_id}/log?offset=…&limit=…
    GET /internal/v1/attempts/{attempt_id}/log/stream?offset=…

They answer exactly as the public log routes do (the same functions: logs_sse's
`serve_read` and `tail`), for one attempt rather than a run's latest. They accept
only the cluster credential (cluster_auth.py), never the admin token: a request
that carries an Authorization header is refused, whatever else it carries. The
signing node must be in `nodes`, and the attempt must be this node's own: the
routes expose this node's log files and nothing else. Outside fleet mode they do
not exist (404).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import cluster_auth, ids
from ..clock import now_ms
from ..db import attempts, peers, runs
from ..model import TERMINAL_ATTEMPT, TERMINAL_RUN
from ..runtime.lifecycle import Runtime
from . import _proxy, logs_sse
from .context import runtime_of
from .errors import Forbidden, Missing, Unauthorized


async def _admit(request: Request) -> Runtime:
    rt = runtime_of(request)
    node = _proxy.node_of(rt)
    if node is None or not node.fleet:
        raise Missing("not found")
    if "authorization" in request.headers:
        raise Unauthorized("internal routes accept only the cluster credential")
    try:
        name = cluster_auth.verify(rt.settings.cluster_secret, request.headers,
                                   request.method, request.scope["path"],
                                   request.scope["query_string"].decode("latin-1"), now_ms())
    except cluster_auth.Refused as exc:
        raise Unauthorized(f"cluster credential refused: {exc}") from None
    async with rt.db.read() as tx:
        if not await peers.known(tx, name):
            raise Forbidden(f"node {name!r} is not registered in this fleet")
    return rt


async def _target(rt: Runtime, attempt_id: str) -> logs_sse.Target:
    """(this node's attempt, its log is over?, its run's status). Over: the run
    ended, or the attempt ended and a later attempt replaced it (a retry, maybe on
    another node, has a log of its own)."""
    node = _proxy.node_of(rt)
    if not ids.is_uuid7(attempt_id) or node is None:
        raise Missing("attempt not found")
    async with rt.db.read() as tx:
        attempt = await attempts.find_attempt(tx, attempt_id)
        if attempt is None or attempt.runtime_owner != node.node_id:
            raise Missing("attempt not found on this node")
        run = await runs.get_run(tx, attempt.run_id)
        tried = await attempts.attempts_of_run(tx, run.id)
    superseded = attempt.status in TERMINAL_ATTEMPT and tried[-1].id != attempt.id
    return attempt, run.status in TERMINAL_RUN or superseded, run.status.value


async def read(request: Request) -> Response:
    rt = await _admit(request)
    offset, limit = logs_sse.read_window(rt, request)
    attempt, terminal, status = await _target(rt, request.path_params["attempt_id"])
    return await logs_sse.serve_read(rt, attempt, terminal, status, offset, limit)


async def stream(request: Request) -> Response:
    rt = await _admit(request)
    attempt_id = request.path_params["attempt_id"]
    attempt, _, _ = await _target(rt, attempt_id)  # 404 before the stream starts
    assert attempt is not None
    offset = logs_sse.read_window(rt, request)[0]
    return logs_sse.sse_response(logs_sse.tail(
        rt, lambda: _target(rt, attempt_id), attempt.run_id, offset, follow_owner=False))


routes = [
    Route("/internal/v1/attempts/{attempt_id}/log", read, methods=["GET"]),
    Route("/internal/v1/attempts/{attempt_id}/log/stream", stream, methods=["GET"]),
]
