"""The roots (data, receipts, logs, work and its scripts folder), private and confined."""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
from pathlib import Path

from .settings import MIN_ADMIN_TOKEN, Settings


class RootError(Exception):
    pass


class AlreadyRunning(Exception):
    pass


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_private_dir(path: Path) -> Path:
    """Create 0700 if missing; refuse a symlink or a non-directory.

    A directory created here is made durable in its parent (an fsync of the
    parent, once in the directory's life): without it a power cut soon after the
    first start could take the whole data directory, database and all.
    """
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    for new in reversed(missing):
        try:
            new.mkdir(mode=0o700)
        except FileExistsError:
            continue
        fsync_dir(new.parent)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise RootError(f"{path} is not a directory")
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def prepare_roots(settings: Settings) -> None:
    for root in (settings.data_path, settings.receipts_path, settings.logs_path,
                 settings.work_path):
        ensure_private_dir(root)
    ensure_private_dir(settings.data_path / "secrets")
    ensure_private_dir(settings.scripts_path)
    ensure_private_dir(settings.script_history_path)


def acquire_runtime_lock(settings: Settings) -> int:
    """An exclusive flock held for the life of the process: one runtime per data dir."""
    path = settings.data_path / "runtime.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise AlreadyRunning(
                f"another qledge runtime holds {path}: only one may use a data directory"
            ) from exc
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def admin_token(settings: Settings) -> tuple[str, bool]:
    """(token, generated_now). Generated once into data/secrets/admin.token, mode 0600."""
    if settings.admin_token:
        return settings.admin_token, False
    path = settings.data_path / "secrets" / "admin.token"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        token = path.read_text().strip()
        if len(token) < MIN_ADMIN_TOKEN:
            raise RootError(f"{path} holds no usable token (fewer than {MIN_ADMIN_TOKEN}"
                            " characters); remove it to generate one") from None
        return token, False
    token = secrets.token_urlsafe(32)
    try:
        os.write(fd, (token + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)  # the name too: a token shown once must not vanish
    return token, True
