"""The one door through which an archive's bytes are read (verify, restore).

Today an archive is a plain or gzip tar and this hands the stream on as it is. An
encrypted archive (backup/crypto.py, passphrase) is opened here and only here: a
decrypting wrapper returned from `open_archive` is all the readers need to change."""

from __future__ import annotations

from typing import IO


def open_archive(source: IO[bytes]) -> IO[bytes]:
    """The archive's tar stream (gzip or not: tarfile's `r|*` tells) read from
    `source`, a stream read once, in order."""
    return source
