"""Benchmark ql-launch against the alternatives, side by side, in one run.

    .venv/bin/python scripts/_bench/launcher.py [--runs 200] [--tasks 8]

1. Per-task memory of a *waiting* parent (PSS from /proc/<pid>/smaps_rollup,
   RssAnon from /proc/<pid>/status), averaged over --tasks concurrent parents
   each waiting on `sleep 30`: ql-launch vs a Python waiter (`python3 -c`
   that spawns and waits) vs `sh -c 'sleep 30; :'`.
2. Spawn-to-receipt latency (median / p99 over --runs): ql-launch running
   /bin/true and publishing its receipt (on disk, then on tmpfs where fsync is
   free) vs a bare os.posix_spawn of /bin/true + waitpid; and, side by side on
   tmpfs, the same with the Landlock confinement qledge passes (`--deny` of a
   data, receipts and logs directory laid out like the image's state dir).
3. The static binary size.

Targets: PSS <= 64 KiB, RssAnon <= 32 KiB, binary <= 200 KiB, launcher+receipt
<= 3x bare spawn. Misses are printed as MISS; the exit status is always 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCH = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())
KIB = 1024


def launcher_path() -> Path:
    override = os.environ.get("QLEDGE_LAUNCHER")
    if override:
        return Path(override)
    path = REPO / "build/launcher" / ARCH / "ql-launch"
    if not path.exists():
        subprocess.run([str(REPO / "scripts/build-launcher"), ARCH], check=True)
    return path


def kib_field(path: str, name: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise LookupError(f"{name} not in {path}")


def token_fd() -> int:
    r, w = os.pipe()
    os.write(w, secrets.token_urlsafe(32).encode())
    os.close(w)
    os.set_inheritable(r, True)
    return r


def launcher_argv(binary: Path, receipts: Path, fd: int, *command: str,
                  deny: tuple[Path, ...] = ()) -> list[str]:
    return [
        str(binary),
        "--receipt-dir", str(receipts),
        "--run-id", str(uuid.uuid4()),
        "--attempt-id", str(uuid.uuid4()),
        "--sequence", "1",
        "--token-fd", str(fd),
        *(a for d in deny for a in ("--deny", str(d))),
        "--", *command,
    ]  # fmt: skip


def landlock_abi() -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return int(libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def walked_entries(deny: tuple[Path, ...]) -> int:
    """How many entries the launcher grants one by one: those of every ancestor."""
    ancestors = {a for d in deny for a in d.resolve().parents}
    return sum(len(os.listdir(a)) for a in ancestors)


# ---- memory -----------------------------------------------------------------


Row = tuple[str, float, float, float]


def waiting_memory(name: str, argv_for: Callable[[], tuple[list[str], int | None]], n: int) -> Row:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            argv, fd = argv_for()
            procs.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(fd,) if fd is not None else (),
                    start_new_session=True,
                )
            )
            if fd is not None:
                os.close(fd)
        time.sleep(1.0)  # let every parent reach its wait (Python needs a moment)
        pss = [kib_field(f"/proc/{p.pid}/smaps_rollup", "Pss") for p in procs]
        anon = [kib_field(f"/proc/{p.pid}/status", "RssAnon") for p in procs]
        rss = [kib_field(f"/proc/{p.pid}/status", "VmRSS") for p in procs]
        return name, statistics.mean(pss), statistics.mean(anon), statistics.mean(rss)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


# ---- latency -----------------------------------------------------------------


def timed(spawn: Callable[[], int], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        pid = spawn()
        _, status = os.waitpid(pid, 0)
        out.append(time.perf_counter() - t0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"spawned process failed: {status}")
    return out


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1e3, p99 * 1e3


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def fs_type(path: Path) -> str:
    out = subprocess.run(
        ["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=False
    )
    kind = out.stdout.strip() or "?"
    return "ext2/3/4" if kind == "ext2/ext3" else kind  # one magic number for all three


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=8)
    args = parser.parse_args()

    binary = launcher_path()
    size = binary.stat().st_size
    sleep = shutil.which("sleep") or "/bin/sleep"
    work = Path(tempfile.mkdtemp(prefix="ql-bench-", dir=REPO / "build"))
    shm_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    shm = Path(tempfile.mkdtemp(prefix="ql-bench-", dir=shm_root)) if shm_root else None
    disk_receipts = work / "receipts"
    disk_receipts.mkdir(mode=0o700)
    log = os.open(work / "bench.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        print(f"ql-launch: {binary} ({size} bytes, {size / KIB:.1f} KiB)")
        print(f"host: {platform.machine()}, kernel {platform.release()}, {os.cpu_count()} CPUs")
        print()

        # 1. memory
        def ql() -> tuple[list[str], int | None]:
            fd = token_fd()
            return launcher_argv(binary, disk_receipts, fd, sleep, "30"), fd

        waiter = "import subprocess, sys; subprocess.run(sys.argv[1:])"
        rows = [
            waiting_memory("ql-launch", ql, args.tasks),
            waiting_memory(
                "python3 -c waiter",
                lambda: ([sys.executable, "-c", waiter, sleep, "30"], None),
                args.tasks,
            ),
            waiting_memory(
                "sh -c 'sleep 30; :'", lambda: (["/bin/sh", "-c", "sleep 30; :"], None), args.tasks
            ),
        ]
        print(f"waiting parent, mean of {args.tasks} concurrent tasks (KiB)")
        print(f"  {'parent':<22}{'PSS':>10}{'RssAnon':>10}{'VmRSS':>10}")
        for name, pss, anon, rss in rows:
            print(f"  {name:<22}{pss:>10.1f}{anon:>10.1f}{rss:>10.1f}")
        ql_pss, ql_anon = rows[0][1], rows[0][2]
        for name, pss, anon, _ in rows[1:]:
            print(f"  ql-launch vs {name}: PSS x{ql_pss / pss:.3f}, RssAnon x{ql_anon / anon:.3f}")
        print()

        # 2. latency
        actions = [
            (os.POSIX_SPAWN_DUP2, devnull, 0),
            (os.POSIX_SPAWN_DUP2, log, 1),
            (os.POSIX_SPAWN_DUP2, log, 2),
        ]
        env = dict(os.environ)

        def bare() -> int:
            return os.posix_spawn("/bin/true", ["true"], env, file_actions=actions, setsid=True)

        def launch(receipts: Path, deny: tuple[Path, ...] = ()) -> Callable[[], int]:
            def spawn() -> int:
                fd = token_fd()
                try:
                    argv = launcher_argv(binary, receipts, fd, "/bin/true", deny=deny)
                    return os.posix_spawn(str(binary), argv, env, file_actions=actions, setsid=True)
                finally:
                    os.close(fd)

            return spawn

        timed(bare, 20)  # warm caches
        results = [("bare posix_spawn(/bin/true)+waitpid", timed(bare, args.runs))]
        results.append(
            (
                f"ql-launch true + receipt ({fs_type(disk_receipts)})",
                timed(launch(disk_receipts), args.runs),
            )
        )
        if shm is not None:
            results.append(
                (f"ql-launch true + receipt ({fs_type(shm)})", timed(launch(shm), args.runs))
            )
        state = work / "var" / "lib" / "qledge"
        deny = tuple(state / d for d in ("data", "receipts", "logs"))
        for d in (*deny, state / "work"):
            d.mkdir(parents=True, mode=0o700)
        abi = landlock_abi()
        cpu = {"plain": 0.0, "deny": 0.0}
        if shm is not None and abi > 0:
            # Interleaved, so that a noisy neighbour hits both alike; CPU time of the
            # launcher and its command too (RUSAGE_CHILDREN), which a busy machine
            # spreads far less than wall time.
            plain, confined = [], []
            for _ in range(max(1, args.runs // 20)):
                before = children_cpu()
                plain += timed(launch(shm), 20)
                middle = children_cpu()
                confined += timed(launch(shm, deny), 20)
                cpu["plain"] += middle - before
                cpu["deny"] += children_cpu() - middle
            results += [(f"ql-launch true + receipt ({fs_type(shm)}), again", plain),
                        (f"  the same, --deny x3 (Landlock ABI {abi})", confined)]
        published = len(list(disk_receipts.glob("*.json")))
        print(f"spawn-to-exit latency over {args.runs} runs (ms); disk receipts: {published}")
        print(f"  {'what':<42}{'median':>10}{'p99':>10}")
        for name, samples in results:
            med, p99 = stats(samples)
            print(f"  {name:<42}{med:>10.3f}{p99:>10.3f}")
        bare_med, bare_p99 = stats(results[0][1])
        disk_med, disk_p99 = stats(results[1][1])
        ratio = disk_med / bare_med
        print(f"  overhead on disk: median x{ratio:.2f}, p99 x{disk_p99 / bare_p99:.2f}")
        if shm is not None:
            shm_med, shm_p99 = stats(results[2][1])
            print(f"  overhead on tmpfs (no fsync cost): median x{shm_med / bare_med:.2f}, "
                  f"p99 x{shm_p99 / bare_p99:.2f}")  # fmt: skip
        if shm is not None and abi > 0:
            plain_med, plain_p99 = stats(results[-2][1])
            deny_med, deny_p99 = stats(results[-1][1])
            n = len(results[-1][1])
            print(f"  Landlock confinement: +{deny_med - plain_med:.3f} ms median, "
                  f"+{deny_p99 - plain_p99:.3f} ms p99 (x{deny_med / plain_med:.2f}); "
                  f"CPU per spawn {cpu['plain'] / n * 1e3:.3f} -> {cpu['deny'] / n * 1e3:.3f} ms"
                  f"; {walked_entries(deny)} entries granted one by one")
        elif abi <= 0:
            print("  Landlock confinement: not measured (this kernel has no Landlock)")
        print()

        # 3. verdicts
        checks = [
            (f"launcher PSS {ql_pss:.1f} KiB <= 64 KiB", ql_pss <= 64),
            (f"launcher RssAnon {ql_anon:.1f} KiB <= 32 KiB", ql_anon <= 32),
            (f"binary {size / KIB:.1f} KiB <= 200 KiB", size <= 200 * KIB),
            (f"spawn+receipt on disk x{ratio:.2f} <= 3x bare spawn", ratio <= 3),
        ]
        for text, ok in checks:
            print(f"{verdict(ok)}  {text}")
        if ratio > 3 and shm is not None:
            shm_ratio = stats(results[2][1])[0] / bare_med
            print(
                f"      note: on tmpfs the same work is x{shm_ratio:.2f}; the difference is "
                "the two fsyncs (receipt file + directory) the contract requires"
            )
    finally:
        os.close(log)
        os.close(devnull)
        shutil.rmtree(work, ignore_errors=True)
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
