"""Recovery figures under the real supervised appliance, per profile, side by side.

Setup: --running tasks that sleep past the restart, and --waiting short tasks
that finish while the worker is frozen (SIGSTOP), so their receipts wait on
disk. Then the worker is SIGKILLed and supervisord restarts it. Printed:
kill -9 -> /readyz 200; restart -> journal backlog of finished work 0; and for
the long tasks, released after the restart, launcher exit -> terminal event
(re-attached pidfds, not the periodic round). Targets: ready <= 2.5 s; exit
consumed <= 1 s after the restart.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from _appliance import Appliance  # noqa: E402
from conftest import free_port  # noqa: E402


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.02)


def one(profile: str, running: int, waiting: int, state: Path) -> dict[str, float]:
    app = Appliance(state, free_port(), profile=profile,
                    max_concurrent_attempts=str(running + waiting + 8))
    app.start()
    gates: dict[str, int] = {}
    try:
        http = app.http
        long_task = http.post("/api/v1/tasks", json={
            "name": "long", "concurrency": "allow",
            "command": 'flock -s "$HOME/gate-long" true'}).json()["id"]
        short_task = http.post("/api/v1/tasks", json={
            "name": "short", "concurrency": "allow",
            "command": 'flock -s "$HOME/gate-short" true'}).json()["id"]
        # Tasks block in flock(2) — no CPU, no polling — until the bench lets go.
        gates = {name: os.open(state / "work" / f"gate-{name}", os.O_CREAT | os.O_RDWR, 0o600)
                 for name in ("short", "long")}
        for fd in gates.values():
            fcntl.flock(fd, fcntl.LOCK_EX)
        longs = [http.post(f"/api/v1/tasks/{long_task}/runs").json()["run"]["id"]
                 for _ in range(running)]
        shorts = [http.post(f"/api/v1/tasks/{short_task}/runs").json()["run"]["id"]
                  for _ in range(waiting)]

        def all_running() -> bool:
            page = http.get("/api/v1/runs", params={"status": "queued", "limit": 1}).json()
            return not page["items"]

        _wait(all_running, 120, "every run spawned")
        pid = app.worker_pid()
        os.kill(pid, signal.SIGSTOP)
        os.close(gates.pop("short"))
        receipts = state / "receipts"
        _wait(lambda: sum(1 for _ in receipts.glob("*/*.json")) >= waiting, 60,
              "the short tasks' receipts")
        t_kill = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: app.worker_pid() != pid and app.ready(), 60, "/readyz")
        ready_s = time.monotonic() - t_kill

        def drained() -> bool:
            return not any(receipts.glob("*/*.json"))

        _wait(drained, 60, "backlog 0")
        drain_s = time.monotonic() - t_kill
        for run_id in shorts:
            assert http.get(f"/api/v1/runs/{run_id}").json()["status"] == "succeeded"
        os.close(gates.pop("long"))
        _wait(lambda: all(http.get(f"/api/v1/runs/{r}").json()["terminal"] for r in longs),
              60, "the long tasks to end")
        lags = []
        for run_id in longs:
            run = http.get(f"/api/v1/runs/{run_id}").json()
            assert run["status"] == "succeeded", run
            events = http.get(f"/api/v1/runs/{run_id}/events").json()["items"]
            fin = next(e for e in events if e["type"] == "run.finished")
            lags.append(fin["at_ms"] - run["finished_at_ms"])
        result = {"ready_s": ready_s, "drain_s": drain_s, "exit_lag_max_ms": max(lags),
                        "exit_lag_p50_ms": sorted(lags)[len(lags) // 2]}
    except BaseException:
        print(app.log_tail(80), file=sys.stderr)
        raise
    finally:
        for fd in gates.values():
            os.close(fd)
        app.stop()  # also kills any task still running under this state dir
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--running", type=int, default=64)
    ap.add_argument("--waiting", type=int, default=500)
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(dir=REPO / "build") as tmp:
        for profile in ("edge", "standalone"):
            results[profile] = one(profile, args.running, args.waiting, Path(tmp) / profile)
    print(f"{'figure':48} {'edge':>10} {'standalone':>11}  target")
    rows = [("kill -9 -> /readyz 200, s", "ready_s", "<= 2.5", lambda v: v <= 2.5),
            ("kill -9 -> waiting receipt files deleted, s", "drain_s", "", None),
            ("long task exit -> terminal event, p50 ms", "exit_lag_p50_ms", "", None),
            ("long task exit -> terminal event, max ms", "exit_lag_max_ms", "<= 1000",
             lambda v: v <= 1000)]
    for label, key, target, ok in rows:
        e, s = results["edge"][key], results["standalone"][key]
        verdict = "" if ok is None else ("PASS" if ok(e) and ok(s) else "MISS")
        print(f"{label:48} {e:10.2f} {s:11.2f}  {target} {verdict}")
    print(f"running={args.running} waiting={args.waiting} (receipts on disk at the kill)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
