"""Subscriptions end to end: a real git repository (git CLI) served on loopback over
smart HTTP, pulls run as runs under the real launcher, tasks kept in step, and
failures that leave the previous scripts byte-identical (docs/subscriptions.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from _git_server import GitHttpBackend, GitRepo, GitServer, PageServer, tree_bytes
from qledge.tasks.writable import TaskFields
from test_qinglong_subscriptions import token

from support import ADMIN, make_settings, migrate_for

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

API = "/api/v1/subscriptions"
SECRET = "s3cr3t-TOKEN-7d1f0a"

BEAN = """// QuantumultX: 10 7 * * * https://example.com/scripts/jd_bean.js, tag=京豆
const $ = new Env('京豆签到');
"""
SIGN = """# cron: 1 9 * * *
# name: 每日签到
print("sign")
"""
LOON = """#!/bin/sh
# cron "30 6 * * *"
echo loon
"""
PLAIN = "console.log('no header')\n"
UTIL = "module.exports = {}\n"


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    r = GitRepo(tmp_path / "origin" / "repo")
    r.write("jd_bean.js", BEAN)
    r.write("sign.py", SIGN)
    r.write("loon.sh", LOON)
    r.write("plain.js", PLAIN)
    r.write("lib/util.js", UTIL)
    r.write("README.md", "not a script\n")
    r.commit("first")
    return r


@pytest.fixture
def git_server(repo: GitRepo) -> Iterator[GitServer]:
    srv = GitServer({"repo": repo.path}, auth=("u", SECRET))
    yield srv
    srv.close()


def _client(state: Path, **overrides: str) -> TestClient:
    from qledge.http.app import create_app

    conf = make_settings(state, **overrides)
    migrate_for(conf)
    return TestClient(create_app(conf, ADMIN), headers={"Authorization": f"Bearer {ADMIN}"})


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    with _client(tmp_path / "state") as c:
        yield c


def scripts_of(client: TestClient, alias: str = "me") -> Path:
    path: Path = client.app.state.runtime.settings.scripts_path / alias  # type: ignore[attr-defined]
    return path


def new_sub(client: TestClient, url: str, **extra: Any) -> dict[str, Any]:
    body = {"name": "mine", "type": "git", "url": url, "branch": "main", "alias": "me",
            "blacklist": "^lib/", "dependences": "^lib/", "default_schedule": "0 3 * * *",
            "username": "u", "secret": SECRET, **extra}
    r = client.post(API, json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def pull(client: TestClient, sub_id: str, timeout: float = 60) -> tuple[dict[str, Any], str]:
    """Pull now; wait for the run to end and its sync; (the run, its log)."""
    r = client.post(f"{API}/{sub_id}/pull")
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    deadline = time.monotonic() + timeout
    while True:
        run = client.get(f"/api/v1/runs/{run_id}").json()
        sub = client.get(f"{API}/{sub_id}").json()
        synced = (sub["last_sync"] or {}).get("run_id") == run_id
        if run["terminal"] and synced:
            break
        assert time.monotonic() < deadline, (run, sub)
        time.sleep(0.05)
    log = client.get(f"/api/v1/runs/{run_id}/log").text
    return run, log


def tasks_by_command(client: TestClient) -> dict[str, dict[str, Any]]:
    items = client.get("/api/v1/tasks", params={"limit": 500}).json()["items"]
    return {t["command"]: t for t in items}


def test_first_and_second_pull_keep_tasks_in_step(api: TestClient, repo: GitRepo,
                                                  git_server: GitServer) -> None:
    sub = new_sub(api, git_server.url("repo"))
    assert "secret" not in sub and sub["has_secret"] is True
    run, log = pull(api, sub["id"])
    assert run["status"] == "succeeded", log
    assert "added: jd_bean.js" in log and "added: lib/util.js" in log
    files = tree_bytes(scripts_of(api))
    assert set(files) == {"jd_bean.js", "sign.py", "loon.sh", "plain.js", "lib/util.js"}
    assert files["jd_bean.js"] == BEAN.encode()

    tasks = tasks_by_command(api)
    bean, sign = tasks["task me/jd_bean.js"], tasks["task me/sign.py"]
    assert (bean["schedule"], bean["name"]) == ("10 7 * * *", "京豆签到")  # QuantumultX, Env
    assert (sign["schedule"], sign["name"]) == ("1 9 * * *", "每日签到")  # cron:, name:
    assert tasks["task me/loon.sh"]["schedule"] == "30 6 * * *"  # Loon's cron "…"
    plain = tasks["task me/plain.js"]
    assert (plain["schedule"], plain["name"]) == ("0 3 * * *", "plain.js")  # the defaults
    assert "task me/lib/util.js" not in tasks  # a dependence file: copied, no task
    last = api.get(f"{API}/{sub['id']}").json()["last_sync"]
    assert sorted(last["added"]) == ["jd_bean.js", "loon.sh", "plain.js", "sign.py"]

    # The user edits one task; the second commit changes its header, another's, removes
    # one script and adds one.
    r = api.patch(f"/api/v1/tasks/{sign['id']}", json={"schedule": "5 5 * * *"})
    assert r.status_code == 200, r.text
    repo.write("jd_bean.js", BEAN.replace("10 7 * * *", "20 7 * * *"))
    repo.write("sign.py", SIGN.replace("1 9 * * *", "2 9 * * *"))
    repo.remove("loon.sh")
    repo.write("new.js", "// cron: 0 1 * * *\nconst $ = new Env('新的');\n")
    repo.commit("second")
    run, log = pull(api, sub["id"])
    assert run["status"] == "succeeded", log
    assert "added: new.js" in log and "changed: jd_bean.js" in log
    assert "removed: loon.sh" in log
    tasks = tasks_by_command(api)
    assert tasks["task me/jd_bean.js"]["schedule"] == "20 7 * * *"
    assert tasks["task me/sign.py"]["schedule"] == "5 5 * * *"  # the user's, kept
    assert "task me/loon.sh" not in tasks  # vanished: deleted (the default)
    assert tasks["task me/new.js"]["name"] == "新的"
    last = api.get(f"{API}/{sub['id']}").json()["last_sync"]
    assert last["added"] == ["new.js"] and last["removed"] == ["loon.sh"]
    assert last["changed"] == ["jd_bean.js"] and last["kept_user_edits"] == ["sign.py"]
    assert not (scripts_of(api) / "loon.sh").exists()


def test_vanished_scripts_are_disabled_when_configured_and_come_back(
        api: TestClient, repo: GitRepo, git_server: GitServer) -> None:
    sub = new_sub(api, git_server.url("repo"), vanished="disable")
    assert pull(api, sub["id"])[0]["status"] == "succeeded"
    repo.remove("loon.sh")
    repo.commit("gone")
    assert pull(api, sub["id"])[0]["status"] == "succeeded"
    assert tasks_by_command(api)["task me/loon.sh"]["enabled"] is False
    repo.write("loon.sh", LOON)
    repo.commit("back")
    assert pull(api, sub["id"])[0]["status"] == "succeeded"
    assert tasks_by_command(api)["task me/loon.sh"]["enabled"] is True


def _assert_failed_unchanged(api: TestClient, sub_id: str, before: dict[str, bytes],
                             reason: str) -> str:
    run, log = pull(api, sub_id)
    assert run["status"] == "failed" and run["exit_code"] == 1, log
    assert reason in log, log
    assert "is unchanged" in log
    assert tree_bytes(scripts_of(api)) == before
    return log


def test_failed_pulls_leave_the_previous_scripts_byte_identical(
        api: TestClient, repo: GitRepo, git_server: GitServer) -> None:
    sub = new_sub(api, git_server.url("repo"))
    assert pull(api, sub["id"])[0]["status"] == "succeeded"
    before = tree_bytes(scripts_of(api))
    tasks_before = tasks_by_command(api)
    # Something new upstream that a failed pull must not bring in.
    repo.write("jd_bean.js", "changed\n")
    repo.commit("upstream change")
    sid = sub["id"]

    assert api.patch(f"{API}/{sid}", json={"branch": "nope"}).status_code == 200
    _assert_failed_unchanged(api, sid, before, "the repository has no branch 'nope'")
    api.patch(f"{API}/{sid}", json={"branch": "main", "secret": "wrong"})
    _assert_failed_unchanged(api, sid, before, "refused the credentials (HTTP 401)")
    api.patch(f"{API}/{sid}", json={"secret": SECRET,
                                   "url": f"http://127.0.0.1:{_closed_port()}/repo"})
    _assert_failed_unchanged(api, sid, before, "is unreachable")
    # back to the server's origin: the credential is given again (an origin change
    # drops it, test_a_url_to_another_origin_drops_the_credential)
    api.patch(f"{API}/{sid}", json={"url": git_server.url("repo"), "secret": SECRET})
    repo.write("big.bin.js", os.urandom(200_000))
    repo.commit("big")
    r = api.patch(f"{API}/{sid}", json={"caps": {"repo_bytes": 50_000}})
    assert r.status_code == 200, r.text
    _assert_failed_unchanged(api, sid, before, "larger than the cap of 50000 bytes")
    api.patch(f"{API}/{sid}", json={"caps": {"repo_bytes": 1 << 20, "file_bytes": 100_000}})
    _assert_failed_unchanged(api, sid, before, "big.bin.js is larger than 100000 bytes")
    assert tasks_by_command(api) == tasks_before  # a failed pull touches no task

    api.patch(f"{API}/{sid}", json={"caps": {"file_bytes": 1 << 20}})
    run, log = pull(api, sid)  # and a good pull afterwards still works
    assert run["status"] == "succeeded", log
    assert (scripts_of(api) / "jd_bean.js").read_bytes() == b"changed\n"


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_credentials_never_leave_through_api_events_logs_or_receipts(
        api: TestClient, git_server: GitServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    # as `qledge serve` sets it (test_debug_logging_never_prints_sql_parameters)
    caplog.set_level("INFO", logger="aiosqlite")
    sub = new_sub(api, git_server.url("repo"), sub_before="env; echo before")
    run, log = pull(api, sub["id"])
    assert run["status"] == "succeeded", log
    assert "before" in log and "QL_PULL_SPEC" not in log  # the hook's env is clean
    rt = api.app.state.runtime  # type: ignore[attr-defined]
    seen = [log, api.get(API).text, api.get(f"{API}/{sub['id']}").text,
            api.get("/api/v1/tasks").text, api.get("/api/v1/runs").text,
            api.get(f"/api/v1/runs/{run['id']}").text,
            api.get(f"/api/v1/runs/{run['id']}/events").text,
            api.patch(f"{API}/{sub['id']}", json={"name": "renamed"}).text]
    for root in (rt.settings.receipts_path, rt.settings.logs_path):
        seen += [p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*")
                 if p.is_file()]
    seen += [r.getMessage() for r in caplog.records]  # the worker's own log
    assert all(SECRET not in text for text in seen)


def test_validation_names_the_field(api: TestClient) -> None:
    base = {"name": "n", "type": "git", "url": "https://example.com/r.git", "alias": "a"}
    cases = [({"url": "ssh://git@example.com/r"}, "url"),
             ({"url": "https://u:p@example.com/r"}, "url"),
             ({"alias": "../x"}, "alias"), ({"alias": ".hidden"}, "alias"),
             ({"type": "svn"}, "type"), ({"schedule": "61 * * * *"}, "schedule"),
             ({"schedule": "@every 30s"}, "schedule"), ({"schedule": "@every 32d"}, "schedule"),
             ({"whitelist": "("}, "whitelist"), ({"extensions": ["j s"]}, "extensions"),
             ({"vanished": "keep"}, "vanished"), ({"branch": "a..b"}, "branch"),
             ({"caps": {"files": 0}}, "caps.files"), ({"secret": "a\nb"}, "secret")]
    for extra, field in cases:
        r = api.post(API, json={**base, **extra})
        assert r.status_code == 422, (extra, r.text)
        assert r.json()["field"] == field, (extra, r.json())
        assert "a\nb" not in r.text
    assert api.post(API, json=base).status_code == 201
    r = api.post(API, json=base)
    assert r.status_code == 422 and r.json()["field"] == "alias"


def test_a_hand_made_folder_is_not_taken_over(api: TestClient) -> None:
    scripts_of(api, "mine").mkdir(parents=True)
    r = api.post(API, json={"name": "n", "type": "git", "url": "https://example.com/r",
                            "alias": "mine"})
    assert r.status_code == 422 and r.json()["field"] == "alias", r.text


def test_the_pull_is_a_scheduled_task_that_follows_its_subscription(api: TestClient) -> None:
    sub = new_sub(api, "https://example.com/r", schedule="0 */6 * * *")
    task = api.get(f"/api/v1/tasks/{sub['pull_task_id']}").json()
    assert task["schedule"] == "0 */6 * * *" and task["enabled"] is True
    assert sub["id"] in task["command"] and SECRET not in task["command"]
    assert task["env"] == {}
    api.patch(f"{API}/{sub['id']}", json={"enabled": False, "schedule": "0 1 * * *"})
    task = api.get(f"/api/v1/tasks/{sub['pull_task_id']}").json()
    assert task["schedule"] == "0 1 * * *" and task["enabled"] is False
    # an interval: the pull task gets it as its schedule (docs/tasks.md, "Schedules")
    r = api.patch(f"{API}/{sub['id']}", json={"enabled": True, "schedule": "@every 360m"})
    assert r.status_code == 200 and r.json()["schedule"] == "@every 6h", r.text
    task = api.get(f"/api/v1/tasks/{sub['pull_task_id']}").json()
    assert task["schedule"] == "@every 6h"
    assert task["next_fire_at_ms"] == task["updated_at_ms"] + 6 * 3_600_000
    assert api.delete(f"{API}/{sub['id']}").status_code == 204
    assert api.get(f"/api/v1/tasks/{sub['pull_task_id']}").status_code == 404


@pytest.mark.parametrize(("url", "https"), [
    ("git@github.com:owner/repo.git", "https://github.com/owner/repo.git"),
    ("ssh://git@gitea.lan:2222/me/scripts.git", "https://gitea.lan/me/scripts.git"),
])
def test_ssh_urls_are_refused_naming_the_https_one(api: TestClient, url: str,
                                                   https: str) -> None:
    r = api.post(API, json={"name": "n", "type": "git", "url": url, "alias": "s"})
    assert r.status_code == 422 and r.json()["field"] == "url", r.text
    assert "SSH URLs are not supported" in r.json()["message"]
    assert https in r.json()["message"]


def _pull_pids(sub_id: str) -> list[int]:
    """The pull processes of this subscription (its python, the launcher's child: the
    launcher's own argv holds the same words after `--`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"subscription" in argv and b"pull" in argv and sub_id.encode() in argv \
                and b"--attempt-id" not in argv:
            pids.append(int(entry))
    return pids


def test_kill_9_mid_fetch_leaves_the_scripts_and_the_next_pull_cleans_up(
        api: TestClient, repo: GitRepo, git_server: GitServer) -> None:
    sub = new_sub(api, git_server.url("repo"))
    assert pull(api, sub["id"])[0]["status"] == "succeeded"
    before = tree_bytes(scripts_of(api))
    repo.write("jd_bean.js", "changed\n")
    repo.write("pad.js", os.urandom(300_000))  # a pack of several chunks
    repo.commit("more")
    git_server.stall = True
    r = api.post(f"{API}/{sub['id']}/pull")
    assert r.status_code == 202
    run_id = r.json()["run_id"]
    assert git_server.stalled.wait(30), "the pull never reached the pack"
    staging = scripts_of(api).parent.parent / ".subscriptions"
    assert [p.name for p in staging.iterdir() if p.name.startswith("me.pull-")]
    pids = _pull_pids(sub["id"])
    assert len(pids) == 1, pids
    os.kill(pids[0], 9)
    git_server.stall = False
    git_server.release.set()
    deadline = time.monotonic() + 30
    while not (run := api.get(f"/api/v1/runs/{run_id}").json())["terminal"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert run["status"] != "succeeded", run
    assert tree_bytes(scripts_of(api)) == before
    while (api.get(f"{API}/{sub['id']}").json()["last_sync"] or {}).get("run_id") != run_id:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    last = api.get(f"{API}/{sub['id']}").json()["last_sync"]
    assert last["status"] == run["status"] and "added" not in last  # no task touched
    run, log = pull(api, sub["id"])
    assert run["status"] == "succeeded", log
    assert (scripts_of(api) / "jd_bean.js").read_bytes() == b"changed\n"
    assert not [p for p in staging.iterdir() if p.name.startswith("me.pull-")]


def test_enospc_during_the_fetch_leaves_the_scripts(tmp_path: Path, repo: GitRepo,
                                                     git_server: GitServer) -> None:
    import subprocess

    from support import unavailable

    if os.geteuid() != 0:
        unavailable("the ENOSPC drill needs root to mount a small tmpfs")
    work = tmp_path / "work"
    work.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(work)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        with _client(tmp_path / "state", work_dir=str(work)) as api:
            sub = new_sub(api, git_server.url("repo"))
            assert pull(api, sub["id"])[0]["status"] == "succeeded"
            before = tree_bytes(scripts_of(api))
            repo.write("jd_bean.js", "changed\n")
            repo.write("big.js", os.urandom(3 << 20))  # within the caps, not the disk
            repo.commit("big")
            _assert_failed_unchanged(api, sub["id"], before, "no space left on device")
            tasks = tasks_by_command(api)
            assert "task me/big.js" not in tasks
    finally:
        subprocess.run(["umount", "-l", str(work)], check=False)


def test_a_pull_that_ended_before_a_restart_is_kept_in_step_after_it(
        tmp_path: Path, git_server: GitServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from qledge.runtime.subscriptions import Syncer

    async def stalled_round(self: Syncer) -> None:
        return None  # this worker "dies" before its sync round

    state = tmp_path / "state"
    with monkeypatch.context() as m:
        m.setattr(Syncer, "round", stalled_round)
        with _client(state) as api:
            sub = new_sub(api, git_server.url("repo"))
            run_id = api.post(f"{API}/{sub['id']}/pull").json()["run_id"]
            deadline = time.monotonic() + 60
            while not (run := api.get(f"/api/v1/runs/{run_id}").json())["terminal"]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert run["status"] == "succeeded"
            got = api.get(f"{API}/{sub['id']}").json()
            assert got["sync_pending"] is True and got["last_run_id"] == run_id
            assert "task me/jd_bean.js" not in tasks_by_command(api)
    with _client(state) as api:
        deadline = time.monotonic() + 30
        while (api.get(f"{API}/{sub['id']}").json()["last_sync"] or {}).get("run_id") != run_id:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert api.get(f"{API}/{sub['id']}").json()["sync_pending"] is False
        assert tasks_by_command(api)["task me/jd_bean.js"]["schedule"] == "10 7 * * *"


def test_a_raw_file_subscription_pulls_one_script(api: TestClient) -> None:
    import threading
    from wsgiref.simple_server import make_server

    body = {"/raw/daily.js": b"// cron: 15 8 * * *\nconst $ = new Env('daily');\n"}

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        data = body.get(environ["PATH_INFO"])
        start_response("200 OK" if data else "404 Not Found", [])
        return [data or b""]

    srv = make_server("127.0.0.1", 0, app)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        r = api.post(API, json={"name": "one", "type": "file", "url": f"{base}/raw/daily.js",
                                "alias": "me"})
        assert r.status_code == 201, r.text
        sub = r.json()
        run, log = pull(api, sub["id"])
        assert run["status"] == "succeeded", log
        assert tree_bytes(scripts_of(api)) == {"daily.js": body["/raw/daily.js"]}
        task = tasks_by_command(api)["task me/daily.js"]
        assert (task["schedule"], task["name"]) == ("15 8 * * *", "daily")
        api.patch(f"{API}/{sub['id']}", json={"url": f"{base}/raw/gone.js"})
        before = tree_bytes(scripts_of(api))
        _assert_failed_unchanged(api, sub["id"], before, "answered HTTP 404")
    finally:
        srv.shutdown()
        srv.server_close()


def test_debug_logging_never_prints_sql_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """QLEDGE_LOG_LEVEL=DEBUG must not turn on aiosqlite's statement log, which prints
    each statement's parameters (a subscription's secret, env values)."""
    import logging

    from qledge.cli import output as cli

    sql, root = logging.getLogger("aiosqlite"), logging.getLogger()
    levels = sql.level, root.level
    monkeypatch.setenv("QLEDGE_LOG_LEVEL", "DEBUG")
    try:
        sql.setLevel(logging.NOTSET)
        root.setLevel(logging.DEBUG)  # what basicConfig sets on a fresh process
        cli.setup_logging()
        assert not sql.isEnabledFor(logging.DEBUG)
    finally:
        sql.setLevel(levels[0])
        root.setLevel(levels[1])


# -- issue 35: hardening -----------------------------------------------------------------

def _served(tmp_path: Path, files: dict[str, str]) -> tuple[GitRepo, GitServer]:
    repo = GitRepo(tmp_path / "origin" / "other")
    for rel, text in files.items():
        repo.write(rel, text)
    repo.commit("first")
    return repo, GitServer({"other": repo.path})


def test_a_dependence_file_with_a_cron_header_never_gets_a_task(api: TestClient,
                                                                 tmp_path: Path) -> None:
    notify = "// cron: 1 1 * * *\nmodule.exports = { send() {} }\n"
    daily = "// cron: 2 2 * * *\nrequire('./sendNotify')\n"
    _, srv = _served(tmp_path, {"sendNotify.js": notify, "daily.js": daily})
    try:
        sub = new_sub(api, srv.url("other"), blacklist="", dependences="sendNotify",
                      username=None, secret=None)
        run, log = pull(api, sub["id"])
        assert run["status"] == "succeeded", log
        assert set(tree_bytes(scripts_of(api))) == {"sendNotify.js", "daily.js"}  # copied
        tasks = tasks_by_command(api)
        assert "task me/daily.js" in tasks
        assert "task me/sendNotify.js" not in tasks  # a library: never scheduled
        assert api.get(f"{API}/{sub['id']}").json()["last_sync"]["added"] == ["daily.js"]
    finally:
        srv.close()


def test_names_the_scripts_tree_hides_never_get_tasks(api: TestClient, tmp_path: Path) -> None:
    header = "// cron: 3 3 * * *\n"
    _, srv = _served(tmp_path, {"ok.js": header, "node_modules/lib/index.js": header,
                                "deep/node_modules/x.js": header,
                                ".qledge-tmp-abc.js": header, "lib/.qledge-tmp-1/y.js": header})
    try:
        sub = new_sub(api, srv.url("other"), blacklist="", dependences="",
                      username=None, secret=None)
        run, log = pull(api, sub["id"])
        assert run["status"] == "succeeded", log
        assert [c for c in tasks_by_command(api) if c.startswith("task me/")] == ["task me/ok.js"]
        assert set(tree_bytes(scripts_of(api))) == {"ok.js"}  # neither script nor dependence
    finally:
        srv.close()


def test_a_url_to_another_origin_drops_the_credential(api: TestClient,
                                                      git_server: GitServer) -> None:
    sub = new_sub(api, git_server.url("repo"))
    sid = sub["id"]
    # Same origin (scheme, host, port), another path: the credential stays.
    r = api.patch(f"{API}/{sid}", json={"url": git_server.url("repo") + "/"})
    assert r.status_code == 200 and r.json()["has_secret"] is True, r.text
    elsewhere = PageServer()
    try:
        r = api.patch(f"{API}/{sid}", json={"url": elsewhere.url("repo")})
        assert r.status_code == 200 and r.json()["has_secret"] is False, r.text
        run, log = pull(api, sid)
        assert run["status"] == "failed", log
        assert elsewhere.authorizations and not any(elsewhere.authorizations)
        # Given again with the new URL, it is kept (and goes to the origin it was given for).
        r = api.patch(f"{API}/{sid}", json={"url": git_server.url("repo"), "secret": SECRET})
        assert r.status_code == 200 and r.json()["has_secret"] is True, r.text
        assert pull(api, sid)[0]["status"] == "succeeded"
        # http → https on the same host and port is another origin too.
        https = git_server.url("repo").replace("http://", "https://")
        assert api.patch(f"{API}/{sid}", json={"url": https}).json()["has_secret"] is False
    finally:
        elsewhere.close()


def test_a_url_that_is_a_web_page_says_so_with_a_code(api: TestClient) -> None:
    page = PageServer()
    try:
        sub = new_sub(api, page.url("owner/project"), username=None, secret=None)
        run, log = pull(api, sub["id"])
        assert run["status"] == "failed" and run["exit_code"] == 1, log
        last = log.strip().splitlines()[-1]
        assert last.startswith("pull failed (SUB_NOT_GIT): "), last
        assert "did not answer as a git repository" in last and "clone URL" in last
        assert "ValueError" not in log
    finally:
        page.close()


def test_the_worker_never_runs_a_subscriptions_patterns(api: TestClient,
                                                        tmp_path: Path) -> None:
    """`^(a+)+$` takes exponential time in `re`: against this name about five seconds
    (each further `a` doubles it). The pull process pays it (a launched task, under its
    timeout); the worker's sync only reads what the pull kept, so it never stalls."""
    evil = "a" * 27 + "!.js"
    _, srv = _served(tmp_path, {"ok.js": "// cron: 4 4 * * *\n", evil: "// cron: 5 5 * * *\n"})
    try:
        # `!` makes the slow name a script: kept, so the sync meets it too.
        sub = new_sub(api, srv.url("other"), whitelist="^(a+)+$|!|ok", blacklist="",
                      dependences="", username=None, secret=None)
        run_id = api.post(f"{API}/{sub['id']}/pull").json()["run_id"]
        deadline = time.monotonic() + 120
        worst, last = 0.0, time.monotonic()
        while (api.get(f"{API}/{sub['id']}").json()["last_sync"] or {}).get("run_id") != run_id:
            assert api.get("/healthz").status_code == 200
            now = time.monotonic()
            worst, last = max(worst, now - last), now
            assert now < deadline
            time.sleep(0.02)
        assert api.get(f"/api/v1/runs/{run_id}").json()["status"] == "succeeded"
        assert worst < 2.0, f"the worker stalled for {worst:.1f} s"
        from qledge.scripts.meta import task_command

        mine = {c for c in tasks_by_command(api) if c.startswith(("task me/", "task 'me/"))}
        assert mine == {task_command(f"me/{evil}"), "task me/ok.js"}
    finally:
        srv.close()


def test_a_compression_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    """256 MiB of zeros packs into ~130 KiB; the pull must refuse it from the pack's
    headers instead of inflating it (which took more than twice its size in memory)."""
    import subprocess
    import sys

    from qledge.subscriptions.spec import ENV_NAME, Caps, PullSpec, encode

    repo = GitRepo(tmp_path / "origin" / "bomb")
    repo.write("ok.js", "// cron: 1 1 * * *\n")
    with open(repo.path / "zeros.js", "wb") as f:
        f.truncate(256 << 20)  # sparse: cheap to write and to read
    # Past the threshold git streams the blob straight into a pack: no repack needed,
    # and `git http-backend` sends it as stored.
    repo.git("-c", "core.bigFileThreshold=1m", "add", "-A")
    repo.git("commit", "-q", "-m", "bomb")
    work = tmp_path / "work"
    work.mkdir()
    srv = GitHttpBackend(tmp_path / "origin")
    try:
        spec = PullSpec(id="bomb", type="git", url=srv.url("bomb"), branch="main",
                        alias="me", scripts_dir=str(work / "scripts"),
                        staging_dir=str(work / ".subscriptions"), caps=Caps(timeout_s=60))
        # The pull runs as a child of a small wrapper that reports its children's peak
        # RSS: a direct child of pytest would count the pytest process it was forked
        # from (hundreds of MB late in a full run) as its own peak.
        wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
                   "print('maxrss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
                   " sys.exit(r.returncode)")
        done = subprocess.run(
            [sys.executable, "-c", wrapper,
             sys.executable, "-I", "-m", "qledge", "subscription", "pull", "bomb"],
            env={"PATH": "/usr/bin:/bin", "HOME": str(work), ENV_NAME: encode(spec)},
            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        out, _, maxrss = done.stdout.decode().rpartition("maxrss ")
    finally:
        srv.close()
    assert int(maxrss) < 128 << 10, f"peak RSS {maxrss} KiB: {out}"
    assert done.returncode == 1, out
    assert "pull failed (SUB_REPO_TOO_LARGE)" in out and "once unpacked" in out, out
    assert not (work / "scripts" / "me").exists()


def _set_command(client: TestClient, task_id: str, command: str) -> None:
    """A row changed outside the APIs (an earlier version let them edit it)."""
    from qledge.clock import now_ms
    from qledge.db import tasks

    rt = client.app.state.runtime  # type: ignore[attr-defined]

    async def edit() -> None:
        async with rt.db.write() as tx:
            await tasks.update_task(tx, task_id, TaskFields(command=command), now_ms())

    client.portal.call(edit)  # type: ignore[attr-defined]


def _run_task(client: TestClient, task_id: str) -> tuple[dict[str, Any], str]:
    r = client.post(f"/api/v1/tasks/{task_id}/runs")
    assert r.status_code in (201, 202), r.text
    run_id = r.json()["run"]["id"]
    deadline = time.monotonic() + 60
    while not (run := client.get(f"/api/v1/runs/{run_id}").json())["terminal"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return run, client.get(f"/api/v1/runs/{run_id}/log").text


def test_the_pull_task_cannot_be_borrowed_for_its_secret(tmp_path: Path,
                                                         git_server: GitServer) -> None:
    state = tmp_path / "state"
    with _client(state) as api:
        sub = new_sub(api, git_server.url("repo"))
        task_id = sub["pull_task_id"]
        num = api.get(f"/api/v1/tasks/{task_id}").json()["num"]
        crons = token(api, ["crons"])
        steal = "printenv QL_PULL_SPEC; echo borrowed"
        r = api.put("/open/crons", json={"id": num, "command": steal}, headers=crons)
        assert r.status_code == 409 and "cannot be changed" in r.json()["message"], r.text
        r = api.patch(f"/api/v1/tasks/{task_id}", json={"command": steal})
        assert r.status_code == 409, r.text
        assert (r.json()["error"], r.json()["field"]) == ("SYSTEM_TASK", "command")
        r = api.patch(f"/api/v1/tasks/{task_id}", json={"env": {"PYTHONPATH": "/tmp"}})
        assert r.status_code == 409 and r.json()["field"] == "env", r.text
        assert api.put("/open/crons", json={"id": num, "name": "mine"},
                       headers=crons).status_code == 200  # the rest stays editable

        # However the command changed: it runs without the spec.
        _set_command(api, task_id, steal)
        run, log = _run_task(api, task_id)
        assert "borrowed" in log and SECRET not in log and "QL_PULL_SPEC" not in log

        # A `qledge` package planted in the work dir (every task can write there) is
        # not what the pull runs (-I: the working directory is not on sys.path).
        planted = api.app.state.runtime.settings.work_path / "qledge"  # type: ignore[attr-defined]
        planted.mkdir()
        (planted / "__init__.py").write_text("")
        (planted / "__main__.py").write_text(
            "import os\nprint('planted', os.environ.get('QL_PULL_SPEC'))\n")
        # An earlier version's command (no -I) is set right at the next start.
        old = api.get(f"/api/v1/tasks/{task_id}").json()["command"].replace(" -I ", " ")
        _set_command(api, task_id, old)
    with _client(state) as api:
        assert " -I -m qledge subscription pull " in \
            api.get(f"/api/v1/tasks/{task_id}").json()["command"]
        run, log = pull(api, sub["id"])
        assert run["status"] == "succeeded", log
        assert "planted" not in log and SECRET not in log


def test_loader_variables_of_the_global_envs_skip_a_launch_with_a_secret(
        api: TestClient, git_server: GitServer) -> None:
    """An `envs` token sets LD_PRELOAD for every task: the loader would run its library
    in the pull before the pull scrubs its spec. Ordinary tasks still get it."""
    missing = "/nonexistent/qledge-preload.so"
    r = api.post("/api/v1/envs", json={"name": "LD_PRELOAD", "value": missing})
    assert r.status_code in (200, 201), r.text
    r = api.post("/api/v1/tasks", json={"name": "plain", "command": "echo plain"})
    assert r.status_code == 201, r.text
    _, log = _run_task(api, r.json()["id"])
    assert missing in log  # the loader tried it: the variable reached the task
    sub = new_sub(api, git_server.url("repo"))
    run, log = pull(api, sub["id"])
    assert run["status"] == "succeeded", log
    assert missing not in log


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _object(kind: int, size: int, body: bytes, prefix: bytes = b"") -> bytes:
    head, size = bytearray([(kind << 4) | (size & 0x0F)]), size >> 4
    while size:
        head[-1] |= 0x80
        head.append(size & 0x7F)
        size >>= 7
    import zlib

    return bytes(head) + prefix + zlib.compress(body)


def _pack(*objects: bytes) -> Any:
    import io

    data = b"PACK" + (2).to_bytes(4, "big") + len(objects).to_bytes(4, "big")
    return io.BytesIO(data + b"".join(objects) + b"\0" * 20)


def test_pack_objects_are_sized_before_they_are_inflated(tmp_path: Path) -> None:
    """What a pack claims is not trusted: a header that under-states its object, a
    delta whose copies (one byte for 64 KiB) write past its target, a target past
    the cap — each refused in 64 KiB steps. A real pack with deltas passes."""
    import subprocess

    from qledge.subscriptions._fetch import check_pack
    from qledge.subscriptions.spec import PullError

    def refused(pack: Any, limit: int) -> str:
        with pytest.raises(PullError) as info:
            check_pack(pack, limit)
        return info.value.code

    zeros = bytes(1 << 20)
    assert refused(_pack(_object(3, 10, zeros)), 64 << 10) == "SUB_REPO_TOO_LARGE"
    assert refused(_pack(_object(3, 10, zeros)), 8 << 20) == "SUB_BAD_PACK"
    assert refused(_pack(_object(3, 8 << 20, b"")), 1 << 20) == "SUB_REPO_TOO_LARGE"
    base = _object(3, 10, b"0123456789")
    bomb = _varint(10) + _varint(100) + b"\x80" * 10_000  # 10 000 copies of 64 KiB
    delta = _object(6, len(bomb), bomb, prefix=_varint(len(base)))
    assert refused(_pack(base, delta), 8 << 20) == "SUB_BAD_PACK"
    big = _varint(10) + _varint(2 << 20) + b"\x80" * 32
    delta = _object(7, len(big), big, prefix=b"\x11" * 20)
    assert refused(_pack(base, delta), 1 << 20) == "SUB_REPO_TOO_LARGE"

    repo = GitRepo(tmp_path / "real")
    for i in range(3):
        repo.write(f"f{i}.js", "".join(f"line {n}\n" for n in range(5000)) + f"// {i}\n")
    repo.commit("similar files: deltas")
    objects = repo.git("rev-list", "--objects", "--all")
    pack = subprocess.run(["git", "pack-objects", "--stdout", "--delta-base-offset"],
                          cwd=repo.path, input=objects.encode(), capture_output=True,
                          check=True).stdout
    import io

    check_pack(io.BytesIO(pack), 1 << 20)
