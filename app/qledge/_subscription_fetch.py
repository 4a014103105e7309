"""The network half of a pull: a shallow git fetch (dulwich) or one raw file (urllib3).

Both are bounded (docs/subscriptions.md): the bytes received (`caps.repo_bytes`),
connect/read timeouts, TLS verified against the system's CA store. Only the pull
process imports this module (dulwich costs ~35 ms and ~11 MB; the worker never pays).
"""

from __future__ import annotations

import errno
import os
import ssl
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import urllib3
from dulwich.client import HTTPUnauthorized, get_transport_and_path
from dulwich.errors import GitProtocolError, NotGitRepository
from dulwich.objects import ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from .subscription_spec import PullError, PullSpec

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


def git_files(spec: PullSpec, gitdir: Path) -> Iterator[tuple[str, int, bytes]]:
    """(path, mode, content) of every regular file in the branch's newest commit.

    The pack lands in a bare repository under `gitdir` (the pull's staging folder);
    the bytes received are counted and the fetch stops past `caps.repo_bytes`."""
    repo = Repo.init_bare(str(gitdir), mkdir=True)
    try:
        client, path = get_transport_and_path(
            spec.url, username=_username(spec), password=spec.secret, pool_manager=_pool(),
            quiet=True)
    except ValueError as exc:
        raise PullError(f"unsupported repository URL {_where(spec.url)}") from exc
    ref = b"refs/heads/" + spec.branch.encode() if spec.branch else b"HEAD"
    picked: list[ObjectID] = []

    def wants(refs: Mapping[Ref, ObjectID], depth: int | None = None) -> list[ObjectID]:
        sha = refs.get(Ref(ref))
        if sha is None:
            what = f"branch {spec.branch!r}" if spec.branch else "a default branch (HEAD)"
            raise PullError(f"the repository has no {what}")
        picked.append(sha)
        return [sha]

    cap = spec.caps.repo_bytes
    received = 0
    f, commit, abort = repo.object_store.add_pack()

    def pack_data(chunk: bytes) -> int:
        nonlocal received
        received += len(chunk)
        if received > cap:
            raise PullError(f"the repository is larger than the cap of {cap} bytes "
                            "(caps.repo_bytes)")
        f.write(chunk)
        return len(chunk)

    try:
        client.fetch_pack(path, wants, repo.get_graph_walker(), pack_data, depth=1)
    except BaseException as exc:
        abort()
        raise _reason(exc, spec) from exc
    try:
        commit()
    except OSError as exc:
        raise _reason(exc, spec) from exc
    if not picked:
        raise PullError("the server offered no commit")
    store = repo.object_store
    tree = store[picked[0]].tree  # type: ignore[attr-defined]
    for entry in store.iter_tree_contents(tree):
        if entry.path is None or entry.mode is None or entry.sha is None:
            continue
        if stat.S_ISLNK(entry.mode) or entry.mode == _GITLINK:
            continue  # symlinks and submodules never leave the repository
        yield (entry.path.decode("utf-8", "surrogateescape"), entry.mode,
               store[entry.sha].as_raw_string())


def raw_file(spec: PullSpec) -> tuple[str, bytes]:
    """(file name, content) of a `file` subscription's URL."""
    name = urlsplit(spec.url).path.rsplit("/", 1)[-1]
    if not name or name in (".", ".."):
        raise PullError(f"the URL {_where(spec.url)} names no file")
    headers = {}
    if spec.secret is not None:
        headers = urllib3.make_headers(basic_auth=f"{_username(spec)}:{spec.secret}")
    cap = spec.caps.repo_bytes
    try:
        resp = _pool().request("GET", spec.url, headers=headers, preload_content=False)
        try:
            if resp.status != 200:
                raise PullError(f"{_where(spec.url)} answered HTTP {resp.status}")
            data = bytearray()
            for chunk in resp.stream(64 << 10):
                data += chunk
                if len(data) > cap:
                    raise PullError(f"the file is larger than the cap of {cap} bytes "
                                    "(caps.repo_bytes)")
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
        return PullError(f"{where} refused the credentials (HTTP 401)" if spec.secret
                         else f"{where} needs credentials (HTTP 401)")
    if isinstance(exc, NotGitRepository):
        return PullError(f"{where} is not a git repository")
    cause = _network_cause(exc)
    if cause is not None:
        return PullError(f"{where} is unreachable: {cause}")
    if isinstance(exc, GitProtocolError):
        return PullError(f"git protocol error from {where}: {_clean(str(exc))}")
    if isinstance(exc, urllib3.exceptions.HTTPError):
        return PullError(f"{where}: {type(exc).__name__}")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return PullError("no space left on device while fetching")
    if isinstance(exc, OSError):
        return PullError(f"fetch failed: {os.strerror(exc.errno) if exc.errno else exc}")
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
