"""Saving an env or a task that would make every spawn fail with E2BIG is refused
(launch/environment.py); right at the kernel's limit, runs still start."""

from __future__ import annotations

from starlette.testclient import TestClient

from qledge.launch import environment
from test_envs import run_and_log

KIB64 = 65536
# "BIG=" + 65536 bytes + "&" + this many + NUL is exactly MAX_ARG_STRLEN.
FITS = environment.MAX_ARG_STRLEN - len("BIG=") - KIB64 - 1 - 1


def _tasks(client: TestClient) -> list[str]:
    return [t["name"] for t in client.get("/api/v1/tasks").json()["items"]]


def test_same_name_envs_are_checked_against_the_kernels_string_limit(client: TestClient
                                                                     ) -> None:
    assert environment.MAX_ARG_STRLEN == 131072
    first = client.post("/api/v1/envs", json={"name": "BIG", "value": "a" * KIB64})
    second = client.post("/api/v1/envs", json={"name": "BIG", "value": "b" * FITS})
    assert first.status_code == 201 and second.status_code == 201, second.text
    task = client.post("/api/v1/tasks", json={"name": "n", "command": 'echo "${#BIG}"'}).json()
    run, log = run_and_log(client, task["id"])
    assert run["status"] == "succeeded", run  # exactly at the limit: the spawn works
    assert log == f"{KIB64 + 1 + FITS}\n"

    # One byte more, whichever way it comes, is refused and changes nothing.
    r = client.patch(f"/api/v1/envs/{second.json()['id']}", json={"value": "b" * (FITS + 1)})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["variable"] == "BIG" and "131072" in body["message"]
    assert "b" * KIB64 not in r.text  # never echoes a value
    r = client.post("/api/v1/envs", json={"name": "BIG", "value": "c"})
    assert r.status_code == 422 and r.json()["variable"] == "BIG"
    other = client.post("/api/v1/envs", json={"name": "OTHER", "value": "d"}).json()
    r = client.post("/open/envs", json=[{"name": "BIG", "value": "e"}])
    assert r.status_code == 400 and "BIG" in r.json()["message"], r.text
    r = client.put("/open/envs/name", json={"ids": [other["num"]], "name": "BIG"})
    assert r.status_code == 400 and "131072" in r.json()["message"], r.text
    r = client.put("/open/envs", json={"id": other["num"], "name": "BIG"})
    assert r.status_code == 400, r.text
    envs = client.get("/api/v1/envs").json()["items"]
    assert [(e["name"], len(e["value"])) for e in envs] == \
        [("BIG", KIB64), ("BIG", FITS), ("OTHER", 1)]
    # A disabled env may be saved; enabling it is what counts.
    off = client.post("/api/v1/envs", json={"name": "BIG", "value": "f", "enabled": False})
    assert off.status_code == 201, off.text
    r = client.put("/open/envs/enable", json=[off.json()["num"]])
    assert r.status_code == 400 and "BIG" in r.json()["message"]
    assert client.get(f"/api/v1/envs/{off.json()['id']}").json()["enabled"] is False
    r = client.patch(f"/api/v1/envs/{off.json()['id']}", json={"enabled": True})
    assert r.status_code == 422
    run, _ = run_and_log(client, task["id"])
    assert run["status"] == "succeeded"


def test_a_tasks_own_env_and_the_total_are_checked(client: TestClient) -> None:
    budget = environment.budget()
    assert 0 < budget <= environment.ENV_BUDGET
    # Global envs of ~64 KiB each, then a task whose own env pushes the total over.
    n_global = budget // (KIB64 + 16) - 2
    for i in range(n_global):
        r = client.post("/api/v1/envs", json={"name": f"G{i}", "value": "g" * KIB64})
        assert r.status_code == 201, (i, r.text)
    small = client.post("/api/v1/tasks", json={"name": "small", "command": "true",
                                               "env": {"T0": "t" * KIB64}})
    assert small.status_code == 201, small.text
    big_env = {f"T{i}": "t" * KIB64 for i in range(4)}
    r = client.post("/api/v1/tasks", json={"name": "big", "command": "true", "env": big_env})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "env" and str(budget) in r.json()["message"]
    r = client.patch(f"/api/v1/tasks/{small.json()['id']}", json={"env": big_env})
    assert r.status_code == 422
    r = client.post("/open/crons", json={"command": "true", "schedule": "0 0 * * *",
                                         "name": "q"})
    assert r.status_code == 200  # no env of its own: fits
    assert sorted(_tasks(client)) == ["q", "small"]
    # A global env that would push the task with an env of its own over: refused,
    # and the message names that task.
    r = client.post("/api/v1/envs", json={"name": "MORE", "value": "m" * KIB64})
    r2 = client.post("/api/v1/envs", json={"name": "MORE2", "value": "m" * KIB64})
    refused = r if r.status_code == 422 else r2
    assert refused.status_code == 422, (r.text, r2.text)
    assert "small" in refused.json()["message"]
    run, _ = run_and_log(client, small.json()["id"])
    assert run["status"] == "succeeded", run
