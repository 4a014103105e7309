"""The archive's layout and its manifest (docs/backup.md).

An archive is a tar (optionally gzip): `qledge-backup/FORMAT` first (the format
version, so a newer one is refused before anything is read), then the members,
then `qledge-backup/manifest.json` last, naming every member with its size and
sha256 (known only once the member is written: the archive is streamed)."""

from __future__ import annotations

import msgspec

FORMAT_VERSION = 1
ROOT = "qledge-backup"
FORMAT_NAME = f"{ROOT}/FORMAT"
MANIFEST_NAME = f"{ROOT}/manifest.json"
DB_NAME = f"{ROOT}/db.sqlite3"
AREAS = ("scripts", "scripts-history", "logs")


class Format(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    format: int
    qledge_version: str


class Member(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str
    kind: str  # "file" | "dir"
    size: int
    sha256: str


class Manifest(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    format: int
    qledge_version: str
    schema_version: int
    created_at_ms: int
    with_logs: bool
    with_history: bool
    encrypted: bool
    counts: dict[str, int]
    members: tuple[Member, ...]


def encode(value: Format | Manifest) -> bytes:
    return msgspec.json.encode(value)


def decode_format(data: bytes) -> Format:
    return msgspec.json.decode(data, type=Format, strict=True)


def decode_manifest(data: bytes) -> Manifest:
    return msgspec.json.decode(data, type=Manifest, strict=True)
