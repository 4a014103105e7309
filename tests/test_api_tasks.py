from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from qledge.tasks.spec import MAX_NAME

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

TASK = {"name": "hello", "command": "echo hi", "schedule": "*/5 * * * *", "timeout_s": 60,
        "env": {"GREETING": "hi"}}


def test_auth_required(client: TestClient) -> None:
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong-token-xxxxxxxx"},
                    {"Authorization": "Basic abc"}):
        r = client.get("/api/v1/tasks", headers=headers)
        assert r.status_code == 401, headers
        assert r.json()["error"] == "UNAUTHORIZED"
    assert client.get("/healthz", headers={"Authorization": ""}).status_code == 200
    assert client.get("/readyz", headers={"Authorization": ""}).status_code == 200


def test_crud_round_trip(client: TestClient) -> None:
    r = client.post("/api/v1/tasks", json=TASK)
    assert r.status_code == 201, r.text
    task = r.json()
    assert task["name"] == "hello" and task["concurrency"] == "forbid" and task["enabled"]
    assert task["next_fire_at_ms"] is not None
    assert client.get(f"/api/v1/tasks/{task['id']}").json()["command"] == "echo hi"
    r = client.put(f"/api/v1/tasks/{task['id']}", json={"enabled": False, "schedule": None})
    assert r.status_code == 200 and r.json()["enabled"] is False and r.json()["schedule"] is None
    assert r.json()["version"] == task["version"] + 1
    listed = client.get("/api/v1/tasks").json()["items"]
    assert [t["id"] for t in listed] == [task["id"]]
    assert client.delete(f"/api/v1/tasks/{task['id']}").status_code == 204
    r = client.get(f"/api/v1/tasks/{task['id']}")
    assert r.status_code == 404 and r.json()["error"] == "NOT_FOUND"


