"""Every integer a client sends, on every route, against hostile values; duplicate
JSON keys; bounded and control-character-free strings (http/inputs.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from support import wait_terminal

# Hostile text for integer query parameters and headers: too big for int64,
# negative, not a number, digits int() would accept but are not ASCII ("²" passes
# str.isdigit(), "٣" is an Arabic-Indic 3), float syntax, and 5000 digits (int()
# itself refuses more than 4300).
HOSTILE_TEXT = ["9999999999999999999999", "-9999999999999999999999", "-1", "abc", "²", "٣",
                "1e23", "0x10", "+1", " 1", "1_0", "9" * 5000]
# Hostile JSON values where a body holds an integer.
HOSTILE_JSON: list[Any] = [99999999999999999999999, -99999999999999999999999, -1, 1e23, "²",
                           "abc", True, None, [1], {"a": 1}]
RUN = "{run}"

# (route, parameter, how it is sent); /open answers 400 (QingLong), native 422.
QUERY_INTS = [
    ("/api/v1/tasks", "after"),
    ("/api/v1/tasks", "limit"),
    ("/api/v1/runs", "limit"),
    (f"/api/v1/runs/{RUN}/events", "after"),
    (f"/api/v1/runs/{RUN}/log", "offset"),
    (f"/api/v1/runs/{RUN}/log", "limit"),
    (f"/api/v1/runs/{RUN}/log/stream", "offset"),
    ("/api/v1/cron/preview", "n"),
    ("/open/crons", "page"),
    ("/open/crons", "size"),
]
HEADER_INTS = [(f"/api/v1/runs/{RUN}/log", "Last-Event-ID"),
               (f"/api/v1/runs/{RUN}/log/stream", "Last-Event-ID")]
PATH_INTS = ["/open/crons/{v}", "/open/crons/{v}/log", "/open/envs/{v}"]
# (method, path, body template with V, field named in the error)
BODY_INTS = [
    ("POST", "/api/v1/tasks", {"name": "n", "command": "true", "timeout_s": "V"}, "timeout_s"),
    ("POST", "/api/v1/tasks", {"name": "n", "command": "true", "keep_runs": "V"}, "keep_runs"),
    ("POST", "/api/v1/tasks", {"name": "n", "command": "true", "keep_days": "V"}, "keep_days"),
    ("PATCH", "/api/v1/tasks/{task}", {"timeout_s": "V"}, "timeout_s"),
    ("POST", "/open/crons", {"command": "true", "schedule": "* * * * *",
                             "allow_multiple_instances": "V"}, "allow_multiple_instances"),
    ("PUT", "/open/crons", {"id": "V", "name": "x"}, "id"),
    ("PUT", "/open/envs", {"id": "V", "value": "x"}, "id"),
    ("PUT", "/open/envs/name", {"ids": ["V"], "name": "X"}, "ids"),
    *[(m, p, ["V"], "ids") for m, p in [
        ("DELETE", "/open/crons"), ("PUT", "/open/crons/run"), ("PUT", "/open/crons/stop"),
        ("PUT", "/open/crons/enable"), ("PUT", "/open/crons/disable"),
        ("DELETE", "/open/envs"), ("PUT", "/open/envs/enable"), ("PUT", "/open/envs/disable")]],
]


@pytest.fixture
def ids(client: TestClient) -> dict[str, str]:
    task = client.post("/api/v1/tasks", json={"name": "t", "command": "echo hi"}).json()
    run = client.post(f"/api/v1/tasks/{task['id']}/runs").json()["run"]
    wait_terminal(client, run["id"])
    return {"run": run["id"], "task": task["id"]}


def _names_field(r: Any, field: str) -> bool:
    body = r.json()
    if "field" in body:
        return bool(body["field"] == field)
    return field in body["message"]  # QingLong's shape has only a message


def _status(path: str) -> int:
    return 400 if path.startswith("/open/") else 422


def test_hostile_integers_in_queries_and_headers(client: TestClient, ids: dict[str, str]
                                                 ) -> None:
    failures = []
    for route, name in QUERY_INTS:
        path = route.format(**ids)
        for value in HOSTILE_TEXT:
            extra = {"schedule": "* * * * *"} if path.endswith("preview") else {}
            r = client.get(path, params={**extra, name: value})
            if r.status_code != _status(path) or not _names_field(r, name):
                failures.append((path, name, value[:30], r.status_code, r.text[:200]))
    for route, name in HEADER_INTS:
        path = route.format(**ids)
        for value in HOSTILE_TEXT:
            if value != value.strip():
                continue  # a header value's own whitespace is not the client's
            r = client.get(path, headers={name: value.encode()})
            if r.status_code != 422 or not _names_field(r, name):
                failures.append((path, name, value[:30], r.status_code, r.text[:200]))
    assert failures == []


def test_hostile_integers_in_paths(client: TestClient) -> None:
    failures = []
    for route in PATH_INTS:
        for value in HOSTILE_TEXT:
            r = client.get(route.format(v=value))
            # Digits past int64 are a bad id (400 naming it); anything else is a
            # path that no route matches (404): never a 500.
            want = 400 if value.isascii() and value.isdigit() else 404
            if r.status_code != want or (want == 400 and not _names_field(r, "id")):
                failures.append((route, value[:30], r.status_code, r.text[:200]))
    assert failures == []


def test_hostile_integers_in_bodies(client: TestClient, ids: dict[str, str]) -> None:
    failures = []
    for method, route, template, field in BODY_INTS:
        path = route.format(**ids)
        for value in HOSTILE_JSON:
            if value is None and field not in ("id", "ids"):
                continue  # null is "not set" for these optional fields
            body = json.loads(json.dumps(template).replace('"V"', json.dumps(value)))
            r = client.request(method, path, json=body)
            if r.status_code != _status(path) or not _names_field(r, field):
                failures.append((method, path, field, repr(value)[:30], r.status_code,
                                 r.text[:200]))
    assert failures == []


def test_negative_limits_are_refused_not_clamped(client: TestClient, ids: dict[str, str]
                                                 ) -> None:
    for path in ("/api/v1/tasks", "/api/v1/runs", f"/api/v1/runs/{ids['run']}/log"):
        for value in ("-1", "0"):
            r = client.get(path, params={"limit": value})
            assert r.status_code == 422 and r.json()["field"] == "limit", (path, r.text)
    r = client.get("/api/v1/tasks", params={"after": "abc"})
    assert r.status_code == 422 and r.json()["field"] == "after"
    assert client.get("/api/v1/tasks", params={"limit": "500", "after": "0"}).status_code == 200
    r = client.get(f"/api/v1/runs/{ids['run']}/log", params={"offset": "2", "limit": "1"})
    assert r.status_code == 200 and r.content == b"\n"


def test_numeric_string_ids_still_work_like_qinglong(client: TestClient) -> None:
    cron = client.post("/open/crons", json={"command": "true", "schedule": "0 0 * * *"})
    num = cron.json()["data"]["id"]
    assert client.put("/open/crons/disable", json=[str(num)]).json() == {"code": 200}
    assert client.get(f"/open/crons/{num:05d}").json()["data"]["isDisabled"] == 1
    r = client.put("/open/crons/enable", json=[num, str(num), f" {num} "])
    assert r.json() == {"code": 200}
    r = client.put("/open/crons/enable", json=list(range(1001)))
    assert r.status_code == 400 and "at most 1000" in r.json()["message"]


@pytest.mark.parametrize(("method", "path", "body", "key"), [
    ("POST", "/api/v1/tasks", '{"name": "a", "command": "true", "name": "b"}', "name"),
    ("POST", "/api/v1/tasks", '{"name": "a", "command": "true", "env": {"A": "1", "A": "2"}}',
     "A"),
    ("POST", "/api/v1/envs", '{"name": "A", "value": "1", "value": "2"}', "value"),
    ("POST", "/api/v1/apps", '{"name": "a", "scopes": ["crons"], "scopes": ["envs"]}',
     "scopes"),
    ("POST", "/open/crons", '{"command": "true", "schedule": "* * * * *", "command": "id"}',
     "command"),
    ("POST", "/open/envs", '[{"name": "A", "value": "1", "name": "B"}]', "name"),
    ("PUT", "/open/envs/name", '{"ids": [1], "name": "A", "name": "B"}', "name"),
])
def test_duplicate_json_keys_are_refused(client: TestClient, method: str, path: str,
                                         body: str, key: str) -> None:
    r = client.request(method, path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == _status(path), r.text
    payload = r.json()
    message = payload["message"]
    assert f"duplicate key {key!r}" in message
    if not path.startswith("/open/"):
        assert payload["field"] == key
    assert client.get("/api/v1/tasks").json()["items"] == []  # nothing was saved


LONG = "x" * 5000


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/v1/tasks", {"name": "a\x00b", "command": "true"}, "name"),
    ("/api/v1/tasks", {"name": "a\nb", "command": "true"}, "name"),
    ("/api/v1/tasks", {"name": "a\x1b[31m", "command": "true"}, "name"),
    ("/api/v1/tasks", {"name": "a\u0085b", "command": "true"}, "name"),
    ("/api/v1/tasks", {"name": "x" * 201, "command": "true"}, "name"),
    ("/api/v1/tasks", {"name": "n", "command": "true", "labels": ["ok", "b\x00d"]}, "labels"),
    ("/api/v1/tasks", {"name": "n", "command": "true", "labels": ["t\tab"]}, "labels"),
    ("/api/v1/tasks", {"name": "n", "command": "true", "labels": [str(i) for i in range(51)]},
     "labels"),
    ("/api/v1/tasks", {"name": "n", "command": "true", "labels": ["x" * 101]}, "labels"),
    ("/api/v1/tasks", {"name": "n", "command": "tr\x00ue"}, "command"),
    ("/api/v1/tasks", {"name": "n", "command": "é" * 40000}, "command"),  # 80000 bytes
    ("/api/v1/tasks", {"name": "n", "command": "true", "schedule": "* " * 200}, "schedule"),
    ("/api/v1/tasks", {"name": "n", "command": "true",
                       "env": {f"V{i}": "1" for i in range(257)}}, "env"),
    ("/api/v1/tasks", {"name": "n", "command": "true", "env": {"A": "€" * 30000}}, "env"),
    ("/api/v1/envs", {"name": "A", "value": "1", "remarks": "a\x00b"}, "remarks"),
    ("/api/v1/envs", {"name": "A", "value": "1", "remarks": "a\x07b"}, "remarks"),
    ("/api/v1/envs", {"name": "A", "value": "1", "remarks": LONG}, "remarks"),
    ("/api/v1/envs", {"name": "A\x00", "value": "1"}, "name"),
    ("/api/v1/envs", {"name": "A", "value": "v\x00"}, "value"),
    ("/api/v1/apps", {"name": "a\x00", "scopes": ["crons"]}, "name"),
    ("/api/v1/apps", {"name": "a", "scopes": ["crons"] * 100}, "scopes"),
    ("/open/crons", {"command": "true", "schedule": "* * * * *", "name": "a\rb"}, "name"),
    ("/open/crons", {"command": "true", "schedule": "* * * * *", "labels": ["\x00"]}, "labels"),
    ("/open/envs", [{"name": "A", "value": "1", "remarks": "\x00"}], "remarks"),
])
def test_bounded_strings_without_control_characters(client: TestClient, path: str,
                                                    body: Any, field: str) -> None:
    r = client.post(path, json=body)
    assert r.status_code == _status(path), r.text
    assert _names_field(r, field), r.text


def test_where_newlines_are_allowed(client: TestClient) -> None:
    task = client.post("/api/v1/tasks", json={
        "name": "multi", "command": "echo a\n\techo b\r\n", "env": {"PEM": "-----\nabc\n-----"},
        "labels": ["x" * 100] * 50})
    assert task.status_code == 201, task.text
    env = client.post("/api/v1/envs", json={"name": "N", "value": "a\nb", "remarks": "l1\nl2\tx"})
    assert env.status_code == 201, env.text


def test_a_name_derived_from_the_command_has_no_control_characters(client: TestClient
                                                                    ) -> None:
    r = client.post("/open/crons", json={"command": "printf '\x1b[1m'\techo " + "x" * 300,
                                         "schedule": "0 0 * * *"})
    assert r.status_code == 200, r.text
    name = r.json()["data"]["name"]
    assert name.startswith("printf '") and len(name) == 200
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name)


def test_query_text_is_bounded(client: TestClient) -> None:
    assert client.get("/api/v1/envs", params={"search": "x" * 257}).status_code == 422
    assert client.get("/open/envs", params={"searchValue": "x" * 257}).status_code == 400
    assert client.get("/open/crons", params={"searchValue": "\x00"}).status_code == 400
    assert client.get("/api/v1/runs", params={"task_id": "x" * 1000}).status_code == 422
