"""The network half of a pull: a shallow git fetch (dulwich) or one raw file (urllib3).

Both are bounded (docs/subscriptions.md): the bytes received (`caps.repo_bytes`),
connect/read timeouts, TLS verified against the system's CA store. Only the pull
process imports this module (dulwich costs ~35 ms and ~11 MB; the worker never pays).
"""

from __future__ import annotations

import errno
import functools
import os
import ssl
import stat
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import urllib3
from dulwich.client import HTTPUnauthorized, get_transport_and_path
from dulwich.errors import GitProtocolError, NotGitRepository
from dulwich.object_store import BaseObjectStore
from dulwich.objects import ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from .spec import PullError, PullSpec

_TIMEOUT = urllib3.Timeout(connect=15.0, read=60.0)
_GITLINK = 0o160000


def _pool() -> urllib3.PoolManager:
    ctx = ssl.create_default_context()  # verifies certificates and host names
    return urllib3.PoolManager(ssl_context=ctx, timeout=_TIMEOUT,
                               retries=urllib3.Retry(total=2, connect=2, read=0, redirect=5))


def _where(url: str) -> str:
    """The URL without user info, query or fragment: safe to print."""
    u = urlsplit(url)
    host = u.hostname or ""
    if u.port:
        host = f"{host}:{u.port}"
    return f"{u.scheme}://{host}{u.path}"


def _username(spec: PullSpec) -> str | None:
    if spec.secret is None:
        return None
    return spec.username or "git"


def git_files(spec: PullSpec, gitdir: Path) -> Iterator[tuple[str, int, Callable[[], bytes]]]:
    """(path, mode, its content's reader) of every regular file in the branch's newest
    commit: a file the filters do not keep is never inflated.

    The pack lands in a bare repository under `gitdir` (the pull's staging folder);
    the bytes received are counted and the fetch stops past `caps.repo_bytes`."""
    repo = Repo.init_bare(str(gitdir), mkdir=True)
    try:
        client, path = get_transport_and_path(
            spec.url, username=_username(spec), password=spec.secret, pool_manager=_pool(),
            quiet=True)
    except ValueError as exc:
        raise PullError("SUB_BAD_URL", f"unsupported repository URL {_where(spec.url)}") \
            from exc
    ref = b"refs/heads/" + spec.branch.encode() if spec.branch else b"HEAD"
    picked: list[ObjectID] = []

    def wants(refs: Mapping[Ref, ObjectID], depth: int | None = None) -> list[ObjectID]:
        sha = refs.get(Ref(ref))
        if sha is None:
            what = f"branch {spec.branch!r}" if spec.branch else "a default branch (HEAD)"
            raise PullError("SUB_NO_BRANCH", f"the repository has no {what}")
        picked.append(sha)
        return [sha]

    cap = spec.caps.repo_bytes
    received = 0
    f, commit, abort = repo.object_store.add_pack()

    def pack_data(chunk: bytes) -> int:
        nonlocal received
        received += len(chunk)
        if received > cap:
            raise PullError("SUB_REPO_TOO_LARGE", f"the repository is larger than the cap "
                            f"of {cap} bytes (caps.repo_bytes)")
        f.write(chunk)
        return len(chunk)

    try:
        client.fetch_pack(path, wants, repo.get_graph_walker(), pack_data, depth=1)
    except BaseException as exc:
        abort()
        raise _reason(exc, spec) from exc
    try:
        # Before dulwich indexes the pack (it inflates each object whole in memory):
        # a few hundred KiB of zeros can inflate to gigabytes.
        if f.tell():  # an empty pack is dulwich's to refuse (commit() drops it)
            f.flush()
            f.seek(0)
            check_pack(f, cap)
    except BaseException:
        abort()
        raise
    try:
        commit()
    except OSError as exc:
        raise _reason(exc, spec) from exc
    if not picked:
        raise PullError("SUB_NO_COMMIT", "the server offered no commit")
    store = repo.object_store
    tree = store[picked[0]].tree  # type: ignore[attr-defined]
    for entry in store.iter_tree_contents(tree):
        if entry.path is None or entry.mode is None or entry.sha is None:
            continue
        if stat.S_ISLNK(entry.mode) or entry.mode == _GITLINK:
            continue  # symlinks and submodules never leave the repository
        yield (entry.path.decode("utf-8", "surrogateescape"), entry.mode,
               functools.partial(_content, store, entry.sha))


def _content(store: BaseObjectStore, sha: ObjectID) -> bytes:
    return store[sha].as_raw_string()


# -- the pack's objects, sized before anyone inflates them whole -------------------------

