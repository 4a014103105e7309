"""Scheduled backups into a directory with keep-N rotation (backup/schedule.py,
backup/schedule_task.py, http/backup_schedule.py; docs/backup.md "Scheduled backups")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest
from starlette.testclient import TestClient

from qledge import backup, paths, settings
from qledge.backup import crypto, schedule

from support import Server, eventually, migrate_for, wait_terminal


def _bytes(data: bytes) -> schedule.Callable[[IO[bytes]], object]:
    return lambda out: out.write(data)


def test_rotation_keeps_the_newest_and_never_touches_other_files(tmp_path: Path) -> None:
    d = tmp_path / "stick"
    d.mkdir()
    old = ["qledge-backup-20260101-000000.tar.gz", "qledge-backup-20260102-000000.tar.gz",
           "qledge-backup-20260102-000000-1.tar.gz", "qledge-backup-20260103-000000.tar.gz"]
    for name in old:
        (d / name).write_bytes(b"old")
    foreign = ["notes.txt", "qledge-backup-latest.tar.gz", "qledge-backup-20260101-000000.tar"]
    for name in foreign:
        (d / name).write_bytes(b"mine")
    (d / "qledge-backup-20250101-000000.tar.gz").symlink_to(d / "notes.txt")  # not a file
    (d / ".qledge-backup-20260104-000000.tar.gz.partial").write_bytes(b"half")
    done = schedule.write_to_dir(d, 2, _bytes(b"new"))
    assert done.cleaned == (".qledge-backup-20260104-000000.tar.gz.partial",)
    # "-1" is the later of two in one second though it sorts first as text.
    assert done.removed == tuple(old[:3])
    assert sorted(p.name for p in d.iterdir()) == sorted([
        *foreign, old[3], done.path.name, schedule.LOCK_NAME,
        "qledge-backup-20250101-000000.tar.gz"])
    dfd = os.open(d, os.O_RDONLY)
    try:
        assert schedule.final_names(dfd) == [old[3], done.path.name]
    finally:
        os.close(dfd)
    assert done.path.read_bytes() == b"new"
    for name in foreign:
        assert (d / name).read_bytes() == b"mine"
    assert (d / "qledge-backup-20250101-000000.tar.gz").is_symlink()


def test_keep_one_keeps_only_the_new_archive(tmp_path: Path) -> None:
    first = schedule.write_to_dir(tmp_path, 1, _bytes(b"1"))
    second = schedule.write_to_dir(tmp_path, 1, _bytes(b"2"))
    assert first.path != second.path  # one second: "-1"
    assert second.removed == (first.path.name,)
    dfd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert schedule.final_names(dfd) == [second.path.name]
    finally:
        os.close(dfd)


def test_a_failed_backup_leaves_no_partial_and_rotates_nothing(tmp_path: Path) -> None:
    kept = schedule.write_to_dir(tmp_path, 1, _bytes(b"good"))

    def broken(out: IO[bytes]) -> object:
        out.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        schedule.write_to_dir(tmp_path, 1, broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [kept.path.name, schedule.LOCK_NAME])


def test_a_second_backup_into_the_same_directory_is_refused_while_one_runs(
        tmp_path: Path) -> None:
    def nested(out: IO[bytes]) -> object:
        with pytest.raises(schedule.DirectoryBusy):
            schedule.write_to_dir(tmp_path, 3, _bytes(b"inner"))
        return out.write(b"outer")

    schedule.write_to_dir(tmp_path, 3, nested)


def _appliance(conf: settings.Settings) -> None:
    migrate_for(conf)
    paths.prepare_roots(conf)
    (conf.scripts_path / "a.py").write_bytes(b"print('a')\n")


def test_cli_to_dir_writes_verifiable_archives_and_rotates(
        conf: settings.Settings, tmp_path: Path) -> None:
    _appliance(conf)
    d = tmp_path / "nas"
    d.mkdir()
    env = {**os.environ, "QLEDGE_STATE_DIR": str(conf.state_dir),
           "QLEDGE_ADMIN_TOKEN": "x" * 40}
    argv = [sys.executable, "-m", "qledge", "backup", "--to-dir", str(d), "--keep", "2"]
    for _ in range(3):
        done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert b"written qledge-backup-" in done.stdout
    assert b"rotated out" in done.stdout
    archives = sorted(p for p in d.iterdir() if p.name.startswith("qledge-backup-"))
    assert len(archives) == 2
    for archive in archives:
        with archive.open("rb") as f:
            manifest = backup.verify(f)
        assert "qledge-backup/scripts/a.py" in {m.name for m in manifest.members}
    bad = subprocess.run([*argv[:4], "--to-dir", str(tmp_path / "unplugged")], env=env,
                         capture_output=True, timeout=60, check=False)
    assert bad.returncode == 2 and b"not a directory" in bad.stderr


GOOD = {"enabled": True, "schedule": "0 3 * * *", "keep": 5, "with_logs": True}


@pytest.mark.parametrize(("change", "code", "field"), [
    ({"schedule": "61 * * * *"}, "BACKUP_SCHEDULE_CRON", "schedule"),
    ({"keep": 0}, "BACKUP_KEEP_RANGE", "keep"),
    ({"keep": 1001}, "BACKUP_KEEP_RANGE", "keep"),
    ({"directory": "relative/dir"}, "BACKUP_DIR_NOT_ABSOLUTE", "directory"),
    ({"directory": "/nonexistent/stick"}, "BACKUP_DIR_MISSING", "directory"),
    ({"directory": "STATE/work/scripts/backups"}, "BACKUP_DIR_INSIDE_STATE", "directory"),
    ({"passphrase": "short"}, "BACKUP_PASSPHRASE_SHORT", "passphrase"),
])
def test_schedule_refuses_bad_settings_with_a_stable_code(
        client: TestClient, conf: settings.Settings, tmp_path: Path,
        change: dict[str, object], code: str, field: str) -> None:
    body = {**GOOD, "directory": str(tmp_path), **change}
    if isinstance(body["directory"], str) and body["directory"].startswith("STATE"):
        body["directory"] = body["directory"].replace("STATE", str(conf.state_dir))
    r = client.put("/api/v1/backup/schedule", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == code and r.json()["field"] == field
    assert "params" in r.json()
    assert client.get("/api/v1/backup/schedule").json() == {
        "configured": False, "edited": False, "task_id": None, "enabled": False,
        "directory": None, "schedule": None, "keep": None, "with_logs": False,
        "with_history": False, "encrypted": False}


def test_schedule_unknown_field_and_disabled_missing_directory(
        client: TestClient, tmp_path: Path) -> None:
    r = client.put("/api/v1/backup/schedule", json={**GOOD, "directory": str(tmp_path),
                                                      "passwd": "x"})
    assert r.status_code == 422
    # Disabled: the stick may be unplugged for now.
    r = client.put("/api/v1/backup/schedule", json={**GOOD, "enabled": False,
                                                      "directory": "/nonexistent/stick"})
    assert r.status_code == 200, r.text
    assert r.json()["enabled"] is False and r.json()["directory"] == "/nonexistent/stick"


def test_schedule_is_one_internal_task_updated_in_place(
        client: TestClient, tmp_path: Path) -> None:
    r = client.put("/api/v1/backup/schedule", json={**GOOD, "directory": str(tmp_path)})
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["configured"] and not first["edited"]
    assert (first["directory"], first["schedule"], first["keep"], first["with_logs"],
            first["with_history"]) == (str(tmp_path), "0 3 * * *", 5, True, False)
    task = client.get(f"/api/v1/tasks/{first['task_id']}").json()
    assert task["schedule"] == "0 3 * * *" and task["labels"] == ["backup"]
    assert "--to-dir" in task["command"] and task["enabled"] is True
    r = client.put("/api/v1/backup/schedule", json={**GOOD, "directory": str(tmp_path),
                                                      "keep": 2, "schedule": "@daily"})
    again = r.json()
    assert again["task_id"] == first["task_id"] and again["keep"] == 2
    assert client.get("/api/v1/backup/schedule").json() == again
    # Someone edits the command by hand: read back as edited, PUT rewrites it.
    client.patch(f"/api/v1/tasks/{first['task_id']}", json={"command": "echo hi"})
    assert client.get("/api/v1/backup/schedule").json()["edited"] is True
    client.put("/api/v1/backup/schedule", json={**GOOD, "directory": str(tmp_path)})
    assert client.get("/api/v1/backup/schedule").json()["edited"] is False


def test_the_passphrase_is_kept_apart_and_never_answered(
        client: TestClient, conf: settings.Settings, tmp_path: Path) -> None:
    pw = "correct horse battery"
    r = client.put("/api/v1/backup/schedule", json={**GOOD, "directory": str(tmp_path),
                                                      "passphrase": pw})
    assert r.status_code == 200 and r.json()["encrypted"] is True
    stored = conf.data_path / "backup-passphrase"
    assert stored.read_text() == pw and stored.stat().st_mode & 0o777 == 0o600
    task = client.get(f"/api/v1/tasks/{r.json()['task_id']}").json()
    assert pw not in str(task) and pw not in r.text
    # Absent: kept; null: removed.
    r = client.put("/api/v1/backup/schedule", json={**GOOD, "directory": str(tmp_path)})
    assert r.json()["encrypted"] is True and stored.exists()
    r = client.put("/api/v1/backup/schedule", json={**GOOD, "directory": str(tmp_path),
                                                      "passphrase": None})
    assert r.json()["encrypted"] is False and not stored.exists()


def test_a_scheduled_backup_is_a_real_run_with_a_log(tmp_path: Path) -> None:
    d = tmp_path / "usb"
    d.mkdir()
    server = Server(tmp_path / "state")
    try:
        (tmp_path / "state" / "work" / "scripts" / "x.py").write_text("print(1)\n")
        r = server.http.put("/api/v1/backup/schedule", json={
            **GOOD, "directory": str(d), "keep": 1})
        assert r.status_code == 200, r.text
        task_id = r.json()["task_id"]
        runs = []
        for _ in range(2):
            run = server.http.post(f"/api/v1/tasks/{task_id}/runs").json()["run"]
            done = wait_terminal(server.http, run["id"], timeout=60)
            assert done["status"] == "succeeded", done
            runs.append(run["id"])
        log = server.http.get(f"/api/v1/runs/{runs[-1]}/log").text
        assert "written qledge-backup-" in log and "rotated out" in log
        archives = [p for p in d.iterdir() if p.name.startswith("qledge-backup-")]
        assert len(archives) == 1
        with archives[0].open("rb") as f:
            backup.verify(f)
        # With a passphrase: an encrypted archive, the passphrase in no log.
        pw = "correct horse battery"
        server.http.put("/api/v1/backup/schedule", json={
            **GOOD, "directory": str(d), "keep": 1, "passphrase": pw})
        run = server.http.post(f"/api/v1/tasks/{task_id}/runs").json()["run"]
        assert wait_terminal(server.http, run["id"], timeout=60)["status"] == "succeeded"
        log = server.http.get(f"/api/v1/runs/{run['id']}/log").text
        assert ".tar.gz.enc" in log and pw not in log
        (enc,) = [p for p in d.iterdir() if p.name.startswith("qledge-backup-")]
        with enc.open("rb") as f:
            assert backup.verify(crypto.opened(f, pw.encode())).encrypted
        # The stick is gone: the run fails with a real exit code (and so notifies).
        os.rename(d, tmp_path / "unplugged")
        run = server.http.post(f"/api/v1/tasks/{task_id}/runs").json()["run"]
        failed = wait_terminal(server.http, run["id"], timeout=60)
        assert failed["status"] == "failed" and failed["exit_code"] == 2, failed
        assert "is not a directory" in server.http.get(f"/api/v1/runs/{run['id']}/log").text
        # Another task's credential (every task has one) gets no backup.
        other = server.http.post("/api/v1/tasks", json={
            "name": "thief", "command": f"{sys.executable} -I -m qledge backup scheduled"})
        assert other.status_code == 201, other.text
        run = server.http.post(f"/api/v1/tasks/{other.json()['id']}/runs").json()["run"]
        refused = wait_terminal(server.http, run["id"], timeout=60)
        assert refused["status"] == "failed", refused
        assert "BACKUP_NOT_SCHEDULED_RUN" in server.http.get(
            f"/api/v1/runs/{run['id']}/log").text
        # No credential at all.
        assert server.http.post("/backup/scheduled", headers={
            "Authorization": "Bearer nope"}).status_code == 401
    finally:
        server.stop()


def test_a_cancelled_scheduled_run_stops_the_worker_and_leaves_no_partial(
        tmp_path: Path) -> None:
    d = tmp_path / "usb"
    d.mkdir()
    server = Server(tmp_path / "state")
    try:
        scripts = tmp_path / "state" / "work" / "scripts"
        for i in range(24):  # ~200 MB gzip cannot shrink: seconds of writing
            (scripts / f"big{i}.bin").write_bytes(os.urandom(8 * 1024**2))
        r = server.http.put("/api/v1/backup/schedule", json={**GOOD, "directory": str(d)})
        task_id = r.json()["task_id"]
        run = server.http.post(f"/api/v1/tasks/{task_id}/runs").json()["run"]

        def partial() -> list[Path]:
            return [p for p in d.iterdir() if schedule.PARTIAL.fullmatch(p.name)]

        eventually(lambda: partial() and partial()[0].stat().st_size > 1024**2, timeout=60,
                   what="the worker writing the partial archive")
        assert server.http.post(f"/api/v1/runs/{run['id']}/cancel").status_code in (200, 202)
        done = wait_terminal(server.http, run["id"], timeout=60)
        assert done["status"] == "cancelled", done
        # The worker notices the closed connection and removes its partial file.
        eventually(lambda: not partial(), timeout=30, what="the partial removed")
        assert not [p for p in d.iterdir() if schedule.FINAL.fullmatch(p.name)]
    finally:
        server.stop()
