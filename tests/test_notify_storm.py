"""A failure storm against real receivers: 50 tasks failing within a minute on a real
worker, two json:// channels on loopback (docs/notifications.md, "Quiet by default").

Each channel gets at most `rate_limit` messages plus ONE digest naming the rest, and
the delivery log keeps a row for every message (held rows marked digested, never
dropped). Then a task's recovery, and a message in 中文 with a link to its run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _receivers import HttpReceiver
from support import Server, wait_terminal

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

TASKS = 50
LIMIT = 5
# Shorter than the default 10 minutes so the digest comes within the test; long
# enough that the whole storm falls inside one window.
WINDOW_S = 40
BASE = "http://qledge.example:5700"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "state", notify_retry_base_s="0.2", notify_interval_s="1",
                 max_concurrent_attempts="16")
    try:
        yield srv
    finally:
        srv.stop()


def _channel(http: httpx.Client, name: str, port: int) -> str:
    r = http.post("/api/v1/notifications/channels",
                  json={"name": name, "url": f"json://127.0.0.1:{port}/{name}"})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _messages(http: httpx.Client) -> list[dict[str, Any]]:
    r = http.get("/api/v1/notifications/messages", params={"limit": 500})
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def _start(http: httpx.Client, task_id: str) -> str:
    r = http.post(f"/api/v1/tasks/{task_id}/runs")
    assert r.status_code == 202, r.text
    return str(r.json()["run"]["id"])


def test_fifty_failing_tasks_cost_each_channel_the_limit_and_one_digest(
        server: Server) -> None:
    http = server.http
    a, b = HttpReceiver().start(), HttpReceiver().start()
    try:
        chans = {_channel(http, "a", a.port): a, _channel(http, "b", b.port): b}
        r = http.put("/api/v1/notifications/rules",
                     json={"rate_limit": LIMIT, "rate_window_s": WINDOW_S})
        assert r.status_code == 200, r.text
        r = http.put("/api/v1/notifications/settings", json={"base_url": BASE})
        assert r.status_code == 200 and r.json()["link_base_url"] == BASE, r.text
        tasks = []
        for i in range(TASKS):
            r = http.post("/api/v1/tasks", json={"name": f"job{i:02d}", "command": "exit 1"})
            assert r.status_code == 201, r.text
            tasks.append(str(r.json()["id"]))
        began = time.monotonic()
        run_ids = [_start(http, t) for t in tasks]
        for rid in run_ids:
            assert wait_terminal(http, rid, timeout=60)["status"] == "failed"
        storm_s = time.monotonic() - began
        assert storm_s < 60 and storm_s < WINDOW_S - 5, storm_s  # one storm, one window

        # the limit's worth arrive at once; the digest when the window frees up
        for rec in chans.values():
            assert len(rec.wait(LIMIT + 1, timeout=WINDOW_S + 30)) == LIMIT + 1
        time.sleep(3)  # nothing more comes
        for rec in chans.values():
            docs = [q.json() for q in rec.requests]
            assert len(docs) == LIMIT + 1, [d["title"] for d in docs]
            singles, (dig,) = docs[:LIMIT], docs[LIMIT:]
            assert all(d["type"] == "failure" and d["title"].endswith(": failed")
                       for d in singles)
            held = TASKS - LIMIT
            assert dig["title"] == f"[qledge] {held} more notifications", dig["title"]
            lines = dig["message"].splitlines()
            assert lines[0].startswith(f"Held back by the rate limit ({LIMIT} messages")
            listed = lines[1:]
            assert len(listed) == held and all(" — " + BASE + "/#/runs/" in x for x in listed)
            # every held run is in the digest; the singles are not
            single_runs = {d["message"].rsplit("/#/runs/", 1)[1] for d in singles}
            digest_runs = {x.rsplit("/#/runs/", 1)[1] for x in listed}
            assert single_runs | digest_runs == set(run_ids)
            assert not single_runs & digest_runs

        # the delivery log: a row for every (run, channel), none dropped
        items = _messages(http)
        runs = [m for m in items if m["kind"] == "run"]
        assert len(runs) == TASKS * len(chans)
        for cid in chans:
            mine = [m for m in runs if m["channel_id"] == cid]
            assert {m["run_id"] for m in mine} == set(run_ids)
            states = sorted(m["state"] for m in mine)
            assert states == ["digested"] * (TASKS - LIMIT) + ["sent"] * LIMIT
            (dig_row,) = [m for m in items if m["kind"] == "digest" and m["channel_id"] == cid]
            assert dig_row["state"] == "sent"
            assert {m["digest_id"] for m in mine if m["state"] == "digested"} == {dig_row["id"]}
        counts = http.get("/api/v1/notifications/messages").json()["counts"]
        assert counts["digested"] == (TASKS - LIMIT) * len(chans)
        assert counts["sent"] == (LIMIT + 1) * len(chans) and counts["given_up"] == 0

        # failing again is no news; the recovery is, once (the window has room again)
        again = _start(http, tasks[0])
        assert wait_terminal(http, again)["status"] == "failed"
        r = http.patch(f"/api/v1/tasks/{tasks[0]}", json={"command": "true"})
        assert r.status_code == 200, r.text
        ok = _start(http, tasks[0])
        assert wait_terminal(http, ok)["status"] == "succeeded"
        for rec in chans.values():
            got = rec.wait(LIMIT + 2, timeout=20)
            assert len(got) == LIMIT + 2
            last = got[-1].json()
            assert (last["title"], last["type"]) == ("[qledge] job00: recovered", "success")
            assert f"{BASE}/#/runs/{ok}" in last["message"]
        time.sleep(1.5)
        assert [len(rec.requests) for rec in chans.values()] == [LIMIT + 2] * 2
    finally:
        a.stop()
        b.stop()


def test_a_chinese_message_arrives_with_a_link_to_its_run(server: Server) -> None:
    http = server.http
    hook = HttpReceiver().start()
    try:
        _channel(http, "hook", hook.port)
        assert http.get("/api/v1/notifications/settings").json() == {
            "language": None, "base_url": None, "link_base_url": None}
        bad = http.put("/api/v1/notifications/settings", json={"language": "fr"})
        assert (bad.status_code, bad.json()["field"]) == (422, "language")
        bad = http.put("/api/v1/notifications/settings", json={"base_url": "javascript:x"})
        assert (bad.status_code, bad.json()["field"]) == (422, "base_url")
        r = http.put("/api/v1/notifications/settings",
                     json={"language": "zh-CN", "base_url": BASE + "/"})
        assert r.json() == {"language": "zh-CN", "base_url": BASE + "/",
                            "link_base_url": BASE + "/"}
        r = http.post("/api/v1/tasks", json={"name": "种豆得豆", "command": "exit 127"})
        tid = str(r.json()["id"])
        rid = _start(http, tid)
        assert wait_terminal(http, rid)["status"] == "failed"
        (got,) = hook.wait(1)
        doc = got.json()
        assert doc["title"] == "[qledge] 种豆得豆：失败" and doc["type"] == "failure"
        body = doc["message"].splitlines()
        assert body[1] == "状态：失败" and body[3] == "退出码：127 (找不到命令)"
        assert body[-1] == f"运行：{BASE}/#/runs/{rid}"
        # the channel's test message speaks the same language
        cid = http.get("/api/v1/notifications/channels").json()["items"][0]["id"]
        assert http.post(f"/api/v1/notifications/channels/{cid}/test").json()["ok"] is True
        assert hook.wait(2)[1].json()["title"] == "[qledge] 测试消息"
        # a PUT changes what it names: the language stays, the link base clears
        r = http.put("/api/v1/notifications/settings", json={"base_url": ""})
        assert r.json()["language"] == "zh-CN" and r.json()["base_url"] is None
    finally:
        hook.stop()


def test_a_debug_run_never_notifies_a_task_run_of_the_same_script_does(
        server: Server) -> None:
    http = server.http
    hook = HttpReceiver().start()
    try:
        _channel(http, "hook", hook.port)
        r = http.put("/api/v1/scripts/file",
                     json={"path": "broken.sh", "content": "exit 9\n", "create": True})
        assert r.status_code in (200, 201), r.text
        # the script editor's Run: a hidden task, the user is watching it
        r = http.post("/api/v1/scripts/run", json={"path": "broken.sh"})
        assert r.status_code == 202, r.text
        debug = str(r.json()["run"]["id"])
        assert wait_terminal(http, debug)["status"] == "failed"
        # the `task` program's run of the same script is a task of the user's: it notifies
        r = http.post("/api/v1/scripts/run", json={"command": "task broken.sh now"})
        assert r.status_code == 202, r.text
        cli, cli_task = str(r.json()["run"]["id"]), str(r.json()["task_id"])
        assert wait_terminal(http, cli)["status"] == "failed"
        (got,) = hook.wait(1)
        assert cli in got.json()["message"]
        time.sleep(1.5)
        assert len(hook.requests) == 1
        assert [m["run_id"] for m in _messages(http)] == [cli]
        # a rule the API refuses names its field
        for bad, field in (({"mode": "sometimes"}, "mode"), ({"rate_limit": -1}, "rate_limit"),
                           ({"rate_window_s": 0}, "rate_window_s")):
            r = http.put("/api/v1/notifications/rules", json=bad)
            assert (r.status_code, r.json()["field"]) == (422, field), r.text
        r = http.put(f"/api/v1/notifications/rules/tasks/{cli_task}", json={"mode": "never"})
        assert (r.status_code, r.json()["field"]) == (422, "mode")
    finally:
        hook.stop()
