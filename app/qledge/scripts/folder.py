"""Scripts: the files tasks run, in `<work>/scripts`, edited through the API (docs/scripts.md).

Every operation is blocking file work on directory fds (`fs/confined.py`); the HTTP
layer runs it off the event loop. Paths are relative to the scripts folder and are
refused, with a reason, when they are malformed (`..`, absolute, NUL, …), pass
through a symlink, or name a FIFO, socket or device. Mutations are serialised by one
lock (one worker process), so the history a save records is the content it replaced.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..clock import now_ms
from ..fs import confined as fs
from ..fs.confined import (
    TEMP_PREFIX,
    ScriptBinary,
    ScriptChanged,
    ScriptError,
    ScriptExists,
    ScriptNotFound,
    ScriptNotRegular,
    ScriptPathInvalid,
    ScriptsUnavailable,
    ScriptSymlink,
    ScriptTooLarge,
    ScriptTreeTooLarge,
    ScriptVersionNotFound,
    ScriptWrongType,
)
from ._history import History, Version
from ._tree import HIDDEN, Node, walk

__all__ = [
    "HIDDEN", "TEMP_PREFIX", "Limits", "Node", "Saved", "ScriptBinary", "ScriptChanged",
    "ScriptError",
    "ScriptExists", "ScriptNotFound", "ScriptNotRegular", "ScriptPathInvalid", "ScriptSymlink",
    "ScriptTooLarge", "ScriptTreeTooLarge", "ScriptVersionNotFound", "ScriptWrongType",
    "Scripts", "ScriptsUnavailable", "TextFile", "Upload", "Version",
]


@dataclass(frozen=True)
class Limits:
    max_text: int = 4 << 20  # read, edit, meta, and each history version
    max_upload: int = 32 << 20
    tree_depth: int = 8
    tree_per_folder: int = 1000
    tree_total: int = 5000
    delete_entries: int = 10_000
    delete_depth: int = 32
    history_keep: int = 5


class TextFile(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    content: str
    size: int
    mtime_ms: int
    sha256: str


class Saved(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    size: int
    sha256: str
    created: bool
    changed: bool
    history: str  # "kept" (the old content is a version), "none" (nothing replaced)
    # or "skipped" (the old content was larger than max_text, or its name too long)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_of(data: bytes, rel: str) -> str:
    """UTF-8 text, or ScriptBinary (a NUL byte or invalid UTF-8)."""
    if b"\x00" in data[:8192]:
        raise ScriptBinary(f"{rel} is a binary file (it has NUL bytes): download it instead",
                           path=rel)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScriptBinary(f"{rel} is not UTF-8 text: download it instead",
                           path=rel) from None


class Scripts:
    def __init__(self, root: Path, history_root: Path, limits: Limits | None = None) -> None:
        self.root = root
        self.limits = limits or Limits()
        self.history_store = History(history_root, self.limits.history_keep)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _root(self) -> Iterator[int]:
        fd = fs.open_root(self.root)
        try:
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _parent(self, parts: tuple[str, ...], create: bool = False) -> Iterator[int]:
        with self._root() as root_fd, fs.folder(root_fd, parts[:-1], create=create) as dfd:
            yield dfd

    # -- reading -----------------------------------------------------------------------

    def tree(self, rel: str = "", depth: int | None = None) -> tuple[list[Node], bool]:
        """(entries of the folder at `rel`, truncated), children to `depth` levels."""
        parts = fs.parse(rel, allow_root=True)
        lim = self.limits
        levels = lim.tree_depth if depth is None else max(1, min(depth, lim.tree_depth))
        with self._root() as root_fd, fs.folder(root_fd, parts) as dfd:
            return walk(dfd, rel, levels, lim.tree_per_folder, lim.tree_total)

    def read_bytes(self, rel: str, limit: int | None = None) -> tuple[bytes, os.stat_result]:
        parts = fs.parse(rel)
        with self._parent(parts) as dfd:
            fd, st = fs.open_file(dfd, parts[-1], rel)
            try:
                return fs.read_all(fd, self.limits.max_text if limit is None else limit,
                                   rel), st
            finally:
                os.close(fd)

    def read(self, rel: str) -> TextFile:
        data, st = self.read_bytes(rel)
        return TextFile(path=rel, content=text_of(data, rel), size=len(data),
                        mtime_ms=st.st_mtime_ns // 1_000_000, sha256=_sha(data))

    def open_for_download(self, rel: str) -> tuple[int, int]:
        """(fd, size) of a regular file for streaming; the caller closes the fd."""
        parts = fs.parse(rel)
        with self._parent(parts) as dfd:
            fd, st = fs.open_file(dfd, parts[-1], rel)
        return fd, st.st_size

    # -- writing -----------------------------------------------------------------------

    def _existing(self, dfd: int, name: str, rel: str) -> os.stat_result | None:
        st = fs.lstat_at(dfd, name)
        if st is not None:
            fs.refuse_kind(st, rel, "file")
        return st

    def _keep_old(self, dfd: int, parts: tuple[str, ...], rel: str, new: bytes | None
                  ) -> tuple[str, bool, str | None]:
        """(history outcome, changed, sha256 of the old content) for a file about to be
        replaced by `new`; the old content is a durable version before the rename."""
        fd, st = fs.open_file(dfd, parts[-1], rel)
        try:
            if st.st_size > self.limits.max_text:
                return "skipped", True, None
            try:
                old = fs.read_all(fd, self.limits.max_text, rel)
            except ScriptTooLarge:
                return "skipped", True, None
        finally:
            os.close(fd)
        if old == new:
            return "none", False, _sha(old)
        vid = self.history_store.record(parts, old, now_ms())
        return ("kept" if vid else "skipped"), True, _sha(old)

    def write(self, rel: str, content: bytes, *, create_only: bool = False,
              base_sha256: str | None = None, parents: bool = True) -> Saved:
        """Create or replace a file atomically; the replaced content becomes a version.
        `create_only` refuses an existing file; `base_sha256` refuses a file whose
        content is not the one the caller edited (ScriptChanged)."""
        parts = fs.parse(rel)
        if len(content) > self.limits.max_text:
            raise ScriptTooLarge(f"the content is larger than {self.limits.max_text} bytes",
                                 path=rel, field="content")
        with self._lock, self._parent(parts, create=parents) as dfd:
            st = self._existing(dfd, parts[-1], rel)
            if st is not None and create_only:
                raise ScriptExists(f"{rel} already exists", path=rel)
            history, changed, old_sha = "none", True, None
            if st is not None:
                # Only what could be read is compared: a too-large old file never matches.
                history, changed, old_sha = self._keep_old(dfd, parts, rel, content)
            if base_sha256 is not None and base_sha256 != (old_sha or ""):
                raise ScriptChanged(f"{rel} changed since it was opened: reload it first",
                                    path=rel)
            if changed:
                mode = stat.S_IMODE(st.st_mode) & 0o777 if st is not None else 0o644
                fs.write_atomic(dfd, parts[-1], content, mode)
        return Saved(path=rel, size=len(content), sha256=_sha(content), created=st is None,
                     changed=changed, history=history)

    def stage(self) -> Upload:
        """A streaming upload: its bytes go to a hidden temp file in the scripts folder
        until `place` names where it belongs (QingLong's clients send the file part
        before the fields that say where it goes)."""
        with self._root() as root_fd:
            return Upload(fs.TempFile(root_fd), self.limits.max_upload)

    def place(self, up: Upload, rel: str, *, overwrite: bool) -> Saved:
        """Rename a staged upload into place (atomically; its history like a save)."""
        try:
            parts = fs.parse(rel)
            with self._lock, self._parent(parts, create=True) as dfd:
                st = self._existing(dfd, parts[-1], rel)
                if st is not None and not overwrite:
                    raise ScriptExists(f"{rel} already exists", path=rel)
                history = "none"
                if st is not None:
                    history = self._keep_old(dfd, parts, rel, None)[0]
                    up.temp.mode = stat.S_IMODE(st.st_mode) & 0o777
                try:
                    up.temp.commit(parts[-1], into=dfd)
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
                    up.temp.copy_into(dfd, parts[-1])  # a folder on another filesystem
        finally:
            up.abort()
        return Saved(path=rel, size=up.size, sha256=up.sha.hexdigest(), created=st is None,
                     changed=True, history=history)

    def mkdir(self, rel: str) -> None:
        parts = fs.parse(rel)
        with self._lock, self._parent(parts, create=True) as dfd:
            st = fs.lstat_at(dfd, parts[-1])
            if st is not None:
                if fs.kind(st.st_mode) == "directory":
                    raise ScriptExists(f"{rel} already exists", path=rel)
                fs.refuse_kind(st, rel, "directory")
            os.mkdir(parts[-1], 0o755, dir_fd=dfd)
            os.fsync(dfd)

    def move(self, src: str, dst: str) -> str:
        """Rename or move a file or folder (never onto an existing name); its history
        follows. Returns the kind moved."""
        a, b = fs.parse(src, field="from"), fs.parse(dst, field="to")
        if b[: len(a)] == a:
            raise ScriptPathInvalid("a folder cannot be moved into itself", path=dst,
                                    reason="into_itself", field="to")
        with self._lock, self._parent(a) as sfd, self._parent(b, create=True) as dfd:
            st = fs.lstat_at(sfd, a[-1])
            if st is None:
                raise ScriptNotFound(f"{src} does not exist", path=src, field="from")
            what = fs.kind(st.st_mode)
            if what not in ("file", "directory"):
                fs.refuse_kind(st, src, "file")
            if fs.lstat_at(dfd, b[-1]) is not None:
                raise ScriptExists(f"{dst} already exists", path=dst, field="to")
            os.rename(a[-1], b[-1], src_dir_fd=sfd, dst_dir_fd=dfd)
            os.fsync(dfd)
            os.fsync(sfd)
            self.history_store.move(a, b, what == "directory")
        return what

    def replaceable(self, rel: str, field: str = "path") -> bool:
        """Is `rel` a regular file (True) or nothing at all (False)? Anything else — a
        folder, a symlink — raises its error: a save that renames a file checks the old
        name with this before it writes anything."""
        parts = fs.parse(rel, field=field)
        try:
            with self._parent(parts) as dfd:
                st = fs.lstat_at(dfd, parts[-1])
        except ScriptNotFound:
            return False
        if st is not None:
            fs.refuse_kind(st, rel, "file")
        return st is not None

    def delete(self, rel: str, *, file_only: bool = False) -> dict[str, Any]:
        """Remove a file (or a symlink/FIFO/device: the name only, nothing is followed)
        or a folder with everything in it, within the bounds; its history goes too.
        `file_only`: anything but a regular file is refused, never removed."""
        parts = fs.parse(rel)
        lim = self.limits
        with self._lock, self._parent(parts) as dfd:
            st = fs.lstat_at(dfd, parts[-1])
            if st is None:
                raise ScriptNotFound(f"{rel} does not exist", path=rel)
            if file_only:
                fs.refuse_kind(st, rel, "file")
            what, entries = fs.kind(st.st_mode), 0
            if what == "directory":
                sub = os.open(parts[-1], fs.DIR_FLAGS, dir_fd=dfd)
                try:
                    entries = fs.count_tree(sub, lim.delete_entries, lim.delete_depth, rel)
                finally:
                    os.close(sub)
                fs.remove_tree(dfd, parts[-1])
            else:
                os.unlink(parts[-1], dir_fd=dfd)
            os.fsync(dfd)
            self.history_store.remove(parts, what == "directory")
        return {"path": rel, "type": what, "entries": entries}

    # -- history -------------------------------------------------------------------------

    def history(self, rel: str) -> list[Version]:
        return self.history_store.versions(fs.parse(rel))

    def version(self, rel: str, vid: str) -> bytes:
        return self.history_store.read(fs.parse(rel), vid, self.limits.max_text)

    def restore(self, rel: str, vid: str) -> Saved:
        """Write a version back (the current content becomes a version in turn)."""
        return self.write(rel, self.version(rel, vid))


class Upload:
    """Bytes of one uploaded file, staged; `Scripts.place` puts it in place, `abort`
    drops it. `write` refuses more than `limit` bytes in all."""

    def __init__(self, temp: fs.TempFile, limit: int) -> None:
        self.temp = temp
        self.limit = limit
        self.size = 0
        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise ScriptTooLarge(f"the upload is larger than {self.limit} bytes",
                                 field="file")
        self.sha.update(data)
        self.temp.write(data)

    def abort(self) -> None:
        self.temp.abort()
