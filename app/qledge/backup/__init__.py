"""Backups of an appliance (docs/backup.md): `writer` streams an archive, `check`
(`verify`) reads one back and checks every member against its manifest, `restore`
stages one and `swap` puts it in place. (`check`, not `verify`: importing a submodule
sets the package's attribute of that name, which would hide the function.)

The writer and the readers (tarfile) load on first use: the worker's start-up imports
`swap` and the API's error map imports `errors`, and an idle worker never loads tarfile
(tests/test_imports_idle.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import BackupInvalid, RestoreError
from .manifest import FORMAT_VERSION, Manifest

if TYPE_CHECKING:
    from .check import verify
    from .writer import estimate, write

__all__ = ["FORMAT_VERSION", "BackupInvalid", "Manifest", "RestoreError", "estimate",
           "verify", "write"]


def __getattr__(name: str) -> Any:
    if name == "verify":
        from .check import verify as found
    elif name in ("estimate", "write"):
        from . import writer

        found = getattr(writer, name)
    else:
        raise AttributeError(name)
    return found
