"""File work confined to one root, done only through directory fds (docs/scripts.md).

Every step from the root down is an `openat(…, O_DIRECTORY|O_NOFOLLOW)` on the fd of
the step before, so no path string is ever resolved by the kernel from `/` and no
symlink is ever followed: a symlink on the way is refused by name, and so is a FIFO,
socket or device where a file or folder is expected. Files are opened with
`O_NONBLOCK|O_NOFOLLOW` after an `lstat`, then `fstat`-checked, so a FIFO swapped in
meanwhile can never block a thread. Writes go to a hidden temp file in the target's
own folder, are fsync'd and renamed over the target, and the folder is fsync'd.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator

from .. import failpoints

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
NAME_MAX = 255  # bytes, like the kernel's
PATH_MAX = 4096
TEMP_PREFIX = ".qledge-tmp-"  # hidden from listings; a killed writer may leave one


class ScriptError(Exception):
    """A refused or failed scripts operation; `reason` is a stable code, `path` the
    relative path it concerns (http/errors.py maps each class to a status)."""

    reason = "error"

    def __init__(self, message: str, *, path: str = "", reason: str | None = None,
                 field: str = "path") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.field = field
        if reason is not None:
            self.reason = reason


class ScriptPathInvalid(ScriptError):
    """The path text itself is refused (`..`, absolute, NUL, …): nothing was touched."""


class ScriptSymlink(ScriptError):
    reason = "symlink"


class ScriptNotRegular(ScriptError):
    """A FIFO, socket or device where a file or folder was expected."""


class ScriptNotFound(ScriptError):
    reason = "not_found"


class ScriptExists(ScriptError):
    reason = "exists"


class ScriptWrongType(ScriptError):
    """A folder where a file is expected, or the other way round."""


class ScriptTooLarge(ScriptError):
    reason = "too_large"


class ScriptBinary(ScriptError):
    reason = "binary"


class ScriptChanged(ScriptError):
    reason = "changed"


class ScriptTreeTooLarge(ScriptError):
    reason = "tree_too_large"


class ScriptVersionNotFound(ScriptError):
    reason = "version_not_found"


class ScriptsUnavailable(ScriptError):
    reason = "root_unavailable"


def kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char_device"
    if stat.S_ISBLK(mode):
        return "block_device"
    return "unknown"


def parse(rel: str, *, allow_root: bool = False, field: str = "path") -> tuple[str, ...]:
    """The parts of a relative path, or ScriptPathInvalid naming why not."""
    def bad(reason: str, message: str) -> ScriptPathInvalid:
        return ScriptPathInvalid(message, path=rel, reason=reason, field=field)

    if rel == "":
        if allow_root:
            return ()
        raise bad("empty", f"{field} must not be empty")
    if "\x00" in rel:
        raise bad("nul", f"{field} must not contain a NUL byte")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in rel):
        raise bad("control_char", f"{field} must not contain control characters")
    try:
        encoded = rel.encode("utf-8")
    except UnicodeEncodeError:
        raise bad("encoding", f"{field} is not valid UTF-8") from None
    if rel.startswith("/"):
        raise bad("absolute", f"{field} must be relative to the scripts folder, "
                              "not absolute")
    if len(encoded) > PATH_MAX:
        raise bad("too_long", f"{field} is longer than {PATH_MAX} bytes")
    parts = tuple(rel.split("/"))
    for part in parts:
        if part == "..":
            raise bad("dotdot", f"{field} must not contain '..'")
        if part == ".":
            raise bad("dot_part", f"{field} must not contain '.' parts")
        if part == "":
            raise bad("empty_part", f"{field} must not contain empty parts ('//' or a "
                                    "trailing '/')")
        if len(part.encode("utf-8")) > NAME_MAX:
            raise bad("too_long", f"a name in {field} is longer than {NAME_MAX} bytes")
    return parts


def join(parts: Iterable[str]) -> str:
    return "/".join(parts)


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def refuse_kind(st: os.stat_result, rel: str, want: str) -> None:
    """Raise the named error when the entry at `rel` is not a `want` ("file"/"directory")."""
    found = kind(st.st_mode)
    if found == want:
        return
    if found == "symlink":
        raise ScriptSymlink(f"{rel} is a symlink: symlinks are not followed", path=rel)
    if found in ("file", "directory"):
        reason = "is_directory" if found == "directory" else "not_directory"
        raise ScriptWrongType(f"{rel} is a {found}, not a {want}", path=rel, reason=reason)
    raise ScriptNotRegular(f"{rel} is a {found.replace('_', ' ')}, not a regular "
                           f"{want}", path=rel, reason=found)


class NotAFolder(NotADirectoryError):
    """A level of a folder path that is a file or a symlink (never followed); `parts`
    is the path up to and including it."""

    def __init__(self, parts: tuple[str, ...]) -> None:
        super().__init__(errno.ENOTDIR, f"{'/'.join(parts)} is not a folder")
        self.parts = parts


def folder_fd(root_fd: int, parts: tuple[str, ...], mode: int, *,
              made: Callable[[tuple[str, ...]], None] | None = None,
              durable: bool = False) -> int:
    """An fd of root/parts, each missing level made with `mode`, never through a link
    (NotAFolder). `made` hears each level created (for an undo); `durable` fsyncs the
    parent of each, so a new folder survives a power cut with what is put in it."""
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts):
            try:
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(name, mode, dir_fd=fd)
                if made is not None:
                    made(parts[:i + 1])
                if durable:
                    os.fsync(fd)
                nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                raise NotAFolder(parts[:i + 1]) from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_root(root: os.PathLike[str] | str) -> int:
    try:
        return os.open(root, DIR_FLAGS)
    except OSError as exc:
        raise ScriptsUnavailable(f"the scripts folder cannot be opened: {exc.strerror}") \
            from exc


def _open_dir(dir_fd: int, name: str, rel: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise ScriptNotFound(f"{rel} does not exist", path=rel) from None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        st = lstat_at(dir_fd, name)
        if st is None:
            raise ScriptNotFound(f"{rel} does not exist", path=rel) from None
        refuse_kind(st, rel, "directory")
        raise


@contextlib.contextmanager
def folder(root_fd: int, parts: tuple[str, ...], *, create: bool = False,
           mode: int = 0o755) -> Iterator[int]:
    """An fd of the folder at `parts` under root_fd, reached one openat at a time;
    `create` makes missing folders on the way (each fsync'd into its parent)."""
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts):
            rel = join(parts[: i + 1])
            try:
                nxt = _open_dir(fd, name, rel)
            except ScriptNotFound:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=fd)
                    os.fsync(fd)
                nxt = _open_dir(fd, name, rel)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def open_file(dir_fd: int, name: str, rel: str) -> tuple[int, os.stat_result]:
    """A regular file opened read-only without following a symlink or blocking."""
    st = lstat_at(dir_fd, name)
    if st is None:
        raise ScriptNotFound(f"{rel} does not exist", path=rel)
    refuse_kind(st, rel, "file")
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise ScriptNotFound(f"{rel} does not exist", path=rel) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ScriptSymlink(f"{rel} is a symlink: symlinks are not followed",
                                path=rel) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped between the lstat and the open
        os.close(fd)
        refuse_kind(st, rel, "file")
    return fd, st


