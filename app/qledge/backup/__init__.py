"""Backups of an appliance (docs/backup.md): `writer` streams an archive, `verify` reads
one back and checks every member against its manifest."""

from __future__ import annotations

from .manifest import FORMAT_VERSION, Manifest
from .verify import BackupInvalid, verify
from .writer import estimate, write

__all__ = ["FORMAT_VERSION", "BackupInvalid", "Manifest", "estimate", "verify", "write"]
