"""Crash drills against the real appliance image in a real Docker engine.

    python tests/container/drill.py [--platform linux/amd64] [--smoke] [--variant node]

Full suite (amd64 in CI): 1. kill -9 of the HTTP worker inside the container
mid-run; 2. `docker restart` with a finished-but-unconsumed receipt and a
still-running task (the task dies with the PID namespace → `lost`, the receipt
→ its exact exit code); 3. `docker kill` then `docker start` (volumes keep
every run). Both modes also check that a task reaches neither the admin token
(PID 1's and the worker's environment, the handed-over file) nor the database.
`--smoke` (arm64 under emulation in CI): start, run, kill the worker, recover.
`--variant node` runs the node image's JavaScript drill instead of the worker
kill: a `node` script saved through the scripts API exits with a chosen code
across a kill -9 of the worker, `node -e` reads values set through qledge's
envs, npm packs and installs a package offline into the work volume. Prints a
JSON summary; exit 1 on any broken invariant. Only the image's API,
`docker exec` and `docker` itself are used.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from typing import Any

import httpx

DOCKER = "/usr/bin/docker"
TOKEN = "container-drill-token-0123456789abcdef"


def sh(*args: str, check: bool = True, timeout: float = 300) -> str:
    res = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:2])} failed: {res.stderr.strip()[-400:]}")
    return res.stdout.strip()


def tag_of(platform: str, variant: str = "default") -> str:
    arch = {"linux/amd64": "amd64", "linux/arm64": "arm64", "linux/arm/v7": "armv7"}[platform]
    return f"qledge:local-{arch}" + ("" if variant == "default" else f"-{variant}")


class Box:
    """One container with its own three named volumes."""

    def __init__(self, platform: str, slow: float, variant: str = "default") -> None:
        self.platform = platform
        self.slow = slow
        self.image = tag_of(platform, variant)
        arch = platform.split("/")[-1]
        self.name = f"qledge-drill-{arch}-{os.getpid()}-{random.randrange(1 << 20)}"
        self.port = random.randint(20000, 32000)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}",
                                 headers={"Authorization": f"Bearer {TOKEN}"},
                                 timeout=30 * slow)

    def run(self) -> None:
        sh("run", "-d", "--name", self.name, "--platform", self.platform,
           "-p", f"127.0.0.1:{self.port}:5700",
           "-e", f"QLEDGE_ADMIN_TOKEN={TOKEN}", "-e", "QLEDGE_ROUND_INTERVAL_S=1",
           "-e", "QLEDGE_PUBLISH_GRACE_MS=200", "--pids-limit", "512",
           *(a for v in ("data", "receipts", "logs")
             for a in ("-v", f"{self.name}-{v}:/var/lib/qledge/{v}")),
           self.image)

    def ready(self, timeout: float = 60) -> float:
        t0 = time.monotonic()
        deadline = t0 + timeout * self.slow
        while time.monotonic() < deadline:
            try:
                if self.http.get("/readyz").status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        logs = sh("logs", "--tail", "40", self.name, check=False)
        raise AssertionError(f"{self.name} not ready:\n{logs}")

    def loop(self) -> str | None:
        """The event loop the worker announced at start ("uvloop" or "asyncio")."""
        res = subprocess.run([DOCKER, "logs", self.name], capture_output=True, text=True,
                             timeout=60)
        m = re.search(r"serving on \S+ \(pid \d+, (\w+) loop\)", res.stdout + res.stderr)
        return m.group(1) if m else None

    def exec(self, *args: str) -> str:
        return sh("exec", self.name, *args)

    def worker_pid(self) -> int:
        return int(self.exec("supervisorctl", "pid", "http"))

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for _ in range(50):
            try:
                return self.http.request(method, f"/api/v1{path}", **kw)
            except httpx.HTTPError:
                time.sleep(0.2 * self.slow)
        raise AssertionError(f"API unreachable: {method} {path}")

    def task(self, command: str) -> str:
        r = self.api("POST", "/tasks", json={"name": "d", "command": command,
                                              "concurrency": "allow"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def trigger(self, task_id: str) -> str:
        r = self.api("POST", f"/tasks/{task_id}/runs")
        assert r.status_code == 202, r.text
        return str(r.json()["run"]["id"])

    def run_of(self, run_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/runs/{run_id}").json())

    def wait(self, run_id: str, want: str = "terminal", timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout * self.slow
        while True:
            run = self.run_of(run_id)
            if (run["terminal"] if want == "terminal" else run["status"] == want):
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} never {want}: {run}")
            time.sleep(0.1)

    def terminal_events(self, run_id: str) -> int:
        items = self.api("GET", f"/runs/{run_id}/events").json()["items"]
        return sum(1 for e in items if e["type"] == "run.finished")

    def remove(self) -> None:
        sh("rm", "-f", "-v", self.name, check=False)  # -v: the anonymous work volume too
        for v in ("data", "receipts", "logs"):
            sh("volume", "rm", "-f", f"{self.name}-{v}", check=False)
        self.http.close()


class Tally:
    def __init__(self) -> None:
        self.drills: list[str] = []
        self.runs = 0
        self.terminal_events = 0
        self.duplicates = 0
        self.false_successes = 0

    def check(self, box: Box, run_id: str, *, status: str, exit_code: int | None) -> None:
        run = box.run_of(run_id)
        events = box.terminal_events(run_id)
        self.runs += 1
        self.terminal_events += events
        self.duplicates += max(0, events - 1)
        if run["status"] == "succeeded" and status != "succeeded":
            self.false_successes += 1
        assert events == 1, f"{run_id}: {events} terminal events"
        assert run["status"] == status, f"{run_id}: {run['status']} != {status}: {run}"
        if exit_code is not None:
            assert run["exit_code"] == exit_code, run


def numbered(n: int, code: int, pause: float) -> str:
    return (f'i=1; while [ $i -le {n} ]; do echo "line $i"; i=$((i+1)); sleep {pause}; done;'
            f" exit {code}")


def drill_worker_kill(box: Box, tally: Tally, lines: int) -> None:
    tasks = {code: box.task(numbered(lines, code, 0.05)) for code in (0, 3, 42)}
    runs = {code: box.trigger(t) for code, t in tasks.items()}
    for run_id in runs.values():
        box.wait(run_id, "running")
    pid = box.worker_pid()
    box.exec("sh", "-c", f"kill -9 {pid}")
    box.ready()
    assert box.worker_pid() != pid
    for code, run_id in runs.items():
        box.wait(run_id)
        tally.check(box, run_id, status="succeeded" if code == 0 else "failed", exit_code=code)
        log = box.api("GET", f"/runs/{run_id}/log").text
        assert log == "".join(f"line {i}\n" for i in range(1, lines + 1)), "log gap/dup"
    tally.drills.append("worker_kill_mid_run")


SECRET_PROBES = {
    # PID 1 (supervisord) runs as the tasks' uid: its environ must not hold the token.
    # ... and it is readable (same uid): the file it was handed over in is named there.
    "pid1_token": "tr '\\0' '\\n' </proc/1/environ | grep -q '^QLEDGE_ADMIN_TOKEN='",
    "pid1_token_file": "tr '\\0' '\\n' </proc/1/environ | grep -q '^QLEDGE_ADMIN_TOKEN_FILE='",
    "worker_environ": "head -c 1 /proc/$W/environ",
    "token_file": "cat /run/qledge/admin.token",
    "database": "head -c 16 /var/lib/qledge/data/qledge.sqlite3",
    "work_dir": "echo hi >/var/lib/qledge/work/probe && rm /var/lib/qledge/work/probe",
    "tmp": "t=$(mktemp) && rm $t",
}


def drill_secrets(box: Box, tally: Tally) -> None:
    """A task (the qledge uid) reaches neither the admin token nor the database."""
    isolation = box.api("GET", "/system").json()["task_isolation"]
    assert isolation["mode"] == "auto", isolation
    script = "; ".join(f"if {cmd} >/dev/null 2>&1; then echo {k}=ok; else echo {k}=no; fi"
                       for k, cmd in SECRET_PROBES.items())
    r = box.api("POST", "/tasks", json={"name": "secrets", "command": script,
                                        "env": {"W": str(box.worker_pid())}})
    assert r.status_code == 201, r.text
    run_id = box.trigger(str(r.json()["id"]))
    box.wait(run_id)
    tally.check(box, run_id, status="succeeded", exit_code=0)
    log = box.api("GET", f"/runs/{run_id}/log").text
    got = dict(line.split("=", 1) for line in log.split() if "=" in line)
    # Without Landlock (a seccomp profile refusing it) the files are within reach;
    # the environments never are.
    confined = "no" if isolation["effective"] else "ok"
    # A Landlock domain also stops ptrace-mode reads of processes outside it, so a
    # confined task cannot read PID 1's environ at all (the file variable's probe
    # then says "no"); unconfined it reads it and finds the file, never the token.
    assert got == {"pid1_token": "no", "pid1_token_file": confined, "worker_environ": "no",
                   "token_file": confined,
                   "database": confined, "work_dir": "ok", "tmp": "ok"}, (got, isolation)
    tally.drills.append("secrets_out_of_reach")


def drill_docker_restart(box: Box, tally: Tally) -> None:
    # The short task ends only once the worker is stopped: a fixed sleep raced the
    # stop under qemu (a `docker exec` of supervisorctl takes seconds there), and a
    # receipt the worker consumed first left nothing for this drill to wait for.
    gate = f"gate-{random.randrange(1 << 30)}"
    long_run = box.trigger(box.task("sleep 600"))
    short_run = box.trigger(box.task(f'while [ ! -e "$HOME/{gate}" ]; do sleep 0.2; done;'
                                     " exit 7"))
    box.wait(long_run, "running")
    box.wait(short_run, "running")
    box.exec("supervisorctl", "stop", "http")  # nobody consumes now
    box.exec("touch", f"/var/lib/qledge/work/{gate}")
    deadline = time.monotonic() + 60 * box.slow
    while not box.exec("sh", "-c", "ls /var/lib/qledge/receipts/*/*.json 2>/dev/null || true"):
        assert time.monotonic() < deadline, "the short task's receipt never appeared"
        time.sleep(0.2)
    sh("restart", "-t", "30", box.name)
    box.ready()
    box.wait(short_run)
    box.wait(long_run)
    tally.check(box, short_run, status="failed", exit_code=7)
    tally.check(box, long_run, status="lost", exit_code=None)
    assert box.run_of(long_run)["reason_code"].startswith("RECOVERY_"), box.run_of(long_run)
    tally.drills.append("docker_restart")


def drill_docker_kill(box: Box, tally: Tally) -> None:
    before = box.api("GET", "/runs", params={"limit": 200}).json()["items"]
    running = box.trigger(box.task("sleep 600"))
    box.wait(running, "running")
    sh("kill", box.name)
    sh("start", box.name)
    box.ready()
    box.wait(running)
    tally.check(box, running, status="lost", exit_code=None)
    after = {r["id"]: r for r in box.api("GET", "/runs", params={"limit": 200}).json()["items"]}
    for r in before:  # the volumes kept every earlier run, unchanged
        assert after[r["id"]]["status"] == r["status"], (r, after[r["id"]])
    check = box.exec("/opt/qledge/venv/bin/python", "-c",
                     "import sqlite3; print(sqlite3.connect('file:/var/lib/qledge/data/"
                     "qledge.sqlite3?mode=ro', uri=True).execute('PRAGMA integrity_check')"
                     ".fetchone()[0])")
    assert check == "ok", check
    tally.drills.append("docker_kill_then_start")


WORK = "/var/lib/qledge/work"
# Prints `js line 1..N` 50 ms apart, then exits with the code it was given.
COUNT_JS = """\
const [n, code] = process.argv.slice(2).map(Number);
let i = 0;
const tick = () => {
  i += 1;
  console.log(`js line ${i}`);
  if (i < n) setTimeout(tick, 50);
  else process.exit(code);
};
tick();
"""
PKG_JSON = '{"name": "drill-pkg", "version": "1.0.0", "main": "index.js"}\n'
PKG_INDEX = "module.exports = 6 * 7;\n"


def drill_node(box: Box, tally: Tally, lines: int) -> None:
    """JavaScript tasks on the node image, with qledge's guarantees."""
    for path, content in (("drill/count.js", COUNT_JS), ("drill/pkg/package.json", PKG_JSON),
                          ("drill/pkg/index.js", PKG_INDEX)):
        r = box.api("PUT", "/scripts/file", json={"path": path, "content": content})
        assert r.status_code in (200, 201), r.text

    # A node script's exact exit code and full log, across a kill -9 of the worker.
    counted = box.trigger(box.task(f"node {WORK}/scripts/drill/count.js {lines} 42"))
    box.wait(counted, "running")
    pid = box.worker_pid()
    killed_at_ms = time.time() * 1000
    box.exec("sh", "-c", f"kill -9 {pid}")
    box.ready()
    assert box.worker_pid() != pid
    box.wait(counted)
    tally.check(box, counted, status="failed", exit_code=42)
    # The script was still running when its worker died (same kernel clock).
    finished_at_ms = box.run_of(counted)["attempts"][-1]["finished_at_ms"]
    assert finished_at_ms > killed_at_ms, (finished_at_ms, killed_at_ms)
    log = box.api("GET", f"/runs/{counted}/log").text
    assert log == "".join(f"js line {i}\n" for i in range(1, lines + 1)), f"log gap/dup: {log!r}"

    # `node -e` sees the values set through qledge's envs (and exits with one).
    for name, value in (("DRILL_GREETING", "你好, envs"), ("DRILL_EXIT", "7")):
        r = box.api("POST", "/envs", json={"name": name, "value": value})
        assert r.status_code == 201, r.text
    env_run = box.trigger(box.task(
        """node -e 'console.log("greeting=" + process.env.DRILL_GREETING);"""
        """ process.exit(Number(process.env.DRILL_EXIT))'"""))
    box.wait(env_run, timeout=120)
    tally.check(box, env_run, status="failed", exit_code=7)
    log = box.api("GET", f"/runs/{env_run}/log").text
    assert log == "greeting=你好, envs\n", repr(log)

    # npm works for the task user: pack a package and install it into the work
    # volume with --prefix (offline: the tarball is local), then require it.
    deps = f"{WORK}/drill-deps"
    npm_run = box.trigger(box.task(
        f"set -e; npm --version; t=$(mktemp -d); cd {WORK}/scripts/drill/pkg;"
        f' npm pack --silent --pack-destination "$t" >/dev/null;'
        f' npm install --prefix {deps} --offline --no-audit --no-fund "$t/drill-pkg-1.0.0.tgz";'
        f""" node -e 'console.log("answer=" + require("{deps}/node_modules/drill-pkg"))'"""))
    box.wait(npm_run, timeout=300)
    tally.check(box, npm_run, status="succeeded", exit_code=0)
    log = box.api("GET", f"/runs/{npm_run}/log").text
    assert re.match(r"\d+\.\d+\.\d+\n", log), f"npm --version: {log!r}"
    assert log.endswith("answer=42\n"), repr(log)
    tally.drills.append("node_tasks")


