"""The last versions of each script, kept outside the scripts tree (docs/scripts.md).

Layout under the history root (`<work>/.scripts-history`, 0700): a script at
`a/b.js` keeps its versions in `d.a/f.b.js/<saved_at_ms>-<6 hex>`. The `d.`/`f.`
prefixes keep a folder and a file of the same name apart, so moving or deleting a
folder moves or deletes its scripts' history in one rename or one removal. A version
is the content a save replaced, written like a script (temp + fsync + rename).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
from pathlib import Path

import msgspec

from ..fs import confined as fs

_VERSION = re.compile(r"^\d{13}-[0-9a-f]{6}$")


class Version(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    saved_at_ms: int
    size: int


def _mapped(parts: tuple[str, ...], is_dir: bool) -> tuple[str, ...]:
    return (*(f"d.{p}" for p in parts[:-1]), ("d." if is_dir else "f.") + parts[-1])


def _too_long(exc: OSError) -> bool:
    return exc.errno == errno.ENAMETOOLONG


class History:
    def __init__(self, root: Path, keep: int) -> None:
        self.root = root
        self.keep = keep

    def record(self, parts: tuple[str, ...], content: bytes, now_ms: int) -> str | None:
        """Keep `content` as the newest version of `parts`; drop the oldest beyond `keep`.
        None when the name is too long to map (the save goes ahead without history)."""
        root_fd = fs.open_root(self.root)
        try:
            with fs.folder(root_fd, _mapped(parts, False), create=True, mode=0o700) as dfd:
                existing = self._ids(dfd)
                # Strictly after the newest one, so two saves in one millisecond keep
                # their order (and the bound drops the older).
                ms = max(now_ms, int(existing[0][:13]) + 1) if existing else now_ms
                vid = f"{ms:013d}-{secrets.token_hex(3)}"
                fs.write_atomic(dfd, vid, content, 0o600)
                for old in self._ids(dfd)[self.keep:]:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(old, dir_fd=dfd)
                os.fsync(dfd)
        except OSError as exc:
            if _too_long(exc):
                return None
            raise
        finally:
            os.close(root_fd)
        return vid

    @staticmethod
    def _ids(dfd: int) -> list[str]:
        with os.scandir(dfd) as it:
            names = [e.name for e in it if _VERSION.match(e.name)]
        return sorted(names, reverse=True)

    def versions(self, parts: tuple[str, ...]) -> list[Version]:
        root_fd = fs.open_root(self.root)
        try:
            with fs.folder(root_fd, _mapped(parts, False)) as dfd:
                out = []
                for vid in self._ids(dfd):
                    st = fs.lstat_at(dfd, vid)
                    if st is not None:
                        out.append(Version(id=vid, saved_at_ms=int(vid[:13]),
                                           size=st.st_size))
                return out
        except fs.ScriptNotFound:
            return []
        except OSError as exc:
            if _too_long(exc):
                return []
            raise
        finally:
            os.close(root_fd)

    def read(self, parts: tuple[str, ...], vid: str, limit: int) -> bytes:
        rel = fs.join(parts)
        if not _VERSION.match(vid):
            raise fs.ScriptVersionNotFound(f"no version {vid!r} of {rel}", path=rel,
                                           field="version")
        root_fd = fs.open_root(self.root)
        try:
            with fs.folder(root_fd, _mapped(parts, False)) as dfd:
                fd, _ = fs.open_file(dfd, vid, rel)
                try:
                    return fs.read_all(fd, limit, rel)
                finally:
                    os.close(fd)
        except fs.ScriptNotFound:
            raise fs.ScriptVersionNotFound(f"no version {vid!r} of {rel}", path=rel,
                                           field="version") from None
        finally:
            os.close(root_fd)

    def move(self, src: tuple[str, ...], dst: tuple[str, ...], is_dir: bool) -> None:
        """Follow a rename of a script or folder; a stale history at the target goes."""
        a, b = _mapped(src, is_dir), _mapped(dst, is_dir)
        root_fd = fs.open_root(self.root)
        try:
            with fs.folder(root_fd, a[:-1]) as sfd, \
                    fs.folder(root_fd, b[:-1], create=True, mode=0o700) as dfd:
                if fs.lstat_at(sfd, a[-1]) is None:
                    return
                self._drop(dfd, b[-1])
                os.rename(a[-1], b[-1], src_dir_fd=sfd, dst_dir_fd=dfd)
                os.fsync(dfd)
                os.fsync(sfd)
        except fs.ScriptNotFound:
            return
        except OSError as exc:
            if not _too_long(exc):
                raise
        finally:
            os.close(root_fd)

    def remove(self, parts: tuple[str, ...], is_dir: bool) -> None:
        mapped = _mapped(parts, is_dir)
        root_fd = fs.open_root(self.root)
        try:
            with fs.folder(root_fd, mapped[:-1]) as dfd:
                self._drop(dfd, mapped[-1])
                os.fsync(dfd)
        except fs.ScriptNotFound:
            return
        except OSError as exc:
            if not _too_long(exc):
                raise
        finally:
            os.close(root_fd)

    @staticmethod
    def _drop(dfd: int, name: str) -> None:
        st = fs.lstat_at(dfd, name)
        if st is None:
            return
        if fs.kind(st.st_mode) == "directory":
            fs.remove_tree(dfd, name)
        else:
            os.unlink(name, dir_fd=dfd)
