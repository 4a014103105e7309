"""Durable process identity: pid + start time (/proc/<pid>/stat field 22) + boot id.

A pid alone is never trusted: after a restart it may belong to somebody else.
The start time pins the exact process; the boot id pins the kernel instance.
"""

from __future__ import annotations

import enum
import itertools
import os

import msgspec


class PidfdUnavailable(Exception):
    """The kernel (or a seccomp profile) refuses pidfd_open."""


def require_pidfds() -> None:
    """Fail at start, with the reason, where pidfd_open does not work.

    The runtime watches launcher exits, re-attaches them after a restart and
    signals them race-free through pidfds: Linux >= 5.3 (every Raspberry Pi OS
    since bullseye, 32-bit included; Docker >= 20.10's seccomp profile allows
    it). There is no polling fallback: on an older kernel the container stops
    here with this message instead of failing at the first task.
    """
    if not hasattr(os, "pidfd_open"):
        raise PidfdUnavailable("this Python has no os.pidfd_open (built without it)")
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError as exc:
        raise PidfdUnavailable(
            f"pidfd_open failed: {os.strerror(exc.errno or 0)}: qledge needs Linux >= 5.3 "
            f"(this kernel: {os.uname().release}) and, in a container, a seccomp "
            "profile that allows pidfd_open (Docker >= 20.10)") from exc
    os.close(fd)


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
