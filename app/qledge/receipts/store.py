"""The receipts volume: shard paths, confined reads, quarantine moves, probe.

Every path is opened relative to a directory fd with O_NOFOLLOW, so a symlink
planted by a task (which runs as an ordinary user next to its receipt) can
never make the control plane read, move or delete a file outside the root;
files move only through `dirfd.move_no_overwrite`, which never overwrites
evidence (docs/contract.md §5). Contents are never logged.

All calls block; the async runtime runs them in a thread. OSErrors other than
the ones mapped here are transient (the caller keeps the receipt and retries).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from qledge.fs import dirfd
from qledge.ids import is_uuid7, shard_key
from qledge.receipts.codec import MAX_RECEIPT_BYTES, ReceiptReason, Rejected

logger = logging.getLogger(__name__)

QUARANTINE_DIR = ".quarantine"
# O_NONBLOCK: if the entry was swapped for a FIFO after the lstat, open must not hang.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PROBE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
# Quarantine names are dirfd.numbered(<id>.json, n): <id>.json, then <id>.<n>.json.
_QUARANTINE_REF = re.compile(rf"\.quarantine/([0-9a-f]{{2}})/({_UUID})(?:\.([1-9]|1[0-6]))?\.json")


class UnsupportedVolume(Exception):
    """The receipts volume cannot publish receipts safely (see `probe`)."""


def _checked_id(attempt_id: str) -> str:
    # is_uuid7 alone accepts a trailing "\n" (`$`); a path component must not.
    if len(attempt_id) != 36 or not is_uuid7(attempt_id):
        raise ValueError("attempt id is not a canonical UUIDv7")
    return attempt_id


def _read_bounded(fd: int) -> bytes:
    # One byte over the cap is enough for the codec to say RECEIPT_TOO_LARGE.
    chunks: list[bytes] = []
    remaining = MAX_RECEIPT_BYTES + 1
    while remaining > 0:
        chunk = os.read(fd, remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def quarantine_names(attempt_id: str) -> list[str]:
    """Every name a quarantined receipt of this attempt can have, in the order tried."""
    return [dirfd.numbered(f"{attempt_id}.json", n) for n in range(dirfd.MAX_SUFFIX + 1)]


class ReceiptStore:
    """Receipts under `<root>/<shard>/<attemptId>.json`, quarantine under `.quarantine/`."""

    def __init__(self, root: Path) -> None:
        real = Path(os.path.realpath(root))
        if not real.is_dir():
            raise NotADirectoryError(f"receipts root {str(root)!r} is not a directory")
        self.root = real

    def relative_path(self, attempt_id: str) -> str:
        return f"{shard_key(_checked_id(attempt_id))}/{attempt_id}.json"

    def ensure_shard(self, attempt_id: str) -> Path:
        """Create the attempt's shard (0700) before spawn; refuse a symlinked one."""
        shard = shard_key(_checked_id(attempt_id))
        with contextlib.ExitStack() as stack:
            root_fd = stack.enter_context(dirfd.open_dir(str(self.root), None))
            # Opened with O_NOFOLLOW|O_DIRECTORY: a symlink or file there is UnsafeDirectory.
            dirfd.private_dir(shard, root_fd, stack, enforce=False)
        return self.root / shard

    @contextlib.contextmanager
    def _shard_fd(self, attempt_id: str) -> Iterator[int]:
        # FileNotFoundError when the shard does not exist (yet).
        with (
            dirfd.open_dir(str(self.root), None) as root_fd,
            dirfd.open_dir(shard_key(_checked_id(attempt_id)), root_fd) as shard_fd,
        ):
            yield shard_fd

    def read(self, attempt_id: str) -> bytes | Rejected | None:
        """The receipt's bytes (at most 4097), None if absent, Rejected if not a file."""
        name = f"{attempt_id}.json"
        not_regular = Rejected(ReceiptReason.RECEIPT_NOT_REGULAR)
        try:
            with self._shard_fd(attempt_id) as shard_fd:
                # lstat first so a device node or FIFO is never even opened.
                if not stat.S_ISREG(os.stat(name, dir_fd=shard_fd, follow_symlinks=False).st_mode):
                    return not_regular
                try:
                    fd = os.open(name, _FILE_FLAGS, dir_fd=shard_fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENXIO):  # swapped after the lstat
                        return not_regular
                    raise
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        return not_regular
                    return _read_bounded(fd)
                finally:
                    os.close(fd)
        except FileNotFoundError:
            return None

    def remove(self, attempt_id: str) -> bool:
        """Delete a consumed receipt (only after the commit); False if already gone.

        No directory fsync: if a crash forgets the unlink, the receipt comes back,
        replays into `already_terminal` and is removed again — one fsync saved per
        attempt on an SD card, no correctness lost.
        """
        try:
            with self._shard_fd(attempt_id) as shard_fd:
                os.unlink(f"{attempt_id}.json", dir_fd=shard_fd)
        except FileNotFoundError:
            return False
        return True

    def quarantine(self, attempt_id: str, reason: str) -> str:
        """Move the receipt into `.quarantine/<shard>/` and return its relative reference.

        Idempotent across a crash between link and unlink (same inode at both
        names). A different file already quarantined under the name gets the
        next deterministic suffix `<id>.<n>.json`. FileNotFoundError when there
        is nothing to move and nothing under the plain quarantine name.
        """
        return self.quarantine_once(attempt_id, reason)[0]

    def quarantine_once(self, attempt_id: str, reason: str) -> tuple[str, bool]:
        """`quarantine`, and whether this call moved the file (False: an earlier call
        did — two consumers of one receipt at once, e.g. the exit watcher's and a
        supervision round's: only the one that moved it reports it)."""
        shard = shard_key(_checked_id(attempt_id))
        name = f"{attempt_id}.json"
        with contextlib.ExitStack() as stack:
            root_fd = stack.enter_context(dirfd.open_dir(str(self.root), None))
            top_fd = dirfd.private_dir(QUARANTINE_DIR, root_fd, stack, enforce=True)
            dst_fd = dirfd.private_dir(shard, top_fd, stack, enforce=True)
            try:
                src_fd = stack.enter_context(dirfd.open_dir(shard, root_fd))
                source = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
            except FileNotFoundError:
                # An earlier call finished the move but its caller did not see it.
                os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
                return f"{QUARANTINE_DIR}/{shard}/{name}", False
            target = dirfd.move_no_overwrite(src_fd, name, dst_fd, source)
            os.fsync(dst_fd)
            os.fsync(src_fd)
        ref = f"{QUARANTINE_DIR}/{shard}/{target}"
        logger.info("receipt quarantined ref=%s reason=%s", ref, reason)
        return ref, True

    def purge_quarantined(self, ref: str) -> bool:
        """Delete one quarantined file by its exact reference (retention)."""
        match = _QUARANTINE_REF.fullmatch(ref)
        if match is None or shard_key(match.group(2)) != match.group(1):
            raise ValueError("not a quarantine reference")
        shard, name = match.group(1), ref.rsplit("/", 1)[1]
        try:
            with (
                dirfd.open_dir(str(self.root), None) as root_fd,
                dirfd.open_dir(QUARANTINE_DIR, root_fd) as top_fd,
                dirfd.open_dir(shard, top_fd) as shard_fd,
            ):
                os.unlink(name, dir_fd=shard_fd)
                os.fsync(shard_fd)
        except FileNotFoundError:
            return False
        return True


