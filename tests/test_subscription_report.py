"""A pull's result names the scripts that got no task and why (docs/subscriptions.md,
"The pull's result"): no schedule and no default, auto-add off, a task its user deleted.
A real git repository on loopback, the real launcher, the real worker."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from _git_server import GitRepo, GitServer
from test_subscriptions import API, api, git_server, new_sub, pull, repo, tasks_by_command

__all__ = ["api", "git_server", "repo"]  # the fixtures, shared with test_subscriptions


def _last(client: TestClient, sub_id: str) -> dict[str, Any]:
    last: dict[str, Any] = client.get(f"{API}/{sub_id}").json()["last_sync"]
    return last


def test_scripts_without_a_task_are_named_with_a_reason(api: TestClient, repo: GitRepo,
                                                        git_server: GitServer) -> None:
    sub = new_sub(api, git_server.url("repo"), default_schedule=None)
    run, log = pull(api, sub["id"])
    assert run["status"] == "succeeded", log
    last = _last(api, sub["id"])
    # plain.js has no header and the subscription no default schedule.
    assert last["no_task"] == [{"path": "plain.js", "reason": "no_schedule"}]
    assert last["no_task_count"] == 1 and last["no_schedule"] == ["plain.js"]

    # The user deletes one of the tasks: the next pull names it and does not bring it back.
    bean = tasks_by_command(api)["task me/jd_bean.js"]
    assert api.delete(f"/api/v1/tasks/{bean['id']}").status_code == 204
    repo.write("new.js", "// cron: 0 1 * * *\n")
    repo.commit("second")
    assert api.patch(f"{API}/{sub['id']}", json={"auto_add": False}).status_code == 200
    assert pull(api, sub["id"])[0]["status"] == "succeeded"
    last = _last(api, sub["id"])
    assert sorted(last["no_task"], key=lambda x: x["path"]) == [
        {"path": "jd_bean.js", "reason": "task_deleted"},
        {"path": "new.js", "reason": "auto_add_off"},
        {"path": "plain.js", "reason": "auto_add_off"}]
    assert "task me/jd_bean.js" not in tasks_by_command(api)
