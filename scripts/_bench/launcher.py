"""Benchmark ql-launch against the alternatives, side by side, in one run.

    .venv/bin/python scripts/_bench/launcher.py [--runs 200] [--tasks 8] [--smaps]

1. Per-task memory as the appliance runs a task, averaged over --tasks
   concurrent tasks each waiting on `sleep 30` (PSS from
   /proc/<pid>/smaps_rollup, RssAnon from /proc/<pid>/status). Every launcher
   is spawned the way the executor spawns it (launch/executor.py `_launch`):
   posix_spawn in a new session, stdin /dev/null, stdout and stderr the
   attempt's log, the token on fd 3, the documented base environment, and the
   arguments it passes — a receipt shard, `--deny` of the data, receipts and
   logs directories and of the admin token file's directory, laid out like the
   image's state dir (`Isolation.launcher_args()` of that layout), and
   `--isolation`. Counted: the processes that exist only for the task, not
   the task itself.
   a. a plain command: ql-launch exec'ing `sleep 30` directly; and, for
      comparison, ql-launch + `/bin/sh -c 'sleep 30'` (the sum of both; a
      shell that execs its last command adds nothing);
   b. the `task x.py` form (taskform.expand: `--cwd` the script's folder,
      python3 x.py, which sleeps): the launcher alone — the interpreter is the
      task itself;
   beside a Python waiter (`python3 -c` that spawns and waits) and
   `sh -c 'sleep 30; :'`, each waiting on `sleep 30`.
   --smaps also prints one plain-command launcher's mappings (/proc/<pid>/smaps).
2. Spawn-to-receipt latency (median / p99 over --runs): ql-launch running
   /bin/true and publishing its receipt (on disk, then on tmpfs where fsync is
   free) vs a bare os.posix_spawn of /bin/true + waitpid; and, side by side on
   tmpfs, the same with the Landlock confinement qledge passes (`--deny` of a
   data, receipts and logs directory laid out like the image's state dir).
3. The static binary size.

Targets: per task PSS <= 64 KiB and RssAnon <= 32 KiB (plain command and task
form), binary <= 200 KiB, launcher+receipt <= 3x bare spawn. Misses are printed
as MISS; the exit status is always 0.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
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

sys.path.insert(0, str(REPO / "app"))
from qledge import taskform  # noqa: E402
from qledge.launch import executor  # noqa: E402
from qledge.launch.executor import TOKEN_FD, base_env  # noqa: E402
from qledge.launch.isolation import decide  # noqa: E402
from qledge.settings import Settings  # noqa: E402


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


Row = tuple[str, float, float, float, float]  # name, processes, PSS, RssAnon, VmRSS


def memory_of(pids: list[int]) -> tuple[int, int, int]:
    """PSS, RssAnon and VmRSS (KiB) of these processes, summed."""
    pss = sum(kib_field(f"/proc/{p}/smaps_rollup", "Pss") for p in pids)
    anon = sum(kib_field(f"/proc/{p}/status", "RssAnon") for p in pids)
    rss = sum(kib_field(f"/proc/{p}/status", "VmRSS") for p in pids)
    return pss, anon, rss


def children_of() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def for_the_task(parent: int, task: str | None) -> list[int]:
    """The parent and its descendants but the task itself (comm `task`; None:
    every descendant is the task's)."""
    tree = children_of()
    out, todo = [parent], list(tree.get(parent, []))
    while todo:
        pid = todo.pop()
        todo += tree.get(pid, [])
        if task is not None and comm(pid) != task:
            out.append(pid)
    return out


def settle(pids: list[int], task: str | None, timeout: float = 10.0) -> None:
    """Until every parent's task runs (its `task` process exists) and a moment more."""
    deadline = time.monotonic() + timeout
    want = task or "sleep"
    while time.monotonic() < deadline:
        tree = children_of()
        ready = 0
        for parent in pids:
            todo = list(tree.get(parent, []))
            while todo:
                pid = todo.pop()
                todo += tree.get(pid, [])
                with contextlib.suppress(OSError):
                    if comm(pid) == want:
                        ready += 1
                        break
        if ready == len(pids):
            break
        time.sleep(0.05)
    time.sleep(0.5)  # the parents reach their wait


def measured(name: str, parents: list[int], task: str | None) -> Row:
    settle(parents, task)
    counted = [for_the_task(p, task) for p in parents]
    sums = [memory_of(c) for c in counted]
    pss, anon, rss = (statistics.mean(s[i] for s in sums) for i in range(3))
    return name, statistics.mean(len(c) for c in counted), pss, anon, rss


def end_all(parents: list[int]) -> None:
    for pid in parents:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


class Appliance:
    """A state dir laid out like the image's, and the launcher spawned as the
    executor spawns it (launch/executor.py `_launch`)."""

    def __init__(self, binary: Path, root: Path) -> None:
        self.binary = binary
        state = root / "var/lib/qledge"
        run = root / "run/qledge"
        for d in ("data", "receipts", "logs", "work/scripts"):
            (state / d).mkdir(parents=True, mode=0o700)
        run.mkdir(parents=True, mode=0o700)
        (run / "admin.token").write_text(secrets.token_urlsafe(32))
        self.settings = Settings(state_dir=str(state), admin_token_file=str(run / "admin.token"))
        logging.getLogger("qledge.isolation").setLevel(logging.CRITICAL)  # "runs as root"
        self.isolation = decide(self.settings)
        self.env = base_env(self.settings.work_path)
        self.scripts = self.settings.scripts_path
        (self.scripts / "x.py").write_text("import time\n\ntime.sleep(30)\n")

    def task_form(self) -> tuple[list[str], str, dict[str, str]]:
        spawn = taskform.expand(taskform.parse("task x.py", self.scripts), self.scripts,
                                self.env, None)
        return spawn.argv, spawn.cwd, spawn.env

    def plain(self, command: str) -> tuple[list[str], dict[str, str]]:
        """A plain command as the executor runs it: exec'd directly when it needs no shell."""
        direct = executor.direct(command, self.env)
        if direct is None:
            raise SystemExit(f"bench: {command!r} would run under a shell")
        return direct

    def spawn(self, command: list[str], *, cwd: str | None = None,
              env: dict[str, str] | None = None, deny: bool = True,
              sh_fallback: bool = False) -> int:
        attempt = str(uuid.uuid4())
        shard = self.settings.receipts_path / attempt[-2:]
        shard.mkdir(mode=0o700, exist_ok=True)
        log_fd = os.open(self.settings.logs_path / f"{attempt}.log",
                         os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        read_end = token_fd()
        try:
            argv = [
                str(self.binary), "--receipt-dir", str(shard), "--run-id", str(uuid.uuid4()),
                "--attempt-id", attempt, "--sequence", "1", "--token-fd", str(TOKEN_FD),
                *(self.isolation.launcher_args() if deny else []),
                *(["--sh-fallback"] if sh_fallback else []),
                *(["--cwd", cwd] if cwd else []), "--", *command,
            ]  # fmt: skip
            actions = [
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
                (os.POSIX_SPAWN_DUP2, read_end, TOKEN_FD),
            ]
            return os.posix_spawn(self.binary, argv, self.env if env is None else env,
                                  file_actions=actions, setsid=True)
        finally:
            os.close(read_end)
            os.close(log_fd)


def waiting(name: str, spawn: Callable[[], int], n: int, task: str | None) -> Row:
    parents: list[int] = []
    try:
        for _ in range(n):
            parents.append(spawn())
        return measured(name, parents, task)
    finally:
        end_all(parents)


def popen(argv: list[str]) -> int:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True).pid


SMAPS_FIELDS = ("Size", "Rss", "Pss", "Anonymous", "Private_Dirty")


def smaps(pid: int) -> list[tuple[str, dict[str, int]]]:
    """(mapping, {field: KiB}) for each mapping of pid."""
    out: list[tuple[str, dict[str, int]]] = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and ":" not in head:
            words = line.split()
            perms = words[1]
            where = words[5] if len(words) > 5 else "[anon]"
            out.append((f"{perms} {Path(where).name if where[0] == '/' else where}", {}))
        elif head.endswith(":") and head[:-1] in SMAPS_FIELDS and out:
            out[-1][1][head[:-1]] = int(rest.split()[0])
    return out


def print_smaps(app: Appliance) -> None:
    pid = app.spawn(["sleep", "30"])
    try:
        settle([pid], "sleep")
        print(f"one plain-command launcher's mappings, as the appliance runs it (KiB), "
              f"pid {pid}")
        print(f"  {'mapping':<26}" + "".join(f"{f:>14}" for f in SMAPS_FIELDS))
        for name, fields in smaps(pid):
            print(f"  {name:<26}" + "".join(f"{fields.get(f, 0):>14}" for f in SMAPS_FIELDS))
        print()
    finally:
        end_all([pid])


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
    parser.add_argument("--smaps", action="store_true",
                        help="print one launcher's mappings (/proc/<pid>/smaps)")
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
        app = Appliance(binary, work / "appliance")
        if args.smaps:
            print_smaps(app)
        deny_args = app.isolation.launcher_args()
        python_cmd, python_cwd, python_env = app.task_form()
        waiter = "import subprocess, sys; subprocess.run(sys.argv[1:])"
        n = args.tasks
        plain_argv, plain_env = app.plain("sleep 30")
        rows = [
            waiting("ql-launch sleep (plain)", lambda: app.spawn(
                plain_argv, env=plain_env, sh_fallback=True), n, "sleep"),
            waiting("ql-launch + sh -c 'sleep 30'",
                    lambda: app.spawn(["/bin/sh", "-c", "sleep 30"]), n, "sleep"),
            waiting("ql-launch, task x.py", lambda: app.spawn(
                python_cmd, cwd=python_cwd, env=python_env), n, None),
            waiting("ql-launch sleep, no --deny",
                    lambda: app.spawn([sleep, "30"], deny=False), n, "sleep"),
            waiting("python3 -c waiter", lambda: popen([sys.executable, "-c", waiter, sleep,
                                                         "30"]), n, "sleep"),
            waiting("sh -c 'sleep 30; :'", lambda: popen(["/bin/sh", "-c", "sleep 30; :"]), n,
                    "sleep"),
        ]
        shown = " ".join(deny_args).replace(str(work / "appliance"), "<root>")
        print(f"per task, mean of {n} concurrent tasks, waiting on `sleep 30` (KiB); "
              f"the launcher as the appliance runs it: {shown or 'no confinement'}")
        print(f"  {'processes for the task':<32}{'count':>6}{'PSS':>10}{'RssAnon':>10}"
              f"{'VmRSS':>10}")
        for name, procs, pss, anon, rss in rows:
            print(f"  {name:<32}{procs:>6.1f}{pss:>10.1f}{anon:>10.1f}{rss:>10.1f}")
        ql_pss, ql_anon = rows[0][2], rows[0][3]
        for name, _, pss, anon, _ in rows[1:]:
            print(f"  ql-launch sleep vs {name}: PSS x{ql_pss / pss:.3f}, "
                  f"RssAnon x{ql_anon / anon:.3f}")
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
            *((f"{rows[i][0]}: PSS {rows[i][2]:.1f} KiB <= 64 KiB", rows[i][2] <= 64)
              for i in (0, 2)),
            *((f"{rows[i][0]}: RssAnon {rows[i][3]:.1f} KiB <= 32 KiB", rows[i][3] <= 32)
              for i in (0, 2)),
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
