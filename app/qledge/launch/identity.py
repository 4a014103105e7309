"""Durable process identity: pid + start time (/proc/<pid>/stat field 22) + boot id.

A pid alone is never trusted: after a restart it may belong to somebody else.
The start time pins the exact process; the boot id pins the kernel instance.

Exit notification and signals go through pidfds (Linux >= 5.3). Where
pidfd_open fails (an older kernel, e.g. on a 32-bit ARM box, or a seccomp
profile that refuses it), the fds handed out here are the stand-ins of
_exitpoll.py instead: exits are then found by checking this identity in /proc
every 0.2 s, and signals go by pid right after a fresh identity check.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import os
import select
import signal

import msgspec

from ._exitpoll import ExitPoller, reap


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


@functools.cache
def pidfd_unavailable() -> str | None:
    """None where pidfd_open works, else why not (checked once per process)."""
    if not hasattr(os, "pidfd_open"):
        return "this Python has no os.pidfd_open"
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError as exc:
        return f"pidfd_open: {os.strerror(exc.errno or 0)} (kernel {os.uname().release})"
    os.close(fd)
    return None


def _running(watched: tuple[Identity, str]) -> bool:
    return check(*watched) is Liveness.RUNNING


_POLLER: ExitPoller[tuple[Identity, str]] = ExitPoller(_running)


def child_fd(pid: int, boot_id: str) -> int:
    """The exit fd of a child just spawned (unreaped, so its pid is still its own)."""
    if pidfd_unavailable() is None:
        return os.pidfd_open(pid)
    ident = capture(pid, boot_id)
    if ident is None:
        raise ProcessLookupError(pid)
    return _POLLER.open(pid, (ident, boot_id))


def reaped(pid: int, fd: int) -> bool:
    """Collect our exited child behind `fd`; False while it still runs."""
    if pidfd_unavailable() is not None:
        return reap(pid)
    try:
        return os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG) is not None
    except ChildProcessError:
        return True


def send_signal(fd: int, ident: Identity, boot_id: str, sig: signal.Signals, *,
                group: bool = False) -> bool:
    """Signal the launcher behind `fd`, or its whole process group (its pid).

    With a pidfd that is open and not yet reaped the pid cannot have been
    recycled. The stand-in re-checks the identity right before the kill: a pid
    reaped and reused within those microseconds is the race pidfds close.
    False: it no longer runs, nothing was sent.
    """
    if pidfd_unavailable() is None:
        if group:
            os.killpg(ident.pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
        return True
    if check(ident, boot_id) is not Liveness.RUNNING:
        return False
    try:
        (os.killpg if group else os.kill)(ident.pid, sig)
    except ProcessLookupError:
        return False
    return True


def open_pidfd(ident: Identity, boot_id: str) -> tuple[int | None, Liveness]:
    """Open a pidfd, THEN re-check the identity: a pidfd taken after the check
    could point at a recycled pid; one taken before it cannot change target.

    The boot id comes first: a pid recorded on another boot proves nothing, not
    even that its process exited (docs/recovery.md, RECOVERY_BOOT_CHANGED)."""
    if ident.boot_id != boot_id:
        return None, Liveness.BOOT_CHANGED
    if pidfd_unavailable() is not None:
        live = check(ident, boot_id)
        fd = _POLLER.open(ident.pid, (ident, boot_id)) if live is Liveness.RUNNING else None
        return fd, live
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
    return find_launchers([(run_id, attempt_id)], boot_id).get(attempt_id)


def find_launchers(wanted: list[tuple[str, str]], boot_id: str) -> dict[str, Identity]:
    """`find_launcher` for many (run id, attempt id) pairs in one walk of /proc: a worker
    killed within the identity grace may leave a whole burst of launchers unrecorded."""
    runs_of = {attempt_id.encode(): run_id.encode() for run_id, attempt_id in wanted}
    found: dict[bytes, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        for flag, value in itertools.pairwise(argv):
            if flag == b"--attempt-id" and value in runs_of:
                if _has_pair(argv, b"--run-id", runs_of[value]):
                    found.setdefault(value, []).append(int(name))
                break
    out: dict[str, Identity] = {}
    for attempt_id, pids in found.items():
        if len(pids) == 1 and (ident := capture(pids[0], boot_id)) is not None:
            out[attempt_id.decode()] = ident
    return out


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
