"""Environment variables: native admin CRUD, injection into runs, values kept out of events."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from qledge import ids
from qledge.db import envs
from qledge.db.sqlite import Database

from support import eventually

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

SECRET = "s3cr3t-v4lue-0f-an-env"


def wait_terminal(client: TestClient, run_id: str, timeout: float = 20) -> dict[str, Any]:
    def terminal() -> dict[str, Any] | None:
        run: dict[str, Any] = client.get(f"/api/v1/runs/{run_id}").json()
        return run if run["terminal"] else None

    return eventually(terminal, timeout=timeout, interval=0.05, what=f"run {run_id} to be terminal")


def run_and_log(client: TestClient, task_id: str) -> tuple[dict[str, Any], str]:
    r = client.post(f"/api/v1/tasks/{task_id}/runs")
    assert r.status_code == 202, r.text
    run = wait_terminal(client, r.json()["run"]["id"])
    return run, client.get(f"/api/v1/runs/{run['id']}/log").text


def test_crud_round_trip(client: TestClient) -> None:
    r = client.post("/api/v1/envs", json={"name": "MYVAR", "value": SECRET, "remarks": "r"})
    assert r.status_code == 201, r.text
    env = r.json()
    assert env["name"] == "MYVAR" and env["value"] == SECRET and env["enabled"] is True
    assert ids.is_uuid7(env["id"]) and isinstance(env["num"], int)
    second = client.post("/api/v1/envs", json={"name": "OTHER", "value": ""}).json()
    assert second["position"] < env["position"]  # QingLong order: newer below
    listed = client.get("/api/v1/envs").json()["items"]
    assert [e["name"] for e in listed] == ["MYVAR", "OTHER"]
    assert [e["name"] for e in client.get("/api/v1/envs?search=OTH").json()["items"]] == \
        ["OTHER"]
    r = client.put(f"/api/v1/envs/{env['id']}", json={"value": "new", "enabled": False})
    assert r.status_code == 200 and r.json()["value"] == "new" and not r.json()["enabled"]
    assert client.get(f"/api/v1/envs/{env['id']}").json()["remarks"] == "r"
    assert client.delete(f"/api/v1/envs/{env['id']}").status_code == 204
    assert client.get(f"/api/v1/envs/{env['id']}").status_code == 404
    assert client.delete(f"/api/v1/envs/{env['id']}").status_code == 404
    assert client.get("/api/v1/envs/not-a-uuid").status_code == 404


def test_bad_input_names_the_field_without_echoing_the_value(client: TestClient) -> None:
    cases = [
        ({"name": "1BAD", "value": "x"}, "name"),
        ({"name": "A-B", "value": "x"}, "name"),
        ({"name": "", "value": "x"}, "name"),
        ({"name": "OK", "value": "nul\x00" + SECRET}, "value"),
        ({"name": "OK", "value": "x" * 70000}, "value"),
        ({"name": "OK"}, "value"),
        ({"name": "OK", "value": 3}, "value"),
        ({"name": "OK", "value": "x", "bogus": 1}, "bogus"),
    ]
    for body, field in cases:
        r = client.post("/api/v1/envs", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["field"] == field, (body, r.json())
        assert SECRET not in r.text
    assert client.get("/api/v1/envs").json()["items"] == []


def test_envs_need_the_admin_token(client: TestClient) -> None:
    assert client.get("/api/v1/envs", headers={"Authorization": ""}).status_code == 401


def test_enabled_envs_reach_the_task_and_the_task_env_wins(client: TestClient) -> None:
    env = client.post("/api/v1/envs", json={"name": "MYVAR", "value": SECRET}).json()
    client.post("/api/v1/envs", json={"name": "JOINED", "value": "a"})
    client.post("/api/v1/envs", json={"name": "JOINED", "value": "b"})
    off = client.post("/api/v1/envs", json={"name": "JOINED", "value": "off"}).json()
    client.put(f"/api/v1/envs/{off['id']}", json={"enabled": False})

    plain = client.post("/api/v1/tasks", json={
        "name": "echo", "command": 'echo "[$MYVAR] [$JOINED]"'}).json()
    run, log = run_and_log(client, plain["id"])
    assert run["status"] == "succeeded"
    assert log.strip() == f"[{SECRET}] [a&b]"

    own = client.post("/api/v1/tasks", json={
        "name": "own", "command": 'echo "[$MYVAR]"', "env": {"MYVAR": "task-wins"}}).json()
    _, log = run_and_log(client, own["id"])
    assert log.strip() == "[task-wins]"

    client.put(f"/api/v1/envs/{env['id']}", json={"enabled": False})
    _, log = run_and_log(client, plain["id"])
    assert log.strip() == "[] [a&b]"

    # the value never appears in any event of any run
    for item in client.get("/api/v1/runs").json()["items"]:
        events = client.get(f"/api/v1/runs/{item['id']}/events").text
        assert SECRET not in events and "task-wins" not in events


async def test_global_env_joins_same_names_in_panel_order(db: Database) -> None:
    async with db.write() as tx:
        a = await envs.create_env(tx, ids.uuid7(), {"name": "X", "value": "1"}, 1)
        await envs.create_env(tx, ids.uuid7(), {"name": "Y", "value": "y"}, 2)
        await envs.create_env(tx, ids.uuid7(), {"name": "X", "value": "2"}, 3)
        c = await envs.create_env(tx, ids.uuid7(), {"name": "X", "value": "3"}, 4)
        await envs.set_envs_enabled(tx, [c.id], False, 5)
    async with db.read() as tx:
        assert await envs.global_env(tx) == {"X": "1&2", "Y": "y"}
    async with db.write() as tx:
        await envs.update_env(tx, a.id, {"enabled": False}, 6)
        assert await envs.global_env(tx) == {"X": "2", "Y": "y"}


def test_a_multi_line_value_round_trips_byte_for_byte(client: TestClient) -> None:
    value = "a\nb\r\nc\t d "
    r = client.post("/api/v1/envs", json={"name": "COOKIE", "value": value})
    assert r.status_code == 201, r.text
    got = client.get(f"/api/v1/envs/{r.json()['id']}").json()
    assert got["value"] == value
    assert [e["value"] for e in client.get("/api/v1/envs").json()["items"]] == [value]


def test_import_creates_all_or_nothing_and_names_the_bad_item(client: TestClient) -> None:
    good = {"name": "A", "value": "1"}
    r = client.post("/api/v1/envs/import", json={"items": [good, {"name": "9x", "value": "2"}]})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "items[1].name"
    assert client.get("/api/v1/envs").json()["items"] == []
    r = client.post("/api/v1/envs/import", json={"items": [
        good, {"name": "B", "value": "x\ny", "remarks": "r", "enabled": False}]})
    assert r.status_code == 201, r.text
    listed = client.get("/api/v1/envs").json()["items"]
    assert [(e["name"], e["value"], e["enabled"]) for e in listed] == [
        ("A", "1", True), ("B", "x\ny", False)]
    assert client.post("/api/v1/envs/import", json={"items": []}).status_code == 422


def test_bulk_enable_disable_delete_all_or_nothing(client: TestClient) -> None:
    made = [client.post("/api/v1/envs", json={"name": f"V{i}", "value": "v"}).json()["id"]
            for i in range(3)]
    r = client.post("/api/v1/envs/bulk", json={"action": "disable", "ids": made[:2]})
    assert r.status_code == 200 and r.json()["count"] == 2, r.text
    states = {e["id"]: e["enabled"] for e in client.get("/api/v1/envs").json()["items"]}
    assert states == {made[0]: False, made[1]: False, made[2]: True}
    gone = ids.uuid7()
    r = client.post("/api/v1/envs/bulk", json={"action": "delete", "ids": [made[0], gone]})
    assert r.status_code == 404
    assert len(client.get("/api/v1/envs").json()["items"]) == 3
    r = client.post("/api/v1/envs/bulk", json={"action": "delete", "ids": made[:2]})
    assert r.status_code == 200
    assert [e["id"] for e in client.get("/api/v1/envs").json()["items"]] == [made[2]]
    r = client.post("/api/v1/envs/bulk", json={"action": "explode", "ids": made})
    assert r.status_code in (400, 422)


def test_move_reorders_and_the_order_persists(client: TestClient) -> None:
    made = [client.post("/api/v1/envs", json={"name": "SAME", "value": str(i)}).json()["id"]
            for i in range(3)]
    order = lambda: [e["id"] for e in client.get("/api/v1/envs").json()["items"]]  # noqa: E731
    assert order() == made
    r = client.post(f"/api/v1/envs/{made[2]}/move", json={"direction": "up"})
    assert r.status_code == 200, r.text
    assert order() == [made[0], made[2], made[1]]
    client.post(f"/api/v1/envs/{made[0]}/move", json={"direction": "up"})  # at the top: stays
    assert order() == [made[0], made[2], made[1]]
    client.post(f"/api/v1/envs/{made[0]}/move", json={"direction": "down"})
    assert order() == [made[2], made[0], made[1]]
    r = client.post(f"/api/v1/envs/{made[0]}/move", json={"direction": "left"})
    assert r.status_code in (400, 422)