def _advice(root: str, problem: str) -> str:
    return (
        f"receipts volume {root!r} {problem}. The receipts volume must support hard links "
        "or rename-no-replace (renameat2) and POSIX file modes: use ext4, f2fs, xfs or "
        "btrfs, or a Docker named volume — not vfat/exfat (e.g. a FAT-formatted SD card "
        "or USB stick)."
    )


def _keeps_modes(fd: int) -> bool:
    # Two different modes: a vfat mount with umask=077 would *show* 0600 anyway.
    for mode in (0o640, 0o600):
        try:
            os.fchmod(fd, mode)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
                return False
            raise
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            return False
    return True


def _publishes(root_fd: int, first: str, second: str, third: str) -> bool:
    """Can `first` be published under `second` without any chance of overwriting?"""
    try:
        os.link(first, second, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        return True
    except OSError as exc:
        if exc.errno not in dirfd.NO_HARDLINK:
            raise
    os.close(os.open(third, _PROBE_FLAGS, 0o600, dir_fd=root_fd))
    try:
        dirfd.rename_noreplace(root_fd, first, root_fd, second)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
            return False
        raise
    try:
        dirfd.rename_noreplace(root_fd, third, root_fd, second)
    except FileExistsError:
        return True  # refused to replace: NOREPLACE is really honoured
    return False  # the flag was ignored and `second` got overwritten


def probe(root: Path) -> None:
    """Start-up check that receipts can be published and kept private here.

    Raises UnsupportedVolume with operator advice; leaves nothing behind.
    """
    real = os.path.realpath(root)
    base = f".qledge-probe.{os.getpid()}.{secrets.token_hex(4)}"
    names = (f"{base}.a", f"{base}.b", f"{base}.c")
    with dirfd.open_dir(real, None) as root_fd:
        try:
            fd = os.open(names[0], _PROBE_FLAGS, 0o600, dir_fd=root_fd)
        except OSError as exc:
            raise UnsupportedVolume(_advice(real, f"refuses new files ({exc.strerror})")) from exc
        try:
            try:
                modes_kept = _keeps_modes(fd)
            finally:
                os.close(fd)
            if not modes_kept:
                raise UnsupportedVolume(_advice(real, "does not keep POSIX file modes"))
            if not _publishes(root_fd, *names):
                raise UnsupportedVolume(
                    _advice(real, "supports neither hard links nor rename-no-replace")
                )
        finally:
            for name in names:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=root_fd)
