"""Scripts API: /api/v1/scripts (docs/scripts.md). Paths are relative to the scripts folder."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .. import limits, taskform
from ..operations import script_runs
from ..runtime.lifecycle import Runtime
from ..scripts import meta as script_meta
from ..scripts.folder import Limits, ScriptPathInvalid, Scripts, text_of
from . import inputs
from ._files import UPLOAD_OVERHEAD, offload, read_body, read_form
from .errors import BadRequest, Invalid, decode_body, json_response
from .runs import run_view

CHUNK = 256 * 1024


class FileIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    path: str
    content: str
    create: bool = False  # refuse an existing file (409 SCRIPT_EXISTS)
    base_sha256: str | None = None  # refuse if the file is not what the editor loaded


class PathIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    path: str


class RunIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    path: str | None = None  # the panel's debug Run: `task <path> now`, label debug
    command: str | None = None  # the `task` program: its exact `task …` words, label cli


class MoveIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    from_: str = msgspec.field(name="from")
    to: str


class RestoreIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    path: str
    id: str


def scripts_of(request: Request) -> Scripts:
    """The app's Scripts, made on first use from the runtime's settings."""
    found: Scripts | None = getattr(request.app.state, "scripts", None)
    if found is None:
        rt: Runtime = request.app.state.runtime
        found = Scripts(rt.settings.scripts_path, rt.settings.script_history_path)
        request.app.state.scripts = found
    return found


def body_limit(limits: Limits) -> int:
    # JSON escapes can double a text's size; a little room for the other fields.
    return 2 * limits.max_text + 64 * 1024


def body_ceilings(limits: Limits | None = None) -> dict[str, int]:
    """The outer body limit (http/guard.py) of the scripts routes: their largest
    body, an upload with its multipart overhead; each route bounds its own below."""
    limits = limits or Limits()
    # /open's upload also carries its text fields (up to max_text) beside the file.
    most = max(body_limit(limits), limits.max_upload + limits.max_text + UPLOAD_OVERHEAD)
    return {"/api/v1/scripts": most, "/open/scripts": most}


def query_path(request: Request, name: str = "path", *, root_ok: bool = False) -> str:
    value = request.query_params.get(name)
    if value is None or (not value and not root_ok):
        raise Invalid(f"{name} is required", field=name, code="REQUIRED")
    return value


def _flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "")
    if raw not in ("", "0", "1", "true", "false"):
        raise Invalid(f"{name} must be 0/1 or true/false", field=name, code="NOT_BOOLEAN")
    return raw in ("1", "true")


def limits_view(limits: Limits) -> dict[str, int]:
    return {"max_text": limits.max_text, "max_upload": limits.max_upload,
            "tree_depth": limits.tree_depth, "tree_per_folder": limits.tree_per_folder,
            "tree_total": limits.tree_total, "history_keep": limits.history_keep}


async def tree(request: Request) -> Response:
    sc = scripts_of(request)
    path = query_path(request, root_ok=True) if "path" in request.query_params else ""
    depth: int | None = None
    if request.query_params.get("depth"):
        raw = request.query_params["depth"]
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:  # isdigit() takes "²"
            raise Invalid("depth must be a positive integer", field="depth",
                          code="NOT_POSITIVE_INTEGER")
        depth = int(raw)
    nodes, truncated = await offload(sc.tree, path, depth)
    return json_response({"path": path, "items": nodes, "truncated": truncated,
                          "limits": limits_view(sc.limits)})


async def read_file(request: Request) -> Response:
    return json_response(await offload(scripts_of(request).read, query_path(request)))


async def write_file(request: Request) -> Response:
    sc = scripts_of(request)
    body = decode_body(await read_body(request, body_limit(sc.limits)), FileIn)
    saved = await offload(lambda: sc.write(body.path, body.content.encode("utf-8"),
                                           create_only=body.create,
                                           base_sha256=body.base_sha256))
    return json_response(saved, 201 if saved.created else 200)


async def upload(request: Request) -> Response:
    """multipart/form-data with one `file` part into the folder `?path=` (root if empty);
    `?overwrite=1` replaces an existing file (its content goes to the history)."""
    sc = scripts_of(request)
    folder = request.query_params.get("path", "")
    overwrite = _flag(request, "overwrite")
    form = await read_form(request, sc, 64 * 1024)
    up = form.upload
    name = form.fields.get("filename") or form.file_name
    if up is None or not name:
        if up is not None:
            await offload(up.abort)
        raise BadRequest("the form needs a file part with a file name", field="file",
                         code="FILE_PART_REQUIRED")
    if "/" in name:
        await offload(up.abort)
        raise ScriptPathInvalid("the file name must be a name, not a path", path=name,
                                reason="not_a_name", field="filename")
    rel = f"{folder}/{name}" if folder else name
    saved = await offload(lambda: sc.place(up, rel, overwrite=overwrite))
    return json_response(saved, 201 if saved.created else 200)


async def make_folder(request: Request) -> Response:
    sc = scripts_of(request)
    body = decode_body(await read_body(request, 64 * 1024), PathIn)
    await offload(sc.mkdir, body.path)
    return json_response({"path": body.path, "type": "directory"}, 201)


async def move(request: Request) -> Response:
    sc = scripts_of(request)
    body = decode_body(await read_body(request, 64 * 1024), MoveIn)
    what = await offload(sc.move, body.from_, body.to)
    return json_response({"from": body.from_, "to": body.to, "type": what})


async def delete(request: Request) -> Response:
    return json_response(await offload(scripts_of(request).delete, query_path(request)))


def content_disposition(name: str) -> str:
    """attachment with an ASCII fallback and the UTF-8 name (RFC 6266 / 5987)."""
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_"
                       for c in name) or "script"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{urllib.parse.quote(name)}"


class FileResponse(StreamingResponse):
    """Streams an open fd in chunks read off the loop; the fd is closed however the
    response ends (sent, client gone, or never started)."""

    def __init__(self, fd: int, size: int, name: str) -> None:
        self.fd = fd
        super().__init__(self._chunks(size), media_type="application/octet-stream", headers={
            "Content-Disposition": content_disposition(name), "Content-Length": str(size),
            "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})

    async def _chunks(self, size: int) -> AsyncIterator[bytes]:
        offset = 0
        while offset < size:
            data = await offload(os.pread, self.fd, min(CHUNK, size - offset), offset)
            if not data:
                break
            offset += len(data)
            yield data

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            os.close(self.fd)


async def stream_file(sc: Scripts, rel: str) -> Response:
    fd, size = await offload(sc.open_for_download, rel)
    return FileResponse(fd, size, rel.rsplit("/", 1)[-1])


async def download(request: Request) -> Response:
    return await stream_file(scripts_of(request), query_path(request))


async def history(request: Request) -> Response:
    sc = scripts_of(request)
    path = query_path(request)
    items = await offload(sc.history, path)
    return json_response({"path": path, "items": items, "keep": sc.limits.history_keep})


async def history_version(request: Request) -> Response:
    sc = scripts_of(request)
    path, vid = query_path(request), query_path(request, "id")
    data = await offload(sc.version, path, vid)
    return json_response({"path": path, "id": vid, "content": text_of(data, path),
                          "size": len(data)})


async def restore(request: Request) -> Response:
    sc = scripts_of(request)
    body = decode_body(await read_body(request, 64 * 1024), RestoreIn)
    saved = await offload(sc.restore, body.path, body.id)
    return json_response(saved)


async def meta(request: Request) -> Response:
    """What "Create task from this script" prefills: schedule, name, `task <path>`."""
    sc = scripts_of(request)
    path = query_path(request)
    data, _ = await offload(sc.read_bytes, path)
    found = script_meta.parse(data.decode("utf-8", "replace"), path)
    body: dict[str, Any] = {"path": path, **msgspec.structs.asdict(found)}
    return json_response(body)


def _check_file(sc: Scripts, rel: str) -> None:
    os.close(sc.open_for_download(rel)[0])  # confined, existing, a regular file


async def run(request: Request) -> Response:
    """A tracked run of a script as it is on disk now (docs/scripts.md#run)."""
    body = decode_body(await read_body(request, 64 * 1024), RunIn)
    rt: Runtime = request.app.state.runtime
    if (body.path is None) == (body.command is None):
        raise Invalid("send either path or command", field="path", code="PATH_OR_COMMAND")
    if body.path is not None:
        await offload(_check_file, scripts_of(request), body.path)
        command, path, label = (script_runs.debug_command(body.path), body.path,
                                script_runs.DEBUG_LABEL)
    else:
        assert body.command is not None
        inputs.utf8_bytes(body.command, "command", limits.MAX_COMMAND_BYTES, Invalid)
        try:
            form = taskform.parse(body.command, rt.settings.scripts_path)
        except taskform.TaskFormError as exc:
            raise Invalid(f"{exc.reason.value}: {exc.message}", field="command",
                          code="TASK_FORM_REFUSED", params={"reason": exc.reason.value}) from None
        command, path, label = body.command, form.path, "cli"
    task, got = await script_runs.run_command(rt, command, path, label)
    return json_response({"run": run_view(got.run), "task_id": task.id,
                          "outcome": got.outcome}, 202)


routes = [
    Route("/scripts", tree, methods=["GET"]),
    Route("/scripts", delete, methods=["DELETE"]),
    Route("/scripts/file", read_file, methods=["GET"]),
    Route("/scripts/file", write_file, methods=["PUT"]),
    Route("/scripts/upload", upload, methods=["POST"]),
    Route("/scripts/folder", make_folder, methods=["POST"]),
    Route("/scripts/move", move, methods=["POST"]),
    Route("/scripts/download", download, methods=["GET"]),
    Route("/scripts/history", history, methods=["GET"]),
    Route("/scripts/history/version", history_version, methods=["GET"]),
    Route("/scripts/history/restore", restore, methods=["POST"]),
    Route("/scripts/meta", meta, methods=["GET"]),
    Route("/scripts/run", run, methods=["POST"]),
]
