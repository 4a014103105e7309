"""Directory-fd primitives for the volumes tasks can write to: nothing follows a
link, nothing is overwritten.

A task runs as the same user beside its receipts and logs and may plant
symlinks, FIFOs or directories there. So every path is opened relative to a
directory fd with O_NOFOLLOW, and files change names only by hard link +
unlink, or rename-no-replace where links are refused (another user's file
under protected_hardlinks, a filesystem without links): a move never
overwrites what is already there. One routine, `move_no_overwrite`, moves
evidence for both the receipt store's quarantine and the orphan audit.

All calls block; the async runtime runs them in a thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Errnos meaning "this filesystem (or this source) cannot be hard-linked".
NO_HARDLINK = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK,
                         errno.ENOSYS})
# A file moved under a taken name gets `<stem>.<n><suffix>`, n = 1 … MAX_SUFFIX.
MAX_SUFFIX = 16
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


class UnsafeDirectory(Exception):
    """A directory on the way is a symlink or not a directory: refuse, never follow."""


class Changed(OSError):
    """The file at the name is not the one the caller examined (swapped meanwhile):
    transient, like any other OSError of a move — the caller tries again later."""


@contextlib.contextmanager
def open_dir(name: str, dir_fd: int | None) -> Iterator[int]:
    """A directory fd for `name` below `dir_fd`; UnsafeDirectory for a symlink or a file,
    FileNotFoundError when it does not exist."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeDirectory(f"{name!r} is not a real directory") from exc
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def private_dir(name: str, dir_fd: int, stack: contextlib.ExitStack, enforce: bool) -> int:
    """Open (creating 0700 if missing) a directory below `dir_fd`, never via a symlink.

    `enforce` resets an existing directory's mode to 0700 as well; a new entry is
    made durable (fsync of `dir_fd`) before anything is put into it.
    """
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        created = True
    except FileExistsError:
        created = False
    fd = stack.enter_context(open_dir(name, dir_fd))
    if (created or enforce) and stat.S_IMODE(os.fstat(fd).st_mode) != 0o700:
        os.fchmod(fd, 0o700)  # mkdir's mode is filtered by the umask
    if created:
        os.fsync(dir_fd)
    return fd


@functools.cache
def _libc_renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2  # glibc >= 2.28; older or other libcs may lack it
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def rename_noreplace(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """renameat2(RENAME_NOREPLACE); FileExistsError when `dst` exists."""
    fn = _libc_renameat2()
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available in this C library")
    if fn(src_dir_fd, os.fsencode(src), dst_dir_fd, os.fsencode(dst), _RENAME_NOREPLACE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), src, None, dst)


def rename_exchange(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """renameat2(RENAME_EXCHANGE): swap two existing names in one step (a subscription's
    new tree and its scripts folder: never a moment without either)."""
    fn = _libc_renameat2()
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available in this C library")
    if fn(src_dir_fd, os.fsencode(src), dst_dir_fd, os.fsencode(dst), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), src, None, dst)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """All of `data` to `fd`: os.write may take only part (a pipe, a signal, a full disk
    raises instead)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def numbered(name: str, n: int) -> str:
    """The n-th name tried for `name`: itself, then `<stem>.<n><suffix>` (a.json → a.1.json)."""
    if n == 0:
        return name
    stem, suffix = os.path.splitext(name)
    return f"{stem}.{n}{suffix}"


def _new_name(src_fd: int, name: str, dst_fd: int, target: str) -> bool:
    """Give the file a second name without overwriting (True), or move it where links are
    refused (False). FileExistsError when `target` is taken."""
    try:
        os.link(name, target, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        return True
    except OSError as exc:
        if exc.errno not in NO_HARDLINK:
            raise
    rename_noreplace(src_fd, name, dst_fd, target)
    return False


def move_no_overwrite(src_fd: int, name: str, dst_fd: int, source: os.stat_result) -> str:
    """Move the file `source` (lstat of `name` below `src_fd`) to the first free name of
    `numbered(name, n)` below `dst_fd`; returns that name.

    Never overwrites: a name already taken by another file is skipped. Idempotent
    across a crash between link and unlink: a name already holding `source` is
    where the move ends. Changed when the file at `name` was swapped for another
    since `source` was taken (that one stays where it was); FileExistsError when
    every name up to MAX_SUFFIX is taken. The caller fsyncs the directories.
    """
    for n in range(MAX_SUFFIX + 1):
        target = numbered(name, n)
        try:
            linked = _new_name(src_fd, name, dst_fd, target)
        except FileExistsError:
            if os.path.samestat(os.stat(target, dir_fd=dst_fd, follow_symlinks=False), source):
                break  # an earlier move made this name; only the unlink is missing
            continue  # someone else's evidence: never overwrite it
        if not os.path.samestat(os.stat(target, dir_fd=dst_fd, follow_symlinks=False), source):
            if linked:
                os.unlink(target, dir_fd=dst_fd)  # our own new name for the wrong file
            else:
                # Renamed the wrong file away: put it back where it was, never over anything.
                rename_noreplace(dst_fd, target, src_fd, name)
            raise Changed(name)
        break
    else:
        raise FileExistsError(errno.EEXIST, f"{MAX_SUFFIX} files named like {name!r} exist")
    with contextlib.suppress(FileNotFoundError):
        if os.path.samestat(os.stat(name, dir_fd=src_fd, follow_symlinks=False), source):
            os.unlink(name, dir_fd=src_fd)
    return target
