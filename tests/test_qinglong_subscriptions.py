"""QingLong's /open/subscriptions shapes end to end: a QingLong client creates, lists,
runs, edits, disables and deletes a subscription of a real repository served on
loopback (dulwich's smart HTTP behind basic auth); pulls are real runs under the
launcher. QingLong's field names map to the native ones; the password never comes
back; what qledge cannot do is refused with 400 (docs/qinglong-compat.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from _git_server import GitRepo, GitServer

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

SECRET = "tok3n-N0T-to-leak-9f2c"
OPEN = "/open/subscriptions"


def token(client: TestClient, scopes: list[str]) -> dict[str, str]:
    """Headers with a token of a new app holding these scopes."""
    r = client.post("/api/v1/apps", json={"name": "-".join(scopes), "scopes": scopes})
    assert r.status_code == 201, r.text
    app = r.json()
    r = client.get("/open/auth/token", params={"client_id": app["client_id"],
                                               "client_secret": app["client_secret"]})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['data']['token']}"}


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    r = GitRepo(tmp_path / "origin" / "repo")
    r.write("a.js", "// cron: 1 9 * * *\nconst $ = new Env('甲');\n")
    r.write("b.py", "# cron: 2 9 * * *\nprint('b')\n")
    r.write("lib/u.js", "module.exports = {}\n")
    r.commit("first")
    return r


@pytest.fixture
def git_server(repo: GitRepo) -> Iterator[GitServer]:
    srv = GitServer({"repo": repo.path}, auth=("u", SECRET))
    yield srv
    srv.close()


@pytest.fixture
def ql(client: TestClient) -> tuple[TestClient, dict[str, str]]:
    return client, token(client, ["subscriptions"])


def ok(r: Any) -> Any:
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["code"] == 200, body
    assert SECRET not in r.text
    return body.get("data")


def refused(r: Any, status: int, *words: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["code"] == status, body
    assert SECRET not in r.text
    for word in words:
        assert word in body["message"], body
    return str(body["message"])


def body_of(repo_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": "mine", "type": "private-repo", "url": repo_url, "branch": "main",
            "alias": "me", "schedule_type": "interval",
            "interval_schedule": {"type": "hours", "value": 6}, "whitelist": "",
            "blacklist": "", "dependences": "^lib/", "extensions": "js py",
            "pull_type": "user-pwd", "pull_option": {"username": "u", "password": SECRET},
            "sub_before": "", "sub_after": "", "proxy": "", "autoAddCron": True,
            "autoDelCron": True, **extra}


def pulled(c: TestClient, qledge_id: str, after: str | None = None,
           timeout: float = 60) -> dict[str, Any]:
    """Wait for a pull newer than `after` to end and be kept in step; its last_sync."""
    deadline = time.monotonic() + timeout
    while True:
        sub = c.get(f"/api/v1/subscriptions/{qledge_id}").json()
        last = sub["last_sync"]
        if last and last["run_id"] == sub["last_run_id"] and last["run_id"] != after:
            return dict(last)
        assert time.monotonic() < deadline, sub
        time.sleep(0.05)


def test_a_qinglong_client_manages_a_subscription_of_a_real_repository(
        ql: tuple[TestClient, dict[str, str]], git_server: GitServer) -> None:
    c, h = ql
    sub = ok(c.post(OPEN, json=body_of(git_server.url("repo")), headers=h))
    num = sub["id"]
    assert isinstance(num, int) and num >= 1
    assert (sub["schedule_type"], sub["schedule"], sub["interval_schedule"]) == \
        ("interval", None, {"type": "hours", "value": 6})
    assert sub["type"] == "private-repo" and sub["pull_type"] == "user-pwd"
    assert sub["pull_option"] == {"username": "u"} and sub["has_secret"] is True
    assert (sub["extensions"], sub["autoAddCron"], sub["autoDelCron"]) == ("js py", 1, 1)
    assert (sub["status"], sub["is_disabled"], sub["alias"]) == (1, 0, "me")
    native = c.get(f"/api/v1/subscriptions/{sub['qledge_id']}").json()
    assert native["schedule"] == "@every 6h" and native["num"] == num
    pull_task = c.get(f"/api/v1/tasks/{native['pull_task_id']}").json()
    assert pull_task["schedule"] == "@every 6h" and pull_task["enabled"] is True

    # list (searchValue on name or URL, ids), one, and its log before any pull
    assert [s["id"] for s in ok(c.get(OPEN, params={"searchValue": "min"}, headers=h))] == [num]
    assert [s["id"] for s in ok(c.get(OPEN, params={"searchValue": "127.0.0.1"},
                                      headers=h))] == [num]
    assert ok(c.get(f"{OPEN}/", params={"searchValue": "nothing"}, headers=h)) == []
    assert [s["id"] for s in ok(c.get(OPEN, params={"ids": f"[{num}]"}, headers=h))] == [num]
    assert ok(c.get(OPEN, params={"ids": f"[{num + 1}]"}, headers=h)) == []
    assert ok(c.get(f"{OPEN}/{num}", headers=h))["name"] == "mine"
    r = c.get(f"{OPEN}/{num}/log", headers=h)
    assert r.json() == {"code": 200, "data": "", "logStatus": "notFound"}

    # run: a real pull, its log, the tasks it made
    ok(c.put(f"{OPEN}/run", json=[num], headers=h))
    first = pulled(c, sub["qledge_id"])
    assert first["status"] == "succeeded" and sorted(first["added"]) == ["a.js", "b.py"]
    r = c.get(f"{OPEN}/{num}/log", headers=h)
    assert r.json()["logStatus"] == "completed" and "added: a.js" in r.json()["data"]
    assert SECRET not in r.text
    tasks = {t["command"]: t for t in c.get("/api/v1/tasks").json()["items"]}
    assert tasks["task me/a.js"]["schedule"] == "1 9 * * *"
    after_run = ok(c.get(f"{OPEN}/{num}", headers=h))
    assert after_run["status"] == 1 and after_run["log_path"].endswith(".log")
    assert after_run["last_execution_time"] > 0

    # update like QingLong's panel: the whole form, the password left out (kept)
    edited = ok(c.put(OPEN, json={**body_of(git_server.url("repo")), "id": num,
                                  "name": "renamed", "schedule_type": "crontab",
                                  "schedule": "0 */6 * * *", "interval_schedule": None,
                                  "pull_option": {"username": "u"}, "autoDelCron": False},
                      headers=h))
    assert (edited["name"], edited["schedule_type"], edited["schedule"]) == \
        ("renamed", "crontab", "0 */6 * * *")
    assert edited["interval_schedule"] is None and edited["autoDelCron"] == 0
    assert edited["has_secret"] is True
    pull_task = c.get(f"/api/v1/tasks/{native['pull_task_id']}").json()
    assert (pull_task["schedule"], pull_task["name"]) == ("0 */6 * * *", "subscription: renamed")
    # a partial update back to an interval; the stored secret still opens the repository
    edited = ok(c.put(OPEN, json={"id": str(num), "schedule_type": "interval",
                                  "interval_schedule": {"type": "minutes", "value": 90}},
                      headers=h))
    assert edited["interval_schedule"] == {"type": "minutes", "value": 90}
    ok(c.put(f"{OPEN}/run", json=[num], headers=h))
    assert pulled(c, sub["qledge_id"], first["run_id"])["status"] == "succeeded"

    # disable / enable follow into the pull task
    ok(c.put(f"{OPEN}/disable", json=[num], headers=h))
    got = ok(c.get(f"{OPEN}/{num}", headers=h))
    assert (got["is_disabled"], got["status"]) == (1, 2)
    assert c.get(f"/api/v1/tasks/{native['pull_task_id']}").json()["enabled"] is False
    ok(c.put(f"{OPEN}/enable", json=[str(num)], headers=h))
    assert ok(c.get(f"{OPEN}/{num}", headers=h))["is_disabled"] == 0
    assert c.get(f"/api/v1/tasks/{native['pull_task_id']}").json()["enabled"] is True

    # delete: force is refused; unknown ids are ignored; the tasks and scripts stay
    refused(c.request("DELETE", OPEN, json=[num], params={"force": "true"}, headers=h),
            400, "force is not supported")
    ok(c.request("DELETE", OPEN, json=[num, num + 50], headers=h))
    refused(c.get(f"{OPEN}/{num}", headers=h), 404, f"subscription {num} not found")
    assert c.get(f"/api/v1/tasks/{native['pull_task_id']}").status_code == 404
    assert "task me/a.js" in {t["command"] for t in c.get("/api/v1/tasks").json()["items"]}
    # a new subscription never gets the deleted one's id
    again = ok(c.post(OPEN, json=body_of(git_server.url("repo"), alias="me2"), headers=h))
    assert again["id"] > num


def test_stop_cancels_a_running_pull_and_delete_waits_for_it(
        ql: tuple[TestClient, dict[str, str]], git_server: GitServer) -> None:
    c, h = ql
    sub = ok(c.post(OPEN, json=body_of(git_server.url("repo"), sub_before="sleep 30",
                                       schedule_type="crontab", schedule=None,
                                       interval_schedule=None), headers=h))
    num = sub["id"]
    assert sub["schedule"] is None and sub["interval_schedule"] is None
    ok(c.put(f"{OPEN}/run", json=[num], headers=h))
    ok(c.put(f"{OPEN}/run", json=[num], headers=h))  # already queued/running: no error
    deadline = time.monotonic() + 30
    while ok(c.get(f"{OPEN}/{num}", headers=h))["status"] != 0:  # running
        assert time.monotonic() < deadline
        time.sleep(0.05)
    refused(c.request("DELETE", OPEN, json=[num], headers=h), 409, "cancel it first")
    ok(c.put(f"{OPEN}/stop", json=[num], headers=h))
    last = pulled(c, sub["qledge_id"], timeout=30)
    assert last["status"] == "cancelled"
    assert ok(c.get(f"{OPEN}/{num}", headers=h))["status"] == 1
    pull_task = c.get(f"/api/v1/subscriptions/{sub['qledge_id']}").json()["pull_task_id"]
    runs = c.get("/api/v1/runs", params={"task_id": pull_task}).json()["items"]
    assert [r["status"] for r in runs] == ["cancelled"]  # an ordinary run, one of them
    settings = c.app.state.runtime.settings  # type: ignore[attr-defined]
    assert not (settings.scripts_path / "me").exists()  # a stopped pull leaves nothing
    ok(c.request("DELETE", OPEN, json=[num], headers=h))


@pytest.mark.parametrize(("change", "words"), [
    ({"pull_type": "ssh-key", "pull_option": {"private_key": SECRET}},
     ("ssh-key is not supported", "no SSH client", "https://")),
    ({"pull_option": {"private_key": SECRET}}, ("ssh-key is not supported",)),
    ({"url": "git@github.com:owner/repo.git"},
     ("SSH URLs are not supported", "https://github.com/owner/repo.git")),
    ({"pull_type": "token"}, ("pull_type must be user-pwd",)),
    ({"pull_option": {"username": "u", "password": SECRET, "x": 1}},
     ("pull_option must be {username, password}",)),
    ({"pull_type": "user-pwd", "pull_option": None}, ("pull_option {username, password}",)),
    ({"proxy": "http://proxy:8080"}, ("proxy is not supported",)),
    ({"schedule_type": "weekly"}, ("schedule_type must be crontab or interval",)),
    ({"interval_schedule": {"type": "seconds", "value": 30}},
     ("interval_schedule: an interval must be at least 60 s", "*/30 * * * * *")),
    ({"interval_schedule": {"type": "weeks", "value": 1}}, ("type must be one of",)),
    ({"interval_schedule": "6h"}, ("interval_schedule must be {type, value}",)),
    ({"schedule_type": "crontab", "schedule": "61 * * * *"}, ("minute field '61'",)),
    ({"type": "svn"}, ("type must be git or file",)),
    ({"alias": "../x"}, ("alias must be one folder name",)),
    ({"autoAddCron": "maybe"}, ("autoAddCron must be true or false",)),
    ({"whitelist": "("}, ("whitelist is not a valid regular expression",)),
    ({"unknown": 1}, ("unknown",)),
])
def test_bad_input_is_refused_with_400_and_nothing_saved(
        ql: tuple[TestClient, dict[str, str]], change: dict[str, Any],
        words: tuple[str, ...]) -> None:
    c, h = ql
    refused(c.post(OPEN, json=body_of("https://example.com/r.git", **change), headers=h),
            400, *words)
    assert ok(c.get(OPEN, headers=h)) == []


def test_updates_that_cannot_apply_and_unknown_ids(
        ql: tuple[TestClient, dict[str, str]]) -> None:
    c, h = ql
    sub = ok(c.post(OPEN, json=body_of("https://example.com/r.git", type="public-repo",
                                       pull_type=None, pull_option=None,
                                       autoAddCron=None), headers=h))
    num = sub["id"]
    assert sub["type"] == "public-repo" and sub["pull_option"] is None
    assert sub["autoAddCron"] == 1  # not given: on, as QingLong's form has it
    refused(c.put(OPEN, json={"id": num, "alias": "other"}, headers=h), 400,
            "alias cannot change")
    refused(c.put(OPEN, json={"id": num, "type": "file"}, headers=h), 400,
            "type cannot change")
    refused(c.put(OPEN, json={"id": num + 7, "name": "x"}, headers=h), 404,
            f"subscription {num + 7} not found")
    for action in ("run", "stop", "enable", "disable"):
        refused(c.put(f"{OPEN}/{action}", json=[num, num + 7], headers=h), 404,
                f"subscription {num + 7} not found")
    assert ok(c.get(f"{OPEN}/{num}", headers=h))["is_disabled"] == 0  # nothing done
    refused(c.get(f"{OPEN}/{num + 7}/log", headers=h), 404)
    refused(c.get(OPEN, params={"ids": "[1,"}, headers=h), 400, "ids must be a JSON array")
    # type private-repo ⇔ credentials: adding them turns it private, the password unseen
    got = ok(c.put(OPEN, json={"id": num, "pull_type": "user-pwd",
                               "pull_option": {"username": "bot", "password": SECRET}},
                   headers=h))
    assert got["type"] == "private-repo" and got["pull_option"] == {"username": "bot"}


def test_the_subscriptions_scope_guards_the_calls(client: TestClient) -> None:
    h = token(client, ["crons"])
    refused(client.get(OPEN, headers=h), 403, "subscriptions")
    refused(client.get(OPEN, headers={"Authorization": ""}), 401)
    h = token(client, ["logs"])
    refused(client.get(OPEN, headers=h), 403)
    refused(client.get(f"{OPEN}/1/log", headers=h), 404)  # allowed in, no such subscription


@pytest.mark.parametrize("extra", [
    {},  # the minimal form: no extensions, schedule, pull options …
    {"schedule_type": None, "pull_option": {}, "extensions": None, "whitelist": None,
     "sub_before": None, "autoAddCron": None},
])
def test_a_minimal_form_gets_qinglongs_defaults(
        ql: tuple[TestClient, dict[str, str]], git_server: GitServer,
        extra: dict[str, Any]) -> None:
    """What QingLong's own clients send (issue 35: it was a 500, NOT NULL on
    subscriptions.extensions_json, and nothing saved)."""
    c, h = ql
    body = {"name": "mine", "type": "public-repo", "url": git_server.url("repo"),
            "branch": "main", "alias": "me", **extra}
    sub = ok(c.post(OPEN, json=body, headers=h))
    assert (sub["extensions"], sub["autoAddCron"], sub["autoDelCron"]) == \
        ("js mjs py sh", 1, 1)
    assert (sub["schedule_type"], sub["schedule"], sub["pull_option"]) == \
        ("crontab", None, None)
    assert (sub["whitelist"], sub["sub_before"], sub["is_disabled"]) == ("", "", 0)
    native = c.get(f"/api/v1/subscriptions/{sub['qledge_id']}").json()
    assert native["caps"]["files"] == 2000 and native["vanished"] == "delete"
    assert ok(c.get(f"{OPEN}/{sub['id']}", headers=h))["id"] == sub["id"]
