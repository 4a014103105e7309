"""The scheduled backup's configuration (docs/backup.md "Scheduled backups").

It is stored as what it is: one internal task (name `backup: scheduled`, label
`backup`) whose schedule is the cron, whose enabled flag is the switch and whose
command is `qledge backup --to-dir DIR --keep N …`. Each backup is then an ordinary
run — a log, a real exit code, notifications on failure — and nothing else has to be
kept in step with the task. Reading the settings back parses that command; a command
edited by hand into something else reads as `edited`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import NoReturn

import msgspec

from .. import cron
from ..db import backup_schedule as stored
from ..model import Overlap, Task
from ..settings import Settings
from ..tasks.writable import TaskFields
from .crypto import MIN_PASSPHRASE
from .schedule import KEEP_MAX

PASSPHRASE_FILE = "backup-passphrase"  # noqa: S105 - a file name, not a secret

MAX_DIR_CHARS = 1024


class ScheduleIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """PUT /api/v1/backup/schedule. `passphrase`: absent keeps the current one, null
    removes it (plain archives), a string sets it (kept in `passphrase_path`, never in
    the task)."""

    enabled: bool
    directory: str
    schedule: str
    keep: int = 7
    with_logs: bool = False
    with_history: bool = False
    passphrase: str | msgspec.UnsetType | None = msgspec.UNSET


class ScheduleOut(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    configured: bool
    edited: bool = False  # the task's command was changed by hand: PUT rewrites it
    task_id: str | None = None
    enabled: bool = False
    directory: str | None = None
    schedule: str | None = None
    keep: int | None = None
    with_logs: bool = False
    with_history: bool = False
    encrypted: bool = False  # a passphrase is set: the archives are encrypted


class ScheduleInvalid(Exception):
    """`code` is stable (BACKUP_*); `field` and `params` say what is wrong."""

    def __init__(self, code: str, message: str, field: str, **params: object) -> None:
        super().__init__(message)
        self.code, self.field, self.params = code, field, params


def validate(conf: Settings, req: ScheduleIn) -> ScheduleIn:
    try:
        schedule = cron.validate(req.schedule)
    except cron.CronError as exc:
        raise ScheduleInvalid("BACKUP_SCHEDULE_CRON", f"schedule: {exc}", "schedule",
                              reason=str(exc)) from None
    if isinstance(req.passphrase, str) and len(req.passphrase) < MIN_PASSPHRASE:
        raise ScheduleInvalid("BACKUP_PASSPHRASE_SHORT", "a backup passphrase needs at least"
                              f" {MIN_PASSPHRASE} characters", "passphrase",
                              min=MIN_PASSPHRASE)
    if not 1 <= req.keep <= KEEP_MAX:
        raise ScheduleInvalid("BACKUP_KEEP_RANGE", f"keep takes 1 to {KEEP_MAX}", "keep",
                              min=1, max=KEEP_MAX)
    d = req.directory
    if not d or len(d) > MAX_DIR_CHARS or any(ord(c) < 32 for c in d) or \
            not os.path.isabs(d):
        raise ScheduleInvalid("BACKUP_DIR_NOT_ABSOLUTE", "directory must be an absolute path",
                              "directory", max_chars=MAX_DIR_CHARS)
    directory = Path(os.path.normpath(d))
    roots = (conf.data_path, conf.work_path, conf.logs_path, conf.receipts_path)
    for root in roots:
        real = Path(os.path.realpath(root))
        for candidate in (directory, Path(os.path.realpath(directory))):
            if {real, root} & {candidate, *candidate.parents}:
                # A backup inside what is backed up would hold the previous ones.
                raise ScheduleInvalid("BACKUP_DIR_INSIDE_STATE", f"{directory} is inside the"
                                      f" appliance's own {root.name} folder", "directory",
                                      path=str(directory), root=root.name)
    # A disabled schedule may name a stick that is unplugged for now.
    if req.enabled:
        if not directory.is_dir():
            raise ScheduleInvalid("BACKUP_DIR_MISSING", f"{directory} is not a directory"
                                  " (is the volume mounted?)", "directory",
                                  path=str(directory))
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ScheduleInvalid("BACKUP_DIR_NOT_WRITABLE", f"{directory} is not writable"
                                  " by the worker", "directory", path=str(directory))
    return msgspec.structs.replace(req, schedule=schedule, directory=str(directory))


def command(req: ScheduleIn) -> str:
    """`qledge backup scheduled …`: a task cannot read the database (Landlock keeps the
    data dir from every task, launch/isolation.py), so the task's process only asks the
    worker, with its run's credential, to write the archive, and prints what it says.
    The words after `scheduled` are the settings, read back by `read_back`."""
    # -I: the work dir (writable by every task) is not on sys.path (runtime/dependencies.py).
    words = [sys.executable, "-I", "-m", "qledge", "backup", "scheduled", "--to-dir",
             req.directory, "--keep", str(req.keep)]
    words += ["--with-logs"] * req.with_logs + ["--with-history"] * req.with_history
    return shlex.join(words)


def task_fields(req: ScheduleIn) -> TaskFields:
    return TaskFields(name=stored.NAME, command=command(req), schedule=req.schedule,
                      enabled=req.enabled, overlap=Overlap.SKIP, labels=["backup"],
                      retries=0, env={})


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(add_help=False, exit_on_error=False)
    p.add_argument("--to-dir", required=True)
    p.add_argument("--keep", type=int, required=True)
    p.add_argument("--with-logs", action="store_true")
    p.add_argument("--with-history", action="store_true")
    return p


def passphrase_path(conf: Settings) -> Path:
    """In the data dir: the worker's uid only (0600), kept from every task by Landlock,
    never in a backup (only the database's snapshot is taken from there)."""
    return conf.data_path / PASSPHRASE_FILE


def read_passphrase(conf: Settings) -> bytes | None:
    try:
        return passphrase_path(conf).read_bytes() or None
    except FileNotFoundError:
        return None


def store_passphrase(conf: Settings, passphrase: str | None) -> None:
    """Set (written whole, fsynced, renamed) or remove the scheduled backups' passphrase."""
    path = passphrase_path(conf)
    if passphrase is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f".{PASSPHRASE_FILE}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, passphrase.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_back(task: Task | None, *, encrypted: bool = False) -> ScheduleOut:
    if task is None:
        return ScheduleOut(configured=False, encrypted=encrypted)
    base = ScheduleOut(configured=True, task_id=task.id, enabled=task.enabled,
                       schedule=task.schedule, encrypted=encrypted)
    try:
        words = shlex.split(task.command)
        at = words.index("backup")
        if words[at - 2:at] != ["-m", "qledge"] or words[at + 1:at + 2] != ["scheduled"]:
            raise ValueError("not qledge backup scheduled")
        args = _parser().parse_args(words[at + 2:])
    except (ValueError, argparse.ArgumentError):
        return msgspec.structs.replace(base, edited=True)
    out = msgspec.structs.replace(base, directory=args.to_dir, keep=args.keep,
                                  with_logs=args.with_logs, with_history=args.with_history)
    # Anything but the command this module writes (extra words, another order) is an
    # edit: the worker runs no backup for it (`settings_of`). The interpreter's path may
    # differ (an upgrade moved it): the worker does the work, not that interpreter.
    same = shlex.split(command(_as_input(out)))[1:] == words[1:]
    return out if same else msgspec.structs.replace(out, edited=True)


def _as_input(out: ScheduleOut) -> ScheduleIn:
    assert out.directory is not None and out.keep is not None
    return ScheduleIn(enabled=out.enabled, directory=out.directory, schedule=out.schedule or "",
                      keep=out.keep, with_logs=out.with_logs, with_history=out.with_history)


def settings_of(task: Task) -> ScheduleIn | None:
    """What a run of the scheduled task asks the worker to write; None once edited."""
    out = read_back(task)
    if out.edited or out.directory is None:
        return None
    return _as_input(out)
