"""Issue 39's "Done means" for restore: a backup taken while 20 runs execute, restored into
a fresh supervised appliance through POST /api/v1/restore, holds the same tasks, envs,
scripts (byte for byte), subscriptions, channels and apps, and the dependency installs
are queued again — compared through both appliances' APIs (docs/backup.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _appliance import Appliance
from support import free_port

RUNNING = 20
DEAD_INDEX = "http://127.0.0.1:9/simple"  # installs fail fast: no network in a test


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Appliance, Appliance]]:
    made = [Appliance(tmp_path / name, free_port(), pip_index_url=DEAD_INDEX,
                      max_concurrent_attempts="24") for name in ("src", "dst")]
    try:
        for app in made:
            app.start()
        yield made[0], made[1]
    finally:
        for app in made:
            app.stop()


def _ok(resp: Any, status: int = 201) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json()


def _fill(app: Appliance) -> dict[str, bytes]:
    for i in range(RUNNING):
        task = _ok(app.api("POST", "/tasks", json={
            "name": f"sleeper {i}", "command": "sleep 60", "schedule": "0 3 * * *"}))
        _ok(app.api("POST", f"/tasks/{task['id']}/runs"), 202)
    _ok(app.api("POST", "/tasks", json={"name": "daily", "command": "echo hi",
                                        "schedule": "*/5 * * * *", "env": {"A": "1"}}))
    _ok(app.api("POST", "/envs", json={"name": "COOKIE", "value": "pt_key=abc;"}))
    _ok(app.api("POST", "/envs", json={"name": "COOKIE", "value": "pt_key=def;",
                                       "remarks": "second"}))
    files = {"hello.py": b"print('hello')\n", "bin/blob.dat": bytes(range(256)) * 300 +
             os.urandom(4096), "深/中文.js": "console.log('中')\n".encode()}
    for rel, data in files.items():
        folder, _, name = rel.rpartition("/")
        _ok(app.api("POST", "/scripts/upload", params={"path": folder} if folder else {},
                    files={"file": (name, data)}))
    _ok(app.api("POST", "/subscriptions", json={
        "name": "repo", "type": "git", "url": "https://example.com/r.git", "alias": "repo"}))
    _ok(app.api("POST", "/notifications/channels",
                json={"name": "hook", "url": "json://127.0.0.1:9/x"}))
    _ok(app.api("POST", "/apps", json={"name": "client", "scopes": ["crons"]}))
    _ok(app.api("POST", "/dependencies", json={"type": "python", "specs": ["tinypkg"]}), 202)
    return files


def _wait(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _running(app: Appliance) -> int:
    return int(app.api("GET", "/runs", params={"status": "running"}).json()["total"])


def _view(app: Appliance) -> dict[str, Any]:
    """What both appliances must agree on, through the API."""
    tasks = [t for t in _ok(app.api("GET", "/tasks", params={"limit": 500}), 200)["items"]
             if "dependencies" not in t["labels"]]
    return {
        "tasks": sorted((t["id"], t["name"], t["command"], t["schedule"], t["env"],
                         t["enabled"]) for t in tasks),
        "envs": _ok(app.api("GET", "/envs"), 200),
        "subscriptions": _ok(app.api("GET", "/subscriptions"), 200),
        "channels": _ok(app.api("GET", "/notifications/channels"), 200),
        "apps": _ok(app.api("GET", "/apps"), 200),
        "dependencies": sorted((d["id"], d["name"], d["spec"]) for d in _ok(
            app.api("GET", "/dependencies"), 200)["items"]),
    }


def _script(app: Appliance, rel: str) -> bytes:
    resp = app.api("GET", "/scripts/download", params={"path": rel})
    assert resp.status_code == 200, resp.text
    return resp.content


def test_a_backup_taken_under_load_restores_into_a_fresh_appliance(
        pair: tuple[Appliance, Appliance], tmp_path: Path) -> None:
    src, dst = pair
    files = _fill(src)
    _wait("20 runs executing", lambda: _running(src) >= RUNNING)
    archive = tmp_path / "backup.tar.gz"
    with src.http.stream("GET", "/api/v1/backup") as resp:
        assert resp.status_code == 200
        with archive.open("wb") as out:
            for chunk in resp.iter_bytes():
                out.write(chunk)
    assert _running(src) >= RUNNING  # taken while they executed
    want = _view(src)
    src_deps = {d["id"]: d for d in src.api("GET", "/dependencies").json()["items"]}

    # Into the busy appliance itself: refused (it holds data; then runs are executing).
    with archive.open("rb") as body:
        resp = src.http.post("/api/v1/restore", content=body, timeout=120)
    assert resp.status_code == 409 and resp.json()["error"] == "RESTORE_NOT_EMPTY"
    with archive.open("rb") as body:
        resp = src.http.post("/api/v1/restore?replace=1", content=body, timeout=120)
    assert resp.status_code == 409 and resp.json()["error"] == "RESTORE_RUNS_ACTIVE"
    assert resp.json()["params"]["running"] >= RUNNING
    # A damaged archive: refused with its code, the worker goes on.
    resp = dst.http.post("/api/v1/restore", content=archive.read_bytes()[:-5000])
    assert resp.status_code == 422 and resp.json()["error"].startswith("BACKUP_")

    old_pid = dst.worker_pid()
    with archive.open("rb") as body:
        staged = _ok(dst.http.post("/api/v1/restore", content=body, timeout=120), 202)
    assert staged["restarting"] is True and staged["requeued"] == {"python": 1}
    # The worker ends itself; supervisord starts it again and the swap runs first.
    _wait("the restarted worker", lambda: dst.worker_pid() != old_pid and dst.ready())
    got = _view(dst)
    assert got == want
    assert sum(t[1].startswith("sleeper") for t in got["tasks"]) == RUNNING
    assert len(got["envs"]["items"]) == 2 and len(got["apps"]["items"]) == 1
    assert len(got["subscriptions"]["items"]) == 1 and len(got["channels"]["items"]) == 1
    for rel, data in files.items():
        assert _script(dst, rel) == data == _script(src, rel)
    # The installs are queued again: a new job of the restored appliance, not the old one.
    for dep in dst.api("GET", "/dependencies").json()["items"]:
        assert dep["last_run_id"] and dep["last_run_id"] != src_deps[dep["id"]]["last_run_id"]
        run = _ok(dst.api("GET", f"/runs/{dep['last_run_id']}"), 200)
        assert run["task_name"] == "dependencies: python"
    # The runs executing at backup time are not in the restored history (no --history).
    assert _running(dst) <= 1
    assert "restore" not in " ".join(p.name for p in (dst.state / "data").iterdir())