_OFS_DELTA, _REF_DELTA = 6, 7
_CHUNK = 64 << 10


def _too_big(limit: int) -> PullError:
    return PullError("SUB_REPO_TOO_LARGE", f"the repository has an object larger than the "
                     f"cap of {limit} bytes once unpacked (caps.repo_bytes)")


def _malformed(why: str) -> PullError:
    return PullError("SUB_BAD_PACK", f"the server sent a malformed pack: {why}")


class _PackReader:
    """Buffered reads of a pack file, and zlib streams inflated in bounded steps."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.buf = b""
        self.pos = 0

    def _fill(self) -> None:
        if self.pos >= len(self.buf):
            self.buf, self.pos = self.f.read(_CHUNK), 0
            if not self.buf:
                raise _malformed("it ends early")

    def byte(self) -> int:
        self._fill()
        self.pos += 1
        return self.buf[self.pos - 1]

    def skip(self, n: int) -> None:
        while n:
            self._fill()
            k = min(n, len(self.buf) - self.pos)
            self.pos += k
            n -= k

    def inflate(self, limit: int, sink: Callable[[bytes], None] | None = None) -> int:
        """Inflate one zlib stream without holding it: its size (PullError past
        `limit`); `sink` sees the output in chunks of at most 64 KiB."""
        d = zlib.decompressobj()
        total = 0
        while not d.eof:
            self._fill()
            data = self.buf[self.pos:]
            self.pos = len(self.buf)
            while data and not d.eof:
                try:
                    out = d.decompress(data, _CHUNK)
                except zlib.error as exc:
                    raise _malformed("bad compressed data") from exc
                total += len(out)
                if total > limit:
                    raise _too_big(limit)
                if sink is not None and out:
                    sink(out)
                data = d.unconsumed_tail
        self.buf, self.pos = d.unused_data, 0
        return total


class _DeltaSize:
    """A delta's target size from its header, and what its instructions would write
    (a copy of 64 KiB costs one byte: a small delta can claim gigabytes)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.literal = 0  # bytes of an insert still to pass over
        self.sizes: list[int] = []  # base size, target size
        self.written = 0

    def _varint(self) -> int | None:
        value = shift = 0
        for i, b in enumerate(self.buf):
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                del self.buf[:i + 1]
                return value
            if shift > 63:
                raise _malformed("a delta size is too long")
        return None

    def feed(self, data: bytes) -> None:
        self.buf += data
        while len(self.sizes) < 2:
            value = self._varint()
            if value is None:
                return
            self.sizes.append(value)
            if len(self.sizes) == 2 and value > self.limit:
                raise _too_big(self.limit)
        buf, pos = self.buf, 0
        skip = min(self.literal, len(buf))
        pos, self.literal = skip, self.literal - skip
        while pos < len(buf):
            cmd = buf[pos]
            if cmd & 0x80:  # copy from the base: offset bytes (bits 0-3), size (4-6)
                need = 1 + bin(cmd & 0x7F).count("1")
                if len(buf) - pos < need:
                    break
                size, at = 0, pos + 1 + bin(cmd & 0x0F).count("1")
                for bit in range(3):
                    if cmd & (0x10 << bit):
                        size |= buf[at] << (8 * bit)
                        at += 1
                self.written += size or 0x10000
                pos += need
            elif cmd:  # insert the next `cmd` bytes
                take = min(cmd, len(buf) - pos - 1)
                self.written += cmd
                pos += 1 + take
                self.literal = cmd - take
            else:
                raise _malformed("a delta has a zero instruction")
            if self.written > self.sizes[1]:
                raise _malformed("a delta writes more than its target size")
        del buf[:pos]


def check_pack(f: BinaryIO, limit: int) -> None:
    """Refuse a pack with an object that would unpack to more than `limit` bytes —
    from its header, the bytes its zlib stream really inflates to, and for a delta
    its target size and what its instructions write — before dulwich indexes it.
    Memory stays at a few 64 KiB chunks whatever the pack claims."""
    reader = _PackReader(f)
    head = bytes(reader.byte() for _ in range(12))
    if head[:4] != b"PACK" or int.from_bytes(head[4:8], "big") not in (2, 3):
        raise _malformed("no pack header")
    for _ in range(int.from_bytes(head[8:12], "big")):
        b = reader.byte()
        kind, size, shift = (b >> 4) & 7, b & 0x0F, 4
        while b & 0x80:
            b = reader.byte()
            size |= (b & 0x7F) << shift
            shift += 7
            if shift > 70:
                raise _malformed("an object size is too long")
        if size > limit:
            raise _too_big(limit)
        if kind == _OFS_DELTA:
            while reader.byte() & 0x80:
                pass
        elif kind == _REF_DELTA:
            reader.skip(20)
        elif kind not in (1, 2, 3, 4):
            raise _malformed(f"unknown object type {kind}")
        delta = _DeltaSize(limit) if kind in (_OFS_DELTA, _REF_DELTA) else None
        inflated = reader.inflate(limit, delta.feed if delta is not None else None)
        if inflated != size:
            raise _malformed("an object's size does not match its header")


