"""Fleet mode: a log that lives on another node, relayed from it (docs/fleet.md,
"Node-to-node log reads").

An attempt's log stays on the node that ran it (`run_attempts.runtime_owner`). Any
other node answers the public log routes by asking the owner's internal route
(http/internal.py) with the cluster credential and passing its answer through:
status, body and the log headers (`X-Log-*`, `X-Run-*`, 410 for an evicted log)
unchanged. At most one upstream chunk is held: the client's pace drives the
upstream read, so a slow client slows only its own request.

An owner that is down (its lease expired on the database clock, no connection, or
no first byte within FIRST_BYTE_S) is said so: 503 `NODE_UNAVAILABLE` with its name
and last heartbeat, and a stream gets `event: node_down` and ends. Never an empty
answer that would look like a complete, empty log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import msgspec
from starlette.responses import Response, StreamingResponse

from .. import cluster_auth
from ..clock import now_ms
from ..db import peers
from ..model import Attempt
from ..node import Node
from ..runtime.lifecycle import Runtime
from .errors import json_response

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("qledge.http")

FIRST_BYTE_S = 2.0  # connect + the owner's status line: past it the owner is "down"
READ_S = 35.0  # between chunks once started: above the owner's 15 s SSE keep-alive
# Hop-by-hop or per-connection headers: this node's server sets its own.
_DROP = frozenset({"connection", "keep-alive", "transfer-encoding", "date", "server"})
_enc = msgspec.json.Encoder()


class _Down(Exception):
    pass


def node_of(rt: Runtime) -> Node | None:
    """The runtime's Node (runtime/fleet.py keeps it up to date). `Runtime.node` lands
    with the fleet runtime; until then a runtime without one is a single node."""
    node: Node | None = getattr(rt, "node", None)
    return node


def elsewhere(rt: Runtime, attempt: Attempt) -> bool:
    """Is this attempt's log on another node? Never on the embedded SQLite."""
    node = node_of(rt)
    return node is not None and node.fleet and attempt.runtime_owner != node.node_id


async def owner(rt: Runtime, attempt: Attempt) -> peers.Peer | None:
    """The other node that holds this attempt's log; None when it is this node's."""
    if not elsewhere(rt, attempt):
        return None
    async with rt.db.read() as tx:
        found = await peers.owner(tx, attempt.runtime_owner)
    # An owner id without a `nodes` row (it left and was removed): down for good.
    return found or peers.Peer(name=attempt.runtime_owner, url="", state="unknown",
                               alive=False, heartbeat_at_ms=None)


def _down_body(peer: peers.Peer) -> dict[str, object]:
    return {"error": "NODE_UNAVAILABLE", "node": peer.name,
            "last_seen_ms": peer.heartbeat_at_ms,
            "message": f"the log is on node {peer.name}, which is not answering"}


def unavailable(peer: peers.Peer) -> Response:
    return json_response(_down_body(peer), 503,
                         headers={"Retry-After": "5", "Cache-Control": "no-store"})


def node_down_event(peer: peers.Peer) -> bytes:
    return b"event: node_down\ndata: " + _enc.encode(_down_body(peer)) + b"\n\n"


async def _open(rt: Runtime, peer: peers.Peer, path: str, params: dict[str, str]
                ) -> tuple[httpx.AsyncClient, httpx.Response]:
    """The owner's answer, its body not read yet; _Down when it cannot give one."""
    # httpx (with idna, click, pygments: ~3.4 MiB) only in fleet mode, at the first
    # relayed read: an embedded worker never imports it (tests/test_imports_idle.py).
    import httpx

    me = node_of(rt)
    if not peer.alive or not peer.url or me is None:
        raise _Down
    query = urlencode(params)
    headers = cluster_auth.sign(rt.settings.cluster_secret, me.name, "GET", path, query,
                                now_ms())
    client = httpx.AsyncClient(timeout=httpx.Timeout(READ_S, connect=FIRST_BYTE_S))
    try:
        request = client.build_request("GET", f"{peer.url.rstrip('/')}{path}?{query}",
                                       headers=headers)
        upstream = await asyncio.wait_for(client.send(request, stream=True), FIRST_BYTE_S)
    except (httpx.HTTPError, OSError, TimeoutError) as exc:
        await client.aclose()
        log.warning("node %s did not answer a log read: %s", peer.name, type(exc).__name__)
        raise _Down from None
    if upstream.status_code in (401, 403):  # the secrets differ: a setup error, say it
        log.error("node %s refused this node's cluster credential (%d): check that"
                  " cluster_secret is the same on every node", peer.name,
                  upstream.status_code)
        await upstream.aclose()
        await client.aclose()
        raise _Down
    return client, upstream


