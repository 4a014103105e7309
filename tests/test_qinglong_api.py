"""The QingLong OpenAPI subset (/open/*) as QingLong clients use it, with plain HTTP.

TestClient tests run the real runtime (runs execute through ql-launch); the
last test drives the real supervised appliance with httpx and also checks the
control-plane output for leaked secrets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from qledge.settings import Settings

from _appliance import Appliance
from support import eventually, free_port, sql

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

ENV_SECRET = "env-v4lue-th4t-must-n0t-leak"

Get = Callable[..., Any]


def make_app(client: TestClient, name: str, scopes: list[str]) -> tuple[str, str]:
    r = client.post("/api/v1/apps", json={"name": name, "scopes": scopes})
    assert r.status_code == 201, r.text
    body = r.json()
    return body["client_id"], body["client_secret"]


def get_token(client: TestClient | httpx.Client, client_id: str, secret: str) -> str:
    r = client.get("/open/auth/token", params={"client_id": client_id, "client_secret": secret})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["code"] == 200 and body["data"]["token_type"] == "Bearer"
    return str(body["data"]["token"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def ql(client: TestClient) -> tuple[TestClient, dict[str, str]]:
    """The client plus headers carrying a token with every supported scope."""
    cid, secret = make_app(client, "all", ["crons", "envs", "logs"])
    return client, bearer(get_token(client, cid, secret))


def poll(fn: Callable[[], Any], until: Callable[[Any], bool], timeout: float = 20) -> Any:
    last: list[Any] = []

    def holds() -> Any:
        last[:] = [fn()]
        return until(last[0]) and (last[0],)

    try:
        return eventually(holds, timeout=timeout, interval=0.05)[0]
    except AssertionError:
        raise AssertionError(f"condition not met in {timeout}s; last value "
                             f"{last[0] if last else None!r}") from None


# -- apps and tokens -------------------------------------------------------------------------

def test_token_exchange_and_its_errors(client: TestClient) -> None:
    cid, secret = make_app(client, "bot", ["crons"])
    listed = client.get("/api/v1/apps").json()["items"]
    assert [(a["name"], a["client_id"], a["scopes"]) for a in listed] == [("bot", cid, ["crons"])]
    assert secret not in client.get("/api/v1/apps").text

    r = client.get("/open/auth/token", params={"client_id": cid, "client_secret": secret})
    body = r.json()
    assert r.status_code == 200 and body["code"] == 200
    assert set(body["data"]) == {"token", "token_type", "expiration"}
    assert abs(body["data"]["expiration"] - (time.time() + 30 * 86400)) < 60
    assert client.get("/api/v1/apps").json()["items"][0]["live_tokens"] == 1

    for params in ({"client_id": cid, "client_secret": secret + "x"},
                   {"client_id": "nobody", "client_secret": secret}):
        r = client.get("/open/auth/token", params=params)
        assert r.status_code == 400 and r.json()["code"] == 400 and r.json()["message"]
        assert "data" not in r.json()
    r = client.get("/open/auth/token", params={"client_id": cid})
    assert r.status_code == 400 and "client_secret" in r.json()["message"]


def test_app_input_is_validated(client: TestClient) -> None:
    for body, field in (({"name": "x", "scopes": ["system"]}, "scopes"),
                        ({"name": "x", "scopes": []}, "scopes"),
                        ({"name": " ", "scopes": ["envs"]}, "name"),
                        ({"scopes": ["envs"]}, "name")):
        r = client.post("/api/v1/apps", json=body)
        assert r.status_code == 422 and r.json()["field"] == field, r.text
    make_app(client, "dup", ["envs"])
    r = client.post("/api/v1/apps", json={"name": "dup", "scopes": ["envs"]})
    assert r.status_code == 409 and r.json()["field"] == "name", r.text
    assert client.post("/api/v1/apps", json={"name": "bot"},
                       headers={"Authorization": ""}).status_code == 401


def test_scopes_expiry_and_revocation(client: TestClient, conf: Settings) -> None:
    cid, secret = make_app(client, "envs-only", ["envs"])
    token = get_token(client, cid, secret)
    assert client.get("/open/envs", headers=bearer(token)).json()["code"] == 200
    r = client.get("/open/crons", headers=bearer(token))
    assert r.status_code == 403 and r.json()["code"] == 403

    for headers in ({"Authorization": ""}, {"Authorization": "Bearer nope"},
                    {"Authorization": f"Basic {token}"}):
        r = client.get("/open/envs", headers=headers)
        assert r.status_code == 401 and r.json()["code"] == 401, headers

    # the admin token works on /open/* with every scope (QingLong accepts its panel login too)
    assert client.get("/open/crons").json()["code"] == 200

    # expiry: the stored deadline is what counts
    sql(conf, "UPDATE app_tokens SET expires_at_ms = ?", (int(time.time() * 1000) - 1,))
    r = client.get("/open/envs", headers=bearer(token))
    assert r.status_code == 401 and "expired" in r.json()["message"]

    # deleting the app revokes its tokens
    fresh = get_token(client, cid, secret)
    assert client.get("/open/envs", headers=bearer(fresh)).status_code == 200
    app_id = client.get("/api/v1/apps").json()["items"][0]["id"]
    assert client.delete(f"/api/v1/apps/{app_id}").status_code == 204
    assert client.get("/open/envs", headers=bearer(fresh)).status_code == 401
    assert client.get("/open/auth/token", params={
        "client_id": cid, "client_secret": secret}).status_code == 400


def test_logs_scope_reads_cron_logs_only(client: TestClient) -> None:
    cid, secret = make_app(client, "logs", ["logs"])
    h = bearer(get_token(client, cid, secret))
    num = client.post("/open/crons", json={"command": "echo hi", "schedule": "0 0 * * *"}
                      ).json()["data"]["id"]
    r = client.get(f"/open/crons/{num}/log", headers=h)
    assert r.status_code == 200 and r.json() == {"code": 200, "data": "",
                                                  "logStatus": "notFound"}
    assert client.get(f"/open/crons/{num}", headers=h).status_code == 403


# -- crons -----------------------------------------------------------------------------------

def test_cron_fields_crud_and_validation(ql: tuple[TestClient, dict[str, str]]) -> None:
    client, h = ql
    r = client.post("/open/crons", headers=h, json={
        "command": "echo one", "schedule": "30 */5 * * * *", "name": "first",
        "labels": ["a"]})
    assert r.status_code == 200, r.text
    cron = r.json()["data"]
    assert r.json()["code"] == 200
    assert isinstance(cron["id"], int) and cron["name"] == "first"
    assert cron["command"] == "echo one" and cron["schedule"] == "30 */5 * * * *"
    assert cron["status"] == 1 and cron["isDisabled"] == 0 and cron["labels"] == ["a"]
    assert cron["last_running_time"] == 0 and cron["last_execution_time"] == 0
    assert cron["pid"] is None and cron["log_path"] == ""
    assert cron["createdAt"].endswith("Z") and cron["updatedAt"].endswith("Z")
    native = client.get(f"/api/v1/tasks/{cron['qledge_id']}").json()
    assert native["num"] == cron["id"] and native["next_fire_at_ms"] is not None

    second = client.post("/open/crons/", headers=h, json={
        "command": "python3 other.py", "schedule": "0 3 * * *",
        "allow_multiple_instances": 1, "task_before": "", "sub_id": None}).json()["data"]
    assert second["name"] == "python3 other.py" and second["allow_multiple_instances"] == 1

    listed = client.get("/open/crons", headers=h).json()["data"]
    assert listed["total"] == 2 and {c["id"] for c in listed["data"]} == {cron["id"],
                                                                         second["id"]}
    page = client.get("/open/crons?page=2&size=1&t=123", headers=h).json()["data"]
    assert page["total"] == 2 and len(page["data"]) == 1
    found = client.get("/open/crons", headers=h, params={"searchValue": "other"}).json()
    assert [c["id"] for c in found["data"]["data"]] == [second["id"]]
    found = client.get("/open/crons", headers=h, params={"searchValue": "label:a"}).json()
    assert [c["id"] for c in found["data"]["data"]] == [cron["id"]]

    r = client.put("/open/crons", headers=h, json={
        "id": cron["id"], "name": "renamed", "command": "echo two", "schedule": "*/2 * * * *"})
    assert r.status_code == 200 and r.json()["data"]["name"] == "renamed"
    detail = client.get(f"/open/crons/{cron['id']}", headers=h).json()["data"]
    assert detail["command"] == "echo two" and detail["schedule"] == "*/2 * * * *"

    assert client.put("/open/crons/disable", headers=h, json=[str(cron["id"])]).json() == \
        {"code": 200}
    detail = client.get(f"/open/crons/{cron['id']}", headers=h).json()["data"]
    assert detail["isDisabled"] == 1 and detail["status"] == 2
    assert client.get(f"/api/v1/tasks/{cron['qledge_id']}").json()["next_fire_at_ms"] is None
    client.put("/open/crons/enable", headers=h, json=[cron["id"]])
    assert client.get(f"/open/crons/{cron['id']}", headers=h).json()["data"]["status"] == 1

    bad = [
        ({"command": "echo", "schedule": "61 * * * *"}, "schedule"),
        ({"command": "echo", "schedule": ""}, "schedule"),
        ({"command": "echo"}, "schedule"),
        ({"schedule": "* * * * *"}, "command"),
        ({"command": " ", "schedule": "* * * * *"}, "command"),
        ({"command": "echo", "schedule": "* * * * *", "extra_schedules": [{"schedule": "x"}]},
         "extra_schedules"),
        ({"command": "echo", "schedule": "* * * * *", "extra_schedules": [{"cron": "x"}]},
         "extra_schedules"),
        ({"command": "echo", "schedule": "* * * * *", "task_before": "echo x"}, "task_before"),
        ({"command": "echo", "schedule": "* * * * *", "bogus": 1}, "bogus"),
    ]
    for body, field in bad:
        r = client.post("/open/crons", headers=h, json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["code"] == 400 and field in r.json()["message"], (body, r.json())
    assert client.put("/open/crons", headers=h, json={"id": 999, "name": "x"}
                      ).status_code == 404
    r = client.put("/open/crons/run", headers=h, json=[999])
    assert r.status_code == 404 and r.json() == {"code": 404, "message": "cron 999 not found"}
    assert client.put("/open/crons/run", headers=h, json=["x"]).status_code == 400
    assert client.get("/open/crons/999", headers=h).json()["code"] == 404

    assert client.request("DELETE", "/open/crons", headers=h,
                          json=[cron["id"], second["id"], 999]).json() == {"code": 200}
    assert client.get("/open/crons", headers=h).json()["data"] == {"data": [], "total": 0}


def test_extra_schedules_special_schedules_and_instances_map_to_native_fields(
        ql: tuple[TestClient, dict[str, str]]) -> None:
    """QingLong's extra_schedules ⇔ task extra_schedules; allow_multiple_instances 1 ⇔
    overlap allow, 0 ⇔ replace (QingLong stops the running instance); @boot/@once."""
    client, h = ql
    made = client.post("/open/crons", headers=h, json={
        "command": "echo", "schedule": "@once", "allow_multiple_instances": 0,
        "extra_schedules": [{"schedule": "0 3 * * *"}, {"schedule": "@boot"}]}).json()["data"]
    assert made["schedule"] == "@once" and made["allow_multiple_instances"] == 0
    assert made["extra_schedules"] == [{"schedule": "0 3 * * *"}, {"schedule": "@boot"}]
    native = client.get(f"/api/v1/tasks/{made['qledge_id']}").json()
    assert (native["overlap"], native["extra_schedules"]) == ("replace", ["0 3 * * *", "@boot"])
    assert native["next_fire_at_ms"] is not None  # from the extra cron schedule
    client.put("/open/crons", headers=h, json={"id": made["id"], "allow_multiple_instances": 1,
                                               "extra_schedules": []})
    native = client.get(f"/api/v1/tasks/{made['qledge_id']}").json()
    assert (native["overlap"], native["extra_schedules"]) == ("allow", [])
    again = client.get(f"/open/crons/{made['id']}", headers=h).json()["data"]
    assert again["allow_multiple_instances"] == 1 and again["extra_schedules"] is None
    plain = client.post("/open/crons", headers=h, json={"command": "echo", "schedule": "@boot"})
    assert plain.json()["data"]["allow_multiple_instances"] == 0
    assert client.get(f"/api/v1/tasks/{plain.json()['data']['qledge_id']}").json()[
        "overlap"] == "skip"  # nothing said: qledge's default


def test_run_poll_log_stop_delete(ql: tuple[TestClient, dict[str, str]]) -> None:
    client, h = ql
    client.post("/open/envs", headers=h, json=[{"name": "MYVAR", "value": ENV_SECRET}])
    num = client.post("/open/crons", headers=h, json={
        "command": 'echo hello-ql; echo "v=$MYVAR"', "schedule": "0 0 1 1 *"}).json()["data"]["id"]
    assert client.put("/open/crons/run", headers=h, json=[num]).json() == {"code": 200}
    done = poll(lambda: client.get(f"/open/crons/{num}", headers=h).json()["data"],
                lambda c: c["status"] == 1 and c["last_execution_time"] > 0)
    assert done["log_path"] and done["pid"] is None
    log = client.get(f"/open/crons/{num}/log", headers=h).json()
    assert log["code"] == 200 and log["logStatus"] == "completed"
    assert log["data"] == f"hello-ql\nv={ENV_SECRET}\n"

    long = client.post("/open/crons", headers=h, json={
        "command": "echo started; sleep 60", "schedule": "0 0 1 1 *"}).json()["data"]
    client.put("/open/crons/run", headers=h, json=[long["id"]])
    running = poll(lambda: client.get(f"/open/crons/{long['id']}", headers=h).json()["data"],
                   lambda c: c["status"] == 0 and c["pid"])
    assert isinstance(running["pid"], int)
    # a stop before the shell's first line would leave an empty log (a loaded machine)
    poll(lambda: client.get(f"/open/crons/{long['id']}/log", headers=h).json()["data"],
         lambda text: text == "started\n")
    # running twice a forbid task is not an error (like QingLong) and starts nothing new
    assert client.put("/open/crons/run", headers=h, json=[long["id"]]).json()["code"] == 200
    # a running cron cannot be deleted
    r = client.request("DELETE", "/open/crons", headers=h, json=[long["id"]])
    assert r.status_code == 409 and r.json()["code"] == 409
    assert client.put("/open/crons/stop", headers=h, json=[long["id"]]).json() == {"code": 200}
    poll(lambda: client.get(f"/open/crons/{long['id']}", headers=h).json()["data"],
         lambda c: c["status"] == 1)
    runs = client.get("/api/v1/runs", params={"task_id": long["qledge_id"]}).json()["items"]
    assert [r["status"] for r in runs] == ["cancelled"]
    assert client.get(f"/open/crons/{long['id']}/log", headers=h).json()["data"] == "started\n"
    assert client.request("DELETE", "/open/crons", headers=h, json=[long["id"], num]
                          ).json() == {"code": 200}


def test_deleting_a_cron_wakes_the_scheduler_and_dates_its_log_deletions(
        ql: tuple[TestClient, dict[str, str]], conf: Settings) -> None:
    """The one delete operation serves /open too: the scheduler drops the schedule at
    once (not when its sleep ends) and the logs' deletion rows carry the time."""
    client, h = ql
    rt = client.app.state.runtime  # type: ignore[attr-defined]
    num = client.post("/open/crons", headers=h, json={
        "command": "echo bye", "schedule": "0 0 1 1 *"}).json()["data"]["id"]
    poll(lambda: rt.scheduler.next_due_ms, lambda due: due is not None)
    client.put("/open/crons/run", headers=h, json=[num])
    poll(lambda: client.get(f"/open/crons/{num}", headers=h).json()["data"],
         lambda c: c["status"] == 1 and c["last_execution_time"] > 0)
    rounds, asked_at_ms = rt.scheduler.rounds, time.time() * 1000
    assert client.request("DELETE", "/open/crons", headers=h, json=[num]).json() == {
        "code": 200}
    # Woken: the next round sees no schedule left (its sleep had ~a minute to go).
    poll(lambda: (rt.scheduler.rounds, rt.scheduler.next_due_ms),
         lambda seen: seen[0] > rounds and seen[1] is None, timeout=5)
    queued = sql(conf, "SELECT created_at_ms FROM file_deletions")
    assert queued and all(at >= asked_at_ms - 1000 for at in queued)


