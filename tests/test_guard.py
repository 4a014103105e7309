"""The outermost middleware (http/guard.py): the request-body limit, and JSON with an
error id for every unhandled exception, 507 for a full disk."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import ADMIN, Server, tmpfs


def _raw(server: Server, head: str, body_parts: list[bytes], timeout: float = 10
         ) -> tuple[int, dict[str, object]]:
    """Send a request by hand (so nothing buffers or completes the body for us) and
    read the answer; (status, JSON body)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(head.encode())
        for part in body_parts:
            sock.sendall(part)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        header, _, rest = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in header.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    return int(header.split(b" ")[1]), json.loads(rest[:length])


def _head(path: str, extra: str) -> str:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
            f"Content-Type: application/json\r\n{extra}\r\n")


def test_a_declared_huge_body_is_refused_before_it_is_read(server: Server) -> None:
    t0 = time.monotonic()
    status, body = _raw(server, _head("/api/v1/tasks", "Content-Length: 300000000\r\n"),
                        [b"{" + b" " * 65536])
    assert status == 413 and body["error"] == "PAYLOAD_TOO_LARGE"
    assert body["limit_bytes"] == 1 << 20
    assert time.monotonic() - t0 < 5
    status, body = _raw(server, _head("/open/envs", "Content-Length: 300000000\r\n"), [b"["])
    assert status == 413 and body["code"] == 413


def test_a_chunked_body_is_cut_off_at_the_limit(server: Server) -> None:
    # 17 chunks of 64 KiB pass 1 MiB; the final zero-size chunk is never sent, so
    # without the limit the worker would wait for the rest of the body.
    chunk = b"%x\r\n" % 65536 + b" " * 65536 + b"\r\n"
    status, body = _raw(server, _head("/api/v1/tasks", "Transfer-Encoding: chunked\r\n"),
                        [chunk] * 17)
    assert status == 413 and body["error"] == "PAYLOAD_TOO_LARGE"
    # Just below the limit still works.
    command = "echo " + "x" * 60000
    r = server.http.post("/api/v1/tasks", json={"name": "big-ish", "command": command})
    assert r.status_code == 201


def test_body_limit_is_a_setting(tmp_path: Path) -> None:
    srv = Server(tmp_path / "state", max_body_bytes="8192")
    try:
        r = srv.http.post("/api/v1/tasks", json={"name": "n", "command": "x" * 9000})
        assert r.status_code == 413 and r.json()["limit_bytes"] == 8192
        r = srv.http.post("/api/v1/tasks", json={"name": "n", "command": "x" * 7000})
        assert r.status_code == 201
    finally:
        srv.stop()


def test_an_unhandled_error_is_json_with_an_id_that_the_log_repeats(server: Server) -> None:
    task = server.http.post("/api/v1/tasks", json={"name": "t", "command": "true"}).json()
    # A damaged row (as a bug or a bad restore would leave it): decoding it fails.
    conn = sqlite3.connect(server.state / "data" / "qledge.sqlite3")
    with conn:
        conn.execute("UPDATE tasks SET labels_json = '{' WHERE id = ?", (task["id"],))
    conn.close()
    r = server.http.get("/api/v1/tasks")
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["error"] == "INTERNAL" and body["error_id"] in body["message"]
    ql = server.http.get("/open/crons")
    assert ql.status_code == 500 and ql.json()["code"] == 500
    ql_id = ql.json()["message"].split("error id ")[1].split(")")[0]
    deadline = time.monotonic() + 5
    while True:
        out = server.output.read_text(errors="replace")
        if body["error_id"] in out and ql_id in out:
            break
        assert time.monotonic() < deadline, out[-3000:]
        time.sleep(0.05)
    after = out.split(f"error id {body['error_id']}", 1)[1]
    assert "Traceback" in after and "GET /api/v1/tasks" in out
    assert server.http.get("/readyz").status_code == 200


@pytest.fixture
def tiny_data(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "data", "the disk-full test") as mnt:
        yield mnt


def _fill(path: Path) -> None:
    """Write until the filesystem has no byte left."""
    with open(path, "wb", buffering=0) as f:
        block = b"\0" * 65536
        try:
            while True:
                f.write(block)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass


@pytest.mark.drill
def test_a_full_disk_answers_507_and_saves_nothing(tmp_path: Path, tiny_data: Path) -> None:
    srv = Server(tmp_path / "state", data_dir=str(tiny_data))
    try:
        http = srv.http
        filler = tiny_data / "filler"
        _fill(filler)
        command = "echo " + "y" * 60000
        statuses: list[int] = []
        full = None
        for i in range(60):
            r = http.post("/api/v1/tasks", json={"name": f"t{i}", "command": command})
            statuses.append(r.status_code)
            assert r.status_code in (201, 507), r.text
            if r.status_code == 507:
                full = r
                break
        assert full is not None, f"never full: {statuses}"
        body = full.json()
        assert body["error"] == "DISK_FULL" and "disk full" in body["message"]
        assert body["error_id"] in srv.output.read_text(errors="replace")
        ql = http.post("/open/crons", json={"command": command, "schedule": "0 0 * * *"})
        assert ql.status_code == 507 and ql.json()["code"] == 507, ql.text
        assert "disk full" in ql.json()["message"]

        filler.unlink()
        r = http.post("/api/v1/tasks", json={"name": "after", "command": "true"})
        assert r.status_code == 201, r.text
        names = {t["name"] for t in http.get("/api/v1/tasks").json()["items"]}
        saved = {f"t{i}" for i, s in enumerate(statuses) if s == 201}
        assert names == saved | {"after"}  # nothing of the refused requests was kept
    finally:
        srv.stop()


def test_scripts_uploads_may_pass_the_body_limit_up_to_their_own_cap(server: Server) -> None:
    """The scripts routes bound their bodies themselves (32 MiB uploads); the outer
    limit stays 1 MiB everywhere else."""
    big = b"#!/bin/sh\n" + b"# " + b"x" * (3 << 20) + b"\n"  # 3 MiB: above the outer limit
    r = server.http.post("/api/v1/scripts/upload", params={"path": "big"},
                         files={"file": ("big.sh", big)})
    assert r.status_code == 201, r.text
    assert (server.state / "work" / "scripts" / "big" / "big.sh").read_bytes() == big
    r = server.http.post("/api/v1/tasks", content=b"{" + b" " * (3 << 20) + b"}",
                         headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["limit_bytes"] == 1 << 20
    status, body = _raw(server, _head("/api/v1/scripts/upload",
                                      "Content-Length: 300000000\r\n"), [b"-"])
    # above the scripts' own ceiling: refused before it is read
    assert status == 413 and body["error"] == "PAYLOAD_TOO_LARGE"
