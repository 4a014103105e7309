"""QingLong's /open/dependencies shapes over the native dependency operations
(app/qledge/http/qinglong/dependencies.py; docs/qinglong-compat.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from _pkg_index import PackageServer
from test_dependencies import client, sources, wait_run  # noqa: F401 - `sources` is a fixture

pytestmark = pytest.mark.pg  # also run on PostgreSQL: scripts/test's QLTEST_BACKEND=pg pass


def token(c: Any, scopes: list[str]) -> dict[str, str]:
    r = c.post("/api/v1/apps", json={"name": "ql-" + "-".join(scopes), "scopes": scopes})
    assert r.status_code == 201, r.text
    body = r.json()
    got = c.get("/open/auth/token", params={"client_id": body["client_id"],
                                            "client_secret": body["client_secret"]})
    return {"Authorization": f"Bearer {got.json()['data']['token']}"}


def settle(c: Any, headers: dict[str, str], num: int, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (doc := c.get(f"/open/dependencies/{num}", headers=headers).json()["data"])[
            "status"] in (0, 3, 6):
        assert time.monotonic() < deadline, doc
        time.sleep(0.05)
    return dict(doc)


def test_qinglong_clients_add_list_reinstall_and_remove(
        tmp_path: Path, sources: PackageServer) -> None:  # noqa: F811
    with client(tmp_path / "state", sources) as c:
        h = token(c, ["dependencies"])
        assert c.get("/open/dependencies", headers=token(c, ["envs"])).status_code == 403
        r = c.post("/open/dependencies", headers=h, json=[
            {"name": "tinypkg==1.0.0", "type": 1, "remark": "for sign.py"},
            {"name": "tinyjs", "type": 0}])
        assert r.status_code == 200, r.text
        made = r.json()["data"]
        # Queued (6), or already installing (0) when the queue's run started before the
        # answer was read back (seen on PostgreSQL under load): both are true statuses.
        assert [(d["name"], d["type"]) for d in made] == [("tinypkg==1.0.0", 1), ("tinyjs", 0)]
        assert {d["status"] for d in made} <= {0, 6}, made
        assert made[0]["remark"] == "for sign.py" and isinstance(made[0]["id"], int)
        py = settle(c, h, made[0]["id"])
        assert py["status"] == 1 and "Successfully installed tinypkg-1.0.0" in py["log"][0]
        assert settle(c, h, made[1]["id"])["status"] == 1

        listed = c.get("/open/dependencies", headers=h, params={"type": "python3"}).json()
        assert [d["name"] for d in listed["data"]] == ["tinypkg==1.0.0"]
        found = c.get("/open/dependencies/", headers=h, params={"searchValue": "tiny"}).json()
        assert len(found["data"]) == 2

        # PUT changes the spec and reinstalls; reinstall and delete take id arrays.
        r = c.put("/open/dependencies", headers=h,
                  json={"id": made[0]["id"], "name": "tinypkg==1.1.0", "type": 1})
        assert r.status_code == 200, r.text
        assert settle(c, h, made[0]["id"])["status"] == 1
        native = c.get(f"/api/v1/dependencies/{made[0]['qledge_id']}").json()
        assert native["installed_version"] == "1.1.0"
        r = c.put("/open/dependencies/reinstall", headers=h, json=[made[1]["id"]])
        assert r.status_code == 200 and r.json()["data"][0]["status"] in (6, 0, 1)
        assert settle(c, h, made[1]["id"])["status"] == 1
        r = c.request("DELETE", "/open/dependencies", headers=h, json=[str(made[1]["id"])])
        assert r.status_code == 200, r.text
        assert settle(c, h, made[1]["id"])["status"] == 4  # removed

        # Refusals in QingLong's shape.
        for body, why in (([{"name": "curl", "type": 2}], "EXTRA_PACKAGES"),
                          ([{"name": "--pre x", "type": 1}], "looks like an option"),
                          ([{"name": "x", "type": 9}], "type must be 0"),
                          ([], "give 1 to 100")):
            r = c.post("/open/dependencies", headers=h, json=body)
            assert r.status_code == 400 and r.json()["code"] == 400, (body, r.text)
            assert why in r.json()["message"]
        assert c.get("/open/dependencies/999", headers=h).status_code == 404
        assert c.put("/open/dependencies/cancel", headers=h, json=[999]).status_code == 404
        r = c.put("/open/dependencies", headers=h,
                  json={"id": made[0]["id"], "name": "tinyjs", "type": 0})
        assert r.status_code == 400 and "type cannot change" in r.json()["message"]


def test_cancel_stops_the_run_of_a_dependency(tmp_path: Path,
                                              sources: PackageServer) -> None:  # noqa: F811
    sources.hold, sources.release = "tinypkg-1.1.0-py3-none-any.whl", type(sources.release)()
    sources.holding.clear()
    try:
        with client(tmp_path / "state", sources) as c:
            h = token(c, ["dependencies"])
            made = c.post("/open/dependencies", headers=h,
                          json=[{"name": "tinypkg", "type": 1}]).json()["data"]
            assert sources.holding.wait(60)
            assert c.put("/open/dependencies/cancel", headers=h,
                         json=[made[0]["id"]]).json() == {"code": 200}
            sources.release.set()
            doc = settle(c, h, made[0]["id"])
            assert doc["status"] == 7, doc  # cancelled
            run, _ = wait_run(c, doc["run_id"])
            assert run["status"] == "cancelled"
    finally:
        sources.hold = None
        sources.release.set()