COUNT_PY = """\
import sys
n, code = (int(a) for a in sys.argv[1:3])
for i in range(1, n + 1):
    print(f"py line {i}", flush=True)
sys.exit(code)
"""


def drill_task_form(box: Box, tally: Tally, script: str, word: str) -> None:
    """QingLong's `task` form as a tracked run (the interpreter by the script's
    extension, arguments after `--`), then the operator's `docker exec <box> task <path>
    now`: the run's log on stdout, its exit code as the command's, a missing script
    refused with its reason code."""
    want = "".join(f"{word} line {i}\n" for i in (1, 2, 3))
    form = box.trigger(box.task(f"task {script} -- 3 5"))
    box.wait(form, timeout=120)
    tally.check(box, form, status="failed", exit_code=5)
    assert box.api("GET", f"/runs/{form}/log").text == want
    for code in (0, 9):
        res = subprocess.run([DOCKER, "exec", box.name, "task", script, "now", "--", "3",
                              str(code)], capture_output=True, text=True,
                             timeout=180 * box.slow)
        assert (res.returncode, res.stdout) == (code, want), (res.returncode, res.stdout,
                                                               res.stderr)
    missing = subprocess.run([DOCKER, "exec", box.name, "task", "drill/missing.py", "now"],
                             capture_output=True, text=True, timeout=180 * box.slow)
    assert missing.returncode != 0 and "TASK_SCRIPT_NOT_FOUND" in missing.stderr, missing
    tally.drills.append("task_form")

