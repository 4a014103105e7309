"""Drill fixtures: the real supervised appliance in a temp state dir, observed only
through its API and the files it leaves (receipts, quarantine, logs, its output).

Every helper polls; nothing waits a fixed time where a condition can be watched.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from _appliance import Appliance, kill_leftover_tasks
from support import eventually, free_port

T = TypeVar("T")

# Fast loops for drills: a supervision round every second, a short publish grace,
# room for many parallel attempts (the edge profile allows 4).
FAST = {"round_interval_s": "1", "publish_grace_ms": "100", "max_concurrent_attempts": "16"}
TERMINAL_EVENTS = ("attempt.finished", "run.finished")
_HTTP_ERRORS = (httpx.TransportError,)


# -- waiting -------------------------------------------------------------------------


def wait_until(check: Callable[[], T | None], timeout: float, what: str,
               interval: float = 0.05) -> T:
    """Poll `check` until it returns something truthy; fail naming `what`."""
    return eventually(check, timeout=timeout, interval=interval, what=what)  # type: ignore[arg-type]


def is_ready(app: Appliance) -> bool:
    # A short timeout: while no worker listens, a connect may sit in a stale backlog.
    try:
        return app.http.get("/readyz", timeout=2).status_code == 200
    except _HTTP_ERRORS:
        return False


def wait_ready(app: Appliance, timeout: float = 40) -> float:
    t0 = time.monotonic()
    while not is_ready(app):
        if app.proc is not None and app.proc.poll() is not None:
            raise AssertionError(f"supervisord exited:\n{app.log_tail()}")
        if time.monotonic() - t0 > timeout:
            hint = ""
            if "Address already in use" in app.log_tail(200):
                hint = (" - the new worker cannot bind its port: is the old worker's"
                        " listening socket still open in a launcher?")
            raise AssertionError(f"not ready after {timeout}s{hint}:\n{app.log_tail()}")
        time.sleep(0.05)
    return time.monotonic() - t0


def api(app: Appliance, method: str, path: str, *, retry_s: float = 60, **kw: Any
        ) -> httpx.Response:
    """One API call that rides out a worker restart (connection errors, 503 while starting).

    Only for idempotent reads, or for writes where a duplicate is harmless to the drill.
    """
    deadline = time.monotonic() + retry_s
    while True:
        try:
            r = app.http.request(method, f"/api/v1{path}", timeout=5, **kw)
            if r.status_code != 503:
                return r
        except _HTTP_ERRORS:
            pass
        if time.monotonic() >= deadline:
            raise AssertionError(f"{method} {path}: no answer for {retry_s}s\n{app.log_tail()}")
        time.sleep(0.1)


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.status_code} {r.text}"
    return r.json()


# -- the API as drills use it --------------------------------------------------------


def make_task(app: Appliance, command: str, name: str | None = None, **fields: Any
              ) -> dict[str, Any]:
    body = {"name": name or f"drill-{time.monotonic_ns()}", "command": command,
            "concurrency": "allow", **fields}
    task: dict[str, Any] = ok(app.api("POST", "/tasks", json=body), 201)
    return task


def trigger(app: Appliance, task_id: str) -> str:
    run_id: str = ok(app.api("POST", f"/tasks/{task_id}/runs"), 202)["run"]["id"]
    return run_id


def get_run(app: Appliance, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = ok(api(app, "GET", f"/runs/{run_id}"))
    return run


def wait_running(app: Appliance, run_id: str, timeout: float = 30) -> dict[str, Any]:
    """The run with its attempt started (pid recorded)."""
    def started() -> dict[str, Any] | None:
        run = get_run(app, run_id)
        assert not run["terminal"], f"run ended before it was seen running: {run}"
        if run["attempts"] and run["attempts"][-1]["status"] == "running":
            return run
        return None
    return wait_until(started, timeout, f"run {run_id} running")


def wait_terminal(app: Appliance, run_id: str, timeout: float = 60) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run = get_run(app, run_id)
        return run if run["terminal"] else None
    try:
        return wait_until(done, timeout, f"run {run_id} terminal", interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{app.log_tail()}") from None


def events_of(app: Appliance, run_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = 0
    while True:
        page = ok(api(app, "GET", f"/runs/{run_id}/events", params={"after": after}))["items"]
        items.extend(page)
        if not page:
            return items
        after = page[-1]["seq"]


def terminal_events(events: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(TERMINAL_EVENTS, 0)
    for ev in events:
        if ev["type"] in counts:
            counts[ev["type"]] += 1
    return counts


def assert_one_terminal(app: Appliance, run_id: str) -> list[dict[str, Any]]:
    """Exactly one attempt.finished then one run.finished, gap-free sequence numbers."""
    evs = events_of(app, run_id)
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1)), evs
    assert terminal_events(evs) == {"attempt.finished": 1, "run.finished": 1}, evs
    kinds = [e["type"] for e in evs]
    assert kinds.index("attempt.finished") < kinds.index("run.finished"), kinds
    return evs


def full_log(app: Appliance, run_id: str) -> bytes:
    """The whole log of the run's latest attempt through the API, offset by offset."""
    data = b""
    while True:
        r = api(app, "GET", f"/runs/{run_id}/log", params={"offset": len(data)})
        assert r.status_code == 200, r.text
        data += r.content
        if int(r.headers["X-Log-Next-Offset"]) >= int(r.headers["X-Log-Size"]):
            return data


