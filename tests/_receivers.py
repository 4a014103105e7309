"""Real notification receivers on loopback, for apprise to deliver to.

* `HttpReceiver`: an HTTP server recording every request (a `json://` webhook,
  or the fake of a push service's HTTP API, e.g. ntfy's). It can be stopped and
  started again on the same port (a receiver that is down, then back), or made
  to answer 500.
* `SmtpReceiver`: aiosmtpd's SMTP server, recording each message.
"""

from __future__ import annotations

import email
import email.policy
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from support import free_port


class Request:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


class HttpReceiver:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.requests: list[Request] = []
        self.status = 200
        self.delay_s = 0.0  # before answering (a slow service: a send in flight)
        self.answer_bytes = 0  # a body this long instead of "{}" (a hostile service)
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    def start(self) -> HttpReceiver:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n)
                with owner._lock:
                    owner.requests.append(Request("POST", self.path, dict(self.headers), body))
                time.sleep(owner.delay_s)
                self.send_response(owner.status)
                self.send_header("content-type", "application/json")
                if owner.answer_bytes:
                    self.send_header("content-length", str(owner.answer_bytes))
                self.end_headers()
                if not owner.answer_bytes:
                    self.wfile.write(b"{}")
                    return
                chunk, left = b" " * (1 << 20), owner.answer_bytes
                try:
                    while left > 0:
                        self.wfile.write(chunk[:left])
                        left -= len(chunk)
                except OSError:
                    pass  # the sender gave up reading: what a capped one does

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def wait(self, n: int, timeout: float = 30.0) -> list[Request]:
        return _wait(lambda: list(self.requests), n, timeout)


class SmtpReceiver:
    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.port = free_port()
        self.messages: list[email.message.EmailMessage] = []
        owner = self

        class Handler:
            async def handle_DATA(self, server: object, session: object,
                                  envelope: Any) -> str:
                owner.messages.append(email.message_from_bytes(
                    envelope.content, policy=email.policy.default))  # type: ignore[arg-type]
                return "250 OK"

        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    @property
    def url(self) -> str:
        return (f"mailto://127.0.0.1:{self.port}?from=qledge@example.com"
                "&to=operator@example.com&mode=insecure")

    def start(self) -> SmtpReceiver:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def wait(self, n: int, timeout: float = 30.0) -> list[email.message.EmailMessage]:
        return _wait(lambda: list(self.messages), n, timeout)


def text_of(message: email.message.EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain",))
    assert part is not None
    return str(part.get_content())


def _wait(get: Callable[[], list[Any]], n: int, timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = get()
        if len(got) >= n:
            return got
        time.sleep(0.05)
    return get()
