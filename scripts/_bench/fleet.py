"""Fleet figures (issue 23): PostgreSQL with one and three nodes vs the embedded SQLite.

Every configuration is the real supervised appliance (supervisord, worker, real
launchers), standalone limits, measured side by side in one run:

* sqlite    one node on its embedded SQLite (today's appliance);
* pg x1     one node on a throwaway PostgreSQL (its own cluster, fsync on);
* pg x3     three nodes on that PostgreSQL, all claiming from one queue.

1. claim -> running: --runs runs of `true`, one after another, each triggered on
   the first node: run committed `queued` (run.created_at_ms) -> its attempt
   running with its identity recorded (attempt.started_at_ms), from the rows the
   nodes wrote (one clock: every node is on this machine). On PostgreSQL the run
   is claimed by whichever node wakes first (LISTEN/NOTIFY), as in a fleet.
2. completion: launcher exit (attempt.finished_at_ms, the receipt's own time) ->
   result committed (its `run.finished` event, stamped in that transaction); p50/p99
   over the same runs.
3. throughput: --burst runs of `true` triggered at once, wall time until all are
   terminal, as runs per second.

Printed with ratios to SQLite. No targets: the choice of backend is about
sharing, not speed (docs/fleet.md); the figures say what sharing costs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from _pg import Cluster, pg_bindir, psql  # noqa: E402

from _appliance import Appliance  # noqa: E402
from conftest import free_port  # noqa: E402

SECRET = "bench-fleet-cluster-secret-0123456789abcdef"


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _start(root: Path, nodes: int, dsn: str | None) -> list[Appliance]:
    apps = []
    for i in range(nodes):
        env = {"profile": "standalone", "max_concurrent_attempts": "16",
               "round_interval_s": "1"}
        if dsn is not None:
            env.update(profile="cluster-control", database_url=dsn, cluster_secret=SECRET,
                       node_name=f"n{i + 1}")
        app = Appliance(root / f"n{i + 1}", free_port(), **env)
        app.start(60)
        apps.append(app)
    return apps


def _terminal(app: Appliance, run_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run: dict[str, Any] = app.http.get(f"/api/v1/runs/{run_id}").json()
        if run["terminal"]:
            return run
        time.sleep(0.01)
    raise SystemExit(f"bench: run {run_id} not terminal after {timeout}s")


def measure(root: Path, nodes: int, dsn: str | None, runs: int, burst: int
            ) -> dict[str, float]:
    apps = _start(root, nodes, dsn)
    try:
        first = apps[0].http
        task = first.post("/api/v1/tasks", json={"name": "t", "command": "true",
                                                  "concurrency": "allow"}).json()["id"]
        claim: list[float] = []
        done: list[float] = []
        for _ in range(runs):
            run_id = first.post(f"/api/v1/tasks/{task}/runs").json()["run"]["id"]
            run = _terminal(apps[0], run_id)
            attempt = run["attempts"][-1]
            claim.append(attempt["started_at_ms"] - run["created_at_ms"])
            # The result's commit: its run.finished event is stamped in that transaction.
            evs = first.get(f"/api/v1/runs/{run_id}/events").json()["items"]
            at = next(e["at_ms"] for e in evs if e["type"] == "run.finished")
            done.append(at - attempt["finished_at_ms"])
        t0 = time.monotonic()
        ids = [first.post(f"/api/v1/tasks/{task}/runs").json()["run"]["id"]
               for _ in range(burst)]
        for run_id in ids:
            _terminal(apps[0], run_id, 120)
        wall = time.monotonic() - t0
        return {"claim_p50": _pct(claim, 50), "claim_p99": _pct(claim, 99),
                "done_p50": _pct(done, 50), "done_p99": _pct(done, 99),
                "burst_per_s": burst / wall}
    finally:
        for app in apps:
            app.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--burst", type=int, default=60)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qlbench-fleet-"))
    cluster = Cluster(pg_bindir(), free_port())  # scripts/bootstrap installs PostgreSQL
    cluster.start()
    results: dict[str, dict[str, float]] = {}
    try:
        results["sqlite"] = measure(root / "sqlite", 1, None, args.runs, args.burst)
        for nodes in (1, 3):
            name = f"pg{nodes}"
            db = f"bench_{name}"
            psql(cluster.dsn, f"CREATE DATABASE {db} TEMPLATE template0")
            dsn = cluster.dsn.rsplit("/", 1)[0] + "/" + db
            results[f"pg x{nodes}"] = measure(root / name, nodes, dsn, args.runs, args.burst)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    base = results["sqlite"]
    print(f"runs={args.runs} sequential, burst={args.burst}; times in ms")
    print(f"{'':8} {'claim p50':>10} {'p99':>8} {'commit p50':>11} {'p99':>8} {'burst/s':>8}")
    for name, r in results.items():
        print(f"{name:8} {r['claim_p50']:10.1f} {r['claim_p99']:8.1f} {r['done_p50']:11.1f}"
              f" {r['done_p99']:8.1f} {r['burst_per_s']:8.1f}")
    for name, r in results.items():
        if name == "sqlite":
            continue
        claim = r["claim_p50"] / max(base["claim_p50"], 0.1)
        commit = r["done_p50"] / max(base["done_p50"], 0.1)
        print(f"ratio {name} / sqlite: claim p50 x{claim:.2f}, commit p50 x{commit:.2f},"
              f" burst x{r['burst_per_s'] / base['burst_per_s']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
