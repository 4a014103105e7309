"""Power-loss drills: the whole state dir on a filesystem that forgets (docs/recovery.md).

The appliance's state dir (data, receipts, logs) lives on the rig of
`_forgetful.py`: what was not fsync'd — file data, and names whose directory
was not fsync'd — is gone after a cut. The work dir (the tasks' cwd, where
each task appends its start and end markers) stays on a normal disk, outside
the cut. A drill runs a workload, cuts at a chosen moment, then "reboots":
every process (worker, launchers, tasks) is SIGKILLed, the rig is remounted on
what it kept and a new worker starts with a new boot id. Then, only through
the API and the files:

* every run acknowledged (HTTP 202) exists; every run ends, with exactly one
  `attempt.finished` per attempt and one `run.finished`;
* no task process started twice (markers); a result `EXITED` is the task's real
  exit code and the task really ran to its end (nothing invented); `lost` has no
  exit code, and after a reboot its reason is the boot's (`RECOVERY_BOOT_CHANGED`,
  or `RECOVERY_SPAWN_BEFORE_REBOOT` when the identity commit was lost too — never
  `RECOVERY_SPAWN_UNCONFIRMED`, "nothing of it runs on this boot", for a task that
  may have run before the cut);
* nothing durable is gone: a result the API showed before the cut, and the
  result of every receipt that was durable at some moment, survive;
* a log is complete, or says it was truncated by the power loss;
* `PRAGMA integrity_check` is ok.

The negative controls at the end break one durability rule each (a reaper
that deletes before the fsync, a deferred spawn step 1, a launcher without its
directory fsync) and must be caught by these same checks.

`QLTEST_POWERCUT_CUTS` (default 1): how many random-moment cuts to run;
`QLTEST_POWERCUT_KEEP=1` keeps a copy of what the disk held after each cut.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ._forgetful import ForgetfulMount, available
from .conftest import wait_until
from _appliance import kill_leftover_tasks
from _launcher import build_variant
from support import ADMIN, free_port, launcher_path, unavailable

pytestmark = pytest.mark.drill

RANDOM_CUTS = int(os.environ.get("QLTEST_POWERCUT_CUTS", "1"))
WORKER = Path(__file__).with_name("_reboot_worker.py")
LOST_AFTER_REBOOT = {"RECOVERY_BOOT_CHANGED", "RECOVERY_SPAWN_BEFORE_REBOOT"}
# (exit code, output lines, seconds of sleep before the end marker)
TASKS = [(0, 3, 0.0), (3, 40, 0.3), (7, 200, 0.8), (42, 10, 1.5)]


def task_command(markers: Path, code: int, lines: int, sleep: float) -> str:
    """Appends `start <run>` and `end <run>` to the markers file (outside the cut)
    and prints `lines` lines naming its run; the run id is the launcher's argument."""
    return (f"rid=$(tr '\\0' '\\n' < /proc/$PPID/cmdline | sed -n '/^--run-id$/{{n;p;q}}'); "
            f'echo "start $rid" >> {markers}; i=0; '
            f'while [ $i -lt {lines} ]; do echo "line $i of $rid"; i=$((i+1)); done; '
            f'sleep {sleep}; echo "end $rid" >> {markers}; exit {code}')


def expected_log(run_id: str, lines: int) -> bytes:
    return "".join(f"line {i} of {run_id}\n" for i in range(lines)).encode()


