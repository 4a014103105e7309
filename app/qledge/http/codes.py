"""Every `error` code the native API answers with, and the names of the values each
answer carries for a translation (docs/api.md "Errors").

A client that speaks another language (the panel: i18n.js `err.<CODE>`) says the
refusal from the code and these values; the English `message` stays for API users.
A field rule's refusal (fields.FieldError) answers INVALID with its own `rule` and
`params` (i18n.js `code.<rule>`). tests/test_error_codes.py walks the raise sites
against this table and the panel's catalogue against both.

The values are the body's `params` (or a top-level key the answer always had, such
as `retry_after_s`); `field` is not listed: any refusal may name one.
"""

from __future__ import annotations

CODES: dict[str, tuple[str, ...]] = {
    # The classes (http/errors.py), when a raise site says nothing more precise.
    "BAD_REQUEST": (),
    "INVALID": (),
    "UNKNOWN_ZONE": (),
    "UNAUTHORIZED": (),
    "FORBIDDEN": (),
    "NOT_FOUND": ("what",),
    "CONFLICT": (),
    "UNAVAILABLE": (),
    "PAYLOAD_TOO_LARGE": ("limit_bytes",),
    "LOG_NOT_REGULAR_FILE": ("kind",),
    "DISK_FULL": ("error_id",),
    "INTERNAL": ("error_id",),
    "DATABASE_UNAVAILABLE": (),
    "HTTP_ERROR": (),
    # Bodies built by their route.
    "LOG_EVICTED": ("reason", "evicted_at_ms"),
    "NODE_UNAVAILABLE": ("node", "last_seen_ms"),
    # The mappings of domain exceptions (http/errors.py MAPPINGS).
    "CHANGED_CONCURRENTLY": (),
    "ACTIVE_RUN": ("active_run_id", "reason"),
    "SYSTEM_TASK": (),
    "CHAIN_REFUSED": (),
    "RUN_TERMINAL": (),
    "LOG_READ_TIMEOUT": (),
    "LOG_READ_BUSY": (),
    "ENVIRONMENT_TOO_LARGE": ("variable",),
    "WEAK_PASSWORD": (),
    # Scripts (http/errors.py SCRIPT_ERRORS): the relative path and a reason code.
    "SCRIPT_PATH_INVALID": ("path", "reason"),
    "SCRIPT_PATH_SYMLINK": ("path", "reason"),
    "SCRIPT_NOT_REGULAR": ("path", "reason"),
    "SCRIPT_NOT_FOUND": ("path", "reason"),
    "SCRIPT_VERSION_NOT_FOUND": ("path", "reason"),
    "SCRIPT_EXISTS": ("path", "reason"),
    "SCRIPT_WRONG_TYPE": ("path", "reason"),
    "SCRIPT_CHANGED": ("path", "reason"),
    "SCRIPT_TREE_TOO_LARGE": ("path", "reason"),
    "SCRIPT_TOO_LARGE": ("path", "reason"),
    "SCRIPT_BINARY": ("path", "reason"),
    "SCRIPTS_UNAVAILABLE": ("path", "reason"),
    "SCRIPT_ERROR": ("path", "reason"),
    # Signing in (auth/errors.py, http/auth.py, http/signin.py).
    "SIGNIN_REFUSED": (),
    "TOTP_REQUIRED": (),
    "SIGNIN_THROTTLED": ("retry_after_s",),
    "PASSWORD_NOT_SET": (),
    "CURRENT_PASSWORD_REQUIRED": (),
    "TOTP_NOT_ENROLLING": (),
    "ADMIN_TOKEN_REQUIRED": (),
    "CSRF_REFUSED": (),
    "TOKEN_MISSING": (),
    "TOKEN_INVALID": (),
    "SESSION_ENDED": (),
    "TICKET_INVALID": (),
    # Bodies and query strings.
    "MALFORMED_JSON": (),
    "MALFORMED_FORM": (),
    "DUPLICATE_KEY": (),
    "WRONG_TYPE": ("expected",),
    "MISSING_FIELD": (),
    "UNKNOWN_FIELD": (),
    "REQUIRED": (),
    "NOT_BOOLEAN": (),
    "NOT_INTEGER": (),
    "NOT_POSITIVE_INTEGER": (),
    "NOT_ONE_OF": (),
    "NOT_ID_LIST": (),
    "TOO_MANY_IDS": ("max",),
    "TOO_MANY": ("max",),
    "COUNT_OUT_OF_RANGE": ("min", "max"),
    "BAD_ID": (),
    "BAD_CURSOR": (),
    "CURSOR_AND_OFFSET": (),
    "BAD_SCHEDULE": (),
    # Uploads (http/_files.py, http/imports.py).
    "BAD_CONTENT_LENGTH": (),
    "NOT_MULTIPART": (),
    "BAD_MULTIPART": (),
    "TOO_MANY_PARTS": ("max",),
    "ONE_FILE_ONLY": (),
    "FILE_PART_REQUIRED": (),
    "IMPORT_SOURCE_INVALID": (),
    "IMPORT_FAILED": (),
    "BAD_CHOICES": ("max",),
    # Features.
    "PATH_OR_COMMAND": (),
    "TASK_FORM_REFUSED": ("reason",),
    "ALIAS_TAKEN": (),
    "PULL_BUSY": (),
    "NAME_TAKEN": (),
    "NO_PACKAGES": (),
    "BAD_PACKAGE_SPEC": (),
    "ECOSYSTEM_UNAVAILABLE": (),
    "DEPENDENCY_IN_USE": (),
    "NO_SUCH_ATTEMPT": ("number",),
    "OFFSET_PAST_END": (),
    "BAD_APPRISE_URL": (),
    "RULE_INVALID": (),
    "RUN_FINISHED": (),
    "TOO_MANY_SENDS": ("max",),
    # Backups (docs/backup.md): the archive's own refusals (BACKUP_*, RESTORE_* of
    # backup/errors.py) are said by the panel's backup cards (`bk.err.*`, `bs.err.*`).
    "BACKUP_PASSPHRASE_SHORT": ("min",),
    "BACKUP_ENCRYPTION_UNAVAILABLE": (),
    "BACKUP_NOT_SCHEDULED_RUN": (),
    "BACKUP_SCHEDULE_EDITED": (),
    "BACKUP_SCHEDULE_INVALID": (),
    "RESTORE_BUSY": (),
}
