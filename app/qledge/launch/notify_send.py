"""One notification delivery in a short-lived process of its own (docs/notifications.md).

The worker never reads a receiver's answer itself: apprise (through requests) reads
a response body whole, and an `envs` token can point WEBHOOK_URL at any server — one
that answered 800 MB grew the worker by as much, and a receiver that never answered
held the one sending thread for as long as the URL's own `cto`/`rto` allowed. So
each send is `python -m qledge.launch.notify_send`, with:

* its data segment capped (RLIMIT_DATA, MEMORY_BYTES): a larger answer is a
  MemoryError in that process, a failed send, and the worker's memory does not move;
* a deadline the caller sets, not the URL (`cto`/`rto` bound each connect and read,
  not the send): at the deadline the process is killed;
* the URL, title and body on its stdin — never its argv, which /proc shows to
  everyone — and the process non-dumpable before it reads them; an environment of
  the proxy, TLS and locale variables only, never the worker's (in fleet mode that
  names the database);
* at most MAX_RESULT bytes of its answer read back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys

log = logging.getLogger("qledge.notify")

MEMORY_BYTES = 128 << 20  # python and apprise take ~40 MiB of it
MAX_INPUT = 8 << 20
MAX_RESULT = 64 << 10
# The variables a send may need from the worker's environment; nothing else passes.
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR",
              "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY",
              "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENV}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


async def _exchange(proc: asyncio.subprocess.Process, payload: bytes) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(payload)
        await proc.stdin.drain()
    proc.stdin.close()
    out = b""
    while len(out) <= MAX_RESULT:
        chunk = await proc.stdout.read(MAX_RESULT + 1 - len(out))
        if not chunk:
            break
        out += chunk
    await proc.wait()
    return out


async def send(url: str, title: str, body: str, timeout_s: float,
               notify_type: str = "info") -> tuple[bool, str | None]:
    """(delivered, the redacted error) of one message to one apprise URL, within
    `timeout_s` whatever the URL says. `notify_type`: apprise's (info, success,
    warning, failure)."""
    payload = json.dumps({"url": url, "title": title, "body": body,
                          "type": notify_type}).encode()
    if len(payload) > MAX_INPUT:
        return False, "the message is too large to send"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "qledge.launch.notify_send", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=_env(),
        cwd="/", start_new_session=True)
    try:
        out = await asyncio.wait_for(_exchange(proc, payload), timeout_s)
    except TimeoutError:
        return False, f"no answer within {timeout_s:.0f}s"
    finally:
        if proc.returncode is None:  # timed out, or the caller was cancelled
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
    try:
        result = json.loads(out)
        return bool(result["ok"]), (None if result["ok"] else str(result["error"]))
    except (ValueError, KeyError, TypeError):
        # Killed by the memory cap on the way out, say: no verdict is a failed send.
        return False, f"the sending process ended without a result (exit {proc.returncode})"


# -- the child ---------------------------------------------------------------------------

def quiet(logger: logging.Logger) -> None:
    """apprise's log lines name hosts, URLs and sometimes tokens: they are captured per
    send (LogCapture) and redacted there, never passed on to a log."""
    logger.propagate = False
    if not logger.handlers:  # else logging's last resort would print them to stderr
        logger.addHandler(logging.NullHandler())


def deliver(url: str, title: str, body: str, notify_type: str = "info"
            ) -> tuple[bool, str | None]:
    """One message to one apprise URL, in this process (blocking I/O). The error text
    is redacted of the URL's secrets."""
    import apprise  # 100+ plugins

    from ..notifications import rules as notify

    quiet(apprise.logger)
    secrets = notify.secrets_of(url)
    box = apprise.Apprise()
    with apprise.LogCapture(  # type: ignore[no-untyped-call]
            level=logging.WARNING, fmt="%(message)s") as captured:
        if not box.add(url):
            return False, "not a valid apprise URL (or an unknown service)"
        try:
            kind = apprise.NotifyType(notify_type) if notify_type in {
                t.value for t in apprise.NotifyType} else apprise.NotifyType.INFO
            ok = bool(box.notify(title=title, body=body, notify_type=kind))
        except MemoryError:
            return False, (f"the service's answer was larger than the sender's"
                           f" {MEMORY_BYTES >> 20} MiB")
        except Exception as exc:  # a plugin bug must not lose the verdict
            return False, notify.redact(f"{type(exc).__name__}: {exc}", secrets)
        text = captured.getvalue().strip()
    if ok:
        return True, None
    last = text.splitlines()[-3:] if text else ["the service refused the message"]
    return False, notify.redact(" | ".join(last), secrets)


def main() -> int:
    import resource

    from ..process import make_nondumpable

    make_nondumpable()  # before the URL's secrets are read
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_BYTES, MEMORY_BYTES))
    try:
        msg = json.loads(sys.stdin.buffer.read(MAX_INPUT))
        ok, error = deliver(str(msg["url"]), str(msg["title"]), str(msg["body"]),
                            str(msg.get("type") or "info"))
    except MemoryError:
        ok, error = False, f"the service's answer was larger than {MEMORY_BYTES >> 20} MiB"
    sys.stdout.write(json.dumps({"ok": ok, "error": error}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
