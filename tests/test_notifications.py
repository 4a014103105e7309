"""Notifications end to end: a real worker, real apprise, real receivers on loopback
(a json:// webhook, an SMTP server, a fake of ntfy's HTTP API)."""

from __future__ import annotations

import asyncio
import resource
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from qledge.operations import notifications as notify_ops

from _receivers import HttpReceiver, SmtpReceiver, text_of
from support import ADMIN, Server, make_runtime, unavailable, wait_terminal

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass

SECRET = "tok3nS3cretValue42"
FAST = {"notify_retry_base_s": "0.2", "notify_interval_s": "1",
        "notify_base_url": "http://qledge.local:5700/"}


@pytest.fixture
def fast_server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "state", **FAST)
    try:
        yield srv
    finally:
        srv.stop()


def channel(http: httpx.Client, name: str, url: str) -> str:
    r = http.post("/api/v1/notifications/channels", json={"name": name, "url": url})
    assert r.status_code == 201, r.text
    assert SECRET not in r.text and "url" not in r.json()
    return str(r.json()["id"])


def task(http: httpx.Client, name: str, command: str) -> str:
    r = http.post("/api/v1/tasks", json={"name": name, "command": command})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def run(http: httpx.Client, task_id: str) -> dict[str, Any]:
    r = http.post(f"/api/v1/tasks/{task_id}/runs")
    assert r.status_code == 202, r.text
    return wait_terminal(http, str(r.json()["run"]["id"]))


