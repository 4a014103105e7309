"""Soak: 200 tasks, random lengths and exit codes, triggered in waves while the
worker is SIGKILLed at random moments (≥ 10 times). Afterwards every run is
terminal with the exit code its task was told to produce, exactly one terminal
event pair each, no false success, no unjustified `lost`, no receipt left, an
empty journal backlog.

The random seed is printed first; `QLTEST_SOAK_SEED=<seed>` replays the same
tasks, waves and kill delays (the interleaving with the kernel stays live).
"""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import (
    Factory,
    api,
    events_of,
    make_task,
    ok,
    terminal_events,
    wait_backlog_drained,
    wait_until,
)

pytestmark = [pytest.mark.drill, pytest.mark.slow]

TASKS = 200
MIN_KILLS = 10
SIGNALS = (signal.SIGTERM, signal.SIGKILL, signal.SIGHUP, signal.SIGUSR1, signal.SIGINT)


def plan(rng: random.Random, n: int) -> list[tuple[str, int]]:
    """(command, expected exit code) per task: 0-2 s long, exit 0-255 or killed by a signal."""
    out = []
    for i in range(n):
        length = f"{rng.uniform(0, 2):.2f}"
        if rng.random() < 0.15:
            sig = rng.choice(SIGNALS)
            out.append((f"echo soak {i}; sleep {length}; kill -{sig.name[3:]} $$", 128 + sig))
        else:
            code = rng.choice([0, 0, 1, 255, rng.randrange(256)])
            out.append((f"echo soak {i}; sleep {length}; exit {code}", code))
    return out


class Killer(threading.Thread):
    """SIGKILLs the worker at random moments: mostly while it serves, sometimes while it
    is still starting (inside start-up recovery). Records each kill's wall time."""

    def __init__(self, app: Any, rng: random.Random) -> None:
        super().__init__(name="soak-killer", daemon=True)
        self.app = app
        self.rng = rng
        self.stop = threading.Event()
        self.kills: list[tuple[int, str]] = []  # (wall ms, "serving" | "starting")
        self.errors: list[BaseException] = []
        self.probe = httpx.Client(base_url=f"http://127.0.0.1:{app.port}", timeout=2)

    def ready(self) -> bool:
        try:
            return self.probe.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if self.rng.random() < 0.2:
                    phase = "starting"
                    pid = self.app.worker_pid()  # the new worker, maybe not ready yet
                    if self.stop.wait(self.rng.uniform(0.05, 0.6)):
                        break
                else:
                    phase = "serving"
                    wait_until(self.ready, 90, "worker ready (killer)", interval=0.05)
                    if self.stop.wait(self.rng.uniform(0.3, 2.5)):
                        break
                    pid = self.app.worker_pid()
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                self.kills.append((int(time.time() * 1000), phase))
                wait_until(lambda p=pid: self.app.worker_pid() != p, 60, "a new worker")
        except BaseException as exc:  # reported by the test thread
            self.errors.append(exc)
        finally:
            self.probe.close()


