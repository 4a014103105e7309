"""Real processes: supervisord restarts a SIGKILLed worker; one runtime per data dir."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _appliance import ADMIN, Appliance
from support import free_port

pytestmark = pytest.mark.drill


def test_worker_killed_is_restarted_with_db_intact(tmp_path: Path) -> None:
    app = Appliance(tmp_path / "state", free_port())
    app.start()
    try:
        r = app.api("POST", "/tasks", json={"name": "keep me", "command": "true"})
        assert r.status_code == 201
        first = app.worker_pid()
        app.kill_worker()
        app.wait_ready(30)
        second = app.worker_pid()
        assert second != first
        names = [t["name"] for t in app.api("GET", "/tasks").json()["items"]]
        assert names == ["keep me"]
        system = app.api("GET", "/system").json()
        assert system["profile"] == "edge" and system["node_id"]
        check = subprocess.run(
            [sys.executable, "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]);"
             "print(c.execute('PRAGMA integrity_check').fetchone()[0])",
             str(tmp_path / "state" / "data" / "qledge.sqlite3")],
            capture_output=True, text=True, check=True)
        assert check.stdout.strip() == "ok"
    finally:
        app.stop()


def test_second_serve_on_same_data_dir_fails_fast(tmp_path: Path) -> None:
    app = Appliance(tmp_path / "state", free_port())
    app.start()
    try:
        env = {**app.env, "QLEDGE_PORT": str(free_port())}
        res = subprocess.run([sys.executable, "-m", "qledge", "serve"], env=env,
                             capture_output=True, text=True, timeout=20)
        assert res.returncode == 3
        assert "another qledge runtime holds" in res.stderr
        assert app.ready()
    finally:
        app.stop()


def test_generated_admin_token_is_private_and_printed_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLEDGE_")}
    app = Appliance(tmp_path / "state", free_port())
    app.env = {**env, **{k: v for k, v in app.env.items()
                         if k.startswith("QLEDGE_") and k != "QLEDGE_ADMIN_TOKEN"}}
    app.start()
    try:
        token_file = tmp_path / "state" / "data" / "secrets" / "admin.token"
        token = token_file.read_text().strip()
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert token != ADMIN and len(token) >= 32
        assert app.http.get("/api/v1/tasks").status_code == 401
        ok = app.http.get("/api/v1/tasks", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
        app.kill_worker()
        app.wait_ready()
        assert app.output.read_text().count(token) == 1
    finally:
        app.stop()


def test_restarted_worker_binds_while_tasks_still_run(tmp_path: Path) -> None:
    # A leaked listening socket in a launcher would keep the port busy until the
    # task ends, and the restarted worker could never serve again.
    app = Appliance(tmp_path / "state", free_port())
    app.start()
    try:
        task = app.api("POST", "/tasks", json={"name": "long", "command": "sleep 30"}).json()
        run = app.api("POST", f"/tasks/{task['id']}/runs").json()["run"]
        deadline = time.monotonic() + 20
        while app.api("GET", f"/runs/{run['id']}").json()["started_at_ms"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        app.kill_worker()
        app.wait_ready(20)
        assert app.api("GET", f"/runs/{run['id']}").json()["status"] == "running"
        assert app.api("POST", f"/runs/{run['id']}/cancel").status_code == 202
    finally:
        app.stop()