def raw_file(spec: PullSpec) -> tuple[str, bytes]:
    """(file name, content) of a `file` subscription's URL."""
    name = urlsplit(spec.url).path.rsplit("/", 1)[-1]
    if not name or name in (".", ".."):
        raise PullError("SUB_BAD_URL", f"the URL {_where(spec.url)} names no file")
    headers = {}
    if spec.secret is not None:
        headers = urllib3.make_headers(basic_auth=f"{_username(spec)}:{spec.secret}")
    cap = spec.caps.repo_bytes
    try:
        resp = _pool().request("GET", spec.url, headers=headers, preload_content=False)
        try:
            if resp.status != 200:
                raise PullError("SUB_HTTP_STATUS",
                                f"{_where(spec.url)} answered HTTP {resp.status}")
            data = bytearray()
            for chunk in resp.stream(64 << 10):
                data += chunk
                if len(data) > cap:
                    raise PullError("SUB_REPO_TOO_LARGE", f"the file is larger than the "
                                    f"cap of {cap} bytes (caps.repo_bytes)")
        finally:
            resp.release_conn()
    except urllib3.exceptions.HTTPError as exc:
        raise _reason(exc, spec) from exc
    return name, bytes(data)


def _reason(exc: BaseException, spec: PullSpec) -> BaseException:
    """A clear PullError for what went wrong; anything else unchanged."""
    where = _where(spec.url)
    if isinstance(exc, PullError | KeyboardInterrupt | SystemExit):
        return exc
    if isinstance(exc, HTTPUnauthorized):
        return PullError("SUB_AUTH_REFUSED", f"{where} refused the credentials (HTTP 401)")\
            if spec.secret else PullError("SUB_AUTH_REQUIRED",
                                          f"{where} needs credentials (HTTP 401)")
    if isinstance(exc, NotGitRepository):
        return PullError("SUB_NOT_GIT", f"{where} is not a git repository")
    cause = _network_cause(exc)
    if cause is not None:
        return PullError("SUB_UNREACHABLE", f"{where} is unreachable: {cause}")
    if isinstance(exc, GitProtocolError):
        return PullError("SUB_PROTOCOL", f"git protocol error from {where}: "
                         f"{_clean(str(exc))}")
    if isinstance(exc, ValueError):
        # dulwich falls back to git's "dumb" protocol when the smart one is not there,
        # and fails to parse whatever page answered (a project's web page, a login).
        return PullError("SUB_NOT_GIT", f"{where} did not answer as a git repository (a web "
                         "page, a login form or a proxy answered instead): use the "
                         "repository's clone URL, like https://host/owner/repo.git")
    if isinstance(exc, urllib3.exceptions.HTTPError):
        return PullError("SUB_NETWORK", f"{where}: {type(exc).__name__}")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return PullError("SUB_DISK_FULL", "no space left on device while fetching")
    if isinstance(exc, OSError):
        return PullError("SUB_IO_ERROR",
                         f"fetch failed: {os.strerror(exc.errno) if exc.errno else exc}")
    return exc


def _network_cause(exc: BaseException) -> str | None:
    """The connection failure under a wrapped error (dulwich wraps urllib3's)."""
    cur: BaseException | None = exc
    for _ in range(8):
        if cur is None:
            return None
        if isinstance(cur, urllib3.exceptions.MaxRetryError) and cur.reason is not None:
            cur = cur.reason
        if isinstance(cur, urllib3.exceptions.NameResolutionError):
            return "the host name does not resolve"
        if isinstance(cur, urllib3.exceptions.NewConnectionError):
            under = cur.__cause__
            if isinstance(under, OSError) and under.errno:
                return os.strerror(under.errno)
            return "no connection"
        if isinstance(cur, urllib3.exceptions.TimeoutError):
            return "timed out"
        cur = cur.__cause__ or cur.__context__
    return None


def _clean(text: str) -> str:
    """A server's message, one line and bounded (it never carries our secret: the
    credentials travel in a header the server does not echo)."""
    return " ".join(text.split())[:300]