class Machine:
    """The appliance with its state dir on the rig; one worker process per boot."""

    def __init__(self, tmp: Path, *, controls: tuple[str, ...] = (),
                 launcher: str | None = None, **settings: str) -> None:
        self.tmp = tmp
        self.state = tmp / "state"
        self.work = tmp / "work"
        self.work.mkdir(parents=True)
        self.markers = self.work / "markers"
        self.rig = ForgetfulMount(tmp / "backing", self.state, watch="receipts/??/*.json")
        self.controls = controls
        self.launcher = launcher or launcher_path()
        self.settings = {"round_interval_s": "1", "publish_grace_ms": "100", **settings}
        self.port = free_port()
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10,
                                 headers={"Authorization": f"Bearer {ADMIN}"})
        self.boots = 0
        self.worker: subprocess.Popen[bytes] | None = None
        self.tasks: dict[str, tuple[int, int]] = {}   # task id -> (exit code, lines)
        self.acked: dict[str, str] = {}               # run id -> task id (HTTP 202)
        self.observed: dict[str, tuple[str, int | None]] = {}  # EXITED results seen
        self.cut_report: dict[str, Any] = {}

    # -- power and processes ---------------------------------------------------------

    def boot(self, *, wait: bool = True) -> None:
        if self.rig.proc is None:
            self.rig.mount()
        self.boots += 1
        env = {**os.environ, "QLEDGE_STATE_DIR": str(self.state),
               "QLEDGE_WORK_DIR": str(self.work), "QLEDGE_HOST": "127.0.0.1",
               "QLEDGE_PORT": str(self.port), "QLEDGE_ADMIN_TOKEN": ADMIN,
               "QLEDGE_LAUNCHER": self.launcher, "QLEDGE_LOG_LEVEL": "WARNING",
               **{f"QLEDGE_{k.upper()}": v for k, v in self.settings.items()}}
        out = self.tmp / f"worker-{self.boots}.log"
        with open(out, "ab") as f:
            self.worker = subprocess.Popen(
                [sys.executable, str(WORKER), f"drill-boot-{self.boots}", *self.controls],
                env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            wait_until(self.ready, 60, f"worker of boot {self.boots} ready\n{self.output()}")

    def ready(self) -> bool:
        if self.worker is not None and self.worker.poll() is not None:
            raise AssertionError(f"worker exited {self.worker.returncode}:\n{self.output()}")
        try:
            return self.http.get("/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def output(self) -> str:
        out = self.tmp / f"worker-{self.boots}.log"
        return out.read_text(errors="replace")[-3000:] if out.exists() else ""

    def cut(self) -> None:
        """The power goes: the disk keeps what was synced (once), every process dies."""
        self.cut_report = self.rig.cut()
        self.kill_all()

    def kill_all(self) -> None:
        if self.worker is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait(10)
        kill_leftover_tasks(self.state)
        wait_until(lambda: not _launchers(self.state), 10, "launchers gone")

    def reboot(self) -> None:
        if not self.rig.status()["cut"]:
            self.cut()
        else:
            self.cut_report = self.rig.status()
            self.kill_all()
        if os.environ.get("QLTEST_POWERCUT_KEEP"):  # debugging: what the disk kept
            shutil.copytree(self.rig.backing / "root", self.tmp / f"disk-after-cut-{self.boots}",
                            symlinks=True)
        self.rig.remount()
        self.boot()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kill_all()
        self.rig.unmount()
        self.http.close()

    # -- the workload ----------------------------------------------------------------

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.http.request(method, f"/api/v1{path}", **kw)

    def make_tasks(self) -> list[str]:
        for code, lines, sleep in TASKS:
            self.add_task(code, lines, sleep)
        return list(self.tasks)

    def add_task(self, code: int, lines: int, sleep: float) -> str:
        r = self.api("POST", "/tasks", json={
            "name": f"t{code}-{lines}", "concurrency": "allow",
            "command": task_command(self.markers, code, lines, sleep)})
        assert r.status_code == 201, r.text
        task_id: str = r.json()["id"]
        self.tasks[task_id] = (code, lines)
        return task_id

    def trigger(self, task_id: str) -> str | None:
        """POST a run; its id once acknowledged (202), None if the power was gone."""
        try:
            r = self.api("POST", f"/tasks/{task_id}/runs")
        except httpx.HTTPError:
            return None
        if r.status_code != 202:
            return None
        run_id: str = r.json()["run"]["id"]
        self.acked[run_id] = task_id
        return run_id

    def observe(self) -> None:
        """Remember the EXITED results the API shows (they must survive the cut)."""
        for run_id in self.acked:
            try:
                run = self.api("GET", f"/runs/{run_id}", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return
            if run.get("reason_code") == "EXITED":
                self.observed[run_id] = (run["status"], run["exit_code"])

    # -- the checks ------------------------------------------------------------------

    def settle(self, timeout: float = 60) -> dict[str, dict[str, Any]]:
        """After the reboot: every acknowledged run ends; their details."""
        runs: dict[str, dict[str, Any]] = {}

        def all_terminal() -> bool:
            for run_id in self.acked:
                r = self.api("GET", f"/runs/{run_id}")
                assert r.status_code == 200, (
                    f"run {run_id} was acknowledged (202) and is gone after the cut: "
                    f"{r.status_code} {r.text}")
                runs[run_id] = r.json()
            return all(run["terminal"] for run in runs.values())

        wait_until(all_terminal, timeout, "every run terminal after the reboot")
        return runs

    def check(self) -> None:
        runs = self.settle()
        markers = Counter(self.markers.read_text().splitlines()) if self.markers.exists() \
            else Counter()
        by_attempt = {a["id"]: run_id for run_id, run in runs.items() for a in run["attempts"]}
        for run_id, run in runs.items():
            code, lines = self.tasks[self.acked[run_id]]
            assert markers[f"start {run_id}"] <= 1, f"run {run_id}: its task started twice"
            self._one_terminal_each(run_id, run)
            if run["reason_code"] == "EXITED":
                assert run["exit_code"] == code, f"run {run_id}: wrong exit code {run}"
                assert markers[f"end {run_id}"] == 1, f"run {run_id}: invented result {run}"
                self._log(run_id, run, expected_log(run_id, lines))
            elif run["status"] == "lost":
                assert run["exit_code"] is None, run
                assert run["reason_code"] in LOST_AFTER_REBOOT, (
                    f"run {run_id}: lost after a reboot for {run['reason_code']}")
            else:
                raise AssertionError(f"run {run_id}: unexpected end {run}")
        for run_id, seen in self.observed.items():
            after = (runs[run_id]["status"], runs[run_id]["exit_code"])
            assert after == seen, (
                f"run {run_id}: the API showed {seen} before the cut, {after} after it")
        for rel in self.cut_report.get("durable_ever", []):
            attempt_id = Path(rel).stem
            run_id = by_attempt.get(attempt_id)
            assert run_id is not None, f"a durable receipt {rel} of no known attempt"
            run = runs[run_id]
            assert run["reason_code"] == "EXITED", (
                f"run {run_id}: its receipt {rel} was durable, yet it ended {run}")
        self.integrity()

    def _one_terminal_each(self, run_id: str, run: dict[str, Any]) -> None:
        items = self.api("GET", f"/runs/{run_id}/events").json()["items"]
        finished = Counter(e["attempt_id"] for e in items if e["type"] == "attempt.finished")
        assert finished == Counter({a["id"]: 1 for a in run["attempts"]}), (run_id, items)
        assert sum(e["type"] == "run.finished" for e in items) == 1, (run_id, items)
        assert [e["seq"] for e in items] == list(range(1, len(items) + 1)), items

    def _log(self, run_id: str, run: dict[str, Any], want: bytes) -> None:
        (attempt,) = run["attempts"]
        r = self.api("GET", f"/runs/{run_id}/log", params={"limit": 1 << 20})
        if r.status_code == 410:  # evicted by retention: said so, never silent
            assert r.json()["error"] == "LOG_EVICTED", r.text
            return
        assert r.status_code == 200, r.text
        assert attempt["log_bytes_at_exit"] == len(want), (run_id, attempt)
        if attempt["log_truncated"]:
            assert want.startswith(r.content) and len(r.content) < len(want)
            assert r.headers["X-Log-Note"] == (
                f"log truncated by power loss: {len(r.content)} of {len(want)} bytes")
        else:
            assert r.content == want, f"run {run_id}: a silently truncated log"

    def integrity(self) -> None:
        db = self.state / "data" / "qledge.sqlite3"
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            con.close()


def _launchers(state: Path) -> list[int]:
    marker = str(state).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"--receipt-dir" in argv and any(a.startswith(marker) for a in argv):
                    found.append(int(entry.name))
    return found


@pytest.fixture
def machine_factory(tmp_path: Path) -> Iterator[Any]:
    why = available()
    if why:
        unavailable(f"the power-cut rig needs FUSE: {why}")
    made: list[Machine] = []

    def make(**kw: Any) -> Machine:
        m = Machine(tmp_path / f"m{len(made)}", **kw)
        made.append(m)
        return m

    try:
        yield make
    finally:
        for m in made:
            m.close()


# -- the moments ---------------------------------------------------------------------

def _wait_cut(m: Machine, timeout: float = 30) -> None:
    """Keep observing results until the armed cut has happened."""
    def cut() -> bool:
        m.observe()
        return bool(m.rig.status()["cut"])
    wait_until(cut, timeout, "the armed cut", interval=0.05)


def workload(m: Machine, rng: random.Random, runs: int = 8) -> None:
    """Triggers spread over a second or two, results observed meanwhile."""
    tasks = list(m.tasks)
    for _ in range(runs):
        if m.rig.status()["cut"]:
            return
        m.trigger(rng.choice(tasks))
        m.observe()
        time.sleep(rng.uniform(0, 0.25))


ARMED_WITHIN_S = 120.0


def armed(m: Machine, rng: random.Random, op: str, glob: str, *, settle: bool = False,
          skip_max: int = 2) -> None:
    m.boot()
    m.make_tasks()
    m.rig.command("arm", op=op, glob=glob, skip=rng.randint(0, skip_max), settle=settle)
    workload(m, rng, runs=10)
    tasks = list(m.tasks)
    deadline = time.monotonic() + ARMED_WITHIN_S
    while not m.rig.status()["cut"]:  # keep going until the moment comes
        # A worker that never reaches the armed operation (a broken control, a consumer
        # that fails every time) must fail the drill, not hang it.
        assert time.monotonic() < deadline, f"the armed {op} of {glob} never came"
        m.trigger(rng.choice(tasks[:2]))
        _wait_cut_briefly(m)
    m.reboot()
    m.check()


def _wait_cut_briefly(m: Machine) -> None:
    with contextlib.suppress(AssertionError):
        _wait_cut(m, timeout=1.0)


@pytest.mark.parametrize("seed", range(RANDOM_CUTS))
def test_cut_at_a_random_moment(machine_factory: Any, seed: int) -> None:
    rng = random.Random(seed)
    m = machine_factory()
    m.boot()
    m.make_tasks()
    workload(m, rng, runs=rng.randint(4, 12))
    time.sleep(rng.uniform(0, 1.5))
    m.observe()
    m.reboot()
    m.check()


def test_cut_right_after_a_receipt_appears(machine_factory: Any) -> None:
    armed(machine_factory(), random.Random(1), "link", "receipts/??/*.json")


def test_cut_right_after_the_reaper_deletes_one(machine_factory: Any) -> None:
    # settle: the unlink reaches the disk (as a journal commit would take it) and
    # then the power goes: the result it relied on must be durable already.
    armed(machine_factory(), random.Random(2), "unlink", "receipts/??/*.json", settle=True)


def test_cut_right_after_a_task_exits(machine_factory: Any) -> None:
    # The launcher has reaped its command and starts publishing: the receipt's temp file.
    armed(machine_factory(), random.Random(3), "create", "receipts/??/.*.tmp")


def test_cut_right_after_a_trigger_is_acknowledged(machine_factory: Any) -> None:
    m = machine_factory()
    m.boot()
    m.make_tasks()
    run_id = m.trigger(next(iter(m.tasks)))
    m.cut()  # right after the 202
    assert run_id is not None
    m.reboot()
    m.check()


def test_cut_right_after_a_result_is_shown(machine_factory: Any) -> None:
    """The result is committed without its own fsync: the durable receipt must
    bring it back."""
    m = machine_factory()
    m.boot()
    m.make_tasks()
    run_id = m.trigger(list(m.tasks)[1])
    assert run_id is not None
    wait_until(lambda: m.observe() or run_id in m.observed, 20, "a result", interval=0.02)
    m.cut()
    m.reboot()
    m.check()


def test_cut_mid_migration(machine_factory: Any) -> None:
    """The first start of a new database: migrations and the page-size conversion."""
    rng = random.Random(4)
    m = machine_factory()
    m.rig.mount()  # boot() finds it mounted
    m.rig.command("arm", op="fsync", glob="data/qledge.sqlite3*", skip=rng.randint(0, 6))
    m.boot(wait=False)
    wait_until(lambda: m.rig.status()["cut"] or m.ready(), 60, "the cut or ready")
    assert m.rig.status()["cut"], "the first start finished before the cut: move it earlier"
    m.reboot()
    m.make_tasks()
    for task_id in m.tasks:
        m.trigger(task_id)
    m.check()


def test_cut_mid_retention(machine_factory: Any) -> None:
    """Retention evicts logs over the size cap (rows marked durably, then files
    unlinked): cut right at a file deletion."""
    rng = random.Random(5)
    m = machine_factory(logs_cap_mb="1", retention_interval_s="1")
    m.boot()
    m.make_tasks()
    big = m.add_task(0, 8000, 0.0)  # ~400 KB of log a run: four go over the 1 MiB cap
    m.rig.command("arm", op="unlink", glob="logs/??/*.log", skip=rng.randint(0, 1))
    for _ in range(4):
        m.trigger(big)
        m.observe()
    _wait_cut(m, timeout=30)
    m.reboot()
    m.check()

    def deletions_done() -> dict[str, Any] | None:
        info: dict[str, Any] = m.api("GET", "/system").json()
        return info if info["retention"]["pending_file_deletions"] == 0 else None

    wait_until(deletions_done, 30, "queued file deletions done")


# -- negative controls: each broken rule must be caught by the same checks --------------

def test_control_a_reaper_that_deletes_before_the_fsync_is_caught(machine_factory: Any) -> None:
    m = machine_factory(controls=("reaper-early",))
    with pytest.raises(AssertionError, match=r"was durable, yet it ended|before the cut"):
        armed(m, random.Random(2), "unlink", "receipts/??/*.json", settle=True, skip_max=0)


def test_control_a_deferred_spawn_step_1_is_caught(machine_factory: Any) -> None:
    m = machine_factory(controls=("deferred-step1",))
    with pytest.raises(AssertionError, match=r"acknowledged \(202\) and is gone|started twice"):
        test_cut_right_after_a_trigger_is_acknowledged(lambda **kw: m)


def test_control_a_launcher_without_its_directory_fsync_is_caught(
        machine_factory: Any) -> None:
    binary = build_variant("QL_TEST_NO_DIR_FSYNC")
    if isinstance(binary, str):
        unavailable(binary)
    m = machine_factory(launcher=str(binary))
    with pytest.raises(AssertionError, match="before the cut"):
        test_cut_right_after_a_result_is_shown(lambda **kw: m)
