"""The panel's import: POST /api/v1/imports/qinglong with a QingLong backup archive
(docs/migrating-from-qinglong.md). The same code as `qledge import qinglong`.

The body is multipart/form-data with one file part (the .tgz), streamed into a
private temp file in the data volume and capped at MAX_ARCHIVE bytes (413 as soon
as the cap is passed, before the rest is read); the temp file is removed when the
answer is ready. `?apply=true` imports, otherwise it is a dry run; `on_conflict`
(rename|replace|skip) and `with_logs` (0-100) as the CLI's options. A form field
`choices` (a JSON object, "<kind>:<key>" → rename|replace|skip, the report's `kind`
and `key`) decides single conflicts; `on_conflict` the rest. The answer is the
report (importer/report.py's as_json): labels, actions and reasons, never a value.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..runtime.lifecycle import Runtime
from . import inputs
from ._files import UPLOAD_OVERHEAD, Form, offload
from .errors import BadRequest, Invalid, PayloadTooLarge, StateConflict, json_response

MAX_ARCHIVE = 64 << 20
CHOICES_BYTES = 1 << 20  # the `choices` field: up to 10,000 conflicts by their keys
PATH = "/api/v1/imports"


def body_ceilings() -> dict[str, int]:
    """The outer body limit (http/guard.py) of the import upload."""
    return {PATH: MAX_ARCHIVE + UPLOAD_OVERHEAD + CHOICES_BYTES}


def _too_large() -> PayloadTooLarge:
    return PayloadTooLarge(f"the archive is larger than {MAX_ARCHIVE} bytes",
                           field="file", extra={"limit_bytes": MAX_ARCHIVE})


MAX_CHOICES = 10_000


def _choices(raw: str | None) -> dict[str, str] | None:
    """The `choices` field: {"<kind>:<key>": "rename"|"replace"|"skip"}."""
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or len(value) > MAX_CHOICES:
        raise Invalid("choices must be a JSON object of at most 10000 conflicts",
                      field="choices", code="BAD_CHOICES", params={"max": MAX_CHOICES})
    for key, mode in value.items():
        if mode not in ("rename", "replace", "skip") or len(key) > 1000:
            raise Invalid("each choice is rename, replace or skip", field="choices",
                          code="NOT_ONE_OF")
    return value


async def _receive(request: Request, dest: Path) -> dict[str, str] | None:
    """The one file part of the multipart body, into `dest` (created 0600); the
    per-conflict `choices` field, if sent."""
    ctype, params = parse_options_header(request.headers.get("content-type"))
    if ctype != b"multipart/form-data" or not params.get(b"boundary"):
        raise BadRequest("expected a multipart/form-data body with the archive as a file",
                         code="NOT_MULTIPART")
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > (
            MAX_ARCHIVE + UPLOAD_OVERHEAD + CHOICES_BYTES):
        raise _too_large()
    form = Form(field_limit=CHOICES_BYTES)
    try:
        parser = MultipartParser(params[b"boundary"], form.callbacks())  # type: ignore[arg-type]
    except (ValueError, MultipartParseError) as exc:
        raise BadRequest(f"bad multipart boundary: {exc}", code="BAD_MULTIPART") from exc
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    size = 0
    try:
        async for chunk in request.stream():
            try:
                parser.write(chunk)
            except MultipartParseError as exc:
                raise BadRequest(f"malformed multipart body: {exc}",
                                 code="BAD_MULTIPART") from exc
            data = form.take()
            size += len(data)
            if size > MAX_ARCHIVE:
                raise _too_large()
            if data:
                await offload(os.write, fd, data)
        if not form.ended or form.file_name is None:
            raise BadRequest("the body holds no file part (the archive)", field="file",
                             code="FILE_PART_REQUIRED")
    finally:
        os.close(fd)
    return _choices(form.fields.get("choices"))


async def qinglong(request: Request) -> Response:
    # The importer (tarfile, the QingLong readers and planner: ~1.3 MiB) loads at the
    # first import, not in every idle worker (tests/test_imports_idle.py).
    from ..importer import report as qinglong_report
    from ..importer.plan import ImportFailed
    from ..importer.source import SourceError
    from ..runtime import imports

    rt: Runtime = request.app.state.runtime
    flag = request.query_params.get("apply", "false")
    if flag not in ("true", "false", "1", "0"):
        raise Invalid("apply must be true or false", field="apply", code="NOT_BOOLEAN")
    on_conflict = request.query_params.get("on_conflict") or None
    if on_conflict not in (None, "rename", "replace", "skip"):
        raise Invalid("on_conflict must be rename, replace or skip", field="on_conflict",
                      code="NOT_ONE_OF")
    with_logs = inputs.query_int(request, "with_logs", 0, 0, 100)
    upload = rt.settings.data_path / f".import-upload-{secrets.token_hex(6)}.tgz"
    try:
        choices = await _receive(request, upload)
        plan = await imports.upload(rt, upload, apply=flag in ("true", "1"),
                                    on_conflict=on_conflict, with_logs=with_logs,
                                    choices=choices)
    except SourceError as exc:  # a source that cannot be imported
        # The upload's file and scratch folder are server paths: never in an answer.
        where = re.escape(str(rt.settings.data_path)) + r"/\S*"
        said = re.sub(where, "the uploaded file", str(exc))
        error: Invalid | StateConflict = Invalid(said, field="file")
        error.code = "IMPORT_SOURCE_INVALID"
        raise error from None
    except ImportFailed as exc:  # an import that failed and was undone
        error = StateConflict(str(exc))
        error.code = "IMPORT_FAILED"
        raise error from None
    finally:
        upload.unlink(missing_ok=True)
    return json_response(qinglong_report.as_json(plan))


routes = [Route("/imports/qinglong", qinglong, methods=["POST"])]
