"""GET /api/v1/task-list and /api/v1/task-overview (db/task_lists.py, http/task_lists.py)
on a real SQLite file; runs seeded straight into the database (not 1,000 real runs)."""

from __future__ import annotations

import sqlite3

from starlette.testclient import TestClient

from qledge import settings
from qledge.clock import now_ms


def _seed_runs(conf: settings.Settings, runs: list[tuple[str, str, str, int, int]]) -> None:
    """(run id, task id, status, created_at_ms, duration_ms) rows, finished."""
    with sqlite3.connect(conf.db_path) as db:
        db.executemany(
            "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, started_at_ms,"
            " finished_at_ms, exit_code) VALUES (?, ?, 'manual', ?, ?, ?, ?, ?)",
            [(rid, tid, st, at, at, at + d, 0 if st == "succeeded" else 1)
             for rid, tid, st, at, d in runs])


def _tasks(client: TestClient, n: int) -> list[dict[str, object]]:
    out = []
    for i in range(n):
        body = {"name": f"job-{i:02d}", "command": f"python3 job{i}.py --flag",
                "labels": ["even" if i % 2 == 0 else "odd"], "enabled": i % 3 != 0}
        r = client.post("/api/v1/tasks", json=body)
        assert r.status_code == 201, r.text
        out.append(r.json())
    return out


def test_list_filters_sorts_pages_and_strips(client: TestClient,
                                             conf: settings.Settings) -> None:
    tasks = _tasks(client, 12)
    base = now_ms() - 3_600_000
    runs = []
    for k in range(15):  # job-00: 15 runs, the last one failed
        runs.append((f"r00-{k:03d}", tasks[0]["id"], "failed" if k == 14 else "succeeded",
                     base + k * 1000, 500 + k))
    runs.append(("r05-000", tasks[5]["id"], "succeeded", base, 100))
    _seed_runs(conf, runs)

    body = client.get("/api/v1/task-list?limit=5&offset=0").json()
    assert body["total"] == 12 and [t["name"] for t in body["items"]] == [
        f"job-{i:02d}" for i in range(5)]
    first = body["items"][0]
    assert len(first["runs"]) == 10 and first["runs"][0]["id"] == "r00-014"
    assert first["runs"][0]["status"] == "failed" and first["runs"][0]["duration_ms"] == 514
    assert first["last_status"] == "failed" and first["command"] == "python3 job0.py --flag"
    assert body["labels"] == ["even", "odd"]
    page3 = client.get("/api/v1/task-list?limit=5&offset=10").json()["items"]
    assert [t["name"] for t in page3] == ["job-10", "job-11"]

    assert [t["name"] for t in client.get("/api/v1/task-list?q=JOB1.PY").json()["items"]] == [
        "job-01"]
    odd = client.get("/api/v1/task-list?label=odd&limit=100").json()
    assert odd["total"] == 6 and all("odd" in t["labels"] for t in odd["items"])
    off = client.get("/api/v1/task-list?enabled=false&limit=100").json()
    assert off["total"] == 4 and not any(t["enabled"] for t in off["items"])
    failed = client.get("/api/v1/task-list?last=failed").json()
    assert [t["name"] for t in failed["items"]] == ["job-00"]
    by_last = client.get("/api/v1/task-list?sort=last_run&limit=2").json()["items"]
    assert [t["name"] for t in by_last] == ["job-00", "job-05"]
    desc = client.get("/api/v1/task-list?sort=name&order=desc&limit=1").json()["items"]
    assert desc[0]["name"] == "job-11"


def test_list_refuses_bad_choices(client: TestClient) -> None:
    for query in ("sort=colour", "order=up", "last=ok", "enabled=maybe", "limit=0"):
        r = client.get("/api/v1/task-list?" + query)
        assert r.status_code == 422, query
        assert r.json()["error"] == "INVALID"


def test_internal_tasks_are_listed_apart(client: TestClient, conf: settings.Settings) -> None:
    _tasks(client, 2)
    with sqlite3.connect(conf.db_path) as db:  # a dependency queue's task, as runtime makes it
        db.execute("INSERT INTO tasks (id, name, command, labels_json, created_at_ms,"
                   " updated_at_ms) VALUES ('dep-py', 'dependencies: python', 'x',"
                   " '[\"dependencies\"]', 1, 1)")
    user = client.get("/api/v1/task-list").json()
    assert user["total"] == 2 and user["internal_total"] == 1
    assert "dependencies: python" not in [t["name"] for t in user["items"]]
    internal = client.get("/api/v1/task-list?internal=true").json()
    assert [t["name"] for t in internal["items"]] == ["dependencies: python"]
    assert internal["items"][0]["internal"] is True

    # The pickers' source, GET /tasks?internal=0, leaves it out too; plain GET /tasks not.
    picked = client.get("/api/v1/tasks?internal=0").json()["items"]
    assert "dependencies: python" not in [t["name"] for t in picked] and len(picked) == 2
    assert len(client.get("/api/v1/tasks").json()["items"]) == 3


def test_a_debug_runs_hidden_task_is_in_neither_list(client: TestClient,
                                                     conf: settings.Settings) -> None:
    _tasks(client, 1)
    with sqlite3.connect(conf.db_path) as db:  # a script's debug Run (operations/script_runs)
        db.execute("INSERT INTO tasks (id, name, command, labels_json, hidden, created_at_ms,"
                   " updated_at_ms) VALUES ('dbg', 'task demo.py', 'task demo.py now',"
                   " '[\"debug\"]', 1, 1, 1)")
    for internal in ("false", "true"):
        names = [t["name"] for t in
                 client.get(f"/api/v1/task-list?internal={internal}").json()["items"]]
        assert "task demo.py" not in names
    assert client.get("/api/v1/task-list").json()["total"] == 1


def test_overview_counts_failures_and_durations(client: TestClient,
                                                conf: settings.Settings) -> None:
    tasks = _tasks(client, 3)
    now = now_ms()
    _seed_runs(conf, [
        ("o1", tasks[0]["id"], "succeeded", now - 60_000, 1000),
        ("o2", tasks[0]["id"], "succeeded", now - 50_000, 3000),
        ("o3", tasks[0]["id"], "succeeded", now - 40_000, 2000),
        ("o4", tasks[1]["id"], "failed", now - 30_000, 10),
        ("o5", tasks[1]["id"], "timed_out", now - 20_000, 20),
        ("old", tasks[2]["id"], "failed", now - 3 * 86_400_000, 5),  # outside 24 h
    ])
    day = client.get("/api/v1/task-overview?window=24h").json()
    assert len(day["buckets"]) == 24 and day["bucket_ms"] == 3_600_000
    totals: dict[str, int] = {}
    for b in day["buckets"]:
        for status, n in b["counts"].items():
            totals[status] = totals.get(status, 0) + n
    assert totals == {"succeeded": 3, "failed": 1, "timed_out": 1}
    assert [(f["name"], f["failures"], f["last_failed_run_id"]) for f in day["failed"]] == [
        ("job-01", 2, "o5")]
    top = day["slowest"][0]
    assert (top["name"], top["p50_ms"], top["max_ms"]) == ("job-00", 2000, 3000)
    week = client.get("/api/v1/task-overview?window=7d").json()
    assert len(week["buckets"]) == 7
    assert {f["name"] for f in week["failed"]} == {"job-01", "job-02"}
    assert client.get("/api/v1/task-overview?window=1y").status_code == 422
