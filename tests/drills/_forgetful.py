"""A FUSE filesystem that forgets what was not synced: the power-cut rig of the drills.

Passthrough to `BACKING/root`, but nothing is durable until it is synced, the
strictest reading of POSIX:

* file data written (or truncated) since the last `fsync`/`fdatasync` **of that
  file** is held back;
* creates, unlinks, renames, hard links, mkdir and rmdir since the last `fsync`
  **of the directory they change** are held back. An fsync of a file makes its
  data durable, never its name; a rename across directories needs both.

A "cut" drops everything held back, like a power loss: the backing tree is put
back to its durable state (old blocks written back, sizes cut back, names
restored or removed), and from then on every operation fails with EIO, as on
a dead machine, until the drill unmounts it and mounts a new rig (a reboot).
Metadata other than names and sizes (modes, times) is treated as durable at
once; nothing here relies on it.

How it keeps the old state cheaply: every write runs through (reads need no
bookkeeping), but the first write since the last sync to a block below the
file's durable size saves that block's old bytes; every inode whose name
changes gets an extra hard link under `BACKING/attic/`, so a forgotten unlink
or rename can link it back; a directory's durable entries are snapshotted at
its first change after its last fsync. getattr hides the attic link.

Control: a Unix socket taking one JSON command per connection —
`cut`; `status`; `sync` (everything durable, like sync(2)); `settle` PATH (one
directory's pending names durable, like a journal commit that happened to
come); `arm` OP GLOB [SKIP] [SETTLE]: cut from inside the (SKIP+1)-th
operation OP (create, write, fsync, unlink, link, rename, mkdir, fsyncdir) on
a path matching GLOB, right after it took effect — its caller sees success,
then the machine is dead. `status`/`cut` also answer `durable_ever`: every
path matching the watch glob that was durable (named by a synced directory)
at some moment, e.g. each receipt the launcher really published.

Run as `python _forgetful.py BACKING MOUNTPOINT SOCKET [--no-statfs]
[--watch GLOB]`; drills use `ForgetfulMount`.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BLOCK = 4096
_OPS = ("create", "write", "fsync", "unlink", "link", "rename", "mkdir", "fsyncdir")


_AT_FDCWD = -100
_AT_SYMLINK_FOLLOW = 0x400


def _link_fd(fd: int, dst: str) -> None:
    """linkat(/proc/self/fd/N, AT_SYMLINK_FOLLOW): a name for an open file (os.link
    would link the /proc symlink itself and fail with EXDEV)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.linkat(_AT_FDCWD, f"/proc/self/fd/{fd}".encode(), _AT_FDCWD, dst.encode(),
                   _AT_SYMLINK_FOLLOW) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst)


class _Data:
    """What a file's data was at its last sync: its size and the old bytes of each
    block overwritten since."""

    __slots__ = ("durable_size", "undo")

    def __init__(self, durable_size: int) -> None:
        self.durable_size = durable_size
        self.undo: dict[int, bytes] = {}


