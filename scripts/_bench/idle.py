"""Idle memory of the control plane: supervisord + the HTTP worker, natively.

Starts the appliance the way tests/_appliance.py does (the real supervisord with
rootfs/etc/supervisor/supervisord.conf, the real worker from this venv), creates 20
cron tasks through the API (nothing runs: their schedules are far away), waits
--idle seconds, then prints for each process PSS and RssAnon, their sum against the
target (PSS <= 35 MiB for both together), and where each one's memory sits (its
largest mappings: heap, anonymous, the interpreter, the extension modules).

PSS divides a shared page among every process that maps it. Natively other Python
processes on the machine share the interpreter's pages and lower the figure; in
the image only supervisord and the worker do. "pair PSS" is the figure the image
would show: each resident page of the two counted once, split between the two
only when both map it (from /proc/<pid>/pagemap: needs root with
CAP_SYS_ADMIN, else "-").

The tree's app/qledge is compiled to bytecode first, as in the image.

The measuring part alone, for the container (as root on the host against the
container's host pids, or inside it with `docker exec --privileged`: the worker is
non-dumpable, so its /proc files need CAP_SYS_PTRACE):

    python scripts/_bench/idle.py --pids SUPERVISORD_PID WORKER_PID

Always exits 0 (a benchmark prints, it does not judge a build).
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

TARGET_MIB = 35.0
TASKS = 20
PAGE = os.sysconf("SC_PAGE_SIZE")


def _kib_fields(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[key] = int(parts[0])
    return out


def rollup(pid: int) -> dict[str, int]:
    """smaps_rollup's kB fields and status's RssAnon/RssFile/VmRSS/Threads."""
    fields = _kib_fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
    status = Path(f"/proc/{pid}/status").read_text()
    fields.update({k: v for k, v in _kib_fields(status).items()
                   if k in ("RssAnon", "RssFile", "VmRSS")})
    for line in status.splitlines():
        if line.startswith("Threads:"):
            fields["Threads"] = int(line.split()[1])
    return fields


def _label(path: str) -> str:
    if not path:
        return "[anon]"
    if path.startswith("["):
        return path.split(":")[0] + ("]" if ":" in path else "")
    return os.path.basename(path)


def mappings(pid: int) -> list[tuple[int, int, int, int, str]]:
    """(start, end, pss_kib, rss_kib, label) of every mapping in /proc/<pid>/smaps."""
    out: list[tuple[int, int, int, int, str]] = []
    cur: list[object] | None = None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and ":" not in head[0]:
            if cur is not None:
                out.append(tuple(cur))  # type: ignore[arg-type]
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            path = head[5] if len(head) > 5 else ""
            cur = [lo, hi, 0, 0, _label(path)]
        elif cur is not None and line.startswith("Pss:"):
            cur[2] = int(line.split()[1])
        elif cur is not None and line.startswith("Rss:"):
            cur[3] = int(line.split()[1])
    if cur is not None:
        out.append(tuple(cur))  # type: ignore[arg-type]
    return out


def present_pfns(pid: int, maps: list[tuple[int, int, int, int, str]]) -> dict[int, str] | None:
    """PFN -> label of every resident page, or None without the right to read PFNs."""
    pfns: dict[int, str] = {}
    try:
        fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    except OSError:
        return None
    try:
        for lo, hi, _pss, rss, label in maps:
            if rss == 0:
                continue
            n = (hi - lo) // PAGE
            try:
                data = os.pread(fd, n * 8, (lo // PAGE) * 8)
            except OSError:
                continue  # [vsyscall] and the like
            for (entry,) in struct.iter_unpack("<Q", data):
                if entry >> 63 & 1:
                    pfn = entry & ((1 << 55) - 1)
                    if pfn == 0:
                        return None  # PFNs hidden: no CAP_SYS_ADMIN
                    pfns[pfn] = label
    finally:
        os.close(fd)
    return pfns


def pair_pss(pids: dict[str, int]) -> dict[str, float] | None:
    """KiB each process would show as PSS if only these processes mapped their pages."""
    per: dict[str, dict[int, str]] = {}
    for name, pid in pids.items():
        got = present_pfns(pid, mappings(pid))
        if got is None:
            return None
        per[name] = got
    count: dict[int, int] = defaultdict(int)
    for got in per.values():
        for pfn in got:
            count[pfn] += 1
    return {name: sum(PAGE / 1024 / count[p] for p in got) for name, got in per.items()}


def top_mappings(pid: int, n: int = 10) -> list[tuple[str, int, int, int]]:
    """(label, pss, rss, count) grouped by label, largest PSS first."""
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for _lo, _hi, pss, rss, label in mappings(pid):
        g = groups[label]
        g[0] += pss
        g[1] += rss
        g[2] += 1
    rows = sorted(((k, v[0], v[1], v[2]) for k, v in groups.items()), key=lambda r: -r[1])
    return rows[:n]


def report(pids: dict[str, int], top: int = 10) -> None:
    """The table for two pids (supervisord, worker): the function the container reuses."""
    mib = 1024.0
    figures = {name: rollup(pid) for name, pid in pids.items()}
    pair = pair_pss(pids)
    print("control plane idle memory (MiB)")
    print(f"  {'process':<12} {'pid':>7} {'PSS':>7} {'pair PSS':>9} {'Pss_Anon':>9} "
          f"{'Pss_File':>9} {'RssAnon':>8} {'VmRSS':>7} {'threads':>7}")
    total_pss = total_anon = total_pair = 0.0
    for name, pid in pids.items():
        f = figures[name]
        pp = "-" if pair is None else f"{pair[name] / mib:.1f}"
        print(f"  {name:<12} {pid:>7} {f['Pss'] / mib:>7.1f} {pp:>9} "
              f"{f.get('Pss_Anon', 0) / mib:>9.1f} {f.get('Pss_File', 0) / mib:>9.1f} "
              f"{f['RssAnon'] / mib:>8.1f} {f['VmRSS'] / mib:>7.1f} {f.get('Threads', 0):>7}")
        total_pss += f["Pss"] / mib
        total_anon += f["RssAnon"] / mib
        if pair is not None:
            total_pair += pair[name] / mib
    tp = "-" if pair is None else f"{total_pair:.1f}"
    print(f"  {'sum':<12} {'':>7} {total_pss:>7.1f} {tp:>9} {'':>9} {'':>9} {total_anon:>8.1f}")
    judged = total_pss if pair is None else max(total_pss, total_pair)
    verdict = "PASS" if judged <= TARGET_MIB else "MISS"
    which = "PSS" if pair is None else "the larger of PSS and pair PSS"
    print(f"target: supervisord + worker PSS <= {TARGET_MIB:.0f} MiB: {verdict} "
          f"({which}: {judged:.1f} MiB)")
    for name, pid in pids.items():
        print(f"\n{name} (pid {pid}): largest mappings (KiB)")
        print(f"  {'mapping':<44} {'PSS':>8} {'RSS':>8} {'maps':>5}")
        for label, pss, rss, count in top_mappings(pid, top):
            print(f"  {label[:44]:<44} {pss:>8} {rss:>8} {count:>5}")


def run(idle_s: float, top: int, env: dict[str, str]) -> None:
    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / "tests"))
    from _appliance import Appliance
    from conftest import free_port

    # The image ships compiled bytecode (Containerfile, stage "app"); a worker that
    # compiles its modules at start keeps megabytes of the compiler's garbage (with
    # PYTHONDONTWRITEBYTECODE=1 it would at every start). Compile this tree the same
    # way first (app/**/__pycache__ is ignored by git).
    subprocess.run([sys.executable, "-m", "compileall", "-q", "--invalidation-mode",
                    "checked-hash", str(repo / "app" / "qledge")], check=True)
    with tempfile.TemporaryDirectory(prefix="qledge-idle-") as tmp:
        state = Path(tmp)
        app = Appliance(state, free_port())
        app.env.update(env)
        app.start()
        try:
            for i in range(TASKS):
                # Far-away schedules: nothing runs while the figures are taken.
                r = app.api("POST", "/tasks", json={
                    "name": f"idle-{i:02d}", "command": f"echo idle {i}",
                    "schedule": f"{i % 60} 3 1 1 *"})
                if r.status_code not in (200, 201):
                    print(f"idle: creating a task answered {r.status_code}: {r.text}")
            worker = app.worker_pid()
            assert app.proc is not None
            supervisord = app.proc.pid
            where = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
            pythonpath = next((e.decode() for e in where if e.startswith(b"PYTHONPATH=")),
                              "PYTHONPATH unset")
            print(f"appliance: {TASKS} cron tasks, idle {idle_s:.0f} s; worker {pythonpath}")
            extra = " ".join(f"{k}={v}" for k, v in env.items())
            if extra:
                print(f"extra environment: {extra}")
            time.sleep(idle_s)
            report({"supervisord": supervisord, "worker": worker}, top)
        finally:
            app.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pids", nargs=2, type=int, metavar=("SUPERVISORD_PID", "WORKER_PID"),
                    help="only measure these two running processes")
    ap.add_argument("--idle", type=float, default=10.0, help="idle seconds before measuring")
    ap.add_argument("--top", type=int, default=10, help="mappings listed per process")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment for supervisord and the worker (levers)")
    args = ap.parse_args()
    try:
        if args.pids:
            report({"supervisord": args.pids[0], "worker": args.pids[1]}, args.top)
        else:
            run(args.idle, args.top, dict(e.split("=", 1) for e in args.env))
    except PermissionError as exc:
        # The worker is non-dumpable (process.py): its /proc files need root with
        # CAP_SYS_PTRACE, which `docker exec` lacks unless --privileged.
        print(f"idle: {exc}: run as root on the host against the container's host pids"
              " (docker inspect -f '{{.State.Pid}}' is supervisord; the worker is its"
              " child), or `docker exec --privileged`")
    except Exception as exc:  # a benchmark reports and exits 0
        print(f"idle: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