def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--platform", default="linux/amd64")
    ap.add_argument("--smoke", action="store_true", help="start, run, kill worker, recover")
    ap.add_argument("--variant", default="default", choices=["default", "node"],
                    help="node: the node image and its JavaScript drill instead")
    args = ap.parse_args()
    slow = {"linux/amd64": 1.0, "linux/arm64": 6.0}.get(args.platform, 10.0)
    box = Box(args.platform, slow, args.variant)
    tally = Tally()
    t0 = time.monotonic()
    error = None
    try:
        box.run()
        ready_s = box.ready()
        loop = box.loop()
        if args.variant == "node":
            drill_node(box, tally, lines=100)
            drill_task_form(box, tally, "drill/count.js", "js")
        else:
            drill_worker_kill(box, tally, lines=20 if args.smoke else 60)
            r = box.api("PUT", "/scripts/file", json={"path": "drill/count.py",
                                                       "content": COUNT_PY})
            assert r.status_code in (200, 201), r.text
            drill_task_form(box, tally, "drill/count.py", "py")
        drill_secrets(box, tally)
        if not args.smoke and args.variant == "default":
            drill_docker_restart(box, tally)
            drill_docker_kill(box, tally)
    except (AssertionError, RuntimeError, subprocess.TimeoutExpired) as exc:
        error = str(exc)
        print(sh("logs", "--tail", "60", box.name, check=False), file=sys.stderr)
        ready_s = -1.0
        loop = None
    finally:
        box.remove()
    summary = {"platform": args.platform, "variant": args.variant,
               "mode": "smoke" if args.smoke else "full",
               "drills": tally.drills, "runs": tally.runs,
               "terminal_events": tally.terminal_events, "duplicates": tally.duplicates,
               "false_successes": tally.false_successes, "first_ready_s": round(ready_s, 2),
               "loop": loop,
               "elapsed_s": round(time.monotonic() - t0, 1), "ok": error is None,
               "error": error}
    print(json.dumps(summary))
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main())