def test_log_is_the_bounded_tail(tmp_path: Path) -> None:
    from qledge.http.app import create_app

    from support import ADMIN, make_settings, migrate_for

    conf = make_settings(tmp_path / "state", log_read_limit="1000")
    migrate_for(conf)
    with TestClient(create_app(conf, ADMIN), headers={"Authorization": f"Bearer {ADMIN}"}) as c:
        num = c.post("/open/crons", json={
            "command": "i=0; while [ $i -lt 300 ]; do echo line-$i-é; i=$((i+1)); done",
            "schedule": "0 0 1 1 *"}).json()["data"]["id"]
        c.put("/open/crons/run", json=[num])
        poll(lambda: c.get(f"/open/crons/{num}").json()["data"], lambda x: x["status"] == 1
             and x["last_execution_time"])
        data = c.get(f"/open/crons/{num}/log").json()["data"]
    assert data.endswith("line-299-é\n") and len(data.encode()) <= 1000
    assert "line-0-" not in data and "\ufffd" not in data


# -- envs ------------------------------------------------------------------------------------

def test_envs_crud_as_qinglong_clients_do_it(ql: tuple[TestClient, dict[str, str]]) -> None:
    client, h = ql
    r = client.post("/open/envs", headers=h, json=[
        {"name": "JD_COOKIE", "value": "c1", "remarks": "first"},
        {"name": "JD_COOKIE", "value": "c2"}])
    assert r.status_code == 200, r.text
    created = r.json()["data"]
    assert [e["value"] for e in created] == ["c1", "c2"]
    first = created[0]
    assert set(first) >= {"id", "name", "value", "remarks", "status", "position", "timestamp",
                          "createdAt", "updatedAt"}
    assert first["status"] == 0 and isinstance(first["id"], int)
    assert created[1]["position"] < first["position"]

    listed = client.get("/open/envs", headers=h, params={"searchValue": "first"}).json()
    assert [e["id"] for e in listed["data"]] == [first["id"]]
    r = client.put("/open/envs", headers=h, json={
        "id": first["id"], "name": "JD_COOKIE", "value": "c1b", "remarks": "edited"})
    assert r.json()["data"]["value"] == "c1b" and r.json()["data"]["remarks"] == "edited"
    assert client.get(f"/open/envs/{first['id']}", headers=h).json()["data"]["value"] == "c1b"

    assert client.put("/open/envs/disable", headers=h, json=[first["id"]]).json() == \
        {"code": 200}
    assert client.get(f"/open/envs/{first['id']}", headers=h).json()["data"]["status"] == 1
    task = client.post("/api/v1/tasks", json={"name": "e", "command": 'echo "$JD_COOKIE"'}
                       ).json()
    run = client.post(f"/api/v1/tasks/{task['id']}/runs").json()["run"]
    poll(lambda: client.get(f"/api/v1/runs/{run['id']}").json(), lambda x: x["terminal"])
    assert client.get(f"/api/v1/runs/{run['id']}/log").text == "c2\n"
    client.put("/open/envs/enable", headers=h, json=[first["id"]])
    run = client.post(f"/api/v1/tasks/{task['id']}/runs").json()["run"]
    poll(lambda: client.get(f"/api/v1/runs/{run['id']}").json(), lambda x: x["terminal"])
    assert client.get(f"/api/v1/runs/{run['id']}/log").text == "c1b&c2\n"

    for body, field in (([{"name": "1X", "value": "v"}], "name"),
                        ([{"name": "OK", "value": "v"}, {"name": "a b", "value": "v"}],
                         "[1].name"),
                        ([{"name": "OK"}], "value"),
                        ([], "array")):
        r = client.post("/open/envs", headers=h, json=body)
        assert r.status_code == 400 and field in r.json()["message"], (body, r.text)
    assert client.put("/open/envs/disable", headers=h, json=[12345]).status_code == 404
    assert client.request("DELETE", "/open/envs", headers=h,
                          json=[e["id"] for e in created]).json() == {"code": 200}
    assert client.get("/open/envs", headers=h).json() == {"code": 200, "data": []}


