"""Reading an archive back as a stream and checking it whole before anything is
restored (docs/backup.md): the format first, then every member's name, type, size
and sha256 against the manifest at the end. A hostile or damaged archive is refused
with a stable code and the member it concerns."""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
from collections.abc import Callable, Iterator
from typing import IO

import msgspec

from . import reader
from .errors import BackupInvalid
from .manifest import (
    AREAS,
    DB_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    ROOT,
    Manifest,
    decode_format,
    decode_manifest,
)

MAX_MEMBER_BYTES = 16 * 1024**3  # an absurd size is refused before a byte is read
MAX_SMALL_BYTES = 16 * 1024**2   # FORMAT and manifest.json
MAX_MEMBERS = 1_000_000
CHUNK = 64 * 1024


def check_name(name: str) -> None:
    if name.startswith("/") or "\\" in name or "\x00" in name:
        raise BackupInvalid("BACKUP_MEMBER_PATH", f"member {name!r}: absolute or odd path",
                            member=name)
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or posixpath.normpath(name) != name:
        raise BackupInvalid("BACKUP_MEMBER_PATH", f"member {name!r}: not a plain relative path",
                            member=name)
    if name in (FORMAT_NAME, MANIFEST_NAME, DB_NAME):
        return
    if len(parts) < 3 or parts[0] != ROOT or parts[1] not in AREAS:
        raise BackupInvalid("BACKUP_MEMBER_UNKNOWN", f"member {name!r} is not part of a backup",
                            member=name)


def _read_small(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    if info.size > MAX_SMALL_BYTES:
        raise BackupInvalid("BACKUP_MEMBER_SIZE", f"{info.name} is too large", member=info.name)
    f = tar.extractfile(info)
    if f is None:
        raise BackupInvalid("BACKUP_MEMBER_TYPE", f"{info.name} is not a file", member=info.name)
    return f.read()


Sink = Callable[[tarfile.TarInfo, Iterator[bytes] | None], None]


def verify(source: IO[bytes], sink: Sink | None = None,
           passphrase: bytes | None = None) -> Manifest:
    """Read the whole archive from `source`; the manifest once every check passed.
    `sink`, when given, is called as sink(info, chunks) for each file member — the
    restore's staging — and as sink(info, None) for a directory; nothing it wrote may be
    used unless this returns. `passphrase`: for an encrypted archive (backup/crypto.py)."""
    seen: dict[str, tuple[str, int, str]] = {}
    manifest: Manifest | None = None
    try:
        stream = reader.open_archive(source, passphrase)
        tar = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 (closed below)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupInvalid("BACKUP_NOT_AN_ARCHIVE", f"not a readable archive: {exc}") from exc
    try:
        first = True
        for info in tar:
            if manifest is not None:
                raise BackupInvalid("BACKUP_AFTER_MANIFEST",
                                    f"member {info.name!r} after the manifest", member=info.name)
            check_name(info.name)
            if first:
                if info.name != FORMAT_NAME or not info.isfile():
                    raise BackupInvalid("BACKUP_NO_FORMAT", "the archive does not start with "
                                        f"{FORMAT_NAME}: not a qledge backup")
                fmt = decode_format(_read_small(tar, info))
                if fmt.format != FORMAT_VERSION:
                    raise BackupInvalid(
                        "BACKUP_FORMAT_NEWER" if fmt.format > FORMAT_VERSION else
                        "BACKUP_FORMAT_UNKNOWN",
                        f"backup format {fmt.format} (written by qledge {fmt.qledge_version});"
                        f" this qledge reads format {FORMAT_VERSION}",
                        format=fmt.format, version=fmt.qledge_version)
                first = False
                continue
            if info.name in seen or info.name == FORMAT_NAME:
                raise BackupInvalid("BACKUP_MEMBER_DUPLICATE", f"member {info.name!r} twice",
                                    member=info.name)
            if len(seen) >= MAX_MEMBERS:
                raise BackupInvalid("BACKUP_TOO_MANY_MEMBERS", "too many members")
            if info.name == MANIFEST_NAME:
                manifest = decode_manifest(_read_small(tar, info))
                continue
            if info.isdir():
                seen[info.name] = ("dir", 0, "")
                if sink is not None:
                    sink(info, None)
                continue
            if not info.isreg():
                raise BackupInvalid("BACKUP_MEMBER_TYPE", f"member {info.name!r} is a link or "
                                    "special file", member=info.name)
            if info.size > MAX_MEMBER_BYTES:
                raise BackupInvalid("BACKUP_MEMBER_SIZE", f"member {info.name!r} is too large",
                                    member=info.name, size=info.size)
            f = tar.extractfile(info)
            assert f is not None  # a regular file
            digest = hashlib.sha256()

            def chunks(f: IO[bytes] = f, digest: hashlib._Hash = digest) -> Iterator[bytes]:
                while data := f.read(CHUNK):
                    digest.update(data)
                    yield data

            if sink is not None:
                sink(info, chunks())
            for _ in chunks():  # what the sink left unread
                pass
            seen[info.name] = ("file", info.size, digest.hexdigest())
        reader.finish(stream)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BackupInvalid("BACKUP_DAMAGED", f"the archive is damaged or cut short: {exc}") \
            from exc
    except msgspec.ValidationError as exc:
        raise BackupInvalid("BACKUP_MANIFEST_INVALID", f"the manifest is invalid: {exc}") \
            from exc
    except msgspec.DecodeError as exc:
        raise BackupInvalid("BACKUP_MANIFEST_INVALID", f"the manifest is unreadable: {exc}") \
            from exc
    finally:
        tar.close()
    if manifest is None:
        raise BackupInvalid("BACKUP_NO_MANIFEST", "no manifest: the archive is cut short")
    want = {m.name: (m.kind, m.size, m.sha256) for m in manifest.members}
    for name, got in seen.items():
        if name not in want:
            raise BackupInvalid("BACKUP_MEMBER_UNLISTED", f"{name!r} is not in the manifest",
                                member=name)
        if want[name] != got:
            raise BackupInvalid("BACKUP_CHECKSUM", f"{name!r} does not match its checksum",
                                member=name)
    missing = sorted(set(want) - set(seen))
    if missing:
        raise BackupInvalid("BACKUP_MEMBER_MISSING", f"{missing[0]!r} is missing",
                            member=missing[0])
    if DB_NAME not in seen:
        raise BackupInvalid("BACKUP_NO_DATABASE", "the archive holds no database")
    return manifest
