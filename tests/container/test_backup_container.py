"""A backup and its restore inside the real image (docs/backup.md): an archive taken
from one container with its logs and run history, uploaded to a second, fresh one
through the API. The worker ends itself, supervisord starts it again and the swap
runs first — with the logs volume a real mount point, whose entries are swapped one
by one. The second container then serves the same task, env, script, run and log.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from .test_node import DOCKER, _image

pytestmark = [pytest.mark.drill, pytest.mark.slow]
TOKEN = "backup-container-admin-token-0123456789"
VOLUMES = ("data", "work", "logs", "receipts")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(what: str, check: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
        except httpx.HTTPError:
            got = None
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def _appliance(tag: str) -> Iterator[tuple[str, httpx.Client]]:
    name, port = f"qledge-bk-{tag}-{uuid.uuid4().hex[:8]}", _free_port()
    mounts = [a for v in VOLUMES for a in ("-v", f"{name}-{v}:/var/lib/qledge/{v}")]
    subprocess.run([DOCKER, "run", "-d", "--name", name, "--network", "host",
                    "-e", f"QLEDGE_PORT={port}", "-e", f"QLEDGE_ADMIN_TOKEN={TOKEN}",
                    *mounts, _image("linux/amd64", "default")],
                   check=True, capture_output=True, timeout=120)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", timeout=60,
                        headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        _until("ready", lambda: http.get(f"http://127.0.0.1:{port}/readyz").status_code == 200)
        yield name, http
    finally:
        http.close()
        subprocess.run([DOCKER, "rm", "-f", name], capture_output=True, timeout=120)
        subprocess.run([DOCKER, "volume", "rm", "-f", *(f"{name}-{v}" for v in VOLUMES)],
                       capture_output=True, timeout=120)


def _ok(resp: httpx.Response, status: int) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json()


def _view(http: httpx.Client, run_id: str) -> dict[str, Any]:
    tasks = _ok(http.get("/tasks", params={"limit": 500}), 200)["items"]
    return {
        "tasks": sorted((t["name"], t["command"]) for t in tasks
                        if not t["name"].startswith(("dependencies: ", "backup: "))),
        "envs": sorted((e["name"], e["value"]) for e in _ok(http.get("/envs"), 200)["items"]),
        "script": http.get("/scripts/download", params={"path": "hello.py"}).content,
        "run": {k: v for k, v in _ok(http.get(f"/runs/{run_id}"), 200).items()
                if k in ("status", "exit_code", "task_name")},
        "log": http.get(f"/runs/{run_id}/log").content,
    }


def test_a_backup_with_logs_restores_into_a_fresh_container() -> None:
    with _appliance("src") as (_, src):
        body = "import os\nprint('hello', os.environ['GREETING'], '日志')\n"
        _ok(src.put("/scripts/file", json={"path": "hello.py", "content": body}), 201)
        _ok(src.post("/envs", json={"name": "GREETING", "value": "line one\nline two"}), 201)
        task = _ok(src.post("/tasks", json={"name": "hello", "command": "task hello.py"}), 201)
        run_id = _ok(src.post(f"/tasks/{task['id']}/runs"), 202)["run"]["id"]
        _until("the run", lambda: src.get(f"/runs/{run_id}").json()["status"] == "succeeded")
        want = _view(src, run_id)
        assert b"hello line one" in want["log"] and want["run"]["exit_code"] == 0, want
        archive = src.get("/backup", params={"logs": 1, "history": 1})
        assert archive.status_code == 200, archive.text
    with _appliance("dst") as (name, dst):
        staged = _ok(dst.post("/restore", content=archive.content), 202)
        assert staged["restarting"] is True and staged["logs"] is True, staged
        # The worker ends itself; supervisord starts it and the swap runs first.
        _until("the restored state", lambda: dst.get("/tasks").status_code == 200 and any(
            t["name"] == "hello" for t in dst.get("/tasks").json()["items"]))
        assert _view(dst, run_id) == want
        listing = subprocess.run([DOCKER, "exec", name, "ls", "-a", "/var/lib/qledge/logs",
                                  "/var/lib/qledge/data", "/var/lib/qledge/work"],
                                 capture_output=True, text=True, timeout=60, check=True)
        assert ".restore" not in listing.stdout and "restore-pending" not in listing.stdout, \
            listing.stdout
