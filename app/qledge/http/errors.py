"""Named errors and their one mapping to JSON responses (docs/api.md)."""

from __future__ import annotations

import errno
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .. import auth
from ..backup.errors import BackupInvalid, RestoreError
from ..db import errors as storage
from ..db.rows import Conflict, NotFound
from ..fields import FieldError
from ..launch.environment import EnvironmentTooLarge
from ..launch.fileio import FileBusy, FileTimeout
from ..launch.logs import UnsafeLogFile
from ..operations import ActiveRun, SystemTask
from ..receipts.codec import DuplicateKey, unique_pairs
from ..runtime.cancellation import RunTerminal
from ..runtime.chains import ChainRefused
from ..scripts import folder as scripts

log = logging.getLogger("qledge.http")


class ApiError(Exception):
    status = 400
    code = "BAD_REQUEST"
    retry_after_s: int | None = None  # a Retry-After header

    def __init__(self, message: str, *, field: str | None = None,
                 extra: dict[str, object] | None = None, code: str | None = None,
                 params: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.extra = extra or {}
        # `error` stays the class's code (clients match on it); `code` says which refusal
        # it is (http/codes.py) and `params` what a client's own words for it need
        # (docs/api.md "Errors"): the limit, the kind of value; `message` stays English.
        self.detail = code
        self.params = params or {}


class BadRequest(ApiError):
    pass


class Invalid(ApiError):
    status = 422
    code = "INVALID"


class UnknownZone(Invalid):
    code = "UNKNOWN_ZONE"


class Unauthorized(ApiError):
    status = 401
    code = "UNAUTHORIZED"


class Forbidden(ApiError):
    status = 403
    code = "FORBIDDEN"


class Missing(ApiError):
    status = 404
    code = "NOT_FOUND"


class StateConflict(ApiError):
    status = 409
    code = "CONFLICT"


class Unavailable(ApiError):
    status = 503
    code = "UNAVAILABLE"


class PayloadTooLarge(ApiError):
    status = 413
    code = "PAYLOAD_TOO_LARGE"


class LogNotRegular(ApiError):
    status = 409
    code = "LOG_NOT_REGULAR_FILE"


class DiskFull(ApiError):
    status = 507
    code = "DISK_FULL"


class Internal(ApiError):
    status = 500
    code = "INTERNAL"


_enc = msgspec.json.Encoder()
T = TypeVar("T")


def json_response(body: object, status: int = 200, headers: dict[str, str] | None = None
                  ) -> Response:
    return Response(_enc.encode(body), status_code=status, media_type="application/json",
                    headers=headers)


def _body(exc: ApiError) -> dict[str, object]:
    body: dict[str, object] = {"error": exc.code, "message": exc.message}
    if exc.field is not None:
        body["field"] = exc.field
    if exc.detail is not None:
        body["code"] = exc.detail
    if exc.params:
        body["params"] = exc.params
    body.update(exc.extra)
    return body


def _headers(exc: ApiError) -> dict[str, str]:
    headers: dict[str, str] = {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if exc.status == 413:
        # The rest of the body is never read: close the connection after the answer, or
        # a client still sending would wait on a full socket instead of reading it.
        headers["Connection"] = "close"
    if exc.retry_after_s:
        headers["Retry-After"] = str(exc.retry_after_s)
    return headers


def render(exc: ApiError) -> Response:
    """The native API's answer: `{"error": <code>, "message", "field"?, ...}`."""
    return json_response(_body(exc), exc.status, _headers(exc) or None)


def render_qinglong(exc: ApiError) -> Response:
    """QingLong's answer under /open/*: `{"code": <HTTP status>, "message"}`."""
    return json_response({"code": exc.status, "message": exc.message}, exc.status,
                         _headers(exc) or None)


# -- each exception a route may raise, as the ApiError it answers with ----------------
# `bad_input` is the class a domain rule's refusal becomes: Invalid (422) on the native
# API, BadRequest (400) on QingLong's, the status each API has always given bad input.

def _conflict(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    return StateConflict("changed concurrently, retry", code="CHANGED_CONCURRENTLY")


def _not_found(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    return Missing(f"{exc} not found", params={"what": str(exc)})


def _active_run(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, ActiveRun)
    return StateConflict(str(exc), extra={"active_run_id": exc.run_id, "reason": exc.reason},
                         code="ACTIVE_RUN")


def _system_task(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, SystemTask)
    error = StateConflict(str(exc), field=exc.field)
    error.code = "SYSTEM_TASK"
    return error


def _chain_refused(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, ChainRefused)
    return Invalid(str(exc), field=exc.field, code="CHAIN_REFUSED")


def _run_terminal(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    return StateConflict(f"run is already terminal ({exc})", code="RUN_TERMINAL")


def _http(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, HTTPException)
    mapped = ApiError(exc.detail or "error")
    mapped.status = exc.status_code
    mapped.code = "HTTP_ERROR"
    return mapped


def _unsafe_log(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, UnsafeLogFile)
    return LogNotRegular(
        f"{exc}: qledge serves regular files only (the task replaced its log file)",
        extra={"kind": exc.kind})


def _file_pool(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    error = Unavailable(f"{exc}; try again later")
    error.code = "LOG_READ_TIMEOUT" if isinstance(exc, FileTimeout) else "LOG_READ_BUSY"
    error.retry_after_s = 5
    return error


def field_refusal(exc: FieldError, bad_input: type[ApiError]) -> ApiError:
    """A domain rule's refusal (fields.py), naming the field: `rule` (the FieldError's
    stable code) and its `params` let a client say it in its own language (the panel's
    catalogue: i18n.js `code.<rule>`); `message` stays English."""
    params: dict[str, object] = {k: v for k, v in exc.params.items() if v is not None}
    return bad_input(exc.message, field=exc.field, extra={"rule": exc.code, "params": params})


def _field_error(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, FieldError)
    return field_refusal(exc, bad_input)


def _environment(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, EnvironmentTooLarge)
    extra: dict[str, object] = {} if exc.variable is None else {"variable": exc.variable}
    return bad_input(str(exc), field="env", extra=extra, code="ENVIRONMENT_TOO_LARGE")


def _api_error(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, ApiError)
    return exc


def disk_full(exc: BaseException) -> bool:
    """SQLITE_FULL (a commit that found no room), or ENOSPC/EDQUOT from a file write."""
    if isinstance(exc, storage.StorageError):
        return storage.is_full(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


# Seconds a client waits before retrying a request the database could not serve.
RETRY_AFTER_S = 5


def unexpected(where: str, exc: BaseException) -> ApiError:
    """Any exception no mapping claims (`where`: method and path, never the query: it may
    hold a ticket): an error id that is also in the worker log (with the traceback); a
    full disk is named as such (507)."""
    error_id = secrets.token_hex(6)
    if disk_full(exc):
        log.error("disk full (error id %s) answering %s: %s", error_id, where, exc)
        return DiskFull(
            f"disk full: no space left to save this change (error id {error_id}); nothing"
            " was saved, free some space and retry", extra={"error_id": error_id})
    if isinstance(exc, storage.PgTransient):
        # PostgreSQL unreachable (fleet mode), or a lock/serialization timeout: the same
        # request may succeed in a moment, and nothing of it was committed. SQLite's
        # transient class is all of OperationalError (a missing table too): unchanged.
        log.warning("database unavailable answering %s: %s (sqlstate %s)", where,
                    type(exc.__cause__ or exc).__name__, exc.sqlstate)
        error = Unavailable("the database cannot be reached right now; nothing was"
                            " saved, retry shortly")
        error.code = "DATABASE_UNAVAILABLE"
        error.retry_after_s = RETRY_AFTER_S
        return error
    log.error("unhandled error (error id %s) answering %s", error_id, where, exc_info=exc)
    return Internal(f"internal error (error id {error_id}); the worker log has the details",
                    extra={"error_id": error_id})


# Scripts (docs/scripts.md): each refusal keeps its class's code and carries the reason.
SCRIPT_ERRORS: dict[type[scripts.ScriptError], tuple[int, str]] = {
    scripts.ScriptPathInvalid: (400, "SCRIPT_PATH_INVALID"),
    scripts.ScriptSymlink: (403, "SCRIPT_PATH_SYMLINK"),
    scripts.ScriptNotRegular: (403, "SCRIPT_NOT_REGULAR"),
    scripts.ScriptNotFound: (404, "SCRIPT_NOT_FOUND"),
    scripts.ScriptVersionNotFound: (404, "SCRIPT_VERSION_NOT_FOUND"),
    scripts.ScriptExists: (409, "SCRIPT_EXISTS"),
    scripts.ScriptWrongType: (409, "SCRIPT_WRONG_TYPE"),
    scripts.ScriptChanged: (409, "SCRIPT_CHANGED"),
    scripts.ScriptTreeTooLarge: (409, "SCRIPT_TREE_TOO_LARGE"),
    scripts.ScriptTooLarge: (413, "SCRIPT_TOO_LARGE"),
    scripts.ScriptBinary: (415, "SCRIPT_BINARY"),
    scripts.ScriptsUnavailable: (503, "SCRIPTS_UNAVAILABLE"),
}


def _script_error(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, scripts.ScriptError)
    status, code = next((v for k, v in SCRIPT_ERRORS.items() if isinstance(exc, k)),
                        (400, "SCRIPT_ERROR"))
    extra: dict[str, object] = {"reason": exc.reason}
    if exc.path:
        extra["path"] = exc.path
    mapped = ApiError(exc.message, field=exc.field, extra=extra)
    mapped.status, mapped.code = status, code
    return mapped


# The panel's sign-in (auth/, docs/api.md "Signing in"): each refusal's status.
AUTH_STATUS: dict[type[auth.AuthRefused], int] = {
    auth.BadCredentials: 401, auth.TotpRequired: 401, auth.Throttled: 429,
    auth.PasswordNotSet: 409, auth.CurrentRequired: 403, auth.NoEnrolment: 409,
}


def _auth_refused(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, auth.AuthRefused)
    status = next((v for k, v in AUTH_STATUS.items() if isinstance(exc, k)), 401)
    extra: dict[str, object] = {"retry_after_s": exc.retry_after_s} if exc.retry_after_s else {}
    mapped = ApiError(exc.message, extra=extra)
    mapped.status, mapped.code = status, exc.code
    mapped.retry_after_s = exc.retry_after_s or None
    return mapped


def _weak_password(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    return Invalid(str(exc), field="new", code="WEAK_PASSWORD")


# A backup or restore refused (docs/backup.md): the archive (422), this appliance's
# state (409), room on the data volume (507); `code` and `params` as raised.
RESTORE_STATUS = {"RESTORE_NOT_EMPTY": 409, "RESTORE_RUNS_ACTIVE": 409,
                  "RESTORE_PENDING": 409, "RESTORE_FLEET": 409, "RESTORE_NO_SPACE": 507,
                  "RESTORE_CURRENT_UNREADABLE": 500}


def _backup_refused(exc: Exception, bad_input: type[ApiError]) -> ApiError:
    assert isinstance(exc, BackupInvalid | RestoreError)
    mapped = ApiError(str(exc), extra={"params": dict(exc.params)})
    mapped.status, mapped.code = RESTORE_STATUS.get(exc.code, 422), exc.code
    return mapped


Mapping = Callable[[Exception, type[ApiError]], ApiError]
Handler = Callable[[Request, Exception], Awaitable[Response]]
MAPPINGS: dict[type[Exception], Mapping] = {
    scripts.ScriptError: _script_error,
    ApiError: _api_error,
    FieldError: _field_error,
    NotFound: _not_found,
    Conflict: _conflict,
    ActiveRun: _active_run,
    RunTerminal: _run_terminal,
    ChainRefused: _chain_refused,
    SystemTask: _system_task,
    HTTPException: _http,
    UnsafeLogFile: _unsafe_log,
    FileTimeout: _file_pool,
    FileBusy: _file_pool,
    EnvironmentTooLarge: _environment,
    auth.AuthRefused: _auth_refused,
    auth.WeakPassword: _weak_password,
    BackupInvalid: _backup_refused,
    RestoreError: _backup_refused,
}


def _handlers(shape: Callable[[ApiError], Response],
              bad_input: type[ApiError]) -> dict[Any, Handler]:
    def handler(mapping: Mapping) -> Handler:
        async def answer(request: Request, exc: Exception) -> Response:
            return shape(mapping(exc, bad_input))
        return answer
    return {kind: handler(mapping) for kind, mapping in MAPPINGS.items()}


# The native API's exception handlers (http/app.py) and QingLong's (http/qinglong/).
HANDLERS = _handlers(render, Invalid)


def qinglong_handlers() -> dict[Any, Handler]:
    return _handlers(render_qinglong, BadRequest)


def _duplicate_keys(data: bytes) -> None:
    """The receipt codec's pre-pass: msgspec keeps the last of two equal keys; the API
    refuses them instead (a body must mean one thing). Bad JSON is msgspec's to report."""
    if b"{" not in data:
        return
    try:
        json.loads(data, object_pairs_hook=unique_pairs)
    except DuplicateKey as exc:
        raise Invalid(f"duplicate key {exc.key!r} in the JSON body", field=exc.key,
                      code="DUPLICATE_KEY") from None
    except RecursionError:
        raise BadRequest("malformed JSON: nested too deeply", code="MALFORMED_JSON") from None
    except ValueError:
        pass


def decode_body(data: bytes, kind: type[T]) -> T:
    """Strict JSON decode; the error names the offending field."""
    _duplicate_keys(data)
    try:
        return msgspec.json.decode(data, type=kind, strict=True)
    except msgspec.ValidationError as exc:
        text = str(exc)
        field = text.rsplit("at `$.", 1)[1].rstrip("`").split("[")[0] if "at `$." in text else None
        if field is None and "field `" in text:
            field = text.split("field `", 1)[1].split("`", 1)[0]
        # "Expected `int`, got `str`": the kind a client says in its own words.
        expected = re.match(r"Expected `([a-z]+)", text)
        if expected:
            raise Invalid(text, field=field, code="WRONG_TYPE",
                          params={"expected": expected.group(1)}) from exc
        code = ("MISSING_FIELD" if text.startswith("Object missing") else
                "UNKNOWN_FIELD" if text.startswith("Object contains unknown") else None)
        raise Invalid(text, field=field, code=code) from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="MALFORMED_JSON") from exc