def all_runs(app: Any) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 200}
        if cursor:
            params["cursor"] = cursor
        page = ok(api(app, "GET", "/runs", params=params))
        runs.extend(page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            return runs


def test_soak_random_tasks_random_kills(appliance: Factory) -> None:
    seed = int(os.environ.get("QLTEST_SOAK_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\nsoak seed: QLTEST_SOAK_SEED={seed}")
    rng = random.Random(seed)
    t0 = time.monotonic()
    app = appliance(max_concurrent_attempts="64")
    specs = plan(rng, TASKS)
    expected: dict[str, int] = {}
    task_ids = []
    for i, (command, code) in enumerate(specs):
        task = make_task(app, command, name=f"soak-{i:03d}")
        expected[task["id"]] = code
        task_ids.append(task["id"])

    killer = Killer(app, random.Random(seed + 1))
    killer.start()
    order = list(task_ids)
    rng.shuffle(order)
    triggered = 0
    try:
        while order:
            size = rng.randint(10, 40)
            wave, order = order[:size], order[size:]
            for task_id in wave:
                # A POST cut by a kill may or may not have queued its run: retrying can
                # make a second run of the same task, which must meet the same rules.
                r = api(app, "POST", f"/tasks/{task_id}/runs", retry_s=90)
                assert r.status_code == 202, r.text
                triggered += 1
            time.sleep(rng.uniform(0.2, 2.0))
        wait_until(lambda: len(killer.kills) >= MIN_KILLS or bool(killer.errors), 120,
                   f"{MIN_KILLS} kills")
    finally:
        killer.stop.set()
        killer.join(90)
    assert not killer.errors, killer.errors
    chaos_s = time.monotonic() - t0

    def settled() -> list[dict[str, Any]] | None:
        runs = all_runs(app)
        return runs if all(r["terminal"] for r in runs) else None
    runs = wait_until(settled, 180, "every run terminal", interval=0.5)
    info = wait_backlog_drained(app)

    # -- invariants --------------------------------------------------------------------
    assert {r["task_id"] for r in runs} == set(task_ids), "a task never ran"
    statuses: collections.Counter[str] = collections.Counter()
    problems = []
    justified_lost = []
    kills_ms = [k for k, _ in killer.kills]
    for run in runs:
        code = expected[run["task_id"]]
        statuses[run["status"]] += 1
        evs = events_of(app, run["id"])
        counts = terminal_events(evs)
        if counts != {"attempt.finished": 1, "run.finished": 1}:
            problems.append(f"{run['id']}: terminal events {counts}")
        if run["status"] == "succeeded" and code != 0:
            problems.append(f"{run['id']}: FALSE SUCCESS (told to exit {code})")
        if run["status"] == "lost":
            detail = ok(api(app, "GET", f"/runs/{run['id']}"))
            attempt = detail["attempts"][-1]
            killed_during = any(attempt["created_at_ms"] - 50 <= k <= attempt["finished_at_ms"]
                                for k in kills_ms)
            if run["reason_code"] == "RECOVERY_SPAWN_UNCONFIRMED" and killed_during:
                # the worker died between preparing the attempt and recording its pid
                justified_lost.append(run["id"])
            else:
                problems.append(f"{run['id']}: lost ({run['reason_code']}), worker killed "
                                f"during the attempt: {killed_during}, told to exit {code}")
            continue
        want = "succeeded" if code == 0 else "failed"
        if (run["status"], run["exit_code"], run["reason_code"]) != (want, code, "EXITED"):
            problems.append(f"{run['id']}: {run['status']} exit {run['exit_code']} "
                            f"({run['reason_code']}), told to exit {code}")
    survived = sum(1 for r in runs if r["started_at_ms"] and r["finished_at_ms"] and any(
        r["started_at_ms"] < k < r["finished_at_ms"] for k in kills_ms))
    leftovers = wait_receipts_gone(app)
    summary = (f"seed {seed}: {len(runs)} runs of {TASKS} tasks ({triggered} triggers), "
               f"{len(killer.kills)} kills ({collections.Counter(p for _, p in killer.kills)}),"
               f" statuses {dict(statuses)}, runs alive across a kill {survived}, "
               f"justified lost {len(justified_lost)}, "
               f"chaos {chaos_s:.0f}s, total {time.monotonic() - t0:.0f}s, "
               f"journal {info['journal']}")
    print(summary)
    assert len(killer.kills) >= MIN_KILLS, summary
    assert survived >= MIN_KILLS, f"too few tasks were running across a kill: {summary}"
    assert not problems, "\n".join([summary, *problems[:40]])
    assert not leftovers, f"receipts left behind: {leftovers[:10]}"


def wait_receipts_gone(app: Any, timeout: float = 30) -> list[str]:
    """Receipt files still in the shards (late receipts of lost attempts are replayed
    into already_terminal and removed by the supervision rounds)."""
    root = Path(app.state) / "receipts"

    def left() -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.glob("[0-9a-f][0-9a-f]/*"))
    try:
        wait_until(lambda: not left(), timeout, "receipt shards empty", interval=0.5)
    except AssertionError:
        return left()
    return []
