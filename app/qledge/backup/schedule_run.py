"""One scheduled backup as the worker writes it (docs/backup.md "Scheduled backups"),
shared by `qledge backup --to-dir` and the run endpoint of http/backup_schedule.py.

`say` receives the lines a person reads in the run's log; `gone`, once set, stops the
writing at its next chunk (the run was cancelled or killed: its connection closed), and
the partial file is removed as for any failure."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ..settings import Settings
from . import schedule
from .crypto import EncryptingWriter
from .writer import estimate, write

PROGRESS_EVERY = 64 * 1024**2  # a log line per 64 MiB written


class Abandoned(OSError):
    """The run that asked for this backup is gone."""


class _Counting:
    """The archive's file, counting what goes through and saying so now and then."""

    def __init__(self, out: IO[bytes], say: Callable[[str], None],
                 gone: threading.Event | None) -> None:
        self.out, self.say, self.gone = out, say, gone
        self.written = 0
        self.next_note = PROGRESS_EVERY

    def write(self, data: bytes) -> int:
        if self.gone is not None and self.gone.is_set():
            raise Abandoned("the run that asked for this backup ended")
        n = self.out.write(data)
        self.written += len(data)
        if self.written >= self.next_note:
            self.say(f"{self.written // 1024**2} MiB written")
            self.next_note += PROGRESS_EVERY
        return n

    def flush(self) -> None:
        self.out.flush()


def run_into_dir(conf: Settings, directory: Path, keep: int, *, with_logs: bool,
                 with_history: bool, say: Callable[[str], None],
                 gone: threading.Event | None = None,
                 passphrase: bytes | None = None) -> schedule.Written:
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory (is the volume mounted?)")
    sizes = estimate(conf, with_logs=with_logs)
    say(f"backing up about {sum(sizes.values())} bytes (before compression) into {directory}")

    def produce(out: IO[bytes]) -> object:
        counted = _Counting(out, say, gone)
        if passphrase is None:
            return write(conf, counted, with_logs=with_logs,  # type: ignore[arg-type]
                         with_history=with_history)
        sealed = EncryptingWriter(counted, passphrase)  # type: ignore[arg-type]
        manifest = write(conf, sealed, with_logs=with_logs,  # type: ignore[arg-type]
                         with_history=with_history, encrypted=True)
        sealed.finish()
        return manifest

    done = schedule.write_to_dir(directory, keep, produce, encrypted=passphrase is not None)
    for name in done.cleaned:
        say(f"removed {name} (left by a backup that did not finish)")
    say(f"written {done.path.name}: {done.path.stat().st_size} bytes")
    for name in done.removed:
        say(f"rotated out {name} (keeping {keep})")
    return done
