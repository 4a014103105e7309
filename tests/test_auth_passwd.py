"""`qledge passwd` (cli/passwd.py): the operator sets the panel password and turns the
second factor off on the machine, no current password needed."""
from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path

from starlette.testclient import TestClient

from qledge.auth import totp
from qledge.http.app import create_app

from support import ADMIN, ROOT, make_settings

SAME = {"Origin": "http://testserver"}


def passwd(state: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QLEDGE_STATE_DIR": str(state), "QLEDGE_ADMIN_TOKEN": ADMIN,
           "PYTHONPATH": str(ROOT / "app")}
    return subprocess.run([sys.executable, "-m", "qledge", "passwd", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def test_passwd_sets_and_resets(tmp_path: Path) -> None:
    state = tmp_path / "state"
    conf = make_settings(state)
    r = passwd(state, "--stdin", stdin="short\n")
    assert r.returncode == 2 and "at least 8" in r.stderr
    r = passwd(state, "--stdin", stdin="first password\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "panel password set"
    with TestClient(create_app(conf, ADMIN)) as c:
        assert c.post("/api/v1/auth/login", json={"password": "first password"},
                      headers=SAME).status_code == 200
        secret = c.post("/api/v1/auth/totp", headers=SAME).json()["secret"]
        code = totp.totp(base64.b32decode(secret), time.time())
        assert c.post("/api/v1/auth/totp/confirm", json={"code": code},
                      headers=SAME).status_code == 200
    # A change from the machine needs no current password; it can end every session.
    r = passwd(state, "--stdin", "--sign-out-everywhere", stdin="second password\n")
    assert r.returncode == 0, r.stderr
    r = passwd(state, "--reset-totp")
    assert r.returncode == 0 and r.stdout.strip() == "second factor turned off", r.stderr
    with TestClient(create_app(conf, ADMIN)) as c:
        assert c.get("/api/v1/auth/state").json()["totp_enabled"] is False
        assert c.post("/api/v1/auth/login", json={"password": "first password"},
                      headers=SAME).status_code == 401
        assert c.post("/api/v1/auth/login", json={"password": "second password"},
                      headers=SAME).status_code == 200
        assert len(c.get("/api/v1/auth/sessions").json()["items"]) == 1
