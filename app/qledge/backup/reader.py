"""The one door through which an archive's bytes are read (verify, restore).

An archive is a tar, plain or gzip, possibly sealed with a passphrase
(backup/crypto.py). Opened here and only here: decrypted when it is encrypted, and
gunzipped by `gzip` itself rather than by tarfile's stream mode, because tarfile
stops at the tar's end marker and never checks the gzip trailer: an archive cut
inside its final padding would pass. `finish` reads what follows the end marker, so
gzip's CRC and length are checked and a cut-off archive is refused."""

from __future__ import annotations

import gzip
import io
from typing import IO, Any, cast

from .errors import BackupInvalid

GZIP_MAGIC = b"\x1f\x8b"
# A tar ends with two zero blocks padded to its record size (10 KiB by default);
# more than this after the end marker is not a qledge archive's tail.
MAX_TAIL = 1 << 20


class _Raw(io.RawIOBase):
    """Any readable stream as a raw one, so a BufferedReader (which can peek) wraps it."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.inner.read(len(b))
        b[:len(data)] = data
        return len(data)


def _peekable(source: IO[bytes]) -> IO[bytes]:
    return source if hasattr(source, "peek") else io.BufferedReader(_Raw(source), 1 << 16)


def open_archive(source: IO[bytes], passphrase: bytes | None = None) -> IO[bytes]:
    """The archive's tar stream read from `source` (read once, in order): decrypted
    with `passphrase` when sealed (a sealed archive without one, or a passphrase for
    a plain one, is refused), decompressed when gzip."""
    from . import crypto

    plain = crypto.opened(_peekable(source), passphrase)
    head = plain.peek(2)[:2] if hasattr(plain, "peek") else b""
    if head == GZIP_MAGIC:
        return cast(IO[bytes], gzip.GzipFile(fileobj=plain, mode="rb"))
    return plain


def finish(tar_stream: IO[bytes]) -> None:
    """Read the stream past the tar's end marker to its end: a gzip stream checks its
    trailer there (EOFError or BadGzipFile when cut or damaged, as OSError)."""
    tail = 0
    while data := tar_stream.read(1 << 16):
        tail += len(data)
        if tail > MAX_TAIL:
            raise BackupInvalid("BACKUP_TRAILING_DATA", "data follows the archive's end")
