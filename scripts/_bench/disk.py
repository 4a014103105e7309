"""Disk write amplification per attempt (docs/performance.md, Disk), edge profile.

What is measured, over --runs sequential attempts of `true` (after a warm-up)
with the real runtime in-process (dispatcher, launcher, completion, consumer,
reaper; WAL with its durability classes — spawn step 1 durable, identity and
results deferred, docs/storage.md — and its automatic checkpoints), on the
filesystem of build/ (a real disk: tmpfs would show no block writes). Back to
back by default (the next attempt's durable commit covers the previous
result); --spaced for attempts far apart (each result pays its own fsync and
every attempt starts from a written-back page cache); --steady for spaced
attempts each followed by what the appliance does between two cron runs (a
supervisor round that ages the journal row out, a retention round that deletes
the run past the task's keep_runs), all inside the measured window — the whole
life of a run, paid while the card's page cache is cold:

* bytes: `/proc/self/io` deltas. `write_bytes` is what the kernel attributes
  to a process when it dirties page-cache pages — of the database, the WAL,
  the -shm index, and the filesystem's metadata blocks (directories, inodes,
  bitmaps) it changes (a page dirtied twice before writeback counts once, so it
  is what reaches the card, before the filesystem's own journal); `wchar` is
  every byte handed to write(2)/pwrite(2) (an upper bound). /proc/self/io also
  adds in every child the worker has reaped — the launchers, with their
  receipts, logs and their tasks' writes — so that share (RUSAGE_CHILDREN's
  `ru_oublock`, the same counter in 512-byte units) is taken out of the
  worker's line and printed on the launcher's, measured (until 2026-12-02 the
  bench added a constant 4 KiB block for the receipt on top of a worker figure
  that already held it: every total was ~4 KiB too high back to back, and the
  spaced launcher's metadata was shown as the worker's). The task here is
  `true`: it writes no log.
* fsyncs: `strace -f -y -e trace=fsync,fdatasync` over the worker and every
  launcher, counted between two marker syscalls around the measured attempts,
  split by process (worker threads vs launchers) and by file. "n/a" when
  strace is missing (`apt-get install strace`). strace slows syscalls down; it
  does not change their number.

A second phase measures retention's own cost: rounds until the edge policy
(keep 50 runs per task) has deleted the excess runs, per run deleted.

Target (edge): <= 32 KiB back to back, <= 48 KiB spaced or steady, and <= 4
fsyncs per attempt (issue 24). Misses print MISS;
exit status is 0.

`--compare-log-fsync` measures, in the same run, the alternative to the
receipt's `logBytes` (docs/storage.md, "Logs and power loss"): a launcher
built with -DQL_BENCH_FSYNC_LOG that fsyncs the log before the receipt, plus
the fsync of the log's directory after the worker creates the log file (without
it the log's name, and so the log, would still vanish in a power cut).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "app"))

MARK = "/__qledge_bench_mark_"
STEADY_KEEP = 5  # --steady: the task keeps this many runs, so each attempt deletes one


def _io() -> dict[str, int]:
    """This process's I/O counters, and its reaped children's writes apart.

    /proc/self/io adds the counters of every child the process has waited for (as
    getrusage's RUSAGE_CHILDREN does): the launchers, with their receipts and logs.
    `children_write_bytes` is that share (RUSAGE_CHILDREN's ru_oublock is the same
    write_bytes, in 512-byte units), so the worker's own writes and the launcher's
    are each counted once."""
    out = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = int(value)
    out["children_write_bytes"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock * 512
    return out


def _own(io: dict[str, int]) -> int:
    return io["write_bytes"] - io["children_write_bytes"]


def _mark(name: str) -> None:
    os.access(f"{MARK}{name}", os.F_OK)  # a syscall strace shows: the window boundary


def _fsync_log_variant() -> str:
    """The durable-log alternative: its launcher, and the log's directory entry fsync'd."""
    sys.path.insert(0, str(REPO / "tests"))
    from qledge.launch import logs

    from _launcher import build_variant

    binary = build_variant("QL_BENCH_FSYNC_LOG")
    if isinstance(binary, str):
        raise SystemExit(f"bench disk: {binary}")
    create = logs.create

    def create_durably(root: Path, attempt_id: str) -> tuple[int, str]:
        fd, rel = create(root, attempt_id)
        dfd = os.open(root / rel.split("/")[0], os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return fd, rel

    logs.create = create_durably  # type: ignore[assignment]
    return str(binary)


async def _inner(state: Path, runs: int, warmup: int, spaced: bool,
                 variant: str = "", steady: bool = False) -> dict[str, object]:
    from qledge import ids, settings
    from qledge.db import migrate
    from qledge.operations import create_task
    from qledge.paths import prepare_roots
    from qledge.receipts.codec import Receipt, encode, new_token
    from qledge.runtime.lifecycle import Runtime
    from qledge.tasks.writable import task_fields

    launcher = str(REPO / "build" / "launcher" / os.uname().machine / "ql-launch")
    if variant == "fsync-log":
        launcher = _fsync_log_variant()
    conf = settings.load({
        "QLEDGE_STATE_DIR": str(state), "QLEDGE_ADMIN_TOKEN": "x" * 32,
        "QLEDGE_LAUNCHER": launcher})
    prepare_roots(conf)
    migrate.apply(conf.db_path)
    rt = Runtime(conf)
    if spaced:
        # Attempts far apart (a cron task every few minutes): no next attempt's
        # durable commit comes along within the group-commit window, so every
        # result pays its own fsync; the window is shortened only to keep the bench
        # short. Between attempts the page cache is written back (sync(2)), as
        # the kernel does within 30 s, so every attempt dirties its pages afresh.
        rt.profile = msgspec.structs.replace(rt.profile, group_commit_s=0.05)
    await rt.start()
    while rt.disk.loop.rounds < 1:  # the start-up retention round, outside the window
        await asyncio.sleep(0.01)
    task = await create_task(rt, task_fields({
        "name": "b", "command": "true", "env": {}, "labels": [], "concurrency": "allow",
        **({"keep_runs": STEADY_KEEP} if steady else {})}))
    if steady:
        # The rounds run explicitly after each attempt (below), not on their timers;
        # the journal row is due at once instead of 2 minutes later (it ages out in
        # the next attempt's spawn step 1, or the supervisor's backstop).
        await rt.supervision.stop()
        await rt.disk.loop.stop()
        rt.supervisor.profile = msgspec.structs.replace(rt.supervisor.profile,
                                                        journal_retention_s=0.0)

    ended: Counter[str] = Counter()  # --steady deletes runs: count them as they end

    async def one() -> None:
        ended[await run_once(rt, task.id)] += 1
        if spaced:
            while rt.reaper.waiting:
                await asyncio.sleep(0.005)
            os.sync()
        if steady:
            await rt.supervisor.round()
            os.sync()
            await rt.disk.retention.round()
            os.sync()

    # Steady state: every receipt and log shard exists (creating one of the 256 shards
    # fsyncs the receipts root once in its life).
    for i in range(256):
        rt.receipts.ensure_shard(ids.uuid7()[:-2] + f"{i:02x}")
        (conf.logs_path / f"{i:02x}").mkdir(mode=0o700, exist_ok=True)
    for _ in range(warmup):
        await one()
    await asyncio.sleep(0.2)
    statuses0 = await _count_succeeded(rt)
    io0 = _io()
    _mark("attempts_start")
    t0 = time.perf_counter()
    ended.clear()
    for _ in range(runs):
        await one()
    elapsed = time.perf_counter() - t0
    _mark("attempts_end")
    io1 = _io()
    succeeded = ended["succeeded"] if steady else await _count_succeeded(rt) - statuses0

    # What the supervisor does 2 minutes after each result: the journal rows age out.
    # Same code, its retention window set to 0 so it happens now, inside the window.
    await rt.supervision.stop()
    rt.supervisor.profile = msgspec.structs.replace(rt.supervisor.profile,
                                                    journal_retention_s=0.0)
    # No next spawn comes to age the last rows: the supervisor's backstop, at once.
    rt.supervisor.age_overdue_ms = 0
    _mark("journal_start")
    sup_rounds = 0
    # Settled rows (the usual case) go in one DELETE; "terminal" ones after file checks.
    while _ageing(await rt.report()):
        await rt.reaper.drain()  # nothing it still holds may keep a row back
        await rt.supervisor.round()
        sup_rounds += 1
    _mark("journal_end")
    io_r = _io()
    _mark("retention_start")
    deleted = 0
    rounds = 0
    while True:
        report = await rt.disk.retention.round()
        rounds += 1
        got = report.counts.get("runs_deleted", 0)
        deleted += got
        if not got:
            break
    # Deleted runs' files wait for an fsync to cover the deferred deletion (the next
    # attempt's durable commit, or retention's own after an interval): count it here.
    await rt.db.sync()
    await rt.disk.retention.round()
    _mark("retention_end")
    io2 = _io()
    tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
    async with rt.db.read() as tx:
        page = await tx.one("PRAGMA page_size")
    page_size = int(page[0]) if page else 0
    await rt.stop()
    receipt = encode(Receipt(schema_version=1, run_id=ids.uuid7(), attempt_id=ids.uuid7(),
                             callback_sequence=1, token=new_token(),
                             started_at_ms=int(time.time() * 1000),
                             finished_at_ms=int(time.time() * 1000), exit_code=0))
    return {
        "runs": runs, "succeeded": succeeded, "elapsed_s": elapsed,
        "write_bytes": io1["write_bytes"] - io0["write_bytes"],
        "children_write_bytes": io1["children_write_bytes"] - io0["children_write_bytes"],
        "cancelled_write_bytes": io1["cancelled_write_bytes"] - io0["cancelled_write_bytes"],
        "wchar": io1["wchar"] - io0["wchar"],
        "receipt_bytes": len(receipt),
        "retention_rounds": rounds, "retention_deleted": deleted,
        "journal_rounds": sup_rounds,
        "journal_write_bytes": _own(io_r) - _own(io1),
        "retention_write_bytes": _own(io2) - _own(io_r),
        "retention_wchar": io2["wchar"] - io_r["wchar"],
        "tids": tids, "pid": os.getpid(), "page_size": page_size,
    }


async def run_once(rt: Any, task_id: str) -> str:
    """Trigger a run of the task and wait until it ended and was finished; its status."""
    from qledge.db import runs as run_rows
    from qledge.model import Trigger
    from qledge.operations import trigger

    run = await trigger(rt, task_id, Trigger.API)
    while True:
        async with rt.db.read() as tx:
            cur = await run_rows.get_run(tx, run.id)
        if cur.status.value not in ("queued", "running") and not rt._finishing:
            return str(cur.status.value)
        await asyncio.sleep(0.002)


def _ageing(report: dict[str, object]) -> int:
    journal = report["journal"]
    assert isinstance(journal, dict)
    return int(journal.get("terminal", 0)) + int(journal.get("settled", 0))


async def _count_succeeded(rt: object) -> int:
    async with rt.db.read() as tx:  # type: ignore[attr-defined]
        row = await tx.one("SELECT COUNT(*) AS n FROM runs WHERE status = 'succeeded'")
    return int(row["n"]) if row else 0


_LINE = re.compile(r"^(\d+)\s+(fsync|fdatasync)\((\d+)<([^>]*)>")


def _classify(path: str) -> str:
    if path.endswith("-wal"):
        return "wal"
    if path.endswith(".sqlite3"):
        return "database"
    if "/receipts" in path:
        return "receipts (file+dir)"
    if "/logs" in path:
        return "log (file+dir)"
    return "other"


def _fsyncs(trace: Path, worker_tids: set[int], start: str, end: str) -> dict[str, Counter[str]]:
    inside = False
    by: dict[str, Counter[str]] = {"worker": Counter(), "launcher": Counter()}
    for line in trace.read_text(errors="replace").splitlines():
        if f"{MARK}{start}" in line:
            inside = True
            continue
        if f"{MARK}{end}" in line:
            break
        if not inside or "resumed>" in line:
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        who = "worker" if int(m[1]) in worker_tids else "launcher"
        by[who][_classify(m[4])] += 1
    return by


def _cold(op: Callable[[int], None], n: int) -> float:
    """write_bytes of `op(i)` from a written-back page cache, mean over n, in KiB."""
    total = 0
    for i in range(n):
        os.sync()
        before = _io()["write_bytes"]
        op(i)
        total += _io()["write_bytes"] - before
    return total / n / 1024


def _file_ops(n: int) -> int:
    """The spaced figure's accounting: each file operation an attempt makes, alone,
    from a cold page cache, as the kernel charges it (data pages and the metadata
    blocks — directory, inode table, bitmaps — it dirties afresh)."""
    (REPO / "build").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPO / "build") as tmp:
        root = Path(tmp)
        shard = root / "ab"
        shard.mkdir()
        dfd = os.open(shard, os.O_RDONLY | os.O_DIRECTORY)
        wal = os.open(root / "wal", os.O_RDWR | os.O_CREAT, 0o600)
        os.fsync(wal)
        shm = os.open(root / "shm", os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(shm, 32768)
        shm_map = mmap.mmap(shm, 32768)
        body = b"x" * 262
        end = 0

        def log_create(i: int) -> None:
            os.close(os.open(f"log{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600,
                             dir_fd=dfd))

        def receipt_publish(i: int) -> None:  # as ql-launch: temp, fsync, link, unlink
            fd = os.open(f".tmp{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dfd)
            os.write(fd, body)
            os.fsync(fd)
            os.close(fd)
            os.link(f".tmp{i}", f"r{i}", src_dir_fd=dfd, dst_dir_fd=dfd)
            os.unlink(f".tmp{i}", dir_fd=dfd)
            os.fsync(dfd)

        def wal_commit(i: int) -> None:  # one commit of ~8 KiB appended, fdatasync'd
            nonlocal end
            os.pwrite(wal, b"w" * 8 * 1048, end)
            end += 8 * 1048
            os.fdatasync(wal)

        def shm_commit(i: int) -> None:  # the WAL index: its header and a hash page
            shm_map[0:136] = bytes([i % 256]) * 136
            shm_map[4096 + i * 8:4096 + i * 8 + 8] = b"h" * 8

        rows = [("log file created (worker, spawn step 2)", _cold(log_create, n)),
                ("receipt published (launcher: temp, fsync, link, unlink, dir fsync)",
                 _cold(receipt_publish, n)),
                ("receipt deleted (worker, reaper)",
                 _cold(lambda i: os.unlink(f"r{i}", dir_fd=dfd), n)),
                ("log file deleted (worker, retention)",
                 _cold(lambda i: os.unlink(f"log{i}", dir_fd=dfd), n)),
                ("WAL commit, 8 frames appended + fdatasync", _cold(wal_commit, n)),
                ("-shm index touched by a commit (mmap'd, never fsync'd)",
                 _cold(shm_commit, n))]
        shm_map.close()
        for fd in (dfd, wal, shm):
            os.close(fd)
    print(f"{'one operation, from a cold page cache (after sync)':68} {'KiB':>6}")
    for name, kib in rows:
        print(f"{name:68} {kib:6.2f}")
    print(f"n={n} each; filesystem of {REPO / 'build'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--spaced", action="store_true",
                    help="attempts far apart (cron-like): each result pays its own fsync "
                         "and every attempt starts from a written-back page cache")
    ap.add_argument("--steady", action="store_true",
                    help="spaced, and each attempt followed by a supervisor round (its "
                         f"journal row ages out) and a retention round (keep_runs="
                         f"{STEADY_KEEP}: one run deleted): a run's whole life per attempt")
    ap.add_argument("--compare-log-fsync", action="store_true",
                    help="also measure a durable log (launcher fsyncs it, worker fsyncs its"
                         " directory entry) instead of the receipt's logBytes")
    ap.add_argument("--file-ops", action="store_true",
                    help="what each file operation of an attempt costs from a cold page "
                         "cache (after sync(2)), on build/'s filesystem: the accounting of "
                         "the spaced figure")
    ap.add_argument("--variant", default="", help=argparse.SUPPRESS)
    ap.add_argument("--inner", metavar="STATE", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steady:
        args.spaced = True
    if args.file_ops:
        return _file_ops(args.runs if args.runs != 200 else 40)
    if args.compare_log_fsync:
        base = [sys.executable, __file__, "--runs", str(args.runs), "--warmup",
                str(args.warmup), *(["--spaced"] if args.spaced else [])]
        print("== chosen: the receipt records logBytes (no log fsync)")
        subprocess.run(base, check=True)
        print("== alternative: the log made durable before the receipt")
        subprocess.run([*base, "--variant", "fsync-log"], check=True)
        return 0
    if args.inner:
        try:
            import uvloop
            runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        except ImportError:
            runner = asyncio.Runner()
        with runner:
            result = runner.run(_inner(Path(args.inner), args.runs, args.warmup,
                                       args.spaced, args.variant, args.steady))
        Path(args.out).write_text(json.dumps(result))
        return 0

    (REPO / "build").mkdir(exist_ok=True)
    strace = shutil.which("strace")
    with tempfile.TemporaryDirectory(dir=REPO / "build") as tmp:
        root = Path(tmp)
        out = root / "result.json"
        trace = root / "trace.txt"
        cmd = [sys.executable, __file__, "--inner", str(root / "state"), "--out", str(out),
               "--runs", str(args.runs), "--warmup", str(args.warmup),
               *(["--spaced"] if args.spaced else []),
               *(["--steady"] if args.steady else []),
               *(["--variant", args.variant] if args.variant else [])]
        if strace:
            cmd = [strace, "-f", "-y", "-qq", "-o", str(trace), "-e",
                   "trace=fsync,fdatasync,access,faccessat,faccessat2", *cmd]
        subprocess.run(cmd, check=True, env={**os.environ, "QLEDGE_LOG_LEVEL": "WARNING"})
        r = json.loads(out.read_text())
        fs: dict[str, Counter[str]] | None = None
        fs_ret: dict[str, Counter[str]] | None = None
        fs_jr: dict[str, Counter[str]] | None = None
        if strace:
            tids = set(r["tids"]) | {r["pid"]}
            fs = _fsyncs(trace, tids, "attempts_start", "attempts_end")
            fs_ret = _fsyncs(trace, tids, "retention_start", "retention_end")
            fs_jr = _fsyncs(trace, tids, "journal_start", "journal_end")

    n = r["runs"]
    deleted = r["retention_deleted"] or 1

    def kib(x: float) -> str:
        return f"{x / 1024:8.2f}"

    def count(c: dict[str, Counter[str]] | None, who: str, per: int) -> float | None:
        return None if c is None else sum(c[who].values()) / per

    def fmt(x: float | None) -> str:
        return "     n/a" if x is None else f"{x:8.2f}"

    # bytes: write_bytes net of cancelled writes and of the reaped launchers' (counted
    # on their own line, measured: the receipt's block); wchar as the upper bound
    children = r["children_write_bytes"] / n
    a_wb = (r["write_bytes"] - r["cancelled_write_bytes"]) / n - children
    a_wc = r["wchar"] / n
    j_wb = r["journal_write_bytes"] / n
    r_wb = r["retention_write_bytes"] / deleted
    receipt = children
    a_w, a_l = count(fs, "worker", n), count(fs, "launcher", n)
    j_w = count(fs_jr, "worker", n)
    r_w = count(fs_ret, "worker", deleted)
    total_b = a_wb + receipt + j_wb + r_wb
    total_f = None if a_w is None or a_l is None or j_w is None or r_w is None else (
        a_w + a_l + j_w + r_w)

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    if args.steady:
        return _print_steady(r, fs, n, args.warmup, bool(strace))
    mode = "spaced, cron-like" if args.spaced else "back to back"
    print(f"{'per attempt, edge profile (' + mode + ')':50} {'KiB':>8} {'fsyncs':>8}")
    print(f"{'attempt: worker (run+spawn, identity, result)':50} {kib(a_wb)} {fmt(a_w)}"
          f"   wchar {kib(a_wc).strip()} KiB")
    print(f"{'attempt: launcher: receipt (~' + str(r['receipt_bytes']) + ' B), log':50}"
          f" {kib(receipt)} {fmt(a_l)}")
    print(f"{'journal row ageing (supervisor, later)':50} {kib(j_wb)} {fmt(j_w)}")
    print(f"{'run deletion by retention (per run, later)':50} {kib(r_wb)} {fmt(r_w)}"
          f"   ({r['retention_deleted']} runs, {r['retention_rounds']} rounds)")
    print(f"{'total over a run life':50} {kib(total_b)} {fmt(total_f)}")
    budget = 48 if args.spaced else 32
    print(f"{'target':50} {'<= ' + str(budget):>8} {'<= 4':>8}   bytes "
          f"{verdict(total_b <= budget * 1024)}, "
          f"fsyncs {'n/a (no strace)' if total_f is None else verdict(total_f <= 4)}")
    if fs is not None:
        detail = "; ".join(f"{who}: " + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(c.items()))
                           for who, c in fs.items())
        print(f"attempt fsyncs by file: {detail}")
    print(f"runs={n} succeeded={r['succeeded']} warmup={args.warmup} "
          f"page_size={r['page_size']} elapsed={r['elapsed_s']:.1f}s "
          f"strace={'yes' if strace else 'no'} python={sys.version.split()[0]}")
    return 0


def _print_steady(r: dict[str, Any], fs: dict[str, Counter[str]] | None, n: int,
                  warmup: int, strace: bool) -> int:
    """Everything a run costs, each attempt with its own ageing and deletion, cold."""
    launched = r["children_write_bytes"] / n  # the reaped launchers': receipt, log
    wb = (r["write_bytes"] - r["cancelled_write_bytes"]) / n - launched
    total_b = wb + launched
    worker = None if fs is None else sum(fs["worker"].values()) / n
    launcher = None if fs is None else sum(fs["launcher"].values()) / n
    total_f = None if worker is None or launcher is None else worker + launcher
    ok_b = "PASS" if total_b <= 48 * 1024 else "MISS"
    ok_f = "n/a (no strace)" if total_f is None else "PASS" if total_f <= 4 else "MISS"
    print(f"{'per attempt, edge profile (steady: spaced, a run life each)':60} "
          f"{'KiB':>8} {'fsyncs':>8}")
    print(f"{'worker: attempt + journal ageing + retention round':60} {wb / 1024:8.2f} "
          f"{'n/a' if worker is None else f'{worker:.2f}':>8}"
          f"   wchar {r['wchar'] / n / 1024:.2f} KiB")
    print(f"{'launcher: receipt, log (measured, reaped child)':60} {launched / 1024:8.2f} "
          f"{'n/a' if launcher is None else f'{launcher:.2f}':>8}")
    print(f"{'total per attempt':60} {total_b / 1024:8.2f} "
          f"{'n/a' if total_f is None else f'{total_f:.2f}':>8}")
    print(f"{'target (spaced)':60} {'<= 48':>8} {'<= 4':>8}   bytes {ok_b}, fsyncs {ok_f}")
    if fs is not None:
        detail = "; ".join(f"{who}: " + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(c.items()))
                           for who, c in fs.items())
        print(f"fsyncs by file: {detail}")
    print(f"runs={n} succeeded={r['succeeded']} warmup={warmup} page_size={r['page_size']} "
          f"elapsed={r['elapsed_s']:.1f}s strace={'yes' if strace else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
