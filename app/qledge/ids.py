"""UUIDv7 ids and the shard key used for on-disk fan-out.

A UUIDv7 starts with a millisecond timestamp, so its prefix would put every
file created in the same minute into one shard. The shard key is therefore
taken from the *end* of the id, which is random.
"""

from __future__ import annotations

import os
import re

from . import clock

_CANONICAL = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def uuid7(now_ms: int | None = None) -> str:
    """A fresh UUIDv7 in lower-case canonical text (RFC 9562)."""
    ms = clock.now_ms() if now_ms is None else now_ms
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68  # 12 bits
    rand_b = rand & ((1 << 62) - 1)  # 62 bits
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def is_uuid7(text: str) -> bool:
    """True only for canonical lower-case UUIDv7 text."""
    return _CANONICAL.fullmatch(text) is not None


def shard_key(attempt_id: str) -> str:
    """Two lower-case hex digits from the random tail of the id (256 shards)."""
    if not is_uuid7(attempt_id):
        raise ValueError("not a canonical UUIDv7")
    return attempt_id[-2:]
