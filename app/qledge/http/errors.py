"""Named errors and their one mapping to JSON responses (docs/api.md)."""

from __future__ import annotations

import errno
import json
import logging
import secrets
from typing import TypeVar

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

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

    def __init__(self, message: str, *, field: str | None = None,
                 extra: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.extra = extra or {}


class BadRequest(ApiError):
    pass


class Invalid(ApiError):
    status = 422
    code = "INVALID"


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
    body.update(exc.extra)
    return body


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    if request.url.path.startswith("/open/"):
        # QingLong's shape: {"code": <status>, "message": ...}
        return json_response({"code": exc.status, "message": exc.message}, exc.status)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if exc.status == 413:  # the rest of the body is not read: do not wait for it
        headers = {"Connection": "close"}
    return json_response(_body(exc), exc.status, headers)


async def handle_not_found(request: Request, exc: Exception) -> Response:
    return await handle_api_error(request, Missing(f"{exc} not found"))


async def handle_conflict(request: Request, exc: Exception) -> Response:
    return await handle_api_error(request, StateConflict("changed concurrently, retry"))


async def handle_active_run(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ActiveRun)
    return await handle_api_error(request, StateConflict(
        str(exc), extra={"active_run_id": exc.run_id, "reason": exc.reason}))


async def handle_system_task(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SystemTask)
    error = StateConflict(str(exc), field=exc.field)
    error.code = "SYSTEM_TASK"
    return await handle_api_error(request, error)


async def handle_chain_refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ChainRefused)
    return await handle_api_error(request, Invalid(str(exc), field=exc.field))


async def handle_run_terminal(request: Request, exc: Exception) -> Response:
    return await handle_api_error(request, StateConflict(f"run is already terminal ({exc})"))


async def handle_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    mapped = ApiError(exc.detail or "error")
    mapped.status = exc.status_code
    mapped.code = "HTTP_ERROR"
    return await handle_api_error(request, mapped)


async def handle_unsafe_log(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, UnsafeLogFile)
    return await handle_api_error(request, LogNotRegular(
        f"{exc}: qledge serves regular files only (the task replaced its log file)",
        extra={"kind": exc.kind}))


async def handle_file_pool(request: Request, exc: Exception) -> Response:
    code = "LOG_READ_TIMEOUT" if isinstance(exc, FileTimeout) else "LOG_READ_BUSY"
    error = Unavailable(f"{exc}; try again later")
    error.code = code
    response = await handle_api_error(request, error)
    response.headers["Retry-After"] = "5"
    return response


async def handle_field_error(request: Request, exc: Exception) -> Response:
    """A domain rule's refusal (fields.py): 422 INVALID naming the field, or QingLong's
    400 on /open — the status each API has always given bad input."""
    assert isinstance(exc, FieldError)
    kind = BadRequest if request.url.path.startswith("/open/") else Invalid
    # `rule` (the FieldError's stable code) and its `params` let a client say it in its
    # own language (the panel's catalogue: i18n.js `code.<rule>`); `message` stays English.
    params = {k: v for k, v in exc.params.items() if v is not None}
    return await handle_api_error(request, kind(
        exc.message, field=exc.field, extra={"rule": exc.code, "params": params}))


async def handle_environment(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, EnvironmentTooLarge)
    kind = BadRequest if request.url.path.startswith("/open/") else Invalid
    extra: dict[str, object] = {} if exc.variable is None else {"variable": exc.variable}
    return await handle_api_error(request, kind(str(exc), field="env", extra=extra))


def disk_full(exc: BaseException) -> bool:
    """SQLITE_FULL (a commit that found no room), or ENOSPC/EDQUOT from a file write."""
    if isinstance(exc, storage.StorageError):
        return storage.is_full(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


# Seconds a client waits before retrying a request the database could not serve.
RETRY_AFTER_S = 5


async def handle_unexpected(request: Request, exc: BaseException) -> Response:
    """Any exception no handler above claims: JSON with an error id that is also in
    the worker log (with the traceback); a full disk is named as such (507)."""
    error_id = secrets.token_hex(6)
    where = f"{request.method} {request.url.path}"  # never the query: it may hold a ticket
    if disk_full(exc):
        log.error("disk full (error id %s) answering %s: %s", error_id, where, exc)
        return await handle_api_error(request, DiskFull(
            f"disk full: no space left to save this change (error id {error_id}); nothing"
            " was saved, free some space and retry", extra={"error_id": error_id}))
    if isinstance(exc, storage.PgTransient):
        # PostgreSQL unreachable (fleet mode), or a lock/serialization timeout: the same
        # request may succeed in a moment, and nothing of it was committed. SQLite's
        # transient class is all of OperationalError (a missing table too): unchanged.
        log.warning("database unavailable answering %s: %s (sqlstate %s)", where,
                    type(exc.__cause__ or exc).__name__, exc.sqlstate)
        error = Unavailable("the database cannot be reached right now; nothing was"
                            " saved, retry shortly")
        error.code = "DATABASE_UNAVAILABLE"
        response = await handle_api_error(request, error)
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response
    log.error("unhandled error (error id %s) answering %s", error_id, where, exc_info=exc)
    return await handle_api_error(request, Internal(
        f"internal error (error id {error_id}); the worker log has the details",
        extra={"error_id": error_id}))


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


async def handle_script_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, scripts.ScriptError)
    status, code = next((v for k, v in SCRIPT_ERRORS.items() if isinstance(exc, k)),
                        (400, "SCRIPT_ERROR"))
    extra: dict[str, object] = {"reason": exc.reason}
    if exc.path:
        extra["path"] = exc.path
    mapped = ApiError(exc.message, field=exc.field, extra=extra)
    mapped.status, mapped.code = status, code
    response = await handle_api_error(request, mapped)
    if status == 413:
        # The rest of the body is never read: close the connection after the answer, or
        # a client still sending would wait on a full socket instead of reading it.
        response.headers["Connection"] = "close"
    return response


HANDLERS = {
    scripts.ScriptError: handle_script_error,
    ApiError: handle_api_error,
    FieldError: handle_field_error,
    NotFound: handle_not_found,
    Conflict: handle_conflict,
    ActiveRun: handle_active_run,
    RunTerminal: handle_run_terminal,
    ChainRefused: handle_chain_refused,
    SystemTask: handle_system_task,
    HTTPException: handle_http,
    UnsafeLogFile: handle_unsafe_log,
    FileTimeout: handle_file_pool,
    FileBusy: handle_file_pool,
    EnvironmentTooLarge: handle_environment,
}


def _duplicate_keys(data: bytes) -> None:
    """The receipt codec's pre-pass: msgspec keeps the last of two equal keys; the API
    refuses them instead (a body must mean one thing). Bad JSON is msgspec's to report."""
    if b"{" not in data:
        return
    try:
        json.loads(data, object_pairs_hook=unique_pairs)
    except DuplicateKey as exc:
        raise Invalid(f"duplicate key {exc.key!r} in the JSON body", field=exc.key) from None
    except RecursionError:
        raise BadRequest("malformed JSON: nested too deeply") from None
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
        raise Invalid(text, field=field) from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}") from exc
