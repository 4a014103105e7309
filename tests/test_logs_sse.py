"""Live log tails over SSE: on demand, resumable, never back-pressuring the task."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from _appliance import Appliance
from support import Server, free_port, wait_terminal

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass


def _start(server: Server, command: str, **task: object) -> str:
    task = server.http.post("/api/v1/tasks",
                            json={"name": "s", "command": command, **task}).json()
    r = server.http.post(f"/api/v1/tasks/{task['id']}/runs")
    return str(r.json()["run"]["id"])


def _events(lines: Iterator[str]) -> Iterator[tuple[str, int | None, str]]:
    event, ident, data = "message", None, []
    for line in lines:
        if line == "":
            if data:
                yield event, ident, "\n".join(data)
            event, ident, data = "message", None, []
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("data: "):
            data.append(line[6:])


def _follow(server: Server, run_id: str, offset: int = 0, stop_after: int | None = None,
            on_text: Callable[[str], None] | None = None
            ) -> tuple[str, dict[str, object] | None, int]:
    text, end, last = "", None, offset
    with httpx.stream("GET", f"{server.url}/api/v1/runs/{run_id}/log/stream",
                      params={"offset": offset}, headers=server.http.headers,
                      timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for event, ident, data in _events(r.iter_lines()):
            if event == "log":
                text += json.loads(data)["text"]
                assert ident is not None and ident > last
                last = ident
                if on_text is not None:
                    on_text(text)
                if stop_after is not None and text.count("\n") >= stop_after:
                    break
            elif event == "end":
                end = json.loads(data)
                break
    return text, end, last


def test_stream_follows_lines_live_and_ends_with_status(server: Server) -> None:
    # The task prints its lines, then waits for the gate: every line must come
    # through while it still runs, and the end event only after it exits.
    gate = server.state.parent / "gate"
    run_id = _start(server, f'for i in $(seq 1 30); do echo "n $i"; sleep 0.02; done;'
                            f" while [ ! -e {gate} ]; do sleep 0.05; done; exit 4")

    def open_gate_after_the_last_line(text: str) -> None:
        if text.count("\n") == 30 and not gate.exists():
            run = server.http.get(f"/api/v1/runs/{run_id}").json()
            assert (run["status"], run["terminal"]) == ("running", False), run
            gate.touch()

    text, end, _ = _follow(server, run_id, on_text=open_gate_after_the_last_line)
    assert gate.exists(), "the 30 lines never came while the task ran"
    assert text == "".join(f"n {i}\n" for i in range(1, 31))
    assert end == {"status": "failed", "exit_code": 4, "reason_code": "EXITED",
                   "log_bytes_at_exit": len(text), "log_truncated": False, "log_note": None}


def test_resume_from_offset_without_gap_or_duplicate(server: Server) -> None:
    run_id = _start(server, 'for i in $(seq 1 40); do echo "row $i"; sleep 0.02; done')
    first, end, offset = _follow(server, run_id, stop_after=5)
    assert end is None and first.startswith("row 1\n")
    rest, end, _ = _follow(server, run_id, offset=offset)
    assert first + rest == "".join(f"row {i}\n" for i in range(1, 41))
    assert end is not None and end["status"] == "succeeded"


def test_two_subscribers_see_the_same_bytes(server: Server) -> None:
    run_id = _start(server, 'for i in $(seq 1 50); do echo "x $i é"; sleep 0.01; done')
    results: list[str] = []

    def sub() -> None:
        results.append(_follow(server, run_id)[0])

    threads = [threading.Thread(target=sub) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2 and results[0] == results[1]
    assert results[0] == "".join(f"x {i} é\n" for i in range(1, 51))


def test_a_stalled_subscriber_never_slows_the_task(server: Server) -> None:
    # 50 MB written while one subscriber holds its stream open and reads nothing.
    run_id = _start(server, "head -c 50000000 /dev/zero | tr '\\0' 'a'; echo")
    stalled = httpx.Client(timeout=60, headers=server.http.headers)
    with stalled.stream("GET", f"{server.url}/api/v1/runs/{run_id}/log/stream") as r:
        assert r.status_code == 200
        run = wait_terminal(server.http, run_id, timeout=60)
        assert run["status"] == "succeeded"
        size = int(server.http.get(f"/api/v1/runs/{run_id}/log",
                                   params={"limit": 1}).headers["x-log-size"])
        assert size == 50_000_001
    stalled.close()


def test_no_tail_is_left_after_the_last_subscriber(server: Server) -> None:
    run_id = _start(server, "sleep 30")
    with httpx.stream("GET", f"{server.url}/api/v1/runs/{run_id}/log/stream",
                      headers=server.http.headers, timeout=10) as r:
        assert r.status_code == 200, r.read()
        lines = r.iter_lines()  # keep a reference: a collected iterator closes the stream
        assert next(lines) == "retry: 1000"
        assert server.http.get("/api/v1/system").json()["log_streams"] == 1
    deadline = time.monotonic() + 10
    while server.http.get("/api/v1/system").json()["log_streams"] != 0:
        assert time.monotonic() < deadline, "tail still running after the client left"
        time.sleep(0.1)
    server.http.post(f"/api/v1/runs/{run_id}/cancel")


def test_stream_unknown_run_is_404(server: Server) -> None:
    r = server.http.get("/api/v1/runs/01a22c6f-dc91-7024-a839-591fbcd14523/log/stream")
    assert r.status_code == 404


def _attempt_log_file(server: Server, run: dict[str, object]) -> Path:
    attempt_id = str(run["attempts"][0]["id"])  # type: ignore[index]
    return server.state / "logs" / attempt_id[-2:] / f"{attempt_id}.log"


def test_a_log_cut_short_by_a_power_loss_says_so(server: Server) -> None:
    """The receipt records the log's length at exit (logBytes); a log file found
    shorter (a power cut took its unsynced tail) is reported as truncated
    everywhere: run detail, log read headers, the stream's end event."""
    out = "".join(f"line {i}\n" for i in range(1, 201))
    run_id = _start(server, "for i in $(seq 1 200); do echo \"line $i\"; done; exit 3")
    run = wait_terminal(server.http, run_id)
    assert run["exit_code"] == 3
    (attempt,) = run["attempts"]  # type: ignore[misc]
    assert attempt["log_bytes_at_exit"] == len(out) == attempt["log_size"]
    assert attempt["log_truncated"] is False and attempt["log_note"] is None
    r = server.http.get(f"/api/v1/runs/{run_id}/log")
    assert r.content.decode() == out
    assert r.headers["X-Log-Expected-Size"] == str(len(out))
    assert r.headers["X-Log-Truncated"] == "false" and "X-Log-Note" not in r.headers
    _, end, _ = _follow(server, run_id)
    assert end is not None and end["log_truncated"] is False
    assert end["log_bytes_at_exit"] == len(out)

    os.truncate(_attempt_log_file(server, run), 100)  # what the power cut left on the card
    run = server.http.get(f"/api/v1/runs/{run_id}").json()
    (attempt,) = run["attempts"]
    assert (attempt["log_size"], attempt["log_truncated"]) == (100, True)
    note = f"log truncated by power loss: 100 of {len(out)} bytes"
    assert attempt["log_note"] == note
    assert run["exit_code"] == 3  # the result stands; only the log is incomplete
    r = server.http.get(f"/api/v1/runs/{run_id}/log")
    assert r.content.decode() == out[:100]
    assert r.headers["X-Log-Truncated"] == "true" and r.headers["X-Log-Note"] == note
    assert r.headers["X-Log-Size"] == "100"
    text, end, _ = _follow(server, run_id)
    assert text == out[:100]
    assert end is not None and end["log_truncated"] is True and end["log_note"] == note

    _attempt_log_file(server, run).unlink()  # nothing at all survived
    r = server.http.get(f"/api/v1/runs/{run_id}/log")
    assert r.headers["X-Log-Note"] == f"log truncated by power loss: 0 of {len(out)} bytes"


