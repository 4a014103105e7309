"""Core runtime figures, side by side in one run (in-process runtime, real launcher,
real SQLite file with synchronous=FULL, uvloop):

1. task-start overhead: trigger (run committed `queued`) -> launcher running and
   watched (its identity held for the identity grace, contract.md §3 step 4, or
   committed when the grace is 0); p50/p99 over --runs sequential runs of `true`;
2. completion latency: launcher exit seen (pidfd readable) -> terminal events
   committed; p50/p99 over the same runs;
3. throughput: --burst runs of `true` triggered at once, wall time until all are
   terminal (profile standalone, max 16 concurrent);
4. consumer throughput on a backlog of --backlog valid receipts: batched (one
   transaction per page of 64, durable) vs one transaction per receipt.

Targets (2-core machine): completion p50 <= 10 ms; >= 100 task starts/s;
backlog >= 1,000 receipts/s durable. Misses print MISS; exit status is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "app"))

from qledge import ids, settings, transitions  # noqa: E402
from qledge.db import attempts, migrate, runs, tasks  # noqa: E402
from qledge.model import Trigger  # noqa: E402
from qledge.operations import create_task, trigger  # noqa: E402
from qledge.paths import prepare_roots  # noqa: E402
from qledge.receipts.codec import Receipt, encode, new_token, token_hash  # noqa: E402
from qledge.runtime.lifecycle import Runtime  # noqa: E402
from qledge.tasks.writable import task_fields  # noqa: E402


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _runtime(state: Path, **env: str) -> Runtime:
    conf = settings.load({"QLEDGE_STATE_DIR": str(state), "QLEDGE_ADMIN_TOKEN": "x" * 32,
                          "QLEDGE_LAUNCHER": str(REPO / "build" / "launcher" / os.uname().machine
                                                 / "ql-launch"),
                          **{f"QLEDGE_{k.upper()}": v for k, v in env.items()}})
    prepare_roots(conf)
    migrate.apply(conf.db_path)
    return Runtime(conf)


async def latency(state: Path, runs: int) -> dict[str, float]:
    rt = _runtime(state)
    await rt.start()
    started: dict[str, float] = {}
    exited: dict[str, float] = {}
    done: dict[str, float] = {}
    spawned_hook, exited_hook, finish = rt._spawned, rt._exited, rt._finish

    def on_spawned(result):  # type: ignore[no-untyped-def]
        started[result.attempt.run_id] = time.perf_counter()
        spawned_hook(result)

    def on_exited(attempt_id: str) -> None:
        exited[attempt_id] = time.perf_counter()
        exited_hook(attempt_id)

    async def on_finish(attempt_id: str) -> None:
        await finish(attempt_id)
        done[attempt_id] = time.perf_counter()

    rt.dispatcher.on_spawned = on_spawned
    rt.watcher._on_exit = on_exited
    rt._finish = on_finish  # type: ignore[method-assign]
    task = await create_task(rt, task_fields({
        "name": "b", "command": "true", "env": {}, "labels": [], "concurrency": "allow"}))
    start_ms: list[float] = []
    complete_ms: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run = await trigger(rt, task.id, Trigger.API)
        deadline = time.perf_counter() + 30
        while run.id not in started:
            # A spawn that fails (e.g. the launcher rebuilt under the bench by a
            # bootstrap) never reports: say so instead of waiting for ever.
            if time.perf_counter() > deadline:
                raise SystemExit(f"run {run.id} never spawned: see the log above")
            await asyncio.sleep(0)
        start_ms.append((started[run.id] - t0) * 1000)
        while True:
            async with rt.db.read() as tx:
                tried = await attempts.attempts_of_run(tx, run.id)
            if tried and tried[0].id in done:
                break
            await asyncio.sleep(0.0005)
        aid = tried[0].id
        complete_ms.append((done[aid] - exited[aid]) * 1000)
    await rt.stop()
    return {"start_p50": _pct(start_ms, 50), "start_p99": _pct(start_ms, 99),
            "complete_p50": _pct(complete_ms, 50), "complete_p99": _pct(complete_ms, 99)}


async def throughput(state: Path, burst: int) -> float:
    rt = _runtime(state, profile="standalone")
    await rt.start()
    task = await create_task(rt, task_fields({
        "name": "b", "command": "true", "env": {}, "labels": [], "concurrency": "allow"}))
    t0 = time.perf_counter()
    for _ in range(burst):
        await trigger(rt, task.id, Trigger.API)
    while True:
        async with rt.db.read() as tx:
            left = await tx.one("SELECT COUNT(*) AS n FROM runs WHERE status IN"
                                " ('queued', 'running')")
        if left is not None and left["n"] == 0:
            break
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - t0
    async with rt.db.read() as tx:
        ok = await tx.one("SELECT COUNT(*) AS n FROM runs WHERE status = 'succeeded'")
    await rt.stop()
    assert ok is not None and ok["n"] == burst, "every burst run must succeed"
    return burst / elapsed


async def backlog(state: Path, n: int, batch: int) -> float:
    rt = _runtime(state)
    await rt.start()
    # Only the consumer is measured: no supervisor, dispatcher or retention rounds
    # competing for the writer (retention would start deleting the 2,000 runs).
    await rt.supervision.stop()
    await rt.dispatcher.stop()
    await rt.disk.stop()
    aids: list[str] = []
    async with rt.db.write() as tx:
        task = await tasks.create_task(tx, ids.uuid7(), task_fields({
            "name": "b", "command": "true", "env": {}, "labels": []}), 1)
        for _ in range(n):
            run = await runs.create_run(tx, ids.uuid7(), task.id, Trigger.API, 1)
            aid = ids.uuid7()
            token = new_token()
            att = await attempts.prepare_attempt(
                tx, run, attempt_id=aid, owner=rt.node_id, executor_type="local_process",
                token_hash=token_hash(token), deadline_at_ms=None,
                log_path=f"{aid[-2:]}/{aid}.log", receipt_path=rt.receipts.relative_path(aid),
                now_ms=2)
            run = await runs.get_run(tx, run.id)
            tr = transitions.attempt_started(run, att, pid=1, start_time=1, boot_id="b",
                                             now_ms=3)
            await runs.apply(tx, run, tr, 3)
            shard = rt.receipts.ensure_shard(aid)
            (shard / f"{aid}.json").write_bytes(encode(Receipt(
                schema_version=1, run_id=run.id, attempt_id=aid, callback_sequence=1,
                token=token, started_at_ms=5, finished_at_ms=6, exit_code=0)))
            aids.append(aid)
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        results = await rt.consumer.consume_many(aids[i:i + batch])
        assert all(r.value == "applied" for r in results.values())
    elapsed = time.perf_counter() - t0
    await rt.stop()
    return n / elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--backlog", type=int, default=2000)
    args = ap.parse_args()
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with tempfile.TemporaryDirectory(dir=REPO / "build") as tmp, runner:
        root = Path(tmp)
        lat = runner.run(latency(root / "lat", args.runs))
        tput = runner.run(throughput(root / "tput", args.burst))
        batched = runner.run(backlog(root / "b1", args.backlog, 64))
        single = runner.run(backlog(root / "b2", min(args.backlog, 500), 1))

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    print(f"{'figure':44} {'value':>12}  target")
    print(f"{'task start (trigger -> running) p50 ms':44} {lat['start_p50']:12.2f}")
    print(f"{'task start (trigger -> running) p99 ms':44} {lat['start_p99']:12.2f}")
    print(f"{'completion (exit -> committed) p50 ms':44} {lat['complete_p50']:12.2f}  <= 10 "
          f"{verdict(lat['complete_p50'] <= 10)}")
    print(f"{'completion (exit -> committed) p99 ms':44} {lat['complete_p99']:12.2f}")
    print(f"{'throughput, true tasks/s (burst)':44} {tput:12.1f}  >= 100 "
          f"{verdict(tput >= 100)}")
    print(f"{'backlog consumption, receipts/s (batch 64)':44} {batched:12.1f}  >= 1000 "
          f"{verdict(batched >= 1000)}")
    print(f"{'backlog consumption, receipts/s (1 per tx)':44} {single:12.1f}  "
          f"(batching gains x{batched / single:.1f})")
    print(f"runs={args.runs} burst={args.burst} backlog={args.backlog} "
          f"python={sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
