"""The one wall clock: milliseconds since the epoch, the unit every stored time uses.

Loops that wait use the event loop's monotonic clock instead; this is for
times that are compared with the database or shown to people.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
