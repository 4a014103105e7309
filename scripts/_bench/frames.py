"""WAL frames per attempt, by B-tree (docs/performance.md, Disk): where a run's
writes go, page by page, as the issue-24 accounting needs it.

The real runtime in-process (edge profile, real launcher), a task of `true`.
After a warm-up the automatic checkpoints are switched off and the WAL is reset,
so every page any commit writes stays in it as a frame. Three phases, each read
back from the WAL: --runs sequential attempts (spawn step 1, identity, result);
the supervisor ageing their journal entries (retention window 0); retention
deleting the runs past the task's keep_runs. Each frame's page number is
mapped to its table or index through SQLite's `dbstat`; pages `dbstat` does
not list are pointer-map or free-list pages ("other"). A page written by two
commits counts twice: that is what reaches the card before a checkpoint.

--cron spawn|round: every journal entry due at once, as at cron pace (retention
window 0 from after the warm-up, the reaper drained after each attempt), and
aged inside the attempt phase: by the next attempt's spawn step 1 (`spawn`, this
tree), or by a supervisor round after each attempt in a commit of its own with
step 1's ageing off (`round`, what the tree did before).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import struct
import sys
import tempfile
from collections import Counter
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "app"))

WAL_HEADER = 32
FRAME_HEADER = 24
KEEP = 5


def _frames(wal: Path, start: int) -> tuple[list[int], int, int]:
    """(page number of every frame after byte `start`, commits, end offset)."""
    data = wal.read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    step = FRAME_HEADER + page_size
    pages: list[int] = []
    commits = 0
    off = max(start, WAL_HEADER)
    while off + step <= len(data):
        pgno, db_size = struct.unpack(">II", data[off:off + 8])
        pages.append(pgno)
        commits += db_size != 0
        off += step
    return pages, commits, off


def _owners(db: Path) -> dict[int, str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {int(pgno): str(name) for name, pgno in
                conn.execute("SELECT name, pageno FROM dbstat")}
    finally:
        conn.close()


async def _measure(state: Path, runs: int, warmup: int,
                   cron: str = "") -> dict[str, tuple[Counter[str], int]]:
    from disk import run_once

    from qledge import settings
    from qledge.db import migrate
    from qledge.operations import create_task
    from qledge.paths import prepare_roots
    from qledge.runtime.lifecycle import Runtime
    from qledge.tasks.writable import task_fields

    conf = settings.load({
        "QLEDGE_STATE_DIR": str(state), "QLEDGE_ADMIN_TOKEN": "x" * 32,
        "QLEDGE_LAUNCHER": str(REPO / "build" / "launcher" / os.uname().machine / "ql-launch")})
    prepare_roots(conf)
    migrate.apply(conf.db_path)
    rt = Runtime(conf)
    await rt.start()
    await rt.supervision.stop()
    await rt.disk.loop.stop()
    task = await create_task(rt, task_fields({
        "name": "f", "command": "true", "env": {}, "labels": [], "concurrency": "allow",
        "keep_runs": KEEP}))

    for _ in range(warmup):
        await run_once(rt, task.id)
    await rt.reaper.drain()
    if cron:
        rt.supervisor.profile = msgspec.structs.replace(rt.profile, journal_retention_s=0.0)
        rt.supervisor.age_overdue_ms = 0  # every due entry, each round
        await rt.supervisor.round()  # the warm-up's entries, before the window
        if cron == "round":
            rt.executor.journal_cutoff = lambda now: None
        else:
            rt.supervisor.age_overdue_ms = 10**12  # spawn step 1 alone
    await rt.db.maintenance("PRAGMA wal_autocheckpoint=0")
    await rt.db.maintenance("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = Path(f"{conf.db_path}-wal")
    phases: dict[str, tuple[Counter[str], int]] = {}
    mark = 0

    def take(name: str) -> None:
        nonlocal mark
        pages, commits, mark = _frames(wal, mark)
        owners = _owners(conf.db_path)
        phases[name] = (Counter(owners.get(p, "other") for p in pages), commits)

    for _ in range(runs):
        await run_once(rt, task.id)
        if cron:
            await rt.reaper.drain()
        if cron == "round":
            await rt.supervisor.round()
    await rt.reaper.drain()
    take("attempt")
    rt.supervisor.profile = msgspec.structs.replace(rt.profile, journal_retention_s=0.0)
    rt.supervisor.age_overdue_ms = 0  # no spawn follows: the supervisor's backstop
    await rt.supervisor.round()
    take("journal ageing")
    while (await rt.disk.retention.round()).counts.get("runs_deleted"):
        pass
    await rt.db.sync()
    await rt.disk.retention.round()  # the files, now that the deletion is durable
    take("run deletion")
    await rt.stop()
    return phases


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--cron", choices=("spawn", "round"), default="",
                    help="journal entries due at once and aged within the attempt phase:"
                         " by spawn step 1, or by a round of their own after each attempt")
    args = ap.parse_args()
    (REPO / "build").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPO / "build") as tmp:
        phases = asyncio.run(_measure(Path(tmp) / "state", args.runs, args.warmup,
                                      args.cron))
    deleted = args.runs + args.warmup - KEEP
    per = {"attempt": args.runs, "journal ageing": args.runs + args.warmup,
           "run deletion": deleted}
    names = sorted({n for c, _ in phases.values() for n in c},
                   key=lambda n: -phases["attempt"][0].get(n, 0))
    print(f"{'WAL frames (1 page each), by B-tree':32} {'attempt':>9} {'ageing':>9} "
          f"{'deletion':>9}")
    print(f"{'(per attempt / per run)':32}")
    for name in names:
        cells = [phases[p][0].get(name, 0) / per[p] for p in per]
        print(f"{name:32} " + " ".join(f"{c:9.2f}" for c in cells))
    totals = [sum(phases[p][0].values()) / per[p] for p in per]
    commits = [phases[p][1] / per[p] for p in per]
    print(f"{'total':32} " + " ".join(f"{t:9.2f}" for t in totals))
    print(f"{'commits':32} " + " ".join(f"{c:9.2f}" for c in commits))
    print(f"over a run life: {sum(totals):.2f} frames; runs={args.runs} "
          f"warmup={args.warmup} deleted={deleted} (keep_runs {KEEP})"
          f"{f' cron={args.cron}' if args.cron else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
