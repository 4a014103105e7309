"""The `task` program: a tracked run through the API, its log streamed, its exit code."""

from __future__ import annotations

import subprocess
from pathlib import Path

from qledge.cli.task import admin_token

from support import ADMIN, Server

ROOT = Path(__file__).resolve().parents[1]


def _cli(server: Server, *words: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in server.env.items() if k != "QLEDGE_ADMIN_TOKEN"}
    # scripts/task: run-local's wrapper (the image's runs `qledge task` the same way).
    return subprocess.run([str(ROOT / "scripts/task"), *words],
                          env={**base, **env}, capture_output=True, timeout=60, check=False)


def _scripts(server: Server) -> Path:
    path = server.state / "work" / "scripts"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_task_now_streams_the_log_and_exits_with_the_scripts_code(
        server: Server, tmp_path: Path) -> None:
    (_scripts(server) / "hello.py").write_text(
        "import sys, time\nprint('hello', sys.argv[1:], flush=True)\ntime.sleep(0.5)\n"
        "print('bye')\nsys.exit(7)\n")
    token_file = tmp_path / "admin.token"
    token_file.write_text(ADMIN + "\n")
    out = _cli(server, "hello.py", "now", "--", "a b", QLEDGE_ADMIN_TOKEN_FILE=str(token_file))
    assert out.returncode == 7, out.stderr
    assert out.stdout == b"hello ['a b']\nbye\n"
    # A tracked run of a task named after the script, created once and reused.
    tasks = server.http.get("/api/v1/tasks").json()["items"]
    assert [(t["name"], t["command"], t["labels"], t["schedule"]) for t in tasks] == [
        ("task hello.py", "task hello.py now -- 'a b'", ["cli"], None)]
    again = _cli(server, "hello.py", "now", "--", "a b",
                 QLEDGE_ADMIN_TOKEN_FILE=str(token_file))
    assert again.returncode == 7
    assert len(server.http.get("/api/v1/tasks").json()["items"]) == 1
    runs = server.http.get("/api/v1/runs").json()["items"]
    assert [(r["trigger"], r["exit_code"]) for r in runs] == [("api", 7), ("api", 7)]


def test_a_refused_form_prints_its_reason_and_exits_1(server: Server) -> None:
    _scripts(server)
    out = _cli(server, "missing.py", "now", QLEDGE_ADMIN_TOKEN=ADMIN)
    assert out.returncode == 1, out.stderr
    assert b"failed (TASK_SCRIPT_NOT_FOUND): no such script" in out.stderr


def test_a_malformed_command_line_is_refused_before_the_api(server: Server) -> None:
    out = _cli(server, "a.py", "--bogus", QLEDGE_ADMIN_TOKEN=ADMIN)
    assert (out.returncode, out.stdout) == (2, b"")
    assert b"TASK_BAD_OPTION" in out.stderr
    assert server.http.get("/api/v1/tasks").json()["items"] == []
    # Issue 35, finding 2: these overflowed into a traceback and exit 1.
    for words, code in [(["-m", "99999999999999999999999d", "a.py", "now"], b"TASK_BAD_OPTION"),
                        (["a.py", "desi", "X", "1-99999999999999999999"],
                         b"TASK_BAD_SELECTION")]:
        out = _cli(server, *words, QLEDGE_ADMIN_TOKEN=ADMIN)
        assert (out.returncode, out.stdout) == (2, b""), out.stderr
        assert code in out.stderr and b"Traceback" not in out.stderr


def test_the_token_is_found_where_the_worker_finds_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "admin.token").write_text("from-run-dir\n")
    assert admin_token({"QLEDGE_RUN_DIR": str(run_dir)}) == "from-run-dir"
    explicit = tmp_path / "t"
    explicit.write_text("explicit")
    assert admin_token({"QLEDGE_RUN_DIR": str(run_dir),
                        "QLEDGE_ADMIN_TOKEN_FILE": str(explicit)}) == "explicit"
    (tmp_path / "state/data/secrets").mkdir(parents=True)
    (tmp_path / "state/data/secrets/admin.token").write_text("generated\n")
    none = str(tmp_path / "none")
    assert admin_token({"QLEDGE_RUN_DIR": none, "QLEDGE_ADMIN_TOKEN": "env"}) == "env"
    assert admin_token({"QLEDGE_RUN_DIR": none,
                        "QLEDGE_STATE_DIR": str(tmp_path / "state")}) == "generated"


def test_conc_prints_each_childs_log_in_turn(server: Server) -> None:
    (_scripts(server) / "c.sh").write_text('echo "value $V"\n[ "$V" != b ] || exit 4\n')
    r = server.http.post("/api/v1/envs", json={"name": "V", "value": "a&b&c"})
    assert r.status_code in (200, 201), r.text
    out = _cli(server, "c.sh", "conc", "V", "3", "1-2", QLEDGE_ADMIN_TOKEN=ADMIN)
    assert out.returncode == 4, out.stderr
    assert out.stdout == b"value a\nvalue b\nvalue c\n"  # by value position
    assert b"failed (CONC_CHILDREN)" in out.stderr