def test_later_output_of_a_background_process_is_not_truncation(server: Server) -> None:
    # keep_background: the launcher leaves the daemon running (by default it would
    # end it before the receipt), so it writes after logBytes was taken.
    run_id = _start(server, "(sleep 0.3; echo late) & echo early; exit 0", keep_background=True)
    run = wait_terminal(server.http, run_id)
    (attempt,) = run["attempts"]  # type: ignore[misc]
    assert attempt["log_bytes_at_exit"] == len("early\n")
    deadline = time.monotonic() + 10
    while server.http.get(f"/api/v1/runs/{run_id}/log").content != b"early\nlate\n":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (attempt,) = server.http.get(f"/api/v1/runs/{run_id}").json()["attempts"]
    assert attempt["log_size"] == len("early\nlate\n") and attempt["log_truncated"] is False


# -- hostile log files: a task replaces its own log ------------------------------------

# The task finds its log through its stdout and swaps it for something else.
_SWAP = 'L=$(readlink /proc/$$/fd/1); rm "$L"; {make}; {then}'
_MAKERS = {"fifo": 'mkfifo "$L"', "symlink": 'ln -s /etc/passwd "$L"',
           "directory": 'mkdir "$L"'}


def _log_file(app: Appliance, run_id: str) -> Path:
    attempt = app.api("GET", f"/runs/{run_id}").json()["attempts"][-1]["id"]
    return app.state / "logs" / attempt[-2:] / f"{attempt}.log"


