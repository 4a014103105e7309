"""Filesystem side of `qledge audit receipts`: confined, bounded, never reads contents.

Everything is resolved against a canonical root and opened relative to a
directory fd with O_NOFOLLOW, and every entry is looked at with lstat only:
a task runs next to its receipts as an ordinary user and may plant symlinks,
FIFOs or directories there, so nothing it plants can make the audit follow a
link, block on a FIFO, or move a file from outside the root.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import stat
from collections.abc import Iterator

import msgspec

from ..db.audit_queries import Lookup
from ..fs import dirfd
from ..ids import shard_key
from ..model import TERMINAL_ATTEMPT

# Moved files keep their name, or get dirfd.numbered's `<stem>.<n><suffix>` when it is
# taken (like the consumer's quarantine). Before that routine was shared the audit
# appended `.<n>` to the whole name: such files stay as they are, never overwritten.
ORPHAN_DIR = ".orphan-quarantine"

JOURNALED = "journaled"
ACTIVE = "active"
TERMINAL_UNJOURNALED = "terminal-unjournaled"
UNKNOWN_ATTEMPT = "unknown-attempt"
TEMP = "temp"
OTHER_REGULAR = "other-regular"
TOO_YOUNG = "too-young"
UNSAFE = "unsafe"
CLASSES = (JOURNALED, ACTIVE, TERMINAL_UNJOURNALED, UNKNOWN_ATTEMPT, TEMP, OTHER_REGULAR,
           TOO_YOUNG, UNSAFE)
CLEAN = frozenset({JOURNALED, ACTIVE})
ELIGIBLE = frozenset({TERMINAL_UNJOURNALED, UNKNOWN_ATTEMPT, TEMP, OTHER_REGULAR})
# The terminal set, not "not active": a status this code does not know (a newer
# schema) counts as active.
TERMINAL_STATUSES = frozenset(s.value for s in TERMINAL_ATTEMPT)

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
_RECEIPT = re.compile(rf"({_UUID})\.json")
_TEMP = re.compile(rf"\.({_UUID})\.[0-9]{{1,10}}\.tmp")
_ROOT_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class AuditError(Exception):
    """The audit cannot run safely (exit 2); the run stops before touching anything more."""


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    shard: str
    name: str
    kind: str  # one of CLASSES
    st: os.stat_result

    @property
    def rel(self) -> str:
        return f"{self.shard}/{self.name}"


class ShardScan(msgspec.Struct, frozen=True, kw_only=True):
    shard: str
    found: list[tuple[str, os.stat_result]]
    overflow: bool


class Moves(msgspec.Struct, kw_only=True):
    moved: list[str] = msgspec.field(default_factory=list)  # new relative paths
    failed: list[tuple[str, str]] = msgspec.field(default_factory=list)  # (rel, reason)


def shard_window(cursor: str, count: int) -> tuple[list[str], str]:
    """`count` shard names from `cursor` in order (wrapping ff → 00), and the next cursor."""
    start = int(cursor, 16)
    names = [f"{(start + i) % 256:02x}" for i in range(count)]
    return names, f"{(start + count) % 256:02x}"


@contextlib.contextmanager
def open_root(root: str) -> Iterator[tuple[str, int]]:
    """(canonical root, its fd); AuditError when it is missing or not a directory."""
    real = os.path.realpath(root)
    try:
        fd = os.open(real, _ROOT_DIR_FLAGS)
    except OSError as exc:
        raise AuditError(f"receipts root {root!r} is not a directory ({exc.strerror})") from exc
    try:
        yield real, fd
    finally:
        os.close(fd)


def _check_dir(real_root: str, rel: str) -> bool:
    """True if `rel` is a real directory under the root, False if absent; else AuditError."""
    path = os.path.join(real_root, rel)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    resolved = os.path.realpath(path)
    if os.path.commonpath([real_root, resolved]) != real_root:
        raise AuditError(f"{rel!r} resolves outside the receipts root ({resolved!r}); refusing")
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise AuditError(f"{rel!r} in the receipts root is not a real directory; refusing")
    return True


def preflight(real_root: str, shards: list[str], quarantine: bool) -> None:
    """Verify every directory this run may touch before anything is read or moved."""
    for shard in shards:
        _check_dir(real_root, shard)
    # Checked in report mode too: a planted quarantine link is a finding worth stopping on.
    if _check_dir(real_root, ORPHAN_DIR) and quarantine:
        for shard in shards:
            _check_dir(real_root, f"{ORPHAN_DIR}/{shard}")


@contextlib.contextmanager
def _subdir(name: str, dir_fd: int) -> Iterator[int]:
    try:
        with dirfd.open_dir(name, dir_fd) as fd:
            yield fd
    except dirfd.UnsafeDirectory as exc:  # swapped for a symlink after the preflight
        raise AuditError(str(exc)) from exc


def scan_shard(root_fd: int, shard: str, limit: int) -> ShardScan:
    """lstat the first `limit` entries; reading a `limit + 1`-th one means overflow."""
    found: list[tuple[str, os.stat_result]] = []
    try:
        with _subdir(shard, root_fd) as fd, os.scandir(fd) as it:
            # Incremental: a shard with a million files costs limit + 1 readdir entries.
            names = [entry.name for entry in itertools.islice(it, limit + 1)]
            for name in names[:limit]:
                with contextlib.suppress(FileNotFoundError):  # gone since readdir
                    found.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
    except FileNotFoundError:
        return ShardScan(shard=shard, found=[], overflow=False)  # shard not created yet
    return ShardScan(shard=shard, found=found, overflow=len(names) > limit)


def attempt_id_of(name: str) -> str | None:
    match = _RECEIPT.fullmatch(name) or _TEMP.fullmatch(name)
    return match.group(1) if match else None


def classify(shard: str, name: str, st: os.stat_result, known: Lookup, now: float,
             min_age: float) -> str:
    # Type first: a symlink, FIFO or directory is never moved, whatever its name says.
    if not stat.S_ISREG(st.st_mode):
        return UNSAFE
    attempt_id = attempt_id_of(name)
    if attempt_id is not None:
        # Temp files carry the id too: the runtime cleans those of its own attempts.
        if attempt_id in known.journaled:
            return JOURNALED
        status = known.statuses.get(attempt_id)
        if status is not None and status not in TERMINAL_STATUSES:
            return ACTIVE  # upgrade protection: attempts from before the journal
    if _TEMP.fullmatch(name):
        kind = TEMP
    elif attempt_id is not None and shard_key(attempt_id) == shard:
        kind = TERMINAL_UNJOURNALED if attempt_id in known.statuses else UNKNOWN_ATTEMPT
    else:
        kind = OTHER_REGULAR  # includes a receipt name in the wrong shard
    # A future mtime (clock step) counts as young: unsure means hands off.
    return TOO_YOUNG if now - st.st_mtime < min_age else kind


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns) == (b.st_dev, b.st_ino, b.st_size,
                                                              b.st_mtime_ns)


def _move_one(src_fd: int, dst_fd: int, entry: Entry) -> str:
    """Move `entry` into the quarantine under a free name, if it is still what was scanned."""
    current = os.stat(entry.name, dir_fd=src_fd, follow_symlinks=False)
    if not stat.S_ISREG(current.st_mode) or not _same(current, entry.st):
        raise _Skip("changed since the scan")
    try:
        target = dirfd.move_no_overwrite(src_fd, entry.name, dst_fd, current)
    except dirfd.Changed:
        raise _Skip("changed since the scan") from None
    except FileExistsError:
        raise _Skip(f"{dirfd.MAX_SUFFIX} quarantined files with that name already exist"
                    ) from None
    return f"{ORPHAN_DIR}/{entry.shard}/{target}"


class _Skip(Exception):
    pass


def quarantine_shard(root_fd: int, shard: str, entries: list[Entry]) -> Moves:
    """Move eligible entries of one (non-overflow) shard into `.orphan-quarantine/<shard>/`."""
    result = Moves()
    if not entries:
        return result  # nothing is created for nothing to move
    try:
        with contextlib.ExitStack() as stack:
            # 0700 and re-checked on open: created here, or verified real directories.
            top_fd = dirfd.private_dir(ORPHAN_DIR, root_fd, stack, enforce=True)
            dst_fd = dirfd.private_dir(shard, top_fd, stack, enforce=True)
            src_fd = stack.enter_context(_subdir(shard, root_fd))
            for entry in entries:
                try:
                    result.moved.append(_move_one(src_fd, dst_fd, entry))
                except _Skip as exc:
                    result.failed.append((entry.rel, str(exc)))
                except FileNotFoundError:
                    result.failed.append((entry.rel, "vanished since the scan"))
                except OSError as exc:
                    result.failed.append((entry.rel, errno.errorcode.get(exc.errno or 0, "error")))
            if result.moved:
                os.fsync(dst_fd)  # the new names first, then the removal of the old ones
                os.fsync(src_fd)
    except dirfd.UnsafeDirectory as exc:
        raise AuditError(str(exc)) from exc
    return result
