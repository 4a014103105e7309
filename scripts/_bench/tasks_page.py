"""What the panel's Tasks page and overview cost the server (docs/performance.md,
"Tasks page"): GET /api/v1/task-list (the one request the Tasks page makes) and GET
/api/v1/task-overview for 24 h and 7 days, with 62 tasks and 1,054 runs, then with
100,000 runs over the last 6 days. Runs are written straight into the SQLite file (the
endpoints read them; running 100k real tasks would measure the launcher instead).
Server time is the request's wall time through the ASGI app in-process (no network),
the first call after the seed (cold), median and max of --repeat calls. Target: the
page and the overview <= 300 ms at that volume."""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "app"))

from starlette.testclient import TestClient  # noqa: E402

from qledge import settings  # noqa: E402
from qledge.clock import now_ms  # noqa: E402
from qledge.db import migrate  # noqa: E402
from qledge.http.app import create_app  # noqa: E402
from qledge.paths import prepare_roots  # noqa: E402

TOKEN = "b" * 43
TASKS = 62


def _seed_runs(db: Path, task_ids: list[str], n: int, span_ms: int) -> None:
    now = now_ms()
    rows = []
    for k in range(n):
        at = now - span_ms + (k * span_ms) // n
        failed = k % 23 == 0
        rows.append((f"bench{k:07d}", task_ids[k % len(task_ids)],
                     "failed" if failed else "succeeded", at, at, at + 500 + k % 9000,
                     1 if failed else 0))
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM runs")
        conn.executemany(
            "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, started_at_ms,"
            " finished_at_ms, exit_code) VALUES (?, ?, 'schedule', ?, ?, ?, ?, ?)", rows)


def _time(client: TestClient, path: str, repeat: int) -> tuple[float, float, float]:
    """(first, median, max): the first call right after the seed is the cold one (the
    connection's page cache empty for these pages; the OS cache is not dropped)."""
    took = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = client.get(path)
        took.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, r.text
    return took[0], statistics.median(took), max(took)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--big", type=int, default=100_000, help="runs in the second round")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="qledge-bench-tasks-") as tmp:
        conf = settings.load({"QLEDGE_STATE_DIR": tmp, "QLEDGE_ADMIN_TOKEN": TOKEN,
                              "QLEDGE_LAUNCHER": str(REPO / "build" / "launcher"
                                                     / os.uname().machine / "ql-launch")})
        prepare_roots(conf)
        migrate.apply(conf.db_path)
        with TestClient(create_app(conf, TOKEN),
                        headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            ids = []
            for i in range(TASKS):
                r = client.post("/api/v1/tasks", json={
                    "name": f"check-in-{i:02d}", "command": f"task c{i}.py",
                    "schedule": f"{i % 60} 7 * * *", "labels": ["daily"]})
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
            print(f"{'runs':>8}  {'endpoint':<38} {'first ms':>9} {'median ms':>10} {'max ms':>8}")
            for n, span in ((1_054, 86_400_000), (args.big, 6 * 86_400_000)):
                _seed_runs(conf.db_path, ids, n, span)
                for path in ("/api/v1/task-list?limit=25", "/api/v1/task-overview?window=24h",
                             "/api/v1/task-overview?window=7d"):
                    first, med, worst = _time(client, path, args.repeat)
                    verdict = "  <= 300 PASS" if worst <= 300 else "  <= 300 MISS"
                    print(f"{n:>8}  {path:<38} {first:>9.1f} {med:>10.1f} {worst:>8.1f}{verdict}")
    print(f"tasks={TASKS} repeat={args.repeat} python={sys.version.split()[0]}; the Tasks "
          "page makes this one request (tests/browser/test_tasks_page.py counts them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