def _stream_end(url: str, headers: dict[str, str], timeout: float) -> dict[str, object]:
    with httpx.stream("GET", url, headers=headers, timeout=timeout) as r:
        assert r.status_code == 200
        for event, _, data in _events(r.iter_lines()):
            if event == "end":
                return dict(json.loads(data))
    raise AssertionError("stream closed without an end event")


@pytest.mark.drill
def test_hostile_log_files_never_stall_the_worker(tmp_path: Path) -> None:
    """A FIFO, a symlink or a directory at a log path: every read answers 409 naming
    it at once, every stream ends with the reason, nothing else slows down, and
    `supervisorctl restart http` still stops the worker cleanly (no SIGKILL).

    Landlock keeps a task out of logs/ (docs/security.md); on a kernel without it
    (`task_isolation` auto runs tasks unconfined) a task can still do this, so the
    drill runs with isolation off."""
    app = Appliance(tmp_path / "state", free_port(), task_isolation="off")
    app.start()
    try:
        runs: dict[str, str] = {}
        for kind, make in _MAKERS.items():
            then = "sleep 120" if kind == "fifo" else "true"
            task = app.api("POST", "/tasks", json={
                "name": kind, "command": _SWAP.format(make=make, then=then)}).json()
            runs[kind] = app.api("POST", f"/tasks/{task['id']}/runs").json()["run"]["id"]
        fine_task = app.api("POST", "/tasks", json={"name": "fine", "command": "echo fine"})
        fine = app.api("POST", f"/tasks/{fine_task.json()['id']}/runs").json()["run"]["id"]
        checks = {"fifo": stat.S_ISFIFO, "symlink": stat.S_ISLNK, "directory": stat.S_ISDIR}
        for kind, run_id in runs.items():
            deadline = time.monotonic() + 30
            while True:
                try:
                    if checks[kind](_log_file(app, run_id).lstat().st_mode):
                        break
                except (FileNotFoundError, IndexError):
                    pass
                assert time.monotonic() < deadline, f"the {kind} task never swapped its log"
                time.sleep(0.05)
        assert wait_terminal(app.http, fine)["status"] == "succeeded"

        base = f"http://127.0.0.1:{app.port}"
        headers = dict(app.http.headers)
        fifo_log = f"{base}/api/v1/runs/{runs['fifo']}/log"

        def read() -> httpx.Response:
            return httpx.get(fifo_log, headers=headers, timeout=10)

        # More concurrent reads than any default executor has threads, and streams.
        with ThreadPoolExecutor(max_workers=48) as pool:
            reads = [pool.submit(read) for _ in range(40)]
            streams = [pool.submit(_stream_end, f"{fifo_log}/stream", headers, 10)
                       for _ in range(8)]
            time.sleep(0.2)
            t0 = time.monotonic()
            assert app.http.get("/readyz").status_code == 200
            other = app.api("GET", f"/runs/{fine}/log", timeout=5)
            assert other.status_code == 200 and other.content == b"fine\n"
            assert time.monotonic() - t0 < 3, "the worker stalled"
            for f in reads:
                r = f.result(timeout=20)
                assert r.status_code == 409, r.text
                body = r.json()
                assert body["error"] == "LOG_NOT_REGULAR_FILE" and body["kind"] == "fifo"
            for f in streams:
                end = f.result(timeout=20)
                assert end["error"] == "LOG_NOT_REGULAR_FILE" and end["kind"] == "fifo"
                assert end["status"] == "running"  # the run goes on; only its log is gone

        for kind in ("symlink", "directory"):
            assert wait_terminal(app.http, runs[kind])["status"] == "succeeded"
            r = app.api("GET", f"/runs/{runs[kind]}/log")
            assert r.status_code == 409 and r.json()["kind"] == kind, r.text
            end = _stream_end(f"{base}/api/v1/runs/{runs[kind]}/log/stream", headers, 10)
            assert end["error"] == "LOG_NOT_REGULAR_FILE" and end["kind"] == kind
            assert end["status"] == "succeeded"
        num = app.api("GET", "/tasks").json()["items"][0]["num"]
        ql = app.http.get(f"/open/crons/{num}/log")
        assert ql.status_code == 409 and ql.json()["code"] == 409, ql.text
        assert app.http.get("/api/v1/system").json()["file_reads"]["timeouts"] == 0

        # A clean stop within supervisord's bound: the worker exits by itself.
        old = app.worker_pid()
        t0 = time.monotonic()
        app.ctl("restart", "http")
        assert time.monotonic() - t0 < 20, "the worker needed supervisord's SIGKILL"
        app.wait_ready()
        assert app.worker_pid() != old
        assert "terminated by SIGKILL" not in app.output.read_text(errors="replace")
        app.api("POST", f"/runs/{runs['fifo']}/cancel")
    finally:
        app.stop()


