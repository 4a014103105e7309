"""POST /api/v1/scripts/run: a tracked run of a script as it is on disk now (the
panel's Run and the `task` program share its find-or-create, operations/script_runs.py)."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from test_scripts_api import API, put, root_of

from support import wait_terminal


def _run(client: TestClient, **body: Any) -> Any:
    return client.post(f"{API}/run", json=body)


def _log(client: TestClient, run_id: str) -> bytes:
    r = client.get(f"/api/v1/runs/{run_id}/log")
    assert r.status_code == 200, r.text
    return r.content


def test_run_runs_the_saved_content_as_a_tracked_run_of_one_hidden_debug_task(
        client: TestClient) -> None:
    root_of(client)
    assert put(client, "jd/hi.sh", "echo first\n").status_code == 201
    r = _run(client, path="jd/hi.sh")
    assert r.status_code == 202, r.text
    first = r.json()
    run = wait_terminal(client, first["run"]["id"])
    assert (run["status"], run["exit_code"], run["trigger"]) == ("succeeded", 0, "api")
    assert _log(client, first["run"]["id"]) == b"first\n"

    # The next Run after an edit runs the new content, as a run of the same task.
    assert put(client, "jd/hi.sh", "echo second; exit 3\n").status_code == 200
    again = _run(client, path="jd/hi.sh").json()
    assert again["task_id"] == first["task_id"]
    run = wait_terminal(client, again["run"]["id"])
    assert (run["status"], run["exit_code"]) == ("failed", 3)
    assert _log(client, again["run"]["id"]) == b"second\n"
    # No task is left in the list (nor in QingLong's); ?hidden=1 shows the hidden one.
    assert client.get("/api/v1/tasks").json()["items"] == []
    tasks = client.get("/api/v1/tasks?hidden=1").json()["items"]
    assert [(t["id"], t["name"], t["command"], t["labels"], t["schedule"], t["overlap"],
             t["hidden"], t["keep_runs"]) for t in tasks] == [
        (first["task_id"], "task jd/hi.sh", "task jd/hi.sh now", ["debug"], None, "allow",
         True, 10)]
    assert client.get(f"/api/v1/tasks/{first['task_id']}").json()["hidden"] is True
    assert client.get(f"/api/v1/runs/{first['run']['id']}").status_code == 200


def test_run_leaves_a_users_task_of_the_same_command_alone(client: TestClient) -> None:
    root_of(client)
    put(client, "a b.py", "print('x')\n")
    made = client.post("/api/v1/tasks", json={"name": "mine", "command": "task 'a b.py' now"})
    assert made.status_code == 201, made.text
    assert made.json()["hidden"] is False
    r = _run(client, path="a b.py")
    assert r.status_code == 202 and r.json()["task_id"] != made.json()["id"]
    assert [t["id"] for t in client.get("/api/v1/tasks").json()["items"]] == [made.json()["id"]]
    again = _run(client, path="a b.py").json()
    assert again["task_id"] == r.json()["task_id"]
    assert len(client.get("/api/v1/tasks?hidden=1").json()["items"]) == 2
    wait_terminal(client, r.json()["run"]["id"])
    wait_terminal(client, again["run"]["id"])


def test_run_refuses_paths_like_every_scripts_path(client: TestClient) -> None:
    root = root_of(client)
    (root / "dir").mkdir()
    (root.parent / "outside.sh").write_text("echo no\n")
    for path, status, code, reason in [
            ("../outside.sh", 400, "SCRIPT_PATH_INVALID", "dotdot"),
            ("/etc/passwd", 400, "SCRIPT_PATH_INVALID", "absolute"),
            ("missing.sh", 404, "SCRIPT_NOT_FOUND", "not_found"),
            ("dir", 409, "SCRIPT_WRONG_TYPE", "is_directory")]:
        r = _run(client, path=path)
        assert (r.status_code, r.json()["error"], r.json().get("reason")) == (
            status, code, reason), (path, r.text)
    (root / "link.sh").symlink_to(root.parent / "outside.sh")
    r = _run(client, path="link.sh")
    assert (r.status_code, r.json()["error"], r.json().get("reason")) == (
        403, "SCRIPT_PATH_SYMLINK", "symlink")
    for body in ({}, {"path": "x.sh", "command": "task x.sh now"}):
        assert _run(client, **body).status_code == 422
    r = _run(client, command="task a.py --bogus")
    assert r.status_code == 422 and "TASK_BAD_OPTION" in r.json()["message"]
    # Issue 35, finding 2: sizes that overflowed into a 500 are refused like any form.
    for command, code in [("task -m 99999999999999999999999d a.py now", "TASK_BAD_OPTION"),
                          ("task a.py desi X 1-99999999999999999999", "TASK_BAD_SELECTION")]:
        r = _run(client, command=command)
        assert r.status_code == 422 and code in r.json()["message"], r.text
    # Nothing refused left a task or a run behind.
    assert client.get("/api/v1/tasks").json()["items"] == []
    assert client.get("/api/v1/runs").json()["items"] == []


def test_run_needs_the_admin_token(client: TestClient) -> None:
    r = client.post(f"{API}/run", json={"path": "x.sh"}, headers={"Authorization": ""})
    assert r.status_code == 401


def test_qinglong_clients_do_not_see_the_hidden_debug_task(client: TestClient) -> None:
    from test_qinglong_api import bearer, get_token, make_app

    root_of(client)
    put(client, "ql.sh", "echo hi\n")
    made = client.post("/api/v1/tasks", json={"name": "visible", "command": "echo v"})
    assert made.status_code == 201, made.text
    run = _run(client, path="ql.sh").json()
    wait_terminal(client, run["run"]["id"])
    headers = bearer(get_token(client, *make_app(client, "reader", ["crons"])))
    for search in ("", "ql.sh", "command:task"):
        page = client.get("/open/crons", headers=headers,
                          params={"searchValue": search} if search else None).json()["data"]
        names = [c["name"] for c in page["data"]]
        assert "task ql.sh" not in names and page["total"] == len(names), (search, page)
    assert [c["name"] for c in client.get("/open/crons", headers=headers).json()["data"]["data"]
            ] == ["visible"]
