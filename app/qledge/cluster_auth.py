"""The cluster credential: node-to-node requests signed with the shared secret.

The secret (`cluster_secret`, docs/fleet.md) never travels: a request carries the
sending node's name, a timestamp (ms) and an HMAC-SHA256 over the method, path,
query, timestamp and name. A receiver recomputes it with its own copy and accepts
it within ±WINDOW_MS of its clock, so a captured request cannot be replayed later;
inside the window a replay repeats a log read, which the internal routes allow
(they expose reads only). The name is inside the MAC, so a node cannot sign as
another one. The comparison is constant-time; nothing here logs the secret or a
signature.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

NODE = "X-Qledge-Node"
TIME = "X-Qledge-Time"
SIGNATURE = "X-Qledge-Signature"
WINDOW_MS = 60_000


class Refused(Exception):
    """Not a valid cluster credential (the message says why, never the secret)."""


def _mac(secret: str, node: str, method: str, path: str, query: str, at_ms: int) -> str:
    # One field per line; a name or path cannot contain a newline that shifts
    # fields (HTTP forbids it in a request line, node names are [a-z0-9-]).
    message = "\n".join((method.upper(), path, query, str(at_ms), node)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(secret: str, node: str, method: str, path: str, query: str, now_ms: int
         ) -> dict[str, str]:
    """The headers that authenticate this request as `node`'s."""
    if not secret:
        raise Refused("no cluster secret is set")
    return {NODE: node, TIME: str(now_ms),
            SIGNATURE: _mac(secret, node, method, path, query, now_ms)}


def verify(secret: str, headers: Mapping[str, str], method: str, path: str, query: str,
           now_ms: int) -> str:
    """The sending node's name, or Refused. `headers` is case-insensitive (Starlette's)."""
    if not secret:
        raise Refused("this node has no cluster secret")
    node = headers.get(NODE, "")
    raw_time = headers.get(TIME, "")
    given = headers.get(SIGNATURE, "")
    if not node or not raw_time or not given:
        raise Refused(f"missing {NODE}, {TIME} or {SIGNATURE}")
    # ASCII digits only: str.isdigit() also takes "²" and other digits int() refuses
    # (an unauthenticated 500), and int() takes non-ASCII digits the MAC never saw.
    if not (raw_time.isascii() and raw_time.isdigit()) or len(raw_time) > 16:
        raise Refused(f"{TIME} must be milliseconds since the epoch")
    at_ms = int(raw_time)
    expected = _mac(secret, node, method, path, query, at_ms)
    if not hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace")):
        raise Refused("bad signature")
    # After the MAC: a forged timestamp is refused as a bad signature, and only a
    # genuine request learns that its clock (or its replay) is out of the window.
    if abs(now_ms - at_ms) > WINDOW_MS:
        raise Refused(f"timestamp outside ±{WINDOW_MS // 1000} s of this node's clock")
    return node
