"""QingLong's scripts calls under /open/scripts (scope `scripts`; docs/qinglong-compat.md).

QingLong addresses a file as `path` (its folder, relative to the scripts folder) plus
`filename`; the shapes are its own (`{"code": 200, "data": …}`, the tree as `IFile`
objects). The work is the native module's, with its confinement: an absolute path or
`..` is refused here where QingLong would quietly answer `''` or 403.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...scripts.folder import Node, ScriptExists, ScriptNotFound, Scripts
from .._files import offload, read_body, read_form
from ..errors import BadRequest, json_response
from ..scripts import body_limit, scripts_of, stream_file
from .auth import scoped
from .wire import decode, ok


class FileIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    filename: str
    path: str | None = ""
    content: str | None = None
    originFilename: str | None = None
    directory: str | None = None
    file: str | None = None  # QingLong's web client sends file='' without a file


class PutIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    filename: str
    content: str
    path: str | None = ""


class DeleteIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    filename: str
    path: str | None = ""
    type: str | None = None


class NameIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    filename: str
    path: str | None = ""


class RenameIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    filename: str
    newFilename: str
    path: str | None = ""


def rel_of(folder: str | None, name: str) -> str:
    """QingLong's join(path, filename); a trailing '/' on the folder is tolerated."""
    base = (folder or "").rstrip("/")
    return f"{base}/{name}" if base else name


def ifile(node: Node, parent: str) -> dict[str, Any] | None:
    """QingLong's IFile; like QingLong, only files and folders (no symlinks, no FIFOs)."""
    if node.type not in ("file", "directory"):
        return None
    out: dict[str, Any] = {"title": node.name, "key": node.path,
                           "type": node.type, "parent": parent,
                           "createTime": node.mtime_ms}
    if node.type == "file":
        out["size"] = node.size
    else:
        kids = [ifile(k, node.path) for k in node.children or []]
        out["children"] = [k for k in kids if k is not None]
    return out


@scoped("scripts")
async def tree(request: Request) -> Response:
    """No `path`: the whole tree (bounded); `path`: that folder's entries, one level."""
    sc = scripts_of(request)
    folder = (request.query_params.get("path") or "").rstrip("/")
    nodes, truncated = await offload(sc.tree, folder, 1 if folder else None)
    items = [ifile(n, folder) for n in nodes]
    body: dict[str, Any] = {"code": 200, "data": [i for i in items if i is not None]}
    if truncated:
        body["truncated"] = True  # a qledge extra: the tree hit its bounds
    return json_response(body)


async def _content(request: Request, name: str) -> Response:
    sc = scripts_of(request)
    found = await offload(sc.read, rel_of(request.query_params.get("path"), name))
    return ok(found.content)


@scoped("scripts")
async def detail(request: Request) -> Response:
    name = request.query_params.get("file")
    if not name:
        raise BadRequest("file is required", field="file")
    return await _content(request, name)


@scoped("scripts")
async def by_name(request: Request) -> Response:
    return await _content(request, request.path_params["file"])


async def _mkdir(sc: Scripts, rel: str) -> None:
    with contextlib.suppress(ScriptExists):  # QingLong's mkdir -p: an existing folder is fine
        await offload(sc.mkdir, rel)


@scoped("scripts")
async def create(request: Request) -> Response:
    """A folder (`directory`), an upload (a `file` part), or a file with `content`;
    `originFilename` different from `filename` renames while saving."""
    sc = scripts_of(request)
    if request.headers.get("content-type", "").startswith("multipart/"):
        form = await read_form(request, sc, sc.limits.max_text)
        try:
            fields = {k: form.fields[k] for k in FileIn.__struct_fields__ if k in form.fields}
            body = decode(msgspec.json.encode(fields), FileIn)
        except BaseException:
            if form.upload is not None:
                await offload(form.upload.abort)
            raise
        up = form.upload
        if up is not None:
            rel = rel_of(body.path, body.filename)
            await offload(lambda: sc.place(up, rel, overwrite=True))
            return ok()
    else:
        body = decode(await read_body(request, body_limit(sc.limits)), FileIn)
    if body.directory:
        await _mkdir(sc, rel_of(body.path, body.directory))
        return ok()
    rel = rel_of(body.path, body.filename)
    origin = body.originFilename
    old = rel_of(body.path, origin) if origin and origin != body.filename else None
    # Both names are checked before anything is written (write() parses its own first):
    # the old one must be a file or nothing — a folder is never removed by renaming a file.
    if old is not None and not await offload(sc.replaceable, old, "originFilename"):
        old = None
    data = (body.content or "").encode("utf-8")
    await offload(lambda: sc.write(rel, data))
    if old is not None:
        with contextlib.suppress(ScriptNotFound):
            await offload(lambda: sc.delete(old, file_only=True))
    return ok()


@scoped("scripts")
async def update(request: Request) -> Response:
    sc = scripts_of(request)
    body = decode(await read_body(request, body_limit(sc.limits)), PutIn)
    rel = rel_of(body.path, body.filename)
    await offload(lambda: sc.write(rel, body.content.encode("utf-8")))
    return ok()


@scoped("scripts")
async def delete(request: Request) -> Response:
    """Like QingLong's rmPath: a file, or a folder with its contents; a missing one is
    not an error."""
    sc = scripts_of(request)
    body = decode(await read_body(request, 64 * 1024), DeleteIn)
    with contextlib.suppress(ScriptNotFound):
        await offload(sc.delete, rel_of(body.path, body.filename))
    return ok()


@scoped("scripts")
async def download(request: Request) -> Response:
    sc = scripts_of(request)
    body = decode(await read_body(request, 64 * 1024), NameIn)
    return await stream_file(sc, rel_of(body.path, body.filename))


@scoped("scripts")
async def rename(request: Request) -> Response:
    sc = scripts_of(request)
    body = decode(await read_body(request, 64 * 1024), RenameIn)
    src, dst = rel_of(body.path, body.filename), rel_of(body.path, body.newFilename)
    await offload(sc.move, src, dst)
    return ok()


routes = [
    Route("/scripts", tree, methods=["GET"]),
    Route("/scripts/", tree, methods=["GET"]),
    Route("/scripts", create, methods=["POST"]),
    Route("/scripts/", create, methods=["POST"]),
    Route("/scripts", update, methods=["PUT"]),
    Route("/scripts/", update, methods=["PUT"]),
    Route("/scripts", delete, methods=["DELETE"]),
    Route("/scripts/", delete, methods=["DELETE"]),
    Route("/scripts/detail", detail, methods=["GET"]),
    Route("/scripts/download", download, methods=["POST"]),
    Route("/scripts/rename", rename, methods=["PUT"]),
    Route("/scripts/{file}", by_name, methods=["GET"]),
]
