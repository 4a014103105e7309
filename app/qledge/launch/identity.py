"""Durable process identity: pid + start time (/proc/<pid>/stat field 22) + boot id.

A pid alone is never trusted: after a restart it may belong to somebody else.
The start time pins the exact process; the boot id pins the kernel instance.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import os
import select

import msgspec


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    start_time: int
    boot_id: str


class Liveness(enum.StrEnum):
    RUNNING = "running"
    EXITED = "exited"  # gone, or a zombie waiting to be reaped
    MISMATCH = "mismatch"  # the pid now names another process
    BOOT_CHANGED = "boot_changed"
    UNSUPPORTED = "unsupported"  # no /proc or no identity recorded


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm may contain spaces and ')' — split after the LAST ')'
    rest = raw[raw.rindex(")") + 2:].split()
    return rest  # rest[0] is field 3 (state)


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22


def state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def capture(pid: int, boot_id: str) -> Identity | None:
    st = start_time(pid)
    return Identity(pid=pid, start_time=st, boot_id=boot_id) if st is not None else None


def check(ident: Identity | None, boot_id: str) -> Liveness:
    if ident is None or not os.path.isdir("/proc/self"):
        return Liveness.UNSUPPORTED
    if ident.boot_id != boot_id:
        return Liveness.BOOT_CHANGED
    fields = _stat_fields(ident.pid)
    if fields is None:
        return Liveness.EXITED
    if int(fields[19]) != ident.start_time:
        return Liveness.MISMATCH
    if fields[0] in ("Z", "X"):
        return Liveness.EXITED
    return Liveness.RUNNING


def open_pidfd(ident: Identity, boot_id: str) -> tuple[int | None, Liveness]:
    """Open a pidfd, THEN re-check the identity: a pidfd taken after the check
    could point at a recycled pid; one taken before it cannot change target."""
    try:
        fd = os.pidfd_open(ident.pid)
    except ProcessLookupError:
        return None, Liveness.EXITED
    except OSError:
        return None, check(ident, boot_id)
    live = check(ident, boot_id)
    if live is not Liveness.RUNNING:
        os.close(fd)
        return None, live
    return fd, live


def find_launcher(run_id: str, attempt_id: str, boot_id: str) -> Identity | None:
    """The one live launcher whose argv names this run and attempt, or None.

    Used only at start-up for attempts whose spawn was never confirmed (a rare,
    bounded /proc walk). Two matches are ambiguous: None (fail closed).
    """
    want = (b"--run-id", run_id.encode(), b"--attempt-id", attempt_id.encode())
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if _has_pair(argv, want[0], want[1]) and _has_pair(argv, want[2], want[3]):
            found.append(int(name))
    if len(found) != 1:
        return None
    return capture(found[0], boot_id)


def _has_pair(argv: list[bytes], flag: bytes, value: bytes) -> bool:
    return any(a == flag and b == value for a, b in itertools.pairwise(argv))


def exited(pidfd: int) -> bool:
    """Has the process behind `pidfd` exited? (A pidfd turns readable then; no wait.)"""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


async def wait_exit(pidfd: int, timeout_s: float) -> bool:
    """Wait on the event loop, never blocking it, until the process exits; False on timeout."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(True)

    loop.add_reader(pidfd, ready)
    try:
        await asyncio.wait_for(done, timeout_s)
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)