class Forgetful:
    """The filesystem's state and operations (mfusepy calls these, under one lock)."""

    use_ns = True

    def __init__(self, backing: Path, *, statfs: bool = True, watch: str = "") -> None:
        self.root = str(backing / "root")
        self.attic = str(backing / "attic")
        os.makedirs(self.root, exist_ok=True)
        shutil.rmtree(self.attic, ignore_errors=True)
        os.makedirs(self.attic)
        self.has_statfs = statfs
        self.watch = watch
        self.lock = threading.RLock()
        self.dead = False
        self.data: dict[int, _Data] = {}
        # dir inode -> its durable entries {name: (inode, is_dir)}, for dirs changed since
        # their last fsync.
        self.dirs: dict[int, dict[str, tuple[int, bool]]] = {}
        self.in_attic: set[int] = set()
        self.durable_ever: set[str] = set()
        self.armed: tuple[str, str, int, bool] | None = None
        self.fired: str | None = None
        self.counts = {"held_files_dropped": 0, "held_bytes_dropped": 0,
                       "names_dropped": 0, "names_restored": 0}

    # -- helpers ---------------------------------------------------------------------

    def _real(self, path: str) -> str:
        return self.root + path if path != "/" else self.root

    def _attic_file(self, ino: int) -> str:
        return os.path.join(self.attic, f"f{ino}")

    def _attic_dir(self, ino: int) -> str:
        return os.path.join(self.attic, f"d{ino}")

    def _alive(self) -> None:
        if self.dead:
            raise OSError(errno.EIO, "the power is off")

    def _snap_dir(self, real_dir: str) -> None:
        """Remember a directory's durable entries before its first change since its fsync."""
        ino = os.lstat(real_dir).st_ino
        if ino in self.dirs:
            return
        entries: dict[str, tuple[int, bool]] = {}
        with os.scandir(real_dir) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                entries[e.name] = (st.st_ino, stat.S_ISDIR(st.st_mode))
        self.dirs[ino] = entries

    def _keep(self, real: str | None, fh: int | None = None) -> int:
        """An attic link for this file, so a forgotten unlink/rename can bring it back."""
        st = os.fstat(fh) if fh is not None else os.lstat(real)  # type: ignore[arg-type]
        if st.st_ino not in self.in_attic and not stat.S_ISDIR(st.st_mode):
            if fh is not None:  # the open file itself, wherever its name went
                _link_fd(fh, self._attic_file(st.st_ino))
            else:
                os.link(real, self._attic_file(st.st_ino), follow_symlinks=False)  # type: ignore[arg-type]
            self.in_attic.add(st.st_ino)
        return st.st_ino

    def _track(self, fh: int) -> _Data:
        st = os.fstat(fh)
        d = self.data.get(st.st_ino)
        if d is None:
            self._keep(None, fh)
            d = self.data[st.st_ino] = _Data(st.st_size)
        return d

    def _save(self, d: _Data, fh: int, start: int, end: int) -> None:
        """Old bytes of the blocks in [start, end) below the durable size, once each."""
        end = min(end, d.durable_size)
        for block in range(start // BLOCK, (end + BLOCK - 1) // BLOCK):
            if block not in d.undo:
                d.undo[block] = os.pread(fh, BLOCK, block * BLOCK)

    def _durable_dir(self, path: str, ino: int) -> None:
        self.dirs.pop(ino, None)
        if not self.watch:
            return
        with os.scandir(self._real(path)) as it:
            for e in it:
                rel = os.path.join(path, e.name).lstrip("/")
                if fnmatch.fnmatch(rel, self.watch):
                    self.durable_ever.add(rel)

    def _after(self, op: str, path: str) -> None:
        """Cut here if armed for this operation (it has already taken effect)."""
        if self.armed is None:
            return
        want_op, pattern, skip, settle = self.armed
        rel = path.lstrip("/")
        if want_op != op or not fnmatch.fnmatch(rel, pattern):
            return
        if skip > 0:
            self.armed = (want_op, pattern, skip - 1, settle)
            return
        self.armed = None
        self.fired = rel
        if settle:
            parent = os.path.dirname(path)
            self._durable_dir(parent, os.lstat(self._real(parent)).st_ino)
        self.cut()

    # -- the cut ---------------------------------------------------------------------

    def cut(self) -> None:
        with self.lock:
            if self.dead:
                return
            self.dead = True
            for ino, d in self.data.items():
                with open(self._attic_file(ino), "r+b") as f:
                    size = os.fstat(f.fileno()).st_size
                    held = max(0, size - d.durable_size) + len(d.undo) * BLOCK
                    for block, old in d.undo.items():
                        os.pwrite(f.fileno(), old, block * BLOCK)
                    os.ftruncate(f.fileno(), d.durable_size)
                if held:
                    self.counts["held_files_dropped"] += 1
                    self.counts["held_bytes_dropped"] += held
            self._detach(self.root)
            self._attach(self.root)
            for name in os.listdir(self.attic):
                p = os.path.join(self.attic, name)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
            self.data.clear()
            self.dirs.clear()
            self.in_attic.clear()

    def _detach(self, real_dir: str) -> None:
        """Remove every entry the directory's durable state does not have."""
        want = self.dirs.get(os.lstat(real_dir).st_ino)
        with os.scandir(real_dir) as it:
            entries = list(it)
        for e in entries:
            st = e.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(st.st_mode)
            if want is not None and want.get(e.name) != (st.st_ino, is_dir):
                self.counts["names_dropped"] += 1
                if is_dir:
                    os.rename(e.path, self._attic_dir(st.st_ino))
                else:
                    if st.st_ino not in self.in_attic:
                        self._keep(e.path)
                    os.unlink(e.path)
            elif is_dir:
                self._detach(e.path)

    def _attach(self, real_dir: str) -> None:
        """Bring back every durable entry the directory lost, then its subdirectories."""
        want = self.dirs.get(os.lstat(real_dir).st_ino) or {}
        for name, (ino, is_dir) in want.items():
            dst = os.path.join(real_dir, name)
            if os.path.lexists(dst):
                continue
            src = self._attic_dir(ino) if is_dir else self._attic_file(ino)
            if not os.path.lexists(src):
                print(f"forgetful: cannot restore {dst}: inode {ino} is gone",
                      file=sys.stderr)
                continue
            self.counts["names_restored"] += 1
            if is_dir:
                self._detach(src)
                os.rename(src, dst)
            else:
                os.link(src, dst)
        with os.scandir(real_dir) as it:
            subdirs = [e.path for e in it if e.is_dir(follow_symlinks=False)]
        for sub in subdirs:
            self._attach(sub)

    # -- control ---------------------------------------------------------------------

    def command(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req.get("cmd")
        with self.lock:
            if cmd == "cut":
                self.cut()
            elif cmd == "sync":
                self._alive()
                self.data.clear()
                for path in self._all_dirs():
                    self._durable_dir(path, os.lstat(self._real(path)).st_ino)
            elif cmd == "settle":
                self._alive()
                path = "/" + str(req["path"]).strip("/")
                self._durable_dir(path, os.lstat(self._real(path)).st_ino)
            elif cmd == "arm":
                if req["op"] not in _OPS:
                    raise ValueError(f"cannot arm on {req['op']!r}")
                self.armed = (req["op"], req["glob"], int(req.get("skip", 0)),
                              bool(req.get("settle", False)))
            elif cmd != "status":
                raise ValueError(f"unknown command {cmd!r}")
            return {"ok": True, "cut": self.dead, "fired": self.fired,
                    "armed": self.armed is not None,
                    "held_files": sum(1 for d in self.data.values()),
                    "held_dirs": len(self.dirs),
                    "durable_ever": sorted(self.durable_ever), **self.counts}

    def _all_dirs(self) -> list[str]:
        rels = (os.path.relpath(d, self.root) for d, _, _ in os.walk(self.root))
        return ["/" if r == "." else f"/{r}" for r in rels]

    # -- FUSE operations -------------------------------------------------------------

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self.lock:
            self._alive()
            st = os.fstat(fh) if fh is not None else os.lstat(self._real(path or "/"))
            attrs = {k: getattr(st, k) for k in (
                "st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size",
                "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_blocks")}
            for k in ("st_atime", "st_mtime", "st_ctime"):
                attrs[k] = attrs.pop(f"{k}_ns")
            if st.st_ino in self.in_attic:
                attrs["st_nlink"] -= 1
            return attrs

    def access(self, path: str, amode: int) -> int:
        with self.lock:
            self._alive()
            if not os.access(self._real(path), amode):
                raise OSError(errno.EACCES, "access")
            return 0

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        with self.lock:
            self._alive()
            real = self._real(path)
            out = []
            # use_ino: a zero inode would hide the entry, so each gets its own.
            for name in (".", ".."):
                st = os.lstat(os.path.join(real, name))
                out.append((name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0))
            with os.scandir(real) as it:
                for e in it:
                    st = e.stat(follow_symlinks=False)
                    out.append((e.name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0))
            return out

    def readlink(self, path: str) -> str:
        with self.lock:
            self._alive()
            return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        with self.lock:
            self._alive()
            if not self.has_statfs:
                return {}  # what libfuse answers for a filesystem without statfs
            sv = os.statvfs(self.root)
            return {k: getattr(sv, k) for k in (
                "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                "f_ffree", "f_favail", "f_flag", "f_namemax")}

    def chmod(self, path: str, mode: int) -> int:
        with self.lock:
            self._alive()
            os.chmod(self._real(path), mode)
            return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        with self.lock:
            self._alive()
            os.chown(self._real(path), uid, gid)
            return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self.lock:
            self._alive()
            os.utime(self._real(path), ns=times)
            return 0

    def open(self, path: str, flags: int) -> int:
        with self.lock:
            self._alive()
            real = self._real(path)
            # The kernel tells the offset of every write; a read-write backing fd also
            # lets the rig read the old bytes it must keep.
            if flags & os.O_ACCMODE != os.O_RDONLY:
                flags = (flags & ~os.O_ACCMODE & ~os.O_APPEND) | os.O_RDWR
            trunc = flags & os.O_TRUNC
            fh = os.open(real, flags & ~os.O_TRUNC & ~os.O_CREAT & ~os.O_EXCL)
            if trunc:
                self._truncate(fh, 0)
            return fh

    def create(self, path: str, mode: int, flags: int) -> int:
        with self.lock:
            self._alive()
            real = self._real(path)
            self._snap_dir(os.path.dirname(real))
            acc = (flags & ~os.O_ACCMODE & ~os.O_APPEND & ~os.O_TRUNC) | os.O_RDWR
            fh = os.open(real, acc | os.O_CREAT | os.O_EXCL, mode)
            self._keep(real, fh)
            self.data[os.fstat(fh).st_ino] = _Data(0)
            self._after("create", path)
            return fh

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self.lock:
            self._alive()
            return os.pread(fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self.lock:
            self._alive()
            d = self._track(fh)
            self._save(d, fh, offset, offset + len(data))
            n = os.pwrite(fh, data, offset)
            self._after("write", path or "")
            return n

    def _truncate(self, fh: int, length: int) -> None:
        d = self._track(fh)
        self._save(d, fh, length, d.durable_size)
        os.ftruncate(fh, length)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self.lock:
            self._alive()
            if fh is not None:
                self._truncate(fh, length)
                return 0
            real = self._real(path or "/")
            tmp = os.open(real, os.O_RDWR)
            try:
                self._truncate(tmp, length)
            finally:
                os.close(tmp)
            return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0  # close(2) makes nothing durable

    def release(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self.lock:
            self._alive()
            # fdatasync also covers the size: what is needed to read the data back.
            self.data.pop(os.fstat(fh).st_ino, None)
            self._after("fsync", path or "")
            return 0

    def opendir(self, path: str) -> int:
        with self.lock:
            self._alive()
            return os.open(self._real(path), os.O_RDONLY | os.O_DIRECTORY)

    def releasedir(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self.lock:
            self._alive()
            self._durable_dir(path or "/", os.fstat(fh).st_ino)
            self._after("fsyncdir", path or "/")
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self.lock:
            self._alive()
            real = self._real(path)
            self._snap_dir(os.path.dirname(real))
            os.mkdir(real, mode)
            self.dirs[os.lstat(real).st_ino] = {}  # a new directory is durably empty
            self._after("mkdir", path)
            return 0

    def rmdir(self, path: str) -> int:
        with self.lock:
            self._alive()
            real = self._real(path)
            self._snap_dir(os.path.dirname(real))
            if os.listdir(real):
                raise OSError(errno.ENOTEMPTY, "rmdir")
            self._snap_dir(real)
            os.rename(real, self._attic_dir(os.lstat(real).st_ino))
            return 0

    def unlink(self, path: str) -> int:
        with self.lock:
            self._alive()
            real = self._real(path)
            self._snap_dir(os.path.dirname(real))
            self._keep(real)
            os.unlink(real)
            self._after("unlink", path)
            return 0

    def link(self, target: str, source: str) -> int:
        with self.lock:
            self._alive()
            new, old = self._real(target), self._real(source)
            self._snap_dir(os.path.dirname(new))
            self._keep(old)
            os.link(old, new)
            self._after("link", target)
            return 0

    def symlink(self, target: str, source: str) -> int:
        with self.lock:
            self._alive()
            real = self._real(target)
            self._snap_dir(os.path.dirname(real))
            os.symlink(source, real)
            self._keep(real)
            return 0

    def rename(self, old: str, new: str) -> int:
        with self.lock:
            self._alive()
            src, dst = self._real(old), self._real(new)
            self._snap_dir(os.path.dirname(src))
            self._snap_dir(os.path.dirname(dst))
            st = os.lstat(src)
            if stat.S_ISDIR(st.st_mode):
                self._snap_dir(src)
                with contextlib.suppress(FileNotFoundError):
                    over = os.lstat(dst)
                    if stat.S_ISDIR(over.st_mode) and not os.listdir(dst):
                        os.rename(dst, self._attic_dir(over.st_ino))
            else:
                self._keep(src)
                with contextlib.suppress(FileNotFoundError):
                    self._keep(dst)
            os.rename(src, dst)
            self._after("rename", new)
            return 0


# -- the process ---------------------------------------------------------------------


def _wrap(fs: Forgetful, name: str) -> Callable[..., Any]:
    method = getattr(fs, name)

    def call(*args: Any) -> Any:
        try:
            return method(*args)
        except OSError as exc:
            import mfusepy

            raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

    return call


def _serve_control(fs: Forgetful, sock_path: str) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    srv.bind(sock_path)
    srv.listen(8)
    while True:
        conn, _ = srv.accept()
        with conn, conn.makefile("rwb") as f:
            try:
                answer = fs.command(json.loads(f.readline()))
            except Exception as exc:
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            f.write(json.dumps(answer).encode() + b"\n")
            f.flush()


def main(argv: list[str]) -> int:
    import mfusepy

    backing, mountpoint, sock_path = argv[:3]
    watch = argv[argv.index("--watch") + 1] if "--watch" in argv else ""
    fs = Forgetful(Path(backing), statfs="--no-statfs" not in argv, watch=watch)
    ops = type("Ops", (mfusepy.Operations,), {
        "use_ns": True,
        **{name: staticmethod(_wrap(fs, name)) for name in (
            "getattr", "access", "readdir", "readlink", "statfs", "chmod", "chown",
            "utimens", "open", "create", "read", "write", "truncate", "flush", "release",
            "fsync", "opendir", "releasedir", "fsyncdir", "mkdir", "rmdir", "unlink",
            "link", "symlink", "rename")},
    })()
    threading.Thread(target=_serve_control, args=(fs, sock_path), daemon=True).start()
    # No kernel caching of names or attributes: every lookup reaches the rig.
    mfusepy.FUSE(ops, mountpoint, foreground=True, hard_remove=True, use_ino=True,
                 attr_timeout=0, entry_timeout=0, negative_timeout=0, fsname="forgetful")
    return 0


# -- the drill's side ----------------------------------------------------------------


def available() -> str | None:
    """Why the rig cannot run here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount") is None and shutil.which("fusermount3") is None:
        return "no fusermount (Debian package fuse)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:  # OSError: libfuse not found
        return f"mfusepy/libfuse unavailable: {exc}"
    return None


class ForgetfulMount:
    """A mounted rig: `mount()`, `command(...)`, `cut()`, `unmount()`, `remount()`."""

    def __init__(self, backing: Path, mountpoint: Path, *, statfs: bool = True,
                 watch: str = "") -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.sock = str(backing.parent / f".{backing.name}.ctl")
        self.statfs = statfs
        self.watch = watch
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = backing.parent / f"{backing.name}.fuse.log"

    def mount(self) -> None:
        if self.proc is not None:
            raise RuntimeError("already mounted")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.sock)
        args = [sys.executable, __file__, str(self.backing), str(self.mountpoint), self.sock]
        if not self.statfs:
            args.append("--no-statfs")
        if self.watch:
            args += ["--watch", self.watch]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not (os.path.ismount(self.mountpoint) and os.path.exists(self.sock)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the rig did not mount:\n{self.log.read_text()}")
            time.sleep(0.02)

    def command(self, cmd: str, **args: Any) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(self.sock)
            s.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
            with s.makefile("rb") as f:
                answer: dict[str, Any] = json.loads(f.readline())
        if not answer.get("ok"):
            raise RuntimeError(f"rig: {cmd}: {answer.get('error')}")
        return answer

    def cut(self) -> dict[str, Any]:
        return self.command("cut")

    def status(self) -> dict[str, Any]:
        return self.command("status")

    def unmount(self) -> None:
        if self.proc is None:
            return
        # Not os.path.ismount: a cut rig answers EIO to the mountpoint's stat.
        tool = shutil.which("fusermount") or "fusermount3"
        subprocess.run([tool, "-u", "-z", str(self.mountpoint)], check=False,
                       capture_output=True)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def remount(self) -> None:
        """The machine comes back: a new rig on what the backing directory kept."""
        self.unmount()
        self.mount()


@contextlib.contextmanager
def mounted(backing: Path, mountpoint: Path, **kw: Any) -> Iterator[ForgetfulMount]:
    m = ForgetfulMount(backing, mountpoint, **kw)
    m.mount()
    try:
        yield m
    finally:
        m.unmount()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