def test_envs_rename_like_qinglong(ql: tuple[TestClient, dict[str, str]]) -> None:
    """PUT /open/envs/name {"ids": [...], "name": ...} (QingLong's back/api/env.ts):
    every listed env takes the name; the answer is {"code": 200}, as QingLong's."""
    client, h = ql
    made = client.post("/open/envs", headers=h, json=[
        {"name": "OLD_A", "value": "a"}, {"name": "OLD_B", "value": "b"},
        {"name": "KEEP", "value": "k"}]).json()["data"]
    a, b, keep = (e["id"] for e in made)
    r = client.put("/open/envs/name", headers=h, json={"ids": [a, str(b)], "name": "JD_COOKIE"})
    assert r.status_code == 200 and r.json() == {"code": 200}, r.text
    envs = {e["id"]: e for e in client.get("/open/envs", headers=h).json()["data"]}
    assert [envs[i]["name"] for i in (a, b, keep)] == ["JD_COOKIE", "JD_COOKIE", "KEEP"]
    assert envs[a]["updatedAt"] >= made[0]["updatedAt"]
    task = client.post("/api/v1/tasks", json={"name": "e", "command": 'echo "$JD_COOKIE"'}
                       ).json()
    run = client.post(f"/api/v1/tasks/{task['id']}/runs").json()["run"]
    poll(lambda: client.get(f"/api/v1/runs/{run['id']}").json(), lambda x: x["terminal"])
    assert client.get(f"/api/v1/runs/{run['id']}/log").text == "a&b\n"  # joined like QingLong

    for body, status, says in (
            ({"ids": [a], "name": "1BAD"}, 400, "name"),
            ({"ids": [a], "name": "a b"}, 400, "name"),
            ({"ids": [a]}, 400, "name"),
            ({"name": "X"}, 400, "ids"),
            ({"ids": [a, 999999], "name": "X"}, 404, "999999"),
            ({"ids": [a], "name": "X", "extra": 1}, 400, "extra")):
        r = client.put("/open/envs/name", headers=h, json=body)
        assert r.status_code == status and says in r.json()["message"], (body, r.text)
    assert client.get(f"/open/envs/{a}", headers=h).json()["data"]["name"] == "JD_COOKIE"
    cid, secret = make_app(client, "crons-only", ["crons"])
    r = client.put("/open/envs/name", headers=bearer(get_token(client, cid, secret)),
                   json={"ids": [a], "name": "X"})
    assert r.status_code == 403


