"""Sustained load on the edge profile: does the bookkeeping keep up?

    .venv/bin/python scripts/_bench/load.py [--minutes 30] [--rate 120] [--sample-s 60]

An in-process runtime with the edge profile's own intervals (supervision round
30 s at 2 × 8 journal rows, retention round 120 s at 4 × 16, journal retention
2 min), the real launcher and a real SQLite file on disk. --rate runs a minute
of `echo` are triggered at a steady pace across four tasks: one with
`keep_runs: 3`, three with the profile's 50. Every --sample-s it prints the
receipt journal (rows by kind), the runs (all, the keep-3 task's, active),
the log and receipt files on disk and the database size, and at the end
whether each stayed bounded: its last third of samples no higher than its
middle third, plus the bounds the design gives (docs/storage.md,
docs/retention.md). Figures only; the exit status is always 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "app"))

from qledge import ids, settings  # noqa: E402
from qledge.db import journal, migrate  # noqa: E402
from qledge.db import tasks as task_rows  # noqa: E402
from qledge.model import Trigger  # noqa: E402
from qledge.operations import trigger  # noqa: E402
from qledge.paths import prepare_roots  # noqa: E402
from qledge.runtime.lifecycle import Runtime  # noqa: E402
from qledge.tasks.writable import task_fields  # noqa: E402

COLUMNS = ("min", "runs", "keep3", "keep3@ret", "active", "j.active", "j.settled", "j.terminal",
           "j.quar", "logs", "receipts", "db KiB", "wal KiB", "ret.del", "lost")


def _files(root: Path, suffix: str) -> int:
    n = 0
    for shard in os.scandir(root):
        if shard.is_dir(follow_symlinks=False) and not shard.name.startswith("."):
            n += sum(1 for e in os.scandir(shard.path) if e.name.endswith(suffix))
    return n


def _kib(path: Path) -> int:
    try:
        return path.stat().st_size // 1024
    except FileNotFoundError:
        return 0


async def _count(rt: Runtime, sql: str, *params: object) -> int:
    async with rt.db.read() as tx:
        row = await tx.one(sql, params)
    return int(row[0] or 0) if row else 0


async def main_async(args: argparse.Namespace, state: Path) -> None:
    conf = settings.load({
        "QLEDGE_STATE_DIR": str(state), "QLEDGE_ADMIN_TOKEN": "x" * 32,
        "QLEDGE_PROFILE": "edge",
        "QLEDGE_LAUNCHER": str(REPO / "build" / "launcher" / os.uname().machine / "ql-launch")})
    prepare_roots(conf)
    migrate.apply(conf.db_path)
    rt = Runtime(conf)
    p = rt.profile
    print(f"profile {p.name}: supervision every {p.round_interval_s:g} s ({p.pages} x "
          f"{p.page_size} journal rows of file work), retention every "
          f"{p.retention_interval_s:g} s ({p.retention_pages} x {p.retention_page_size}), "
          f"journal retention {p.journal_retention_s:g} s, max {p.max_concurrent_attempts} "
          f"attempts; {args.rate} runs/min for {args.minutes:g} min")
    await rt.start()
    after_retention: list[int] = []
    deleted = [0]
    tasks: list[str] = []
    try:
        async with rt.db.write() as tx:
            for i in range(4):
                fields = {"name": f"load-{i}", "command": f"echo run of task {i}", "env": {},
                          "labels": [], "concurrency": "allow"}
                if i == 0:
                    fields["keep_runs"] = 3
                task = await task_rows.create_task(tx, ids.uuid7(), task_fields(fields), 1)
                tasks.append(task.id)
        keep3 = tasks[0]
        real_round = rt.disk.retention.round

        async def counted_round():  # type: ignore[no-untyped-def]
            report = await real_round()
            deleted[0] += report.counts.get("runs_deleted", 0)
            after_retention.append(await _count(
                rt, "SELECT COUNT(*) FROM runs WHERE task_id = ?", keep3))
            return report

        rt.disk.retention.round = counted_round  # type: ignore[method-assign]
        print("  ".join(f"{c:>9}" for c in COLUMNS))
        samples: list[tuple[float, ...]] = []
        interval = 60.0 / args.rate
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        next_sample = t0
        i = 0
        while True:
            now = time.monotonic()
            if now >= next_sample or now >= end:
                samples.append(await _sample(rt, keep3, after_retention, deleted[0], now - t0))
                next_sample += args.sample_s
                if now >= end:
                    break
                continue
            target = t0 + i * interval
            if now < target:
                await asyncio.sleep(min(target, next_sample, end) - now)
                continue
            await trigger(rt, tasks[i % len(tasks)], Trigger.API)
            i += 1
        _summary(samples, after_retention, rt, args, i)
    finally:
        await rt.stop()


async def _sample(rt: Runtime, keep3: str, after_retention: list[int], deleted: int,
                  elapsed_s: float) -> tuple[float, ...]:
    conf = rt.settings
    journal = await _journal(rt)
    row = (
        elapsed_s / 60,
        await _count(rt, "SELECT COUNT(*) FROM runs"),
        await _count(rt, "SELECT COUNT(*) FROM runs WHERE task_id = ?", keep3),
        after_retention[-1] if after_retention else 0,
        await _count(rt, "SELECT COUNT(*) FROM runs WHERE status = 'queued'"
                         " OR status = 'running'"),
        journal["active"], journal["settled"], journal["terminal"], journal["quarantined"],
        _files(conf.logs_path, ".log"), _files(conf.receipts_path, ".json"),
        _kib(conf.db_path), _kib(Path(f"{conf.db_path}-wal")), deleted,
        await _count(rt, "SELECT COUNT(*) FROM runs WHERE status = 'lost'"),
    )
    print(f"{row[0]:>9.1f}  " + "  ".join(f"{v:>9}" for v in row[1:]), flush=True)
    return row


async def _journal(rt: Runtime) -> dict[str, int]:
    async with rt.db.read() as tx:
        counts = await journal.journal_counts(tx)
    return {k: counts.get(k, 0) for k in ("active", "settled", "terminal", "quarantined")}


def _summary(samples: list[tuple[float, ...]], after_retention: list[int], rt: Runtime,
             args: argparse.Namespace, triggered: int) -> None:
    p = rt.profile
    rate_s = args.rate / 60
    journal_bound = rate_s * (p.journal_retention_s + p.round_interval_s) + p.pages * p.page_size
    keep3_after = 3 + rate_s / 4 * (p.journal_retention_s + p.round_interval_s)
    print()
    print(f"triggered {triggered} runs in {args.minutes:g} min; "
          f"{rt.supervision.rounds} supervision rounds, {rt.disk.loop.rounds} retention rounds")
    third = max(1, len(samples) // 3)
    middle, last = samples[third:2 * third], samples[2 * third:]
    for name, col in (("journal rows", None), ("runs", 1), ("keep-3 task's runs", 2),
                      ("log files", 9), ("receipt files", 10), ("database KiB", 11)):
        values = [sum(s[5:9]) if col is None else s[col] for s in samples]
        mid = [sum(s[5:9]) if col is None else s[col] for s in middle] or [0]
        end = [sum(s[5:9]) if col is None else s[col] for s in last] or [0]
        verdict = "bounded" if max(end) <= max(mid) * 1.1 + 5 else "GROWING"
        print(f"  {name:<22} max {max(values):>8.0f}   middle third max {max(mid):>8.0f}   "
              f"last third max {max(end):>8.0f}   {verdict}")
    if after_retention:
        print(f"  keep-3 task right after each retention round: max {max(after_retention)}, "
              f"last {after_retention[-1]} (design: 3 + runs whose journal row is younger "
              f"than retention + a round = {keep3_after:.0f})")
    print(f"  journal rows design bound: rate x (journal retention + round) + one page "
          f"= {journal_bound:.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=120, help="runs per minute")
    parser.add_argument("--sample-s", type=float, default=60.0)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="ql-load-", dir=REPO / "build"))
    try:
        try:
            import uvloop

            runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        except ImportError:
            runner = asyncio.Runner()
        with runner:
            runner.run(main_async(args, state))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