def _path(attempt_id: str, stream: bool) -> str:
    return f"/internal/v1/attempts/{attempt_id}/log" + ("/stream" if stream else "")


async def relay_read(rt: Runtime, peer: peers.Peer, attempt_id: str, offset: int,
                     limit: int) -> Response:
    """GET …/log of a remote attempt: the owner's answer, as it gave it."""
    try:
        client, upstream = await _open(rt, peer, _path(attempt_id, False),
                                       {"offset": str(offset), "limit": str(limit)})
    except _Down:
        return unavailable(peer)
    headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROP}

    async def body() -> AsyncIterator[bytes]:
        # A failure mid-body propagates: the server aborts the response, and its
        # Content-Length tells the client the body is incomplete.
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        finally:
            await upstream.aclose()
            await client.aclose()

    return StreamingResponse(body(), status_code=upstream.status_code, headers=headers)


async def fetch_tail(rt: Runtime, peer: peers.Peer, attempt_id: str, limit: int
                     ) -> tuple[bytes, int] | None:
    """The last `limit` bytes of a remote attempt's log and their offset (QingLong's log
    route shows a tail); None when the owner cannot answer."""
    import httpx  # fleet mode only, see _open

    data, offset = b"", 0
    for _ in range(2):  # the size first, then the window ending there
        try:
            client, upstream = await _open(rt, peer, _path(attempt_id, False),
                                           {"offset": str(offset), "limit": str(limit)})
        except _Down:
            return None
        try:
            body = await upstream.aread()
            size = int(upstream.headers.get("X-Log-Size", "0"))
            ok = upstream.status_code == 200
        except (httpx.HTTPError, OSError, ValueError):
            ok, body, size = False, b"", 0
        finally:
            await upstream.aclose()
            await client.aclose()
        if not ok:
            return None if upstream.status_code >= 500 else (b"", 0)
        data = body
        if size - offset <= limit:
            return data, offset
        offset = size - limit
    return data, offset


async def relay_stream(rt: Runtime, peer: peers.Peer, attempt_id: str, offset: int
                       ) -> AsyncIterator[bytes]:
    """The SSE tail of a remote attempt: the owner's events, whole events only, then
    `node_down` if the owner goes away before its `end`."""
    import httpx  # fleet mode only, see _open

    try:
        client, upstream = await _open(rt, peer, _path(attempt_id, True),
                                       {"offset": str(offset)})
    except _Down:
        yield node_down_event(peer)
        return
    ended = False
    pending = b""
    try:
        if upstream.status_code != 200:  # e.g. the owner no longer has this attempt
            yield node_down_event(peer)
            return
        async for chunk in upstream.aiter_raw():
            pending += chunk
            cut = pending.rfind(b"\n\n") + 2
            if cut >= 2:  # pass whole events only: a cut one must not reach the client
                block, pending = pending[:cut], pending[cut:]
                ended = block.startswith(b"event: end\n") or b"\n\nevent: end\n" in block
                yield block
    except (httpx.HTTPError, OSError) as exc:
        log.warning("node %s stopped sending a log stream: %s", peer.name,
                    type(exc).__name__)
    finally:
        await upstream.aclose()
        await client.aclose()
    if not ended:
        yield node_down_event(peer)
