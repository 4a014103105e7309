"""Background processes a test starts and must find (or kill) again by an argument.

`MARK` is a valid `sleep` duration (~72 minutes) unique to this pytest process:
the search looks at the whole machine, and with one fixed mark a concurrent run
of the same tests (another checkout, a CI check on the same host) killed this
run's sleeps while its command was still running, so the launcher rightly found
fewer or no leftovers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from pathlib import Path

MARK = f"4321.{uuid.uuid4().int % 10**12:012d}"


def marked() -> list[int]:
    """Live processes whose command line carries MARK (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if MARK.encode() in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry))
    return found


def kill_marked() -> None:
    for pid in marked():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
