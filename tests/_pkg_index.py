"""Package sources made in the test, served on loopback: wheels built by hand behind a
PEP 503 simple index, and `npm pack` tarballs behind a minimal npm registry (the
packument JSON and the tarball with its integrity). No network."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import subprocess
import threading
import zipfile
from pathlib import Path
from typing import Any


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def make_wheel(out: Path, name: str, version: str, *, module: str | None = None,
               body: str = "", requires: tuple[str, ...] = (), padding: int = 0) -> Path:
    """A pure-Python wheel: `<module>/__init__.py` (VERSION and `body`), its dist-info
    first in the zip (so an install cut short can have METADATA without the code), then
    `padding` more modules and `<module>/zz_last.py` last."""
    dist = re.sub(r"[-_.]+", "_", name)
    module = module or dist.lower()
    info = f"{dist}-{version}.dist-info"
    files: list[tuple[str, bytes]] = [
        (f"{info}/METADATA", ("Metadata-Version: 2.1\n"
                              f"Name: {name}\nVersion: {version}\n"
                              + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: qledge-tests\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{module}/__init__.py", f"VERSION = {version!r}\n{body}".encode()),
    ]
    files += [(f"{module}/pad/m{i:05d}.py", b"X = 1\n" + b"#" * 2000 + b"\n")
              for i in range(padding)]
    if padding:
        files.insert(3, (f"{module}/pad/__init__.py", b""))
    files.append((f"{module}/zz_last.py", b"LAST = True\n"))
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files) + f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode()))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in files:
            z.writestr(member, data)
    return path


def npm_pack(out: Path, name: str, version: str, source: str) -> Path:
    """`npm pack` of a one-file CommonJS package (index.js = `source`)."""
    pkg = out / "src" / name.replace("/", "__") / version
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "package.json").write_text(json.dumps(
        {"name": name, "version": version, "main": "index.js", "license": "MIT"}))
    (pkg / "index.js").write_text(source)
    res = subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(out)],
                         cwd=pkg, capture_output=True, text=True, check=True, timeout=120,
                         env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(out),
                              "npm_config_update_notifier": "false"})
    return out / res.stdout.strip().splitlines()[-1]


class PackageServer:
    """Wheels under /simple (PEP 503) and tarballs under /npm; `hold` names a file
    whose download waits until `release` is set (a slow mirror); `auth` = (user,
    password) required on every request when given."""

    def __init__(self, auth: tuple[str, str] | None = None) -> None:
        self.wheels: dict[str, list[Path]] = {}
        self.tarballs: dict[str, dict[str, Path]] = {}
        self.hold: str | None = None
        self.holding = threading.Event()
        self.release = threading.Event()
        self.requests: list[str] = []
        self.auth = auth
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append(self.path)
                if server.auth and self.headers.get("Authorization") != "Basic " + \
                        base64.b64encode(":".join(server.auth).encode()).decode():
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="test"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                found = server.answer(self.path)
                if found is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                ctype, data = found
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def base(self, creds: str = "") -> str:
        return f"http://{creds + '@' if creds else ''}127.0.0.1:{self.port}"

    def index_url(self, creds: str = "") -> str:
        return f"{self.base(creds)}/simple/"

    def registry(self, creds: str = "") -> str:
        return f"{self.base(creds)}/npm/"

    def add_wheel(self, name: str, path: Path) -> None:
        self.wheels.setdefault(_norm(name), []).append(path)

    def add_tarball(self, name: str, version: str, path: Path) -> None:
        self.tarballs.setdefault(name, {})[version] = path

    def _file(self, path: Path) -> bytes:
        if self.hold == path.name:
            self.holding.set()
            self.release.wait(120)
        return path.read_bytes()

    def answer(self, path: str) -> tuple[str, bytes] | None:
        from urllib.parse import unquote

        path = unquote(path.split("?")[0])
        if path == "/simple/":
            links = "".join(f'<a href="{n}/">{n}</a>' for n in self.wheels)
            return "text/html", f"<html><body>{links}</body></html>".encode()
        m = re.fullmatch(r"/simple/([^/]+)/", path)
        if m:
            files = self.wheels.get(_norm(m[1]))
            if not files:
                return None
            links = "".join(
                f'<a href="/files/{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">'
                f"{p.name}</a><br>" for p in files)
            return "text/html", f"<html><body>{links}</body></html>".encode()
        m = re.fullmatch(r"/files/([^/]+)", path)
        if m:
            for files in self.wheels.values():
                for p in files:
                    if p.name == m[1]:
                        return "application/octet-stream", self._file(p)
            return None
        m = re.fullmatch(r"/npm/(.+)/-/([^/]+\.tgz)", path)
        if m:
            for p in self.tarballs.get(m[1], {}).values():
                if p.name == m[2]:
                    return "application/octet-stream", self._file(p)
            return None
        m = re.fullmatch(r"/npm/(.+)", path)
        if m and m[1] in self.tarballs:
            return "application/json", json.dumps(self.packument(m[1])).encode()
        return None

    def packument(self, name: str) -> dict[str, Any]:
        versions = {}
        for version, p in self.tarballs[name].items():
            data = p.read_bytes()
            versions[version] = {
                "name": name, "version": version, "main": "index.js",
                "dist": {"tarball": f"{self.registry()}{name}/-/{p.name}",
                         "shasum": hashlib.sha1(data).hexdigest(),
                         "integrity": "sha512-" + base64.b64encode(
                             hashlib.sha512(data).digest()).decode()}}
        latest = sorted(versions, key=lambda v: [int(x) for x in v.split(".")])[-1]
        return {"name": name, "dist-tags": {"latest": latest}, "versions": versions}

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
