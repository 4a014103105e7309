"""The overview's grouped query (db/task_lists.py `overview`: one pass, the medians by
row number) against a straightforward reading of every run, on random data: the same
buckets, failed tasks and slowest tasks, exactly. A real database (the `db` fixture:
SQLite, or PostgreSQL under QLTEST_BACKEND=pg)."""

from __future__ import annotations

import random
import statistics
from typing import Any

import msgspec

from qledge.db import task_lists
from qledge.db.interface import Database

STATUSES = ("succeeded", "failed", "timed_out", "lost", "cancelled", "queued", "running",
            "blocked")
HOUR = 3_600_000


def _plain(runs: list[dict[str, Any]], names: dict[str, str], since: int, bucket: int,
           n: int) -> dict[str, Any]:
    """What the overview must say, computed the obvious way from every run."""
    mine = [r for r in runs if r["parent"] is None and r["at"] >= since]
    counts: list[dict[str, int]] = [{} for _ in range(n)]
    for r in mine:
        b = (r["at"] - since) // bucket
        if b < n:
            counts[b][r["status"]] = counts[b].get(r["status"], 0) + 1
    failed = []
    for tid in names:
        bad = [r for r in mine if r["task"] == tid and r["status"] in task_lists.FAILED]
        if bad:
            failed.append({"task_id": tid, "name": names[tid], "failures": len(bad),
                           "last_failed_at_ms": max(r["at"] for r in bad),
                           "last_failed_run_id": max(r["id"] for r in bad)})
    failed.sort(key=lambda f: (-f["last_failed_at_ms"], f["task_id"]))
    slow = []
    for tid in names:
        ds = [r["end"] - r["start"] for r in mine if r["task"] == tid
              and r["start"] is not None and r["end"] is not None]
        if ds:
            slow.append({"task_id": tid, "name": names[tid], "runs": len(ds),
                         "p50_ms": int(statistics.median(ds)), "max_ms": max(ds)})
    slow.sort(key=lambda s: (-s["max_ms"], s["task_id"]))
    return {"since_ms": since, "bucket_ms": bucket,
            "buckets": [{"start_ms": since + i * bucket, "counts": c}
                        for i, c in enumerate(counts)],
            "failed": failed[:50], "slowest": slow[:10]}


async def test_the_grouped_overview_equals_the_plain_one(db: Database) -> None:
    rng = random.Random(37)
    now = 1_800_000_000_000
    names = {f"task{i:02d}": f"job {i}" for i in range(70)}
    runs: list[dict[str, Any]] = []
    for k in range(4000):
        at = now - rng.randrange(9 * 24 * HOUR)  # some before either window
        status = rng.choice(STATUSES)
        start = at + rng.randrange(1000) if status not in ("queued", "blocked") else None
        end = (start + rng.choice((0, 1, 7, rng.randrange(600_000)))
               if start is not None and status not in ("running",) and rng.random() > 0.05
               else None)
        parent = runs[rng.randrange(len(runs))]["id"] if runs and rng.random() < 0.1 else None
        runs.append({"id": f"run{k:05d}", "task": rng.choice(list(names)), "status": status,
                     "at": at, "start": start, "end": end, "parent": parent})
    async with db.write() as tx:
        for tid, name in names.items():
            await tx.execute("INSERT INTO tasks (id, name, command, labels_json,"
                             " created_at_ms, updated_at_ms) VALUES (?, ?, 'x', '[]', 1, 1)",
                             (tid, name))
        for r in runs:
            await tx.execute(
                "INSERT INTO runs (id, task_id, trigger, status, created_at_ms, started_at_ms,"
                " finished_at_ms, parent_run_id, conc_index) VALUES (?, ?, 'manual', ?, ?, ?,"
                " ?, ?, ?)", (r["id"], r["task"], r["status"], r["at"], r["start"], r["end"],
                              r["parent"], 1 if r["parent"] else None))
    for bucket, n in ((HOUR, 24), (24 * HOUR, 7)):
        since = (now // bucket + 1) * bucket - n * bucket
        async with db.read() as tx:
            got = msgspec.to_builtins(await task_lists.overview(tx, since, bucket, n))
        want = _plain(runs, names, since, bucket, n)
        assert got == want
        assert got["failed"] and got["slowest"]  # the data exercised both lists
