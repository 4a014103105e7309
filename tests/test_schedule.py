"""GET /api/v1/cron/preview with a task's time zone (issue #37: one clock rule)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from starlette.testclient import TestClient


def test_preview_in_the_tasks_zone_fires_at_its_local_hour(client: TestClient) -> None:
    r = client.get("/api/v1/cron/preview",
                   params={"schedule": "0 8 * * *", "n": 3, "tz": "Asia/Shanghai"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["timezone"], body["zone_source"], body["utc_offset_s"]) == (
        "Asia/Shanghai", "task", 8 * 3600)
    for tick in body["next"]:
        assert tick["at"].endswith("T08:00:00+08:00"), tick
        utc = datetime.fromtimestamp(tick["at_ms"] / 1000, ZoneInfo("UTC"))
        assert (utc.hour, utc.minute) == (0, 0)


def test_an_empty_zone_means_the_appliances(client: TestClient) -> None:
    plain = client.get("/api/v1/cron/preview", params={"schedule": "0 8 * * *"}).json()
    empty = client.get("/api/v1/cron/preview",
                       params={"schedule": "0 8 * * *", "tz": " "}).json()
    assert plain["zone_source"] == empty["zone_source"] == "appliance"
    assert plain["timezone"] == empty["timezone"] and plain["next"] == empty["next"]


def test_an_unknown_zone_is_refused_with_a_code(client: TestClient) -> None:
    for tz in ("Mars/Olympus", "x" * 65):
        r = client.get("/api/v1/cron/preview", params={"schedule": "0 8 * * *", "tz": tz})
        assert r.status_code == 422 and r.json()["field"] == "tz", r.text
    r = client.get("/api/v1/cron/preview",
                   params={"schedule": "0 8 * * *", "tz": "Mars/Olympus"})
    assert r.json()["error"] == "UNKNOWN_ZONE" and "Mars/Olympus" in r.json()["message"]
