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
* The scripts are ES modules. index.html loads one, `main.js`
  (`<script type="module" src="{{main.js}}">`); the modules it imports, and the
  ones they import, are found by reading their `import … from './name.js'` lines.
  Serving rewrites each such specifier to the imported module's hashed name, so
  a module's hash is taken over its rewritten text, dependencies first: a change
  to `core.js` gives every module that imports it (up to `main.js`) a new URL too,
  and an immutable cache never mixes old and new modules. No build step, no
  import map, so the CSP stays `script-src 'self'`.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

PANEL_DIR = Path(__file__).resolve().parents[1] / "panel"
ENTRY = "main.js"  # the one module index.html loads; it imports the rest
# The files index.html refers to as {{name}}; with the modules ENTRY imports (directly or
# not), they are all that is served: anything else in the directory is not.
ASSETS = ("app.css", ENTRY)
# `import { a, b } from './name.js';` at the start of a line: the only import form the
# panel uses (tests/test_panel_js.py holds every module to it).
IMPORT = re.compile(r"^(import\s*\{[^}]*\}\s*from\s*')\./([a-z0-9_-]+\.js)(';)", re.M)
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


def imports(text: str) -> list[str]:
    """The modules a module imports (file names in the panel directory), in order."""
    return [m.group(2) for m in IMPORT.finditer(text)]


def modules(root: Path = PANEL_DIR) -> list[str]:
    """Every module ENTRY reaches, dependencies before their importers (a cycle is an
    error: a module's hashed name depends on those of the modules it imports)."""
    order: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise ValueError(f"panel modules import in a cycle: {' -> '.join(visiting)} -> {name}")
        visiting.append(name)
        for dep in imports((root / name).read_text("utf-8")):
            visit(dep)
        visiting.pop()
        order.append(name)

    visit(ENTRY)
    return order


def _asset(name: str, url: str, body: bytes) -> Asset:
    digest = hashlib.sha256(body).hexdigest()
    suffix = Path(name).suffix
    media = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Asset(name=name, url=url, body=body, gzipped=gzip.compress(body, 9, mtime=0),
                 media_type=media, etag=f'"{digest[:32]}"')


class Panel:
    def __init__(self, root: Path = PANEL_DIR) -> None:
        self.assets: dict[str, Asset] = {}  # by the hashed file name
        urls: dict[str, str] = {}  # by source file name
        self.urls = urls
        for name in ("app.css", *modules(root)):
            body = (root / name).read_bytes()
            if name.endswith(".js"):  # its imports are hashed already: name them so
                body = IMPORT.sub(lambda m: m.group(1) + "./" + urls[m.group(2)].rsplit("/", 1)[1]
                                  + m.group(3), body.decode("utf-8")).encode()
            stem, suffix = name.rsplit(".", 1)
            hashed = f"{stem}.{hashlib.sha256(body).hexdigest()[:16]}.{suffix}"
            asset = _asset(name, f"/assets/{hashed}", body)
            self.assets[hashed] = asset
            urls[name] = asset.url
        html = (root / "index.html").read_text("utf-8")
        if f'<script type="module" src="{{{{{ENTRY}}}}}"></script>' not in html:
            raise ValueError(f"panel index.html does not load {ENTRY} as a module")
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
