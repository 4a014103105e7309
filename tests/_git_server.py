"""A real git repository (built with the git CLI) served over smart HTTP on loopback
by dulwich's own server, optionally behind HTTP basic auth (subscription tests)."""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from dulwich.repo import Repo
from dulwich.server import DictBackend
from dulwich.web import make_wsgi_chain


class GitRepo:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
             *args], cwd=self.path, check=True, capture_output=True, text=True).stdout

    def write(self, rel: str, text: str | bytes) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)

    def remove(self, rel: str) -> None:
        self.git("rm", "-q", rel)

    def commit(self, message: str = "c") -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Threaded(WSGIServer):
    daemon_threads = True


class _Served:
    """A WSGI app on a loopback port, served from a daemon thread."""

    def _serve(self, app: Any) -> None:
        self.server = make_server("127.0.0.1", 0, app, server_class=_Threaded,
                                  handler_class=_Quiet)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GitServer(_Served):
    """Serves repositories at http://127.0.0.1:<port>/<name>."""

    def __init__(self, repos: dict[str, Path], auth: tuple[str, str] | None = None) -> None:
        backend = DictBackend({f"/{name}": Repo(str(p)) for name, p in repos.items()})
        app = make_wsgi_chain(backend)
        self.requests = 0
        self.auth = auth
        # stall: the next pack response sends its first chunk, sets `stalled`, and
        # holds the rest until `release` (a pull caught mid-fetch).
        self.stall = False
        self.stalled = threading.Event()
        self.release = threading.Event()

        def guarded(environ: dict[str, Any], start_response: Any) -> Any:
            self.requests += 1
            if self.auth is not None:
                want = "Basic " + base64.b64encode(":".join(self.auth).encode()).decode()
                if environ.get("HTTP_AUTHORIZATION") != want:
                    start_response("401 Unauthorized",
                                   [("WWW-Authenticate", 'Basic realm="git"'),
                                    ("Content-Length", "0")])
                    return [b""]
            if self.stall and environ["PATH_INFO"].endswith("git-upload-pack") and \
                    environ["REQUEST_METHOD"] == "POST":
                return app(environ, self._stalling(start_response))
            return app(environ, start_response)

        self._serve(guarded)

    def _stalling(self, start_response: Any) -> Any:
        """dulwich writes the pack through start_response's write(): hold it once
        the first 32 KiB went out."""
        def respond(status: str, headers: Any, exc_info: Any = None) -> Any:
            write = start_response(status, headers, exc_info)
            sent = 0

            def held(data: bytes) -> Any:
                nonlocal sent
                out = write(data)
                sent += len(data)
                if sent > 32 << 10 and not self.stalled.is_set():
                    self.stalled.set()
                    self.release.wait(60)
                return out
            return held
        return respond

class GitHttpBackend(_Served):
    """git's own smart HTTP server (`git http-backend` as a CGI) for the repositories
    under `root`, at http://127.0.0.1:<port>/<name>: it streams a pack's objects as
    they are stored (dulwich's server would inflate a big blob in the test process)."""

    def __init__(self, root: Path) -> None:
        def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            env = {"GIT_PROJECT_ROOT": str(root), "GIT_HTTP_EXPORT_ALL": "1",
                   "PATH": "/usr/bin:/bin", "REQUEST_METHOD": environ["REQUEST_METHOD"],
                   "PATH_INFO": environ["PATH_INFO"],
                   "QUERY_STRING": environ.get("QUERY_STRING", ""),
                   "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
                   "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
                   "GATEWAY_INTERFACE": "CGI/1.1"}
            out = subprocess.run(["git", "http-backend"], input=body, env=env,
                                 capture_output=True, check=False).stdout
            head, _, rest = out.partition(b"\r\n\r\n")
            status, headers = "200 OK", []
            for line in head.decode().split("\r\n"):
                key, _, value = line.partition(": ")
                if key.lower() == "status":
                    status = value
                elif key:
                    headers.append((key, value))
            start_response(status, headers)
            return [rest]

        self._serve(app)

class PageServer(_Served):
    """Answers every GET with a web page and records the Authorization headers it was
    sent (a URL that is not a git repository; a host that must not get a credential)."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []

        def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            self.authorizations.append(environ.get("HTTP_AUTHORIZATION"))
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [b"<!doctype html><html><body><h1>My project</h1></body></html>"]

        self._serve(app)


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` with its content: 'byte-identical' checks."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def iter_lines(text: str) -> Iterator[str]:
    yield from text.splitlines()
