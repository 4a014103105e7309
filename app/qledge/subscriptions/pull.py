"""`qledge subscription pull <id>`: one pull, run as a task under the launcher.

Steps (docs/subscriptions.md): take the spec out of the environment (and out of
/proc), `sub_before`, fetch into a staging folder beside the scripts folder, keep the
files the filters select, then swap the new tree in with one renameat2
(RENAME_EXCHANGE; a first pull renames without replacing), print what was added,
changed and removed, `sub_after`. Any failure before the swap — a refused
credential, a missing branch, a cap, ENOSPC, a kill — leaves `scripts/<alias>/`
as it was; the staging folder it leaves behind is removed by the next pull.

Exit codes: 0 pulled, 1 refused or failed (the reason is the log's last line),
2 started without its spec (not as the subscription's task).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType

from .. import process
from ..fs import confined, dirfd
from .spec import ENV_NAME, MANIFEST_SUFFIX, PullError, PullSpec, Rules, decode

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _say(msg: str) -> None:
    print(msg, flush=True)


def main(sub_id: str) -> int:
    process.make_nondumpable()
    raw = os.environ.get(ENV_NAME)
    process.scrub_environ(ENV_NAME)  # hooks and their children never see it
    if raw is None:
        print("pull: no subscription spec in the environment: run it as the subscription's "
              "task (POST /api/v1/subscriptions/<id>/pull)", file=sys.stderr)
        return 2
    spec = decode(raw)
    if spec.id != sub_id:
        print(f"pull: the spec is for subscription {spec.id}, not {sub_id}", file=sys.stderr)
        return 2
    deadline = time.monotonic() + spec.caps.timeout_s

    def expired(signum: int, frame: FrameType | None) -> None:
        raise PullError("SUB_TIMEOUT", f"the pull took longer than {spec.caps.timeout_s} s "
                        "(caps.timeout_s)")

    signal.signal(signal.SIGALRM, expired)
    signal.alarm(spec.caps.timeout_s)
    try:
        pull(spec, deadline)
    except PullError as exc:
        _failed(spec, exc)
        return 1
    except Exception as exc:  # the fetch module maps what it knows to a PullError
        _failed(spec, _unexpected(exc))
        return 1
    finally:
        signal.alarm(0)
    return 0


def _failed(spec: PullSpec, exc: PullError) -> None:
    """The log's last line: the stable code, then the reason (docs/subscriptions.md)."""
    _say(f"pull failed ({exc.code}): {exc.message}; scripts/{spec.alias}/ is unchanged")


def _unexpected(exc: BaseException) -> PullError:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return PullError("SUB_DISK_FULL", "no space left on device")
    if isinstance(exc, OSError):
        return PullError("SUB_IO_ERROR", f"{type(exc).__name__}: "
                         f"{os.strerror(exc.errno) if exc.errno else exc}")
    # Not its text: an unknown exception's message may quote anything.
    return PullError("SUB_PULL_FAILED", f"an unexpected {type(exc).__name__} (a bug, or a "
                     "server answer qledge does not understand): check the URL and type")


def pull(spec: PullSpec, deadline: float) -> None:
    staging = Path(spec.staging_dir)
    staging.mkdir(mode=0o700, exist_ok=True)
    _clean_leftovers(staging, spec.alias)
    stage = staging / f"{spec.alias}.pull-{os.getpid()}-{secrets.token_hex(4)}"
    stage.mkdir(mode=0o700)
    try:
        _hook("sub_before", spec.sub_before, deadline, required=True)
        kept, scripts = _fetch_into(spec, stage)
        old = _digests(Path(spec.scripts_dir) / spec.alias, spec.caps.files * 2)
        _write_manifest(staging, spec.alias, scripts)
        _swap(spec, stage)
        _report(old, kept)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _hook("sub_after", spec.sub_after, deadline, required=False)


def _clean_leftovers(staging: Path, alias: str) -> None:
    """Staging folders of earlier pulls of this alias that were killed or failed."""
    tmp = re.compile(rf"{re.escape(alias + MANIFEST_SUFFIX)}\.[0-9]+-[0-9a-f]{{8}}\.tmp")
    for entry in os.scandir(staging):
        if entry.name.startswith(f"{alias}.pull-") and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        elif tmp.fullmatch(entry.name):  # a manifest a killed pull was writing
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _write_manifest(staging: Path, alias: str, scripts: list[str]) -> None:
    """The scripts this pull keeps, for the worker's sync: it never evaluates the
    patterns itself (a pattern can take exponential time in `re`). Replaced whole (a
    run that fails after this is never synced: only a succeeded run's sync reads it)."""
    data = "".join(f"{p}\n" for p in sorted(scripts)).encode()
    name = f"{alias}{MANIFEST_SUFFIX}"
    tmp = staging / f"{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        dirfd.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, staging / name)


