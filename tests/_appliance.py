"""The real supervised appliance (supervisord + http worker + launchers) for tests and drills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "rootfs" / "etc" / "supervisor" / "supervisord.conf"
ADMIN = "drill-admin-token-0123456789abcdef"
TEST_KNOBS = frozenset({"failpoints"})


class Appliance:
    def __init__(self, state: Path, port: int, *, failpoints: str = "",
                 preexec_fn: Callable[[], None] | None = None, **env: str) -> None:
        """`env`: settings (QLEDGE_<NAME>); `failpoints`: the test-only crash points
        (QLTEST_FAILPOINTS, outside the settings' name space); `preexec_fn`: e.g. a
        seccomp filter, inherited by the whole tree."""
        from support import launcher_path

        self.state = state
        self.port = port
        self.run_dir = state / "run"
        self.output = state / "supervisord.out"
        self.env = {
            **os.environ,
            "QLEDGE_STATE_DIR": str(state),
            "QLEDGE_RUN_DIR": str(self.run_dir),
            "QLEDGE_PYTHON": sys.executable,
            "QLEDGE_HOST": "127.0.0.1",
            "QLEDGE_PORT": str(port),
            "QLEDGE_ADMIN_TOKEN": ADMIN,
            "QLEDGE_LAUNCHER": launcher_path(),
            # Settings are QLEDGE_*; test knobs (failpoints) are QLTEST_*, which the
            # settings never read.
            **{f"{'QLTEST' if k in TEST_KNOBS else 'QLEDGE'}_{k.upper()}": v
               for k, v in env.items()},
        }
        if failpoints:
            self.env["QLTEST_FAILPOINTS"] = failpoints
        self.preexec_fn = preexec_fn
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10,
                                 headers={"Authorization": f"Bearer {ADMIN}"})

    def start(self, timeout: float = 30) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        supervisord = Path(sys.executable).parent / "supervisord"
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(
                [str(supervisord), "-c", str(CONF)], env=self.env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=self.preexec_fn)
        self.wait_ready(timeout)

    def ctl(self, *args: str) -> str:
        supervisorctl = Path(sys.executable).parent / "supervisorctl"
        res = subprocess.run([str(supervisorctl), "-c", str(CONF), *args], env=self.env,
                             capture_output=True, text=True, timeout=30)
        return res.stdout.strip()

    def worker_pid(self) -> int:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            out = self.ctl("pid", "http")
            if out.isdigit() and int(out) > 0:
                return int(out)
            time.sleep(0.05)
        raise AssertionError(f"no worker pid: {out!r}")

    def ready(self) -> bool:
        try:
            return self.http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout: float = 30) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.ready():
                return time.monotonic() - t0
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"supervisord exited:\n{self.log_tail()}")
            time.sleep(0.05)
        raise AssertionError(f"not ready after {timeout}s:\n{self.log_tail()}")

    def kill_worker(self) -> int:
        pid = self.worker_pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return pid
            # a zombie until supervisord reaps it
            try:
                if Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z":
                    return pid
            except (OSError, IndexError):
                return pid
            time.sleep(0.01)
        return pid

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.http.request(method, f"/api/v1{path}", **kw)

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.output.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return "(no output)"

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None
        self.http.close()
        kill_leftover_tasks(self.state)


def kill_leftover_tasks(state: Path) -> int:
    """Teardown: tasks outlive the appliance by design; tests must not leave them behind.

    Finds launchers by their --receipt-dir under `state` and kills their groups.
    """
    killed = 0
    for pid in launcher_pids(state):
        try:
            os.killpg(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def launcher_pids(state: Path) -> set[int]:
    """The launchers of the appliance in `state`: by their --receipt-dir under it."""
    marker = str(state).encode()
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--receipt-dir" in argv and any(a.startswith(marker) for a in argv):
            pids.add(int(entry.name))
    return pids