def system(app: Appliance) -> dict[str, Any]:
    info: dict[str, Any] = ok(api(app, "GET", "/system"))
    return info


def wait_backlog_drained(app: Appliance, timeout: float = 60) -> dict[str, Any]:
    def drained() -> dict[str, Any] | None:
        info = system(app)
        return info if info["journal_backlog"] == 0 else None
    return wait_until(drained, timeout, "journal backlog 0", interval=0.2)


# -- files ---------------------------------------------------------------------------


def receipts_root(app: Appliance) -> Path:
    return app.state / "receipts"


def receipt_file(app: Appliance, attempt_id: str) -> Path:
    return receipts_root(app) / attempt_id[-2:] / f"{attempt_id}.json"


def assert_receipt_reaped(app: Appliance, attempt_id: str) -> None:
    """Consumed receipts are deleted after the fsync that makes their result durable:
    at the latest the profile's group_commit_s (2 s on edge) after the commit."""
    path = receipt_file(app, attempt_id)
    wait_until(lambda: not path.exists(), 10, f"consumed receipt {path.name} deleted")


def quarantine_file(app: Appliance, attempt_id: str) -> Path:
    return receipts_root(app) / ".quarantine" / attempt_id[-2:] / f"{attempt_id}.json"


def output(app: Appliance) -> str:
    return app.output.read_text(errors="replace")


# -- processes -----------------------------------------------------------------------


def proc_state(pid: int) -> str | None:
    """'R', 'S', 'Z', ... or None when the pid is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw[raw.rindex(")") + 2:].split()[0]


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z", "X")


def stop_worker(app: Appliance) -> None:
    """`supervisorctl stop http`: TERM, the default policy leaves tasks running."""
    out = app.ctl("stop", "http")
    assert "stopped" in out or "not running" in out, out
    wait_until(lambda: not is_ready(app), 10, "worker gone")


def start_worker(app: Appliance, timeout: float = 40) -> float:
    app.ctl("start", "http")
    return wait_ready(app, timeout)


def kill_worker(app: Appliance, timeout: float = 40) -> float:
    """kill -9 the HTTP worker; supervisord restarts it. Seconds until ready again."""
    t0 = time.monotonic()
    app.kill_worker()
    wait_ready(app, timeout)
    return time.monotonic() - t0


def stop_leaving_tasks(app: Appliance) -> None:
    """Stop supervisord and its worker (TERM) the way an operator restarts the
    container: the tasks keep running, unlike `Appliance.stop()` (a teardown that
    also kills them). The fixture still cleans them up at the end of the test."""
    if app.proc is not None and app.proc.poll() is None:
        app.proc.send_signal(signal.SIGTERM)
        app.proc.wait(60)
    app.proc = None
    app.http.close()


# -- fixtures ------------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if rep.when == "call":
        item.stash[_FAILED] = rep.failed


_FAILED = pytest.StashKey[bool]()


class Factory:
    """`appliance(state=None, start=True, **settings)`: a started appliance, stopped later."""

    def __init__(self, tmp_path: Path, preexec_fn: Callable[[], None] | None = None) -> None:
        self.tmp_path = tmp_path
        self.preexec_fn = preexec_fn
        self.made: list[Appliance] = []

    def __call__(self, state: Path | None = None, *, start: bool = True, **settings: str
                 ) -> Appliance:
        app = Appliance(state or self.tmp_path / "state", free_port(),
                        preexec_fn=self.preexec_fn, **{**FAST, **settings})
        self.made.append(app)
        if start:
            app.start(timeout=60)
        return app

    def close(self, failed: bool) -> None:
        for app in reversed(self.made):
            if failed:
                print(f"--- {app.output} (tail)\n{app.log_tail(120)}")
            with contextlib.suppress(Exception):
                app.stop()
        for state in {a.state for a in self.made}:
            kill_leftover_tasks(state)


@pytest.fixture
def appliance(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    factory = Factory(tmp_path)
    try:
        yield factory
    finally:
        factory.close(request.node.stash.get(_FAILED, True))