def read_all(fd: int, limit: int, rel: str) -> bytes:
    """The whole file, refusing more than `limit` bytes (it may grow while read)."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise ScriptTooLarge(f"{rel} is larger than {limit} bytes", path=rel)
        chunks.append(chunk)


def _temp_name() -> str:
    return TEMP_PREFIX + secrets.token_hex(8)


class TempFile:
    """A hidden temp file in `dir_fd`'s folder, filled, then renamed over a name."""

    def __init__(self, dir_fd: int, mode: int = 0o644) -> None:
        self.dir_fd = os.dup(dir_fd)
        self.mode = mode
        self.name = _temp_name()
        self.size = 0
        try:
            self.fd = os.open(self.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o600, dir_fd=self.dir_fd)
        except BaseException:
            os.close(self.dir_fd)
            raise

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
            self.size += n
            failpoints.hit("scripts.write.chunk")

    def commit(self, name: str, into: int | None = None) -> None:
        """fsync, rename over `name` in this folder or in the folder `into` (never through
        a symlink: rename replaces the name itself), fsync the folder(s): the target
        has the old or the new content, never a mix. OSError EXDEV when `into` is on
        another filesystem (the temp file is kept for a copy then)."""
        dst = self.dir_fd if into is None else into
        try:
            os.fchmod(self.fd, self.mode)
            os.fsync(self.fd)
            failpoints.hit("scripts.write.before_rename")
            os.rename(self.name, name, src_dir_fd=self.dir_fd, dst_dir_fd=dst)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                self.abort()
            raise
        except BaseException:
            self.abort()
            raise
        self.name = ""
        try:
            os.fsync(dst)
            if dst != self.dir_fd:
                os.fsync(self.dir_fd)
        finally:
            self.abort()

    def copy_into(self, into: int, name: str) -> None:
        """The EXDEV path of `commit`: copy into a temp file in `into`, commit that."""
        os.fsync(self.fd)
        src = os.open(self.name, FILE_FLAGS, dir_fd=self.dir_fd)
        try:
            other = TempFile(into, self.mode)
            try:
                while chunk := os.read(src, 1 << 20):
                    other.write(chunk)
            except BaseException:
                other.abort()
                raise
            other.commit(name)
        finally:
            os.close(src)
            self.abort()

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.name:
            with contextlib.suppress(OSError):
                os.unlink(self.name, dir_fd=self.dir_fd)
            self.name = ""
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1


def write_atomic(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    tmp = TempFile(dir_fd, mode)
    try:
        tmp.write(data)
    except BaseException:
        tmp.abort()
        raise
    tmp.commit(name)


def count_tree(dir_fd: int, limit: int, depth: int, rel: str) -> int:
    """Entries below a folder (not following symlinks), refusing more than `limit`
    or deeper than `depth` levels before anything is changed."""
    total = 0
    stack: list[tuple[int, int]] = [(os.dup(dir_fd), 0)]
    try:
        while stack:
            fd, level = stack.pop()
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        total += 1
                        if total > limit:
                            raise ScriptTreeTooLarge(
                                f"{rel} holds more than {limit} entries: delete its "
                                "contents in parts", path=rel)
                        if entry.is_dir(follow_symlinks=False):
                            if level + 1 >= depth:
                                raise ScriptTreeTooLarge(
                                    f"{rel} is nested deeper than {depth} levels",
                                    path=rel)
                            stack.append((os.open(entry.name, DIR_FLAGS, dir_fd=fd),
                                          level + 1))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return total


def remove_tree(parent_fd: int, name: str) -> None:
    """Remove a folder and everything in it; symlinks inside are unlinked, never
    followed. Call count_tree first: this trusts its bound."""
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for child, is_dir in entries:
            if is_dir:
                remove_tree(fd, child)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)