def test_cron_preview(client: TestClient) -> None:
    asked_at_ms = time.time() * 1000
    r = client.get("/api/v1/cron/preview", params={"schedule": "30 */5 * * * *", "n": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["schedule"] == "30 */5 * * * *" and body["seconds_field"] is True
    nxt = body["next"]
    assert len(nxt) == 3 and nxt[1]["at_ms"] - nxt[0]["at_ms"] == 300_000
    assert nxt[0]["at_ms"] > asked_at_ms and nxt[0]["at"][19:] == nxt[1]["at"][19:]
    for params, field in (({"schedule": "61 * * * *"}, "schedule"), ({}, "schedule"),
                          ({"schedule": "* * * * *", "n": 0}, "n"),
                          ({"schedule": "* * * * *", "n": "x"}, "n")):
        r = client.get("/api/v1/cron/preview", params=params)
        assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert client.get("/api/v1/cron/preview", params={"schedule": "* * * * *"},
                      headers={"Authorization": ""}).status_code == 401


def test_scheduled_cron_fires_through_the_runtime(ql: tuple[TestClient, dict[str, str]]
                                                   ) -> None:
    client, h = ql
    cron = client.post("/open/crons", headers=h, json={
        "command": "echo tick", "schedule": "* * * * * *"}).json()["data"]
    runs = poll(lambda: client.get("/api/v1/runs",
                                   params={"task_id": cron["qledge_id"]}).json()["items"],
                lambda items: any(r["terminal"] for r in items), timeout=10)
    assert {r["trigger"] for r in runs} == {"schedule"}
    client.put("/open/crons/disable", headers=h, json=[cron["id"]])


# -- the real appliance --------------------------------------------------------------------

@pytest.mark.slow
def test_a_qinglong_script_works_against_the_appliance(tmp_path: Path) -> None:
    app = Appliance(tmp_path / "state", free_port())
    app.start()
    try:
        r = app.api("POST", "/apps", json={"name": "script", "scopes": ["crons", "envs"]})
        cid, secret = r.json()["client_id"], r.json()["client_secret"]
        # From here on: exactly what a QingLong client does, no admin token.
        ql = httpx.Client(base_url=app.http.base_url, timeout=10)
        try:
            token = get_token(ql, cid, secret)
            ql.headers["Authorization"] = f"Bearer {token}"
            envs = ql.post("/open/envs", json=[{"name": "MYVAR", "value": ENV_SECRET,
                                                "remarks": "x"}]).json()
            assert envs["code"] == 200
            cron = ql.post("/open/crons", json={
                "command": 'echo "got:$MYVAR"', "schedule": "0 0 1 1 *",
                "name": "qlscript"}).json()["data"]
            assert ql.put("/open/crons/run", json=[cron["id"]]).json()["code"] == 200
            poll(lambda: ql.get(f"/open/crons/{cron['id']}").json()["data"],
                 lambda c: c["status"] == 1 and c["last_execution_time"] > 0)
            assert ql.get(f"/open/crons/{cron['id']}/log").json()["data"] == \
                f"got:{ENV_SECRET}\n"

            long = ql.post("/open/crons", json={"command": "sleep 60",
                                                "schedule": "0 0 1 1 *"}).json()["data"]
            ql.put("/open/crons/run", json=[long["id"]])
            poll(lambda: ql.get(f"/open/crons/{long['id']}").json()["data"],
                 lambda c: c["status"] == 0)
            assert ql.put("/open/crons/stop", json=[long["id"]]).json()["code"] == 200
            poll(lambda: ql.get(f"/open/crons/{long['id']}").json()["data"],
                 lambda c: c["status"] == 1)
            runs = app.api("GET", "/runs", params={"task_id": long["qledge_id"]}).json()
            assert [x["status"] for x in runs["items"]] == ["cancelled"]

            assert ql.request("DELETE", "/open/crons",
                              json=[cron["id"], long["id"]]).json()["code"] == 200
            assert ql.get("/open/crons").json()["data"]["total"] == 0
            assert ql.get("/open/crons", headers={"Authorization": "Bearer x"}
                          ).status_code == 401
        finally:
            ql.close()
        # Secrets stay out of every event and of the control-plane output.
        for item in app.api("GET", "/runs").json()["items"]:
            assert ENV_SECRET not in app.api("GET", f"/runs/{item['id']}/events").text
        output = app.output.read_text(errors="replace")
        for secret_text in (ENV_SECRET, secret, token):
            assert secret_text not in output
    finally:
        app.stop()


# -- what a scope amounts to (issue 35, finding 6) ---------------------------------------------

def test_granting_a_code_running_scope_says_so(client: TestClient) -> None:
    r = client.post("/api/v1/apps", json={"name": "watch", "scopes": ["logs"]})
    assert r.status_code == 201 and r.json()["warnings"] == []
    r = client.post("/api/v1/apps", json={"name": "bot",
                                          "scopes": ["logs", "dependencies", "scripts"]})
    assert r.status_code == 201, r.text
    [warning] = r.json()["warnings"]
    assert warning["code"] == "SCOPES_RUN_CODE"
    assert warning["scopes"] == ["scripts", "dependencies"]
    assert "running any code as the task user" in warning["message"]
    assert "every env value" in warning["message"]
    for scope in ("crons", "envs", "subscriptions"):
        r = client.post("/api/v1/apps", json={"name": f"only-{scope}", "scopes": [scope]})
        assert [w["scopes"] for w in r.json()["warnings"]] == [[scope]]


def test_security_doc_has_a_row_for_every_scope_and_marks_the_code_running_ones() -> None:
    from qledge.http import apps

    doc = (Path(__file__).parents[1] / "docs" / "security.md").read_text()
    section = doc.split("### What each scope reaches", 1)[1]
    table = section.split("\n\n| scope |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
    by_scope = {row[0].strip("| `"): row for row in rows}
    assert sorted(by_scope) == sorted(apps.SCOPES)
    runs_code = {scope for scope, row in by_scope.items() if row[3].startswith("**yes**")}
    assert runs_code == set(apps.RUNS_CODE)


def test_a_cron_out_of_bounds_is_refused_at_save(ql: tuple[TestClient, dict[str, str]]
                                                 ) -> None:
    # Issue 35, finding 2: such a cron overflowed the spawn and stopped every round.
    client, h = ql
    for command, code in [("task -m 99999999999999999999999d hello.py now", "TASK_BAD_OPTION"),
                          ("task hello.py desi NAMES 1-99999999999999999999",
                           "TASK_BAD_SELECTION")]:
        r = client.post("/open/crons", headers=h, json={"command": command,
                                                        "schedule": "* * * * *"})
        assert r.status_code == 400 and code in r.json()["message"], r.text
    assert client.get("/api/v1/tasks").json()["items"] == []