def test_bad_input_names_the_field(client: TestClient) -> None:
    cases = [
        ({**TASK, "bogus": 1}, "bogus"),
        ({**TASK, "timeout_s": "ten"}, "timeout_s"),
        ({**TASK, "command": "   "}, "command"),
        ({**TASK, "schedule": "61 * * * *"}, "schedule"),
        ({**TASK, "schedule": "* *"}, "schedule"),
        ({**TASK, "env": {"1BAD": "x"}}, "env"),
        ({**TASK, "concurrency": "sometimes"}, "concurrency"),
        ({**TASK, "overlap": "forbid"}, "overlap"),
        ({**TASK, "overlap": "skip", "concurrency": "allow"}, "concurrency"),
        ({**TASK, "retries": 11}, "retries"),
        ({**TASK, "retries": -1}, "retries"),
        ({**TASK, "retry_delay_s": 86401}, "retry_delay_s"),
        ({**TASK, "retry_on": ["cancelled"]}, "retry_on"),
        ({**TASK, "retry_on": "failed"}, "retry_on"),
        ({**TASK, "extra_schedules": ["61 * * * *"]}, "extra_schedules"),
        ({**TASK, "extra_schedules": "* * * * *"}, "extra_schedules"),
        ({**TASK, "tz": "Mars/Olympus"}, "tz"),
        ({**TASK, "schedule": "@sometimes"}, "schedule"),
        ({**TASK, "on_success": ["nope"]}, "on_success"),
        ({k: v for k, v in TASK.items() if k != "command"}, "command"),
    ]
    # Well-formed JSON that fails validation: 422 INVALID naming the field.
    for body, field in cases:
        r = client.post("/api/v1/tasks", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"] == "INVALID", (body, r.json())
        assert r.json().get("field") == field, (body, r.json())
    # Not JSON at all: 400 BAD_REQUEST.
    for raw in (b"{not json", b"", b'{"name": "x",'):
        r = client.post("/api/v1/tasks", content=raw)
        assert r.status_code == 400, (raw, r.text)
        assert r.json()["error"] == "BAD_REQUEST", (raw, r.json())
    assert client.get("/api/v1/tasks").json()["items"] == []


def test_overlap_and_its_old_spelling_concurrency_stay_in_step(client: TestClient) -> None:
    """Old clients send and read `concurrency`; new ones `overlap` (docs/tasks.md)."""
    task = client.post("/api/v1/tasks", json=TASK).json()
    assert (task["overlap"], task["concurrency"]) == ("skip", "forbid")
    assert (task["retries"], task["retry_delay_s"], task["retry_on"]) == (0, 10, ["failed", "lost"])
    url = f"/api/v1/tasks/{task['id']}"
    for sent, want in (({"concurrency": "allow"}, ("allow", "allow")),
                       ({"overlap": "replace"}, ("replace", "forbid")),
                       ({"overlap": "allow", "concurrency": "allow"}, ("allow", "allow")),
                       ({"concurrency": "forbid"}, ("skip", "forbid")),
                       ({"overlap": "queue"}, ("queue", "forbid"))):
        got = client.patch(url, json=sent).json()
        assert (got["overlap"], got["concurrency"]) == want, sent
    got = client.patch(url, json={"retries": 10, "retry_on": ["timed_out"]}).json()
    assert (got["retries"], got["retry_on"], got["overlap"]) == (10, ["timed_out"], "queue")


def test_six_field_schedule_is_accepted(client: TestClient) -> None:
    r = client.post("/api/v1/tasks", json={**TASK, "schedule": "30 */5 * * * *"})
    assert r.status_code == 201 and r.json()["schedule"] == "30 */5 * * * *"


def test_a_bad_cron_schedule_names_the_field_and_the_value(client: TestClient) -> None:
    want = "invalid cron schedule: minute field '99': out of range 0-59"
    r = client.post("/api/v1/tasks", json={**TASK, "schedule": "99 * * * *"})
    assert (r.status_code, r.json()["field"], r.json()["message"]) == (422, "schedule", want)
    r = client.get("/api/v1/cron/preview", params={"schedule": "99 * * * *"})
    assert (r.status_code, r.json()["field"], r.json()["message"]) == (422, "schedule", want)
    r = client.post("/api/v1/tasks", json={**TASK, "schedule": "0 3 * * 1-5,9"})
    assert r.json()["message"] == ("invalid cron schedule: day-of-week field '9' (in '1-5,9'):"
                                   " out of range 0-7 (or SUN-SAT)")


# Issue 35, finding 2: a `-m` or a selection whose size overflowed the runtime.
OUT_OF_BOUNDS = [
    ("task -m 99999999999999999999999d hello.py now", "TASK_BAD_OPTION"),
    ("task hello.py desi NAMES 1-99999999999999999999", "TASK_BAD_SELECTION"),
    ("task hello.py conc NAMES \u00b2", "TASK_BAD_SELECTION"),
]


def test_a_task_form_out_of_bounds_is_refused_at_save(client: TestClient) -> None:
    made = client.post("/api/v1/tasks", json=TASK).json()
    for command, code in OUT_OF_BOUNDS:
        r = client.post("/api/v1/tasks", json={**TASK, "command": command})
        assert (r.status_code, r.json()["error"], r.json()["field"]) == (
            422, "INVALID", "command"), r.text
        assert r.json()["message"].startswith(f"{code}: ")
        assert "9999" not in r.json()["message"]
        r = client.patch(f"/api/v1/tasks/{made['id']}", json={"command": command})
        assert r.status_code == 422 and r.json()["message"].startswith(code), r.text
    # A form whose script is missing is still saved: that is decided at spawn.
    assert client.post("/api/v1/tasks", json={**TASK, "command": "task none.py"}
                       ).status_code == 201
    assert len(client.get("/api/v1/tasks").json()["items"]) == 2


def test_a_field_error_names_its_rule_and_the_params_a_translation_needs(
        client: TestClient) -> None:
    r = client.post("/api/v1/tasks", json={**TASK, "schedule": "99 * * * *"})
    assert {k: r.json()[k] for k in ("error", "field", "rule", "params")} == {
        "error": "INVALID", "field": "schedule", "rule": "BAD_SCHEDULE", "params": {}}
    r = client.post("/api/v1/tasks", json={**TASK, "name": "n" * (MAX_NAME + 1)})
    assert (r.status_code, r.json()["rule"], r.json()["params"]) == (
        422, "TOO_LONG", {"max": MAX_NAME, "unit": "characters"}), r.json()
