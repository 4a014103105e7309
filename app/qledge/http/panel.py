"""The operator panel: static files shipped in the package, served at `/`.

* `index.html` is served with `Cache-Control: no-cache` (revalidated with its
  ETag) and a strict Content-Security-Policy: scripts and styles only from this
  origin, no inline script, no framing, no third-party connections.
* Every other file is served as `/assets/<stem>.<hash><suffix>`, the hash being
  the first 16 hex digits of the SHA-256 of its contents, computed once at
  start-up; those answers are `public, max-age=31536000, immutable`. A new
  release changes the hash, index.html names the new file, and browsers never
  run stale code. Unknown or outdated names answer 404.
* Files are read once into memory (the budget is 150 KB in all) and gzipped
  once; a client that accepts gzip gets the compressed copy.
* The scripts are classic deferred scripts sharing one namespace
  (`window.QLEDGE`); `SCRIPTS` is their load order, and index.html's
  `{{scripts}}` becomes one `<script defer>` per entry, so this tuple is the one
  list of what the panel loads.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

PANEL_DIR = Path(__file__).resolve().parents[1] / "panel"
# The page scripts in load order: the strings, the shared core, then one file per page
# (log.js before run.js, which uses it). Every one is a deferred classic script.
SCRIPTS = ("i18n.js", "core.js", "login.js", "tasks.js", "editor.js", "runs.js", "log.js",
           "run.js", "envs.js", "deps.js", "subs.js", "notify.js", "scripts.js", "system.js")
# The files index.html refers to as {{name}} (the scripts through {{scripts}}); anything
# else in the directory is not served.
ASSETS = ("app.css", *SCRIPTS)
IMMUTABLE = "public, max-age=31536000, immutable"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8"}


@dataclass(frozen=True)
class Asset:
    name: str
    url: str
    body: bytes
    gzipped: bytes
    media_type: str
    etag: str


def _asset(name: str, url: str, body: bytes) -> Asset:
    digest = hashlib.sha256(body).hexdigest()
    suffix = Path(name).suffix
    media = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Asset(name=name, url=url, body=body, gzipped=gzip.compress(body, 9, mtime=0),
                 media_type=media, etag=f'"{digest[:32]}"')


class Panel:
    def __init__(self, root: Path = PANEL_DIR) -> None:
        self.assets: dict[str, Asset] = {}  # by the hashed file name
        urls: dict[str, str] = {}
        for name in ASSETS:
            body = (root / name).read_bytes()
            stem, suffix = name.rsplit(".", 1)
            hashed = f"{stem}.{hashlib.sha256(body).hexdigest()[:16]}.{suffix}"
            asset = _asset(name, f"/assets/{hashed}", body)
            self.assets[hashed] = asset
            urls[name] = asset.url
        html = (root / "index.html").read_text("utf-8")
        if "{{scripts}}" not in html:
            raise ValueError("panel index.html does not load the scripts ({{scripts}})")
        tags = "\n".join(f'<script src="{{{{{name}}}}}" defer></script>' for name in SCRIPTS)
        html = html.replace("{{scripts}}", tags)
        for name, url in urls.items():
            html = html.replace("{{" + name + "}}", url)
        if "{{" in html:
            raise ValueError("panel index.html names an asset that is not in ASSETS")
        self.index = _asset("index.html", "/", html.encode())

    @staticmethod
    def _send(request: Request, asset: Asset, headers: dict[str, str]) -> Response:
        headers = {**headers, "ETag": asset.etag, "Vary": "Accept-Encoding"}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(status_code=304, headers=headers)
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(asset.gzipped, media_type=asset.media_type,
                            headers={**headers, "Content-Encoding": "gzip"})
        return Response(asset.body, media_type=asset.media_type, headers=headers)

    async def serve_index(self, request: Request) -> Response:
        return self._send(request, self.index, {"Cache-Control": "no-cache", **SECURITY_HEADERS})

    async def serve_asset(self, request: Request) -> Response:
        asset = self.assets.get(request.path_params["name"])
        if asset is None:
            return PlainTextResponse("not found", 404, headers={"Cache-Control": "no-store"})
        return self._send(request, asset, {"Cache-Control": IMMUTABLE,
                                           "X-Content-Type-Options": "nosniff"})


def routes(root: Path = PANEL_DIR) -> list[BaseRoute]:
    """Reads and hashes the panel files now (at app creation), once."""
    panel = Panel(root)
    return [
        Route("/", panel.serve_index, methods=["GET", "HEAD"]),
        Route("/index.html", panel.serve_index, methods=["GET", "HEAD"]),
        Route("/assets/{name}", panel.serve_asset, methods=["GET", "HEAD"]),
    ]