async def test_an_idle_stream_sends_keepalive_comments(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """While the task prints nothing, the stream sends `: keep-alive` every
    KEEPALIVE_S (shortened here); the bytes are what the response sends."""
    from qledge.http import logs_sse
    from qledge.model import Trigger
    from qledge.runtime.lifecycle import Runtime

    from support import add_task, make_runtime

    monkeypatch.setattr(logs_sse, "KEEPALIVE_S", 0.4, raising=False)
    rt: Runtime = make_runtime(tmp_path / "state")
    await rt.start()
    try:
        from qledge.operations import trigger

        task_id = await add_task(rt, "echo first; sleep 2.5; echo second")
        run = await trigger(rt, task_id, Trigger.API)
        seen: list[bytes] = []
        async for chunk in logs_sse._tail(rt, run.id, 0):
            seen.append(chunk)
            if chunk.startswith(b"event: end"):
                break
        logs_at = [i for i, c in enumerate(seen) if c.startswith(b"event: log")]
        assert len(logs_at) == 2
        quiet = seen[logs_at[0] + 1:logs_at[1]]
        assert quiet and all(c == b": keep-alive\n\n" for c in quiet)
        assert 3 <= len(quiet) <= 7  # ~2.5 s / 0.4 s
    finally:
        await rt.stop()


def test_a_stuck_file_pool_answers_503_and_ends_the_stream(client: TestClient) -> None:
    """When every file thread is stuck (a hung filesystem), log reads answer 503
    LOG_READ_TIMEOUT after the bound, a stream ends with that error, and the rest
    of the worker does not notice."""
    from qledge.launch.fileio import FilePool, FileTimeout
    from test_envs import run_and_log

    task = client.post("/api/v1/tasks", json={"name": "t", "command": "echo hi"}).json()
    run, log = run_and_log(client, task["id"])
    assert log == "hi\n"
    rt = client.app.state.runtime  # type: ignore[attr-defined]
    rt.files = FilePool(threads=1, timeout_s=0.3)
    stuck = threading.Event()

    async def occupy() -> None:
        with contextlib.suppress(FileTimeout):
            await rt.files.run(stuck.wait)

    threading.Thread(target=asyncio.run, args=(occupy(),), daemon=True).start()
    try:
        deadline = time.monotonic() + 5
        while rt.files.stats() != {"threads": 1, "idle": 0, "pending": 0,
                                   "timeouts": rt.files.stats()["timeouts"]}:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        r = client.get(f"/api/v1/runs/{run['id']}/log")
        assert r.status_code == 503 and r.json()["error"] == "LOG_READ_TIMEOUT", r.text
        assert r.headers["retry-after"] == "5"
        ql = client.get(f"/open/crons/{task['num']}/log")
        assert ql.status_code == 503 and ql.json()["code"] == 503
        stream = client.get(f"/api/v1/runs/{run['id']}/log/stream")
        assert "event: end" in stream.text and '"error":"LOG_READ_TIMEOUT"' in stream.text
        assert client.get("/readyz").status_code == 200
        detail = client.get(f"/api/v1/runs/{run['id']}")
        assert detail.status_code == 200  # the run's record does not wait on its log file
        (attempt,) = detail.json()["attempts"]
        assert (attempt["log_size"], attempt["log_truncated"]) == (None, None)  # unknown
    finally:
        stuck.set()
    deadline = time.monotonic() + 5
    while client.get(f"/api/v1/runs/{run['id']}/log").status_code != 200:
        assert time.monotonic() < deadline, "the pool did not recover"
        time.sleep(0.05)
