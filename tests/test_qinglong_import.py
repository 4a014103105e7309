"""`qledge import qinglong` against data made by a real QingLong 2.21.0
(tests/fixtures/qinglong/README.md): the dry-run report, the apply object by object, a
second apply, imported tasks running through the real launcher, an imported app's
token, the panel's upload, and failures that leave nothing behind."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from qledge import failpoints
from qledge.db import backend
from qledge.importer.plan import Plan
from qledge.runtime import dependencies, imports

from support import (
    ADMIN,
    BACKEND,
    ROOT,
    Server,
    make_settings,
    migrate_for,
    pg_env,
    pg_rows,
    sql,
    wait_terminal,
)

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

FIXTURES = Path(__file__).parent / "fixtures" / "qinglong"
DATA_TGZ = FIXTURES / "2.21.0-data.tgz"
BACKUP_TGZ = FIXTURES / "2.21.0-backup.tgz"

# The exact report of a dry run into an empty qledge ({root}: the folder read).
DRY_RUN = (FIXTURES / "2.21.0-dry-run.txt").read_text()
NPM = dependencies.npm_available()


@pytest.fixture
def ql(tmp_path: Path) -> Path:
    """The fixture's data directory, unpacked (the archive itself stays untouched)."""
    with tarfile.open(DATA_TGZ) as tar:
        tar.extractall(tmp_path / "ql", filter="data")
    return tmp_path / "ql" / "data"


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every entry below `root`: mtime and content hash (files), to prove nothing moved."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        out[str(path.relative_to(root))] = (st.st_mtime_ns, digest)
    return out


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QLEDGE_STATE_DIR": str(state), "PYTHONPATH": str(ROOT / "app"),
           **(pg_env(state) if BACKEND == "pg" else {})}
    return subprocess.run([sys.executable, "-m", "qledge", "import", "qinglong", *args],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def rows(state: Path, sql: str) -> list[tuple[Any, ...]]:
    if BACKEND == "pg":  # the node's database is its PostgreSQL one (tests/support.py)
        return pg_rows(pg_env(state)["QLEDGE_DATABASE_URL"], sql)
    conn = sqlite3.connect(state / "data" / "qledge.sqlite3")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def fixture_rows(ql: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{ql / 'db' / 'database.sqlite'}?mode=ro&immutable=1",
                           uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def everything(state: Path) -> dict[str, list[tuple[Any, ...]]]:
    tables = ("tasks", "envs", "subscriptions", "apps", "notify_channels", "dependencies",
              "dependency_jobs", "import_map")
    return {t: rows(state, f"SELECT * FROM {t} ORDER BY 1") for t in tables}


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_dry_run_report_is_exact_and_writes_nothing(ql: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    before = snapshot(ql)
    done = cli(state, str(ql))
    assert done.returncode == 0, done.stderr
    expected = DRY_RUN.replace("{root}", str(ql))
    if not NPM:  # nodejs packages need npm (the image's -node variant)
        expected = expected.replace("dependencies: 2 create, 1 skip",
                                    "dependencies: 1 create, 2 skip").replace(
            "  create    axios (nodejs)\n", "  skip      axios (nodejs)" + " " * 30
            + "not imported: nodejs packages need the image's -node variant\n")
    assert done.stdout == expected
    assert snapshot(ql) == before  # read-only: no -wal, -shm or -journal, no byte changed
    assert all(not v for v in everything(state).values())
    assert files(state / "work" / "scripts").keys() <= {"notify.py", "sendNotify.js"}


def test_apply_object_by_object_then_again_a_no_op(ql: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    before = snapshot(ql)
    done = cli(state, str(ql), "--apply", "--with-logs", "5")
    assert done.returncode == 0, done.stderr
    assert "— applied" in done.stdout
    assert snapshot(ql) == before

    tasks = {r[0]: r[1:] for r in rows(state, (
        "SELECT name, command, schedule, extra_schedules_json, enabled, labels_json, overlap,"
        " timeout_s FROM tasks WHERE labels_json NOT LIKE '%subscription%'"
        " AND labels_json NOT LIKE '%dependencies%'"))}
    assert tasks == {
        "Hello Python": ("task hello.py", "0 8 * * *", "[]", 1, '["daily","python"]',
                         "replace", 7200),
        "Shell backup": ("task backup.sh", "30 15 3 * * *", "[]", 1, '["shell"]', "allow",
                         7200),
        "Greet JS": ("task -m 30m greet.js", "*/20 * * * *",
                     '["0 12 * * *","15 30 18 * * 6"]', 1, "[]", "replace", 7200),
        "Util (off)": ("task tools/util.py now", "0 0 1 * *", "[]", 0, "[]", "replace", 7200),
        "Cleanup at boot": ("task tools/cleanup.sh", "@boot", "[]", 1, "[]", "replace", 7200),
        "Example sign": ("task example-owner_ql-scripts/ex_sign.js", "10 7 * * *", "[]", 1,
                         "[]", "replace", 7200),
    }
    # nodejs and python3 packages declared (QingLong's linux one is not: a derived
    # image's), each with one queued install run of its ecosystem's queue task
    deps = rows(state, "SELECT d.type, d.name, d.spec, d.action, r.status, t.name FROM"
                       " dependencies d JOIN runs r ON r.id = d.last_run_id"
                       " JOIN tasks t ON t.id = r.task_id ORDER BY d.type")
    assert deps == [("node", "axios", "axios", "install", "queued", "dependencies: node")
                    ] * NPM + [("python", "requests", "requests==2.31.0", "install", "queued",
                                "dependencies: python")]
    # QingLong's order (position, larger first), same-name rows kept apart
    assert rows(state, "SELECT name, value, remarks, enabled FROM envs"
                       " ORDER BY position DESC, num") == [
        ("GREETING", "ni hao", "read by hello.py", 1),
        ("JD_COOKIE", "pt_key=AAA;pt_pin=alice;", "alice", 1),
        ("JD_COOKIE", "pt_key=BBB;pt_pin=bob;", "bob", 1),
        ("OLD_TOKEN", "stale-value", "not used any more", 0),
        ("MY_SETTING", "custom value", "from QingLong config.sh", 1)]

    subs = {r[0]: r[1:] for r in rows(state, (
        "SELECT alias, name, type, url, branch, schedule, default_schedule, whitelist,"
        " blacklist, dependences, extensions_json, auto_add, auto_delete, vanished,"
        " sub_before, sub_after, enabled, username, secret FROM subscriptions"))}
    assert subs == {
        "example-owner_ql-scripts": (
            "Example scripts", "git", "https://github.com/example-owner/ql-scripts.git",
            "main", "0 */6 * * *", None, "ex_|demo_", "ex_skip", "utils|sendNotify",
            '["js","py"]', 1, 0, "delete", "echo before-pull", "echo after-pull", 1, None,
            None),
        "me_private": (
            "Private repo", "git", "https://git.example.com/me/private.git", None,
            "@every 12h", None, "", "", "", '["js","mjs","py","pyc"]', 0, 0, "delete", "", "",
            1, "me", "fixture-repo-password"),
        "raw_demo": (
            "Raw file", "file", "https://raw.example.com/x/raw_demo.js", None, "0 1 * * *",
            None, "", "", "", '["js","mjs","py","pyc"]', 0, 0, "delete", "", "", 0, None,
            None)}
    # each subscription owns its pull task, in step with it
    pulls = rows(state, "SELECT s.alias, t.name, t.schedule, t.enabled, t.command FROM"
                        " subscriptions s JOIN tasks t ON t.id = s.pull_task_id ORDER BY 1")
    assert [p[:4] for p in pulls] == [
        ("example-owner_ql-scripts", "subscription: Example scripts", "0 */6 * * *", 1),
        ("me_private", "subscription: Private repo", "@every 12h", 1),
        ("raw_demo", "subscription: Raw file", "0 1 * * *", 0)]
    assert all(p[4].endswith(f"-m qledge subscription pull {i}") for p, i in zip(
        pulls, [r[0] for r in rows(state, "SELECT id FROM subscriptions ORDER BY alias")],
        strict=True))

    (client_id, secret, scopes), = fixture_rows(
        ql, "SELECT client_id, client_secret, scopes FROM Apps WHERE name = 'telegram-bot'")
    assert rows(state, "SELECT name, client_id, secret_hash, scopes_json FROM apps") == [
        ("telegram-bot", client_id, hashlib.sha256(secret.encode()).digest(), scopes)]
    assert rows(state, "SELECT name, url, enabled FROM notify_channels ORDER BY name") == [
        ("qinglong", "tgram://123456789:AAFixtureTokenForQledgeTests/987654321", 1),
        ("qinglong BARK_PUSH", "barks://bark.example.com/fixturedevicekey", 1),
        ("qinglong PUSH_KEY", "schan://SCTfixturekey", 1)]

    scripts = files(state / "work" / "scripts")
    source = files(ql / "scripts")
    for name in ("backup.sh", "greet.js", "hello.py", "tools/util.py", "tools/cleanup.sh",
                 "example-owner_ql-scripts/ex_sign.js", "example-owner_ql-scripts/utils.js"):
        assert scripts[name] == source[name]
    assert scripts["task_before.sh"] == (ql / "config" / "task_before.sh").read_bytes()
    # QingLong's notify helpers are not copied (the worker ships qledge's own at start)
    assert "notify.py" not in scripts and "sendNotify.js" not in scripts
    assert not [p for p in (state / "work" / "scripts").rglob(".qledge-import-*")]
    logs = state / "logs" / "qinglong"
    assert sorted(str(p.relative_to(logs)) for p in logs.rglob("*.log")) == sorted(
        str(p.relative_to(ql / "log")) for p in (ql / "log").rglob("*.log"))
    assert all(p.stat().st_mode & 0o777 == 0o400 for p in logs.rglob("*.log"))

    # 6 tasks + 5 envs + 8 files + 3 subscriptions + 1 app + 3 channels + the packages
    assert rows(state, "SELECT kind, COUNT(*) FROM import_map GROUP BY kind ORDER BY 1") == [
        ("app", 1), ("channel", 3), ("cron", 6), ("dependency", 1 + NPM), ("env", 5),
        ("script", 8), ("subscription", 3)]

    first, first_files = everything(state), files(state / "work")
    again = cli(state, str(ql), "--apply", "--with-logs", "5")
    assert again.returncode == 0, again.stderr
    assert everything(state) == first  # no row written, not even a timestamp
    assert files(state / "work") == first_files
    for line in again.stdout.splitlines():
        assert not line.startswith(("  created", "  changed", "  conflict")), line


def _apply(state: Path, path: Path, **kw: Any) -> Plan:
    conf = make_settings(state)
    migrate_for(conf)

    async def go() -> Plan:
        db = backend.database(conf)
        await db.open()
        try:
            return await imports.run(db, conf, path, apply=True, **kw)
        finally:
            await db.close()

    return asyncio.run(go())


def test_imported_tasks_run_through_the_launcher_and_the_app_gets_a_token(
        ql: Path, tmp_path: Path) -> None:
    """Imported with `qledge import` while the worker runs (docker exec's way)."""
    state = tmp_path / "state"
    (client_id, secret), = fixture_rows(
        ql, "SELECT client_id, client_secret FROM Apps WHERE name = 'telegram-bot'")
    # The imported packages' installs are queued too: a dead mirror keeps them offline
    # (they fail at once, beside the runs this test waits for).
    srv = Server(state, PIP_INDEX_URL="http://127.0.0.1:9/simple",
                 NPM_REGISTRY="http://127.0.0.1:9/")
    try:
        done = cli(state, str(ql), "--apply")
        assert done.returncode == 0, done.stderr
        by_name = {t["name"]: t for t in srv.http.get("/api/v1/tasks").json()["items"]}
        expect = {"Hello Python": ["global-before", "hello from python: ni hao",
                                   "accounts: 2"],
                  "Shell backup": ["global-before", "backup from shell: ni hao"]}
        if shutil.which("node", path="/usr/local/bin:/usr/bin:/bin"):
            expect["Greet JS"] = ["greet from node: ni hao"]
        for name, lines in expect.items():
            run_id = srv.http.post(f"/api/v1/tasks/{by_name[name]['id']}/runs").json()["run"]["id"]
            done = wait_terminal(srv.http, run_id)
            assert done["status"] == "succeeded", (name, done)
            log = srv.http.get(f"/api/v1/runs/{run_id}/log").text
            for line in lines:
                assert line in log, (name, log)

        got = srv.http.get("/open/auth/token", params={"client_id": client_id,
                                                        "client_secret": secret},
                           headers={"Authorization": ""}).json()
        assert got["code"] == 200 and got["data"]["token_type"] == "Bearer"
        token = {"Authorization": f"Bearer {got['data']['token']}"}
        crons = srv.http.get("/open/crons", headers=token).json()
        assert crons["code"] == 200
        assert "Hello Python" in {c["name"] for c in crons["data"]["data"]}
        assert srv.http.get("/open/envs", headers=token).json()["code"] == 200
        wrong = srv.http.get("/open/auth/token", params={"client_id": client_id,
                                                          "client_secret": secret + "x"},
                             headers={"Authorization": ""}).json()
        assert wrong["code"] == 400
    finally:
        srv.stop()


def test_conflicts_are_listed_and_skipped_then_renamed_or_replaced(
        ql: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    scripts = state / "work" / "scripts"
    make_settings(state)
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "hello.py").write_text("print('mine')\n")
    first = cli(state, str(ql), "--apply")  # creates everything else
    assert first.returncode == 0, first.stderr
    assert "  conflict  hello.py" in first.stdout
    assert "a different file is there in qledge (--on-conflict=rename or replace)" in \
        first.stdout
    assert (scripts / "hello.py").read_text() == "print('mine')\n"
    assert not (scripts / "hello.qinglong.py").exists()
    skipped = cli(state, str(ql), "--apply", "--on-conflict=skip")  # the default, said
    assert skipped.returncode == 0 and "  conflict  hello.py" in skipped.stdout
    assert (scripts / "hello.py").read_text() == "print('mine')\n"

    renamed = cli(state, str(ql), "--apply", "--on-conflict=rename")
    assert renamed.returncode == 0, renamed.stderr
    assert (scripts / "hello.py").read_text() == "print('mine')\n"
    assert (scripts / "hello.qinglong.py").read_bytes() == (ql / "scripts" /
                                                            "hello.py").read_bytes()
    replaced = cli(state, str(ql), "--apply", "--on-conflict=replace")
    assert replaced.returncode == 0, replaced.stderr
    # renamed before, so mapped: the copy beside it is the imported file from now on
    assert (scripts / "hello.py").read_text() == "print('mine')\n"
    assert "imported before; unchanged in QingLong" in replaced.stdout


def test_a_task_with_the_same_command_is_a_conflict(ql: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    conf = make_settings(state)
    migrate_for(conf)
    sql(conf,
        "INSERT INTO tasks (id, name, command, schedule, env_json, enabled, concurrency,"
        " labels_json, created_at_ms, updated_at_ms) VALUES ('01900000-0000-7000-8000-"
        "000000000001', 'mine', 'task hello.py', '5 5 * * *', '{}', 1, 'forbid', '[]', 1, 1)")
    plain = cli(state, str(ql), "--apply")
    assert "  conflict  Hello Python" in plain.stdout
    assert rows(state, "SELECT name, schedule FROM tasks WHERE command = 'task hello.py'"
                       " ORDER BY num") == [("mine", "5 5 * * *")]
    cli(state, str(ql), "--apply", "--on-conflict=rename")
    assert rows(state, "SELECT name, schedule FROM tasks WHERE command = 'task hello.py'"
                       " ORDER BY num") == [("mine", "5 5 * * *"),
                                            ("Hello Python (QingLong)", "0 8 * * *")]


def test_changes_in_qinglong_flow_in_and_edits_on_both_sides_conflict(
        ql: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert cli(state, str(ql), "--apply").returncode == 0
    db = ql / "db" / "database.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("UPDATE Crontabs SET schedule = '0 9 * * *' WHERE name = 'Hello Python'")
    conn.execute("UPDATE Envs SET value = 'salut' WHERE name = 'GREETING'")
    conn.commit()
    conn.close()
    sql(make_settings(state), "UPDATE envs SET value = 'hallo' WHERE name = 'GREETING'")
    dry = cli(state, str(ql))
    assert "  change    Hello Python                                changed in QingLong" \
        " since the last import" in dry.stdout
    assert "  conflict  GREETING (read by hello.py)                 changed in QingLong and" \
        " in qledge since the last import" in dry.stdout
    assert cli(state, str(ql), "--apply").returncode == 0
    assert rows(state, "SELECT schedule FROM tasks WHERE name = 'Hello Python'") == [
        ("0 9 * * *",)]
    assert rows(state, "SELECT value FROM envs WHERE name = 'GREETING'") == [("hallo",)]
    assert cli(state, str(ql), "--apply", "--on-conflict=replace").returncode == 0
    assert rows(state, "SELECT value FROM envs WHERE name = 'GREETING'") == [("salut",)]


def test_a_failed_commit_leaves_nothing_behind(ql: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    scripts = state / "work" / "scripts"
    make_settings(state)
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "hello.py").write_text("print('mine')\n")
    before = files(state / "work")
    failpoints.configure("db.before_commit=raise")
    try:
        with pytest.raises(failpoints.FailpointError):
            _apply(state, ql, on_conflict="replace", with_logs=3)
    finally:
        failpoints.configure("")
    assert files(state / "work") == before  # the replaced hello.py is back, copies gone
    assert sorted(p.name for p in scripts.iterdir()) == ["hello.py"]
    assert not (state / "logs" / "qinglong").exists()
    assert all(not v for v in everything(state).values())
    assert not list((state / "data").glob(".import-*"))


def test_an_environment_too_large_refuses_the_whole_import(ql: Path, tmp_path: Path) -> None:
    """Each env fits qledge's limits, all together pass the kernel's execve budget that
    every task's environment must fit (launch/environment.py)."""
    conn = sqlite3.connect(ql / "db" / "database.sqlite")
    conn.executemany("INSERT INTO Envs (name, value, status, position, createdAt, updatedAt)"
                     " VALUES (?, ?, 0, ?, datetime(), datetime())",
                     [(f"BIG_{n}", "x" * 60_000, 1000 - n) for n in range(20)])
    conn.commit()
    conn.close()
    state = tmp_path / "state"
    done = cli(state, str(ql), "--apply")
    assert done.returncode == 1
    assert "nothing was imported" in done.stderr and "environment" in done.stderr
    assert all(not v for v in everything(state).values())
    assert not [p for p in (state / "work" / "scripts").rglob("*") if p.is_file()]


def test_the_panel_backup_archive_and_the_upload(tmp_path: Path) -> None:
    state = tmp_path / "state"
    dry = cli(state, str(BACKUP_TGZ))
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"QingLong import of {BACKUP_TGZ} — dry run")
    assert "config/ is not in this source" in dry.stdout
    assert "crons → tasks: 6 create, 1 skip" in dry.stdout
    assert not list((state / "data").glob(".import-*"))  # the unpacked copy is gone

    srv = Server(state)
    try:
        archive = BACKUP_TGZ.read_bytes()
        report = srv.http.post("/api/v1/imports/qinglong",
                               files={"file": ("data.tgz", archive)}).json()
        assert report["applied"] is False and report["root"] == "the uploaded archive"
        assert report["counts"]["cron"] == {"create": 6, "change": 0, "skip": 1,
                                            "conflict": 0}
        applied = srv.http.post("/api/v1/imports/qinglong?apply=true&with_logs=1",
                                files={"file": ("data.tgz", archive)}).json()
        assert applied["applied"] is True
        names = {t["name"] for t in srv.http.get("/api/v1/tasks").json()["items"]}
        assert {"Hello Python", "Shell backup", "Greet JS"} <= names
        again = srv.http.post("/api/v1/imports/qinglong?apply=true",
                              files={"file": ("data.tgz", archive)}).json()
        assert all(i["action"] == "skip" for i in again["items"])
        assert not list((state / "data").glob(".import-*"))

        bad = srv.http.post("/api/v1/imports/qinglong", files={"file": ("x.tgz", b"junk")})
        assert bad.status_code == 422 and bad.json()["error"] == "IMPORT_SOURCE_INVALID"
        # the reason, without the server's path of the upload (issue 38)
        assert bad.json()["message"] == ("the uploaded file is neither a QingLong data"
                                         " directory nor a .tgz backup archive"), bad.json()
        # a declared body over the cap: 413 before a byte of it is read
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            sock.sendall(b"POST /api/v1/imports/qinglong HTTP/1.1\r\nHost: x\r\n"
                         b"Authorization: Bearer " + ADMIN.encode() + b"\r\n"
                         b"Content-Type: multipart/form-data; boundary=b\r\n"
                         b"Content-Length: " + str(80 << 20).encode() + b"\r\n\r\n--b")
            assert sock.recv(4096).startswith(b"HTTP/1.1 413")
    finally:
        srv.stop()


def test_an_upload_past_the_cap_is_refused_while_it_streams(
        client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from qledge.http import imports as api

    monkeypatch.setattr(api, "MAX_ARCHIVE", 4096)
    answer = client.post("/api/v1/imports/qinglong",
                         files={"file": ("data.tgz", BACKUP_TGZ.read_bytes())})
    assert answer.status_code == 413
    assert answer.json()["error"] == "PAYLOAD_TOO_LARGE"
    state = Path(client.app.state.runtime.settings.data_path)  # type: ignore[attr-defined]
    assert not list(state.glob(".import-*"))  # the partial upload is gone


def test_replace_never_swaps_out_a_folder(ql: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    make_settings(state)
    (state / "work" / "scripts" / "hello.py").mkdir(parents=True)
    (state / "work" / "scripts" / "hello.py" / "mine.txt").write_text("keep")
    done = cli(state, str(ql), "--apply", "--on-conflict=replace")
    assert done.returncode == 1
    assert "hello.py is not a regular file: not replaced" in done.stderr
    assert (state / "work" / "scripts" / "hello.py" / "mine.txt").read_text() == "keep"
    assert sorted(p.name for p in (state / "work" / "scripts").iterdir()) == ["hello.py"]
    assert all(not v for v in everything(state).values())


def test_a_plain_command_naming_a_script_runs_from_the_scripts_folder(
        ql: Path, tmp_path: Path) -> None:
    """Issue 35, finding 18: QingLong ran `bash backup.sh` from its scripts folder;
    imported as it was, qledge ran it in the work folder and it failed with 127."""
    conn = sqlite3.connect(ql / "db" / "database.sqlite")
    conn.execute("UPDATE Crontabs SET command = 'bash backup.sh' WHERE name = 'Shell backup'")
    conn.execute("UPDATE Crontabs SET command = 'python3 /ql/data/scripts/tools/util.py'"
                 " WHERE name = 'Util (off)'")
    conn.commit()
    conn.close()
    state = tmp_path / "state"
    srv = Server(state, PIP_INDEX_URL="http://127.0.0.1:9/simple",
                 NPM_REGISTRY="http://127.0.0.1:9/")
    try:
        done = cli(state, str(ql), "--apply")
        assert done.returncode == 0, done.stderr
        by_name = {t["name"]: t for t in srv.http.get("/api/v1/tasks").json()["items"]}
        for name, line in (("Shell backup", "backup from shell: ni hao"),
                           ("Util (off)", "util from python")):
            run_id = srv.http.post(f"/api/v1/tasks/{by_name[name]['id']}/runs").json()[
                "run"]["id"]
            run = wait_terminal(srv.http, run_id)
            assert (run["status"], run["exit_code"]) == ("succeeded", 0), (name, run)
            assert line in srv.http.get(f"/api/v1/runs/{run_id}/log").text
        assert ("names backup.sh in scripts/: imported as `cd scripts && …` (QingLong ran it"
                " from its scripts folder)") in done.stdout
        assert "names tools/util.py in scripts/" in done.stdout
        by_name = {t["name"]: t for t in srv.http.get("/api/v1/tasks").json()["items"]}
        assert by_name["Shell backup"]["command"] == "cd scripts && bash backup.sh"
        assert by_name["Util (off)"]["command"] == "cd scripts && python3 ./tools/util.py"
    finally:
        srv.stop()
