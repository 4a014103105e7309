"""The refusals of a backup or restore, each with a stable code (http/errors.py maps
them), light enough for every worker to import."""

from __future__ import annotations


class BackupInvalid(Exception):
    """The archive itself is refused: `code` is stable (BACKUP_*); `params` say what the
    translation needs. Nothing was changed."""

    def __init__(self, code: str, message: str, **params: object) -> None:
        super().__init__(message)
        self.code, self.params = code, params


class RestoreError(Exception):
    """The restore is refused for this appliance or could not be staged: `code` is
    stable (RESTORE_*). Nothing was changed."""

    def __init__(self, code: str, message: str, **params: object) -> None:
        super().__init__(message)
        self.code, self.params = code, params