def _fetch_into(spec: PullSpec, stage: Path) -> tuple[dict[str, str], list[str]]:
    """Fetch and filter into stage/tree; ({path: sha256} of what was kept, the kept
    paths that are scripts)."""
    from . import _fetch as fetch

    tree = stage / "tree"
    tree.mkdir(mode=0o755)
    if spec.type == "file":
        name, raw = fetch.raw_file(spec)
        files: Iterable[tuple[str, int, Callable[[], bytes]]] = [(name, 0o100644, lambda: raw)]
        rules = None
    else:
        files = fetch.git_files(spec, stage / "git")
        rules = Rules.of(spec)
    kept: dict[str, str] = {}
    scripts: list[str] = []
    skipped = 0
    for path, mode, read in files:
        kind = "script" if rules is None else rules.classify(path)
        if kind is None:
            continue
        try:
            parts = confined.parse(path)
        except confined.ScriptError:
            skipped += 1
            continue
        if len(kept) >= spec.caps.files:
            raise PullError("SUB_TOO_MANY_FILES",
                            f"more than {spec.caps.files} files match (caps.files)")
        data = read()
        if len(data) > spec.caps.file_bytes:
            raise PullError("SUB_FILE_TOO_LARGE", f"{path} is larger than "
                            f"{spec.caps.file_bytes} bytes (caps.file_bytes)")
        _write(tree, parts, data, 0o755 if mode & 0o111 else 0o644)
        kept["/".join(parts)] = hashlib.sha256(data).hexdigest()
        if kind == "script":
            scripts.append("/".join(parts))
    if skipped:
        _say(f"skipped {skipped} file(s) with unusable paths")
    return kept, scripts


def _write(tree: Path, parts: tuple[str, ...], data: bytes, mode: int) -> None:
    folder = tree.joinpath(*parts[:-1])
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(folder / parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | os.O_CLOEXEC, mode)
    try:
        dirfd.write_all(fd, data)
    finally:
        os.close(fd)


def _digests(root: Path, limit: int) -> dict[str, str] | None:
    """{path: sha256} of the current tree (None: absent or too large to compare)."""
    if not root.is_dir() or root.is_symlink():
        return {} if not root.exists() else None
    out: dict[str, str] = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            full = Path(folder) / name
            if full.is_symlink() or not full.is_file():
                continue
            if len(out) >= limit:
                return None
            with contextlib.suppress(OSError):
                out[full.relative_to(root).as_posix()] = hashlib.sha256(
                    full.read_bytes()).hexdigest()
    return out


def _swap(spec: PullSpec, stage: Path) -> None:
    """Make the tree durable, then put it in place of scripts/<alias> in one rename."""
    Path(spec.scripts_dir).mkdir(mode=0o755, exist_ok=True)
    stage_fd = os.open(stage, _DIR_FLAGS)
    scripts_fd = os.open(spec.scripts_dir, _DIR_FLAGS)
    try:
        _syncfs(stage_fd)
        try:
            dirfd.rename_exchange(stage_fd, "tree", scripts_fd, spec.alias)
        except FileNotFoundError:
            dirfd.rename_noreplace(stage_fd, "tree", scripts_fd, spec.alias)
        os.fsync(scripts_fd)
    finally:
        os.close(stage_fd)
        os.close(scripts_fd)


def _syncfs(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _report(old: dict[str, str] | None, new: dict[str, str]) -> None:
    if old is None:
        _say(f"pulled {len(new)} file(s); the previous tree was not compared")
        return
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = sorted(p for p in set(new) & set(old) if new[p] != old[p])
    _say(f"pulled {len(new)} file(s): {len(added)} added, {len(changed)} changed, "
         f"{len(removed)} removed")
    for label, paths in (("added", added), ("changed", changed), ("removed", removed)):
        for p in paths:
            _say(f"  {label}: {p}")


def _hook(name: str, command: str, deadline: float, *, required: bool) -> None:
    if not command:
        return
    _say(f"{name}: running")
    remaining = max(1.0, deadline - time.monotonic())
    try:
        code = subprocess.run(["/bin/sh", "-c", command], timeout=remaining,
                              check=False).returncode
    except subprocess.TimeoutExpired:
        code = -1
    if code == 0:
        return
    if required:
        raise PullError("SUB_HOOK_FAILED", f"{name} exited {code}")
    _say(f"{name} exited {code} (the new scripts are in place)")