def deliveries(http: httpx.Client, **params: str) -> list[dict[str, Any]]:
    r = http.get("/api/v1/notifications/messages", params=params)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def wait_state(http: httpx.Client, want: set[str], timeout: float = 20.0,
               **params: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        items = deliveries(http, **params)
        if items and {m["state"] for m in items} <= want:
            return items
        if time.monotonic() > deadline:
            raise AssertionError(f"deliveries never reached {want}: {items}")
        time.sleep(0.05)


def test_failed_run_reaches_webhook_smtp_and_ntfy_once(fast_server: Server) -> None:
    http = fast_server.http
    hook, ntfy, smtp = HttpReceiver().start(), HttpReceiver().start(), SmtpReceiver().start()
    try:
        channel(http, "hook", f"json://127.0.0.1:{hook.port}/{SECRET}")
        channel(http, "ntfy", f"ntfy://127.0.0.1:{ntfy.port}/qledge-alerts")
        channel(http, "mail", smtp.url)
        listed = http.get("/api/v1/notifications/channels").text
        assert SECRET not in listed and "127.0.0.1" not in listed
        ok = run(http, task(http, "nightly-ok", "true"))  # succeeded: off by default
        assert ok["status"] == "succeeded"
        failed = run(http, task(http, "backup", "echo working; exit 3"))
        assert (failed["status"], failed["exit_code"]) == ("failed", 3)

        (got_hook,) = hook.wait(1)
        (got_ntfy,) = ntfy.wait(1)
        (got_mail,) = smtp.wait(1)
        expected = ["Task: backup (#", "Status: failed",
                    "Reason: the command exited on its own (EXITED)", "Exit code: 3",
                    "Duration: ", f"Run: http://qledge.local:5700/#/runs/{failed['id']}"]
        doc = got_hook.json()
        assert got_hook.path == f"/{SECRET}" and doc["title"] == "[qledge] backup: failed"
        assert doc["type"] == "failure"  # apprise's notify type, not "info"
        assert all(part in doc["message"] for part in expected), doc["message"]
        assert "working" not in doc["message"]  # no log lines unless the operator opts in
        doc = got_ntfy.json()
        assert (doc["topic"], doc["title"]) == ("qledge-alerts", "[qledge] backup: failed")
        assert all(part in doc["message"] for part in expected), doc["message"]
        assert got_mail["Subject"] == "[qledge] backup: failed"
        assert all(part in text_of(got_mail) for part in expected), text_of(got_mail)

        items = wait_state(http, {"sent"}, run_id=str(failed["id"]))
        assert len(items) == 3 and all(m["tries"] == 1 and m["error"] is None for m in items)
        time.sleep(1.5)  # exactly one each: nothing is sent twice
        assert (len(hook.requests), len(ntfy.requests), len(smtp.messages)) == (1, 1, 1)
        assert deliveries(http, run_id=str(ok["id"])) == []
    finally:
        hook.stop()
        ntfy.stop()
        smtp.stop()


def test_receiver_down_retries_then_delivers(fast_server: Server) -> None:
    http = fast_server.http
    hook = HttpReceiver()  # its port stays closed for now
    channel(http, "hook", f"json://127.0.0.1:{hook.port}/{SECRET}")
    failed = run(http, task(http, "flaky", "exit 1"))
    deadline = time.monotonic() + 20
    while True:
        (msg,) = deliveries(http, run_id=str(failed["id"]))
        if msg["state"] == "retrying" and msg["tries"] >= 2:
            break
        assert time.monotonic() < deadline, msg
        time.sleep(0.05)
    assert msg["error"] and SECRET not in msg["error"] and str(hook.port) not in msg["error"]
    hook.start()
    try:
        (got,) = hook.wait(1)
        assert got.json()["title"] == "[qledge] flaky: failed"
        (msg,) = wait_state(http, {"sent"}, run_id=str(failed["id"]))
        assert msg["error"] is None and msg["tries"] >= 3
    finally:
        hook.stop()


def test_given_up_after_the_bound_with_the_error_visible(tmp_path: Path) -> None:
    srv = Server(tmp_path / "state", **{**FAST, "notify_max_tries": "3"})
    hook = HttpReceiver().start()
    hook.status = 500
    try:
        channel(srv.http, "hook", f"json://127.0.0.1:{hook.port}/{SECRET}")
        failed = run(srv.http, task(srv.http, "doomed", "exit 2"))
        (msg,) = wait_state(srv.http, {"given_up"}, run_id=str(failed["id"]))
        assert msg["tries"] == 3 and len(hook.requests) == 3
        assert "500" in msg["error"] and SECRET not in msg["error"]
        time.sleep(1.0)
        assert len(hook.requests) == 3  # given up means no more sends
    finally:
        hook.stop()
        srv.stop()


def test_channel_api_validates_and_never_returns_the_url(fast_server: Server) -> None:
    http = fast_server.http
    for bad in ("not a url", "nosuchservice://x/y"):
        r = http.post("/api/v1/notifications/channels", json={"name": "x", "url": bad})
        assert (r.status_code, r.json()["field"]) == (422, "url"), r.text
    cid = channel(http, "hook", f"json://127.0.0.1:9/{SECRET}")
    r = http.post("/api/v1/notifications/channels", json={"name": "hook", "url": "json://a/b"})
    assert r.status_code == 409
    r = http.patch(f"/api/v1/notifications/channels/{cid}", json={"enabled": False})
    assert r.status_code == 200 and r.json()["enabled"] is False and SECRET not in r.text
    test = http.post(f"/api/v1/notifications/channels/{cid}/test")
    assert test.status_code == 200 and test.json()["ok"] is False
    assert SECRET not in test.text
    # a service's error names the host: a token there is redacted too
    named = channel(http, "named", f"json://{SECRET}.invalid/x")
    test = http.post(f"/api/v1/notifications/channels/{named}/test").json()
    assert test["ok"] is False and "***" in test["error"] and SECRET not in test["error"]
    assert http.delete(f"/api/v1/notifications/channels/{cid}").status_code == 204
    assert http.delete(f"/api/v1/notifications/channels/{cid}").status_code == 404
    anon = httpx.get(f"{fast_server.url}/api/v1/notifications/channels")
    assert anon.status_code == 401
    # apprise's own log lines name hosts and URLs: they never reach the worker's log
    assert SECRET not in fast_server.output.read_text()


def test_send_test_delivers_now(fast_server: Server) -> None:
    hook = HttpReceiver().start()
    try:
        cid = channel(fast_server.http, "hook", f"json://127.0.0.1:{hook.port}/t")
        r = fast_server.http.post(f"/api/v1/notifications/channels/{cid}/test")
        assert r.json() == {"ok": True, "error": None}
        assert hook.requests[0].json()["title"] == "[qledge] test message"
    finally:
        hook.stop()


def test_rules_per_task_override_streak_and_log_lines(fast_server: Server) -> None:
    http = fast_server.http
    hook = HttpReceiver().start()
    try:
        channel(http, "hook", f"json://127.0.0.1:{hook.port}/h")
        bad = http.put("/api/v1/notifications/rules", json={"statuses": ["exploded"]})
        assert (bad.status_code, bad.json()["field"]) == (422, "statuses")
        r = http.put("/api/v1/notifications/rules", json={"streak": 3, "log_lines": 2})
        assert r.status_code == 200, r.text
        noisy = task(http, "noisy", "echo one; echo two; echo three; exit 1")
        muted = task(http, "muted", "exit 1")
        assert http.put(f"/api/v1/notifications/rules/tasks/{muted}",
                        json={"muted": True}).status_code == 200
        assert run(http, muted)["status"] == "failed"
        for _ in range(4):  # the 3rd failure in a row is one message; the 4th none
            assert run(http, noisy)["status"] == "failed"
        (got,) = hook.wait(1)
        time.sleep(1.5)
        assert len(hook.requests) == 1
        doc = got.json()
        assert doc["title"] == "[qledge] noisy: failed, 3 times in a row"
        assert doc["message"].endswith("Last 2 log lines:\ntwo\nthree")
        rules = http.get("/api/v1/notifications/rules").json()
        assert rules["global"]["streak"] == 3 and rules["tasks"][muted] == {"muted": True}
    finally:
        hook.stop()


def test_metrics_and_auth(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    srv = Server(tmp_path / "state", **FAST)
    try:
        http = srv.http
        assert httpx.get(f"{srv.url}/metrics").status_code == 401

        families: set[str] = set()

        def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
            r = http.get("/metrics")
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
            families.update(f.name for f in text_string_to_metric_families(r.text))
            return {(s.name, tuple(sorted(s.labels.items()))): s.value
                    for fam in text_string_to_metric_families(r.text) for s in fam.samples}

        before = scrape()
        key = ("qledge_runs_finished_total", (("reason", "EXITED"), ("status", "failed")))
        assert key not in before
        tid = task(http, "m", "exit 4")
        run(http, tid)
        run(http, tid)
        after = scrape()
        assert after[key] == 2
        assert after[("qledge_run_duration_seconds_count", (("status", "failed"),))] == 2
        assert after[("qledge_receipts_consumed_total", ())] >= 2
        assert after[("qledge_db_size_bytes", ())] > 0
        assert after[("qledge_process_resident_memory_bytes", ())] > 10 << 20
        for name in ("qledge_queue_depth", "qledge_running_runs", "qledge_disk_pressure",
                     "qledge_notify_outbox_pending", "qledge_scheduler_lag_seconds",
                     "qledge_db_wal_size_bytes"):
            assert (name, ()) in after, name
        # the example dashboard and docs/metrics.md name only metrics that exist
        import json
        import re

        root = Path(__file__).resolve().parents[1] / "docs"
        names = {n for (n, _) in after} | families
        dash = json.loads((root / "grafana-qledge.json").read_text())
        used = {m for p in dash["panels"] for t in p["targets"]
                for m in re.findall(r"qledge_\w+", t["expr"])}
        used |= set(re.findall(r"qledge_\w+", (root / "metrics.md").read_text()))
        assert used and used <= names, used - names
        # no per-task labels: the label sets are the bounded ones only
        labels = {k for (_, ls) in after for (k, _) in ls}
        assert labels <= {"status", "reason", "action", "le"}, labels
    finally:
        srv.stop()
    public = Server(tmp_path / "public", metrics_public="true")
    try:
        assert httpx.get(f"{public.url}/metrics").status_code == 200
    finally:
        public.stop()


def test_script_send_reaches_the_channels_and_the_credential_ends_with_the_run(
        fast_server: Server) -> None:
    if shutil.which("node") is None:
        unavailable("node is not installed (scripts/bootstrap installs nodejs)")
    http = fast_server.http
    hook = HttpReceiver().start()
    ntfy = HttpReceiver().start()
    try:
        channel(http, "hook", f"json://127.0.0.1:{hook.port}/h")
        # A QingLong env keeps notifying: NTFY_URL/NTFY_TOPIC become an ntfy channel.
        for name, value in (("NTFY_URL", f"http://127.0.0.1:{ntfy.port}"),
                            ("NTFY_TOPIC", "ql-topic")):
            assert http.post("/api/v1/envs", json={"name": name, "value": value}
                             ).status_code == 201
        scripts = fast_server.state / "work" / "scripts"
        assert (scripts / "notify.py").is_file() and (scripts / "sendNotify.js").is_file()
        py = run(http, task(http, "py", "cd scripts && python3 -c 'from notify import send;"
                            " import os; print(send(\"hello\", \"from python\"));"
                            " print(os.environ[\"QL_NOTIFY_TOKEN\"])'"))
        assert py["status"] == "succeeded", py
        js = run(http, task(http, "js", "cd scripts && node -e \"require('./sendNotify')"
                            ".sendNotify('hi', 'from node')"
                            ".then(ok => process.exit(ok ? 0 : 1))\""))
        assert js["status"] == "succeeded", js
        got = {(r.json()["title"], r.json()["message"]) for r in hook.wait(2)}
        assert got == {("hello", "from python"), ("hi", "from node")}
        got_ntfy = {(r.json()["topic"], r.json()["message"]) for r in ntfy.wait(2)}
        assert got_ntfy == {("ql-topic", "from python"), ("ql-topic", "from node")}
        log = http.get(f"/api/v1/runs/{py['id']}/log").text
        assert log.splitlines()[0] == "True"
        token = log.splitlines()[1]
        # the run is over: its credential notifies no more; the admin token is no credential
        late = httpx.post(f"{fast_server.url}/notify", json={"title": "late"},
                          headers={"Authorization": f"Bearer {token}"})
        assert late.status_code == 403
        forged = httpx.post(f"{fast_server.url}/notify", json={"title": "x"},
                            headers={"Authorization": f"Bearer {token[:-2]}xx"})
        assert forged.status_code == 401
        admin = httpx.post(f"{fast_server.url}/notify", json={"title": "x"},
                           headers={"Authorization": f"Bearer {ADMIN}"})
        assert admin.status_code == 401
        events = http.get(f"/api/v1/runs/{py['id']}/events").text
        assert token not in events
    finally:
        hook.stop()
        ntfy.stop()


# -- a hostile or hung receiver (issue 35, findings 5 and 13) --------------------------

async def _until(check: Any, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.02)


async def test_a_huge_answer_never_enters_the_workers_memory(tmp_path: Path) -> None:
    # Finding 5: apprise read a receiver's whole answer into the worker (68 → 855 MB).
    rt = make_runtime(tmp_path / "state")
    await rt.start()
    hook = HttpReceiver()
    hook.answer_bytes = 400 << 20
    hook.start()
    try:
        before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = await rt.notifier.send_now(f"json://127.0.0.1:{hook.port}/{SECRET}",
                                            "title", "body")
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib) >> 10
        assert hook.requests, "the message never reached the receiver"
        assert grown_mib < 64, f"the worker's peak grew by {grown_mib} MiB"
        assert result.ok is False, result  # the capped sender could not hold the answer
        assert SECRET not in (result.error or "")
    finally:
        hook.stop()
        await rt.stop()


async def test_a_hung_receiver_holds_up_no_other_notification_work(tmp_path: Path) -> None:
    # Finding 13: one thread served sends, URL checks and test messages, and the URL's
    # own cto/rto set how long a send could take: a channel took 58 s to create.
    rt = make_runtime(tmp_path / "state", notify_interval_s="0.2",
                      notify_retry_base_s="0.2")
    await rt.start()
    rt.notifier.send_timeout_s = 3.0  # qledge's deadline (30 s), shortened for the test
    hung, fast = HttpReceiver(), HttpReceiver().start()
    hung.delay_s = 60.0
    hung.start()
    loop = asyncio.get_running_loop()
    try:
        hung_url = f"json://127.0.0.1:{hung.port}/h?cto=3600&rto=3600"  # "wait an hour"
        began = loop.time()
        test = asyncio.create_task(rt.notifier.send_now(hung_url, "t", "b"))
        await _until(lambda: hung.requests, 15.0)
        # What creating a channel waits for (the URL check) answers at once.
        checked = loop.time()
        assert await rt.notifier.valid(f"json://127.0.0.1:{fast.port}/f")
        assert loop.time() - checked < 2.0
        # The outbox: a message to the hung channel and one to a healthy channel.
        slow_ch = await notify_ops.add_channel(rt, "slow", hung_url, True)
        fast_ch = await notify_ops.add_channel(rt, "fast", f"json://127.0.0.1:{fast.port}/f",
                                               True)
        async with rt.db.write() as tx:
            await rt.notifier.enqueue(tx, kind="test", title="t", body="b",
                                      channel_ids=[slow_ch.id, fast_ch.id])
        queued = loop.time()
        await _until(lambda: fast.requests, 10.0)
        assert loop.time() - queued < 2.5  # not behind the hung send
        result = await test
        assert result.ok is False and result.error == "no answer within 3s"
        assert loop.time() - began < 10.0  # qledge's deadline, not the URL's hour
    finally:
        hung.stop()
        fast.stop()
        await rt.stop()


def test_creating_a_channel_never_waits_for_a_hung_test_send(client: TestClient) -> None:
    # Finding 13 through the API: a channel took 58 s to create while a test hung.
    client.app.state.runtime.notifier.send_timeout_s = 3.0  # type: ignore[attr-defined]
    hung = HttpReceiver()
    hung.delay_s = 60.0
    hung.start()
    try:
        r = client.post("/api/v1/notifications/channels", json={
            "name": "hung", "url": f"json://127.0.0.1:{hung.port}/h?cto=3600&rto=3600"})
        assert r.status_code == 201, r.text
        answers: list[httpx.Response] = []
        began = time.monotonic()
        sender = threading.Thread(target=lambda: answers.append(
            client.post(f"/api/v1/notifications/channels/{r.json()['id']}/test")))
        sender.start()
        deadline = time.monotonic() + 15.0
        while not hung.requests:
            assert time.monotonic() < deadline, "the test message never left"
            time.sleep(0.02)
        created = time.monotonic()
        r = client.post("/api/v1/notifications/channels",
                        json={"name": "other", "url": "json://127.0.0.1:9/x"})
        assert r.status_code == 201 and time.monotonic() - created < 2.0, r.text
        sender.join(15.0)
        assert answers[0].json() == {"ok": False, "error": "no answer within 3s"}
        assert time.monotonic() - began < 10.0  # qledge's deadline, not the URL's hour
    finally:
        hung.stop()
