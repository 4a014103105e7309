"""Secrets out of tasks' reach (docs/security.md): real worker, real launcher, real tasks.

The worker runs as an unprivileged uid here (root would pass every check:
CAP_SYS_PTRACE and CAP_DAC_OVERRIDE), as in the image, and its tasks run as
the same uid: only non-dumpability and Landlock keep the secrets from them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from qledge import paths, settings
from qledge.launch import isolation, logs

from _launcher import landlock_unavailable
from support import ADMIN, Server, make_settings, unavailable, wait_terminal

NOBODY = 65534


def _landlock_abi() -> int:
    return isolation.landlock_abi()[0]


@pytest.fixture
def base() -> Iterator[Path]:
    """A 0755 directory outside /tmp (so /tmp is not an ancestor of a protected one)."""
    path = Path(tempfile.mkdtemp(prefix="qledge-iso-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _server(base: Path, **kw: object) -> Server:
    user = NOBODY if os.geteuid() == 0 else None
    return Server(base / "state", user=user, **kw)  # type: ignore[arg-type]


def _task(http: httpx.Client, command: str, **extra: object) -> str:
    r = http.post("/api/v1/tasks", json={"name": "t", "command": command, **extra})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _run(http: httpx.Client, task_id: str) -> dict[str, object]:
    r = http.post(f"/api/v1/tasks/{task_id}/runs")
    assert r.status_code == 202, r.text
    return wait_terminal(http, str(r.json()["run"]["id"]))


def _verdicts(http: httpx.Client, run: dict[str, object]) -> dict[str, str]:
    text = http.get(f"/api/v1/runs/{run['id']}/log").text
    return dict(re.findall(r"^(\w+)=(ok|no)$", text, re.M))


PROBES = {
    "token_file": 'cat "$S/data/secrets/admin.token"',
    "database": 'head -c 16 "$S/data/qledge.sqlite3"',
    "worker_environ": 'cat /proc/$WORKER/environ',
    "worker_fd": 'ls /proc/$WORKER/fd',
    "worker_mem": 'head -c 1 /proc/$WORKER/mem',
    "receipt": 'cat "$S/receipts/aa/planted.json"',
    "other_log": 'cat "$S/logs/$OTHER"',
    "work_dir": 'echo hi > "$S/work/f" && [ "$(cat "$S/work/f")" = hi ]',
    "tmp": 't=$(mktemp) && echo hi > "$t" && rm "$t"',
    "shell": '/bin/sh -c "exit 0"',
    "own_proc": 'head -c 1 /proc/self/environ',
}


def _probe_command() -> str:
    return "; ".join(f"if {cmd} >/dev/null 2>&1; then echo {name}=ok; else echo {name}=no; fi"
                     for name, cmd in PROBES.items())


def test_a_task_cannot_reach_the_secrets(base: Path) -> None:
    if _landlock_abi() < 1:
        unavailable("this kernel has no Landlock")
    srv = _server(base)
    try:
        http = srv.http
        state = srv.state
        if os.geteuid() == 0:  # the worker really is unprivileged
            status = Path(f"/proc/{srv.proc.pid}/status").read_text()
            assert re.search(rf"^Uid:\s+{NOBODY}\s", status, re.M), status
        system = http.get("/api/v1/system").json()["task_isolation"]
        assert system["mode"] == "auto" and system["effective"] is True
        assert system["landlock_abi"] == _landlock_abi() and system["reason"] is None
        assert sorted(system["protected"]) == sorted(
            str((state / d).resolve()) for d in ("data", "receipts", "logs"))
        # What a generated token, a left-over receipt and another run's log look like.
        (state / "data" / "secrets" / "admin.token").write_text("generated-token\n")
        (state / "receipts" / "aa").mkdir(exist_ok=True)
        (state / "receipts" / "aa" / "planted.json").write_text("{}")
        first = _run(http, _task(http, "echo another-runs-output"))
        other = logs.relative_path(str(first["attempts"][0]["id"]))  # type: ignore[index]
        env = {"S": str(state), "WORKER": str(srv.proc.pid), "OTHER": other}
        run = _run(http, _task(http, _probe_command(), env=env))
        assert run["status"] == "succeeded", run
        assert _verdicts(http, run) == {
            "token_file": "no", "database": "no", "worker_environ": "no", "worker_fd": "no",
            "worker_mem": "no", "receipt": "no", "other_log": "no",
            "work_dir": "ok", "tmp": "ok", "shell": "ok", "own_proc": "ok"}
    finally:
        srv.stop()


def test_a_root_control_plane_confines_its_tasks_without_capabilities(base: Path) -> None:
    """Issue 35, finding 19: under a root control plane (scripts/run-local from a root
    shell) a confined task kept every capability, and CAP_SYS_PTRACE let it read
    /proc/<pid>/environ and maps of any process — supervisord's, another appliance's."""
    if os.geteuid() != 0:
        pytest.skip("only a root control plane gives its tasks capabilities")
    if _landlock_abi() < 1:
        unavailable("this kernel has no Landlock")
    # A dumpable root process outside the task's Landlock domain, its environment
    # holding a secret: supervisord's place under scripts/run-local.
    other = subprocess.Popen(["sleep", "120"], env={"PATH": "/usr/bin:/bin",
                                                    "OTHER_SECRET": "s3cret-of-another"})
    srv = Server(base / "state")  # the worker, and so its tasks, as root
    try:
        http = srv.http
        system = http.get("/api/v1/system").json()["task_isolation"]
        assert system["effective"] is True and system["as_root"] is True
        probes = {
            "other_environ": f"cat /proc/{other.pid}/environ",
            "other_maps": f"head -c 1 /proc/{other.pid}/maps",
            "worker_environ": f"cat /proc/{srv.proc.pid}/environ",
            "no_capability": "grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status"
                             " && grep -q '^CapBnd:[[:space:]]*0*$' /proc/self/status",
            "work_dir": f'echo hi > "{srv.state}/work/f"',
        }
        command = "; ".join(f"if {cmd} >/dev/null 2>&1; then echo {name}=ok;"
                            f" else echo {name}=no; fi" for name, cmd in probes.items())
        run = _run(http, _task(http, command))
        assert run["status"] == "succeeded", run
        assert _verdicts(http, run) == {"other_environ": "no", "other_maps": "no",
                                        "worker_environ": "no", "no_capability": "ok",
                                        "work_dir": "ok"}
        assert "s3cret-of-another" not in http.get(f"/api/v1/runs/{run['id']}/log").text
    finally:
        srv.stop()
        other.kill()
        other.wait()


def test_the_worker_blanks_the_token_in_its_environment(base: Path) -> None:
    # Read as root (or the same uid before it turned non-dumpable): the initial
    # environment block no longer holds the token's bytes.
    if os.geteuid() != 0:
        pytest.skip("only root can read a non-dumpable worker's environ")
    srv = Server(base / "state")
    try:
        environ = Path(f"/proc/{srv.proc.pid}/environ").read_bytes()
        assert ADMIN.encode() not in environ
        assert srv.http.get("/api/v1/system").status_code == 200  # the token still works
    finally:
        srv.stop()


def _no_landlock() -> object:
    preexec = landlock_unavailable()
    if preexec is None:
        pytest.skip("the seccomp Landlock filter is written for x86_64 hosts")
    return preexec


def test_required_isolation_without_landlock_starts_nothing(base: Path) -> None:
    srv = _server(base, preexec_fn=_no_landlock(), task_isolation="required")
    try:
        http = srv.http
        system = http.get("/api/v1/system").json()["task_isolation"]
        assert system == {"mode": "required", "landlock_abi": None, "effective": False,
                          "reason": "Landlock unavailable: Function not implemented",
                          "protected": system["protected"], "as_root": False}
        marker = srv.state / "work" / "ran"
        run = _run(http, _task(http, f"touch {marker}"))
        assert (run["status"], run["reason_code"], run["exit_code"]) == (
            "blocked", "TASK_ISOLATION_UNAVAILABLE", None)
        assert not marker.exists()
    finally:
        srv.stop()


def test_auto_isolation_without_landlock_runs_unconfined_and_says_so(base: Path) -> None:
    srv = _server(base, preexec_fn=_no_landlock())
    try:
        http = srv.http
        system = http.get("/api/v1/system").json()["task_isolation"]
        assert (system["mode"], system["effective"], system["landlock_abi"]) == (
            "auto", False, None)
        assert "Function not implemented" in system["reason"]
        run = _run(http, _task(http, f'head -c 1 "{srv.state}/data/qledge.sqlite3" >/dev/null'
                                     " && echo database=ok"))
        assert run["status"] == "succeeded"
        assert _verdicts(http, run) == {"database": "ok"}
    finally:
        srv.stop()


# -- settings and layout (no process) ------------------------------------------------


def test_token_file_is_read_and_its_directory_protected(tmp_path: Path) -> None:
    secret = tmp_path / "run" / "admin.token"
    secret.parent.mkdir()
    secret.write_text("x" * 40 + "\n")
    conf = make_settings(tmp_path / "state", admin_token="", admin_token_file=str(secret))
    assert conf.admin_token == "x" * 40
    assert str(secret.parent.resolve()) in isolation.decide(conf, (7, None)).protected


def test_token_given_twice_or_unreadable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(settings.SettingsError, match="not both"):
        make_settings(tmp_path / "s1", admin_token_file=str(tmp_path / "t"))
    with pytest.raises(settings.SettingsError, match="cannot read"):
        make_settings(tmp_path / "s2", admin_token="", admin_token_file=str(tmp_path / "none"))


def test_a_work_dir_inside_a_protected_one_is_refused(tmp_path: Path) -> None:
    conf = make_settings(tmp_path / "state", work_dir=str(tmp_path / "state" / "data" / "w"))
    with pytest.raises(paths.RootError, match="inside"):
        isolation.check_layout(conf)
    off = make_settings(tmp_path / "state", work_dir=str(tmp_path / "state" / "data" / "w"),
                        task_isolation="off")
    isolation.check_layout(off)
    assert isolation.decide(off).launcher_args() == []


def test_launcher_arguments_follow_the_mode(tmp_path: Path) -> None:
    conf = make_settings(tmp_path / "state")
    data = str(conf.data_path.resolve())
    auto = isolation.decide(conf, (7, None))
    assert auto.launcher_args()[:2] == ["--deny", data]
    assert auto.launcher_args()[-2:] == ["--isolation", "auto"]
    required = isolation.decide(make_settings(tmp_path / "s", task_isolation="required"),
                                (0, "Landlock unavailable: x"))
    assert required.refuses and required.launcher_args() == []
